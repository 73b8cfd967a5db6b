"""The raw entries' job beside the lake writes (`ingest_pipeline.Beside`), without Spark: its
action starts once the next job runs, or when that job has ended without being seen; a failure
of the action reaches the driver's thread; an action the failed lake writes abandon never
starts."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lethe_jobs.ingest_pipeline import Beside


class _Tracker:
    def __init__(self) -> None:
        self.jobs: list[int] = []

    def getActiveJobsIds(self) -> list[int]:  # Spark's name
        return list(self.jobs)


class _Spark:
    def __init__(self, tracker: _Tracker) -> None:
        self.sparkContext = self
        self.tracker = tracker

    def statusTracker(self) -> _Tracker:  # Spark's name
        return self.tracker


def _beside(tracker: _Tracker, action: Any) -> Beside:
    return Beside(_Spark(tracker), action)  # type: ignore[arg-type]


def test_the_action_waits_for_the_next_job_to_run() -> None:
    tracker = _Tracker()
    started = threading.Event()

    def action() -> dict[int, int]:
        started.set()
        return {3: 12}

    beside = _beside(tracker, action)
    # Given no job running yet, the action does not start
    assert not started.wait(0.3)

    # When the lake writes' job runs
    tracker.jobs = [7]

    # Then the action starts, before the driver asks for its result
    assert started.wait(5)
    assert beside.result() == {3: 12}


def test_the_action_starts_when_the_next_job_ended_unseen() -> None:
    # Given a next job too short to be seen running
    beside = _beside(_Tracker(), lambda: {0: 1})

    # When the driver asks for the result after it, the action runs then
    assert beside.result() == {0: 1}


def test_a_failed_action_fails_the_driver() -> None:
    tracker = _Tracker()
    tracker.jobs = [1]

    def action() -> dict[int, int]:
        raise ValueError("the index write failed")

    beside = _beside(tracker, action)
    with pytest.raises(ValueError, match="the index write failed"):
        beside.result()


def test_an_abandoned_action_never_starts_and_a_started_one_is_waited_for() -> None:
    ran: list[str] = []
    beside = _beside(_Tracker(), lambda: ran.append("ran") or {})  # type: ignore[func-returns-value]

    # When the lake writes fail before their job was seen running
    beside.abandon()

    # Then the action never ran, and there is no result
    assert ran == []
    with pytest.raises(RuntimeError, match="abandoned"):
        beside.result()

    # And an action already running is waited for (the read it scans is dropped after it)
    tracker = _Tracker()
    tracker.jobs = [2]
    started, finished = threading.Event(), threading.Event()

    def slow() -> dict[int, int]:
        started.set()
        time.sleep(0.3)
        finished.set()
        return {1: 1}

    running = _beside(tracker, slow)
    assert started.wait(5)
    running.abandon()
    assert finished.is_set()
