"""The local cloud gives freed memory back periodically (lethe.localcloud.memory_trim)."""

from __future__ import annotations

import threading

import pytest

from lethe.localcloud.memory_trim import (
    DEFAULT_SECONDS,
    ENV,
    glibc_trim,
    interval_from,
    start_trimming,
)

pytestmark = pytest.mark.unit


def test_the_thread_trims_on_its_interval_until_stopped() -> None:
    stop = threading.Event()
    calls: list[int] = []
    enough = threading.Event()

    def trim() -> int:
        calls.append(1)
        if len(calls) >= 3:
            enough.set()
        return 1

    assert start_trimming(stop, {ENV: "0.01"}, trim) == 0.01
    assert enough.wait(5)
    stop.set()
    settled = len(calls)
    assert not threading.Event().wait(0.05)
    assert len(calls) <= settled + 1  # at most one call was already under way


def test_zero_turns_it_off_and_nothing_runs() -> None:
    calls: list[int] = []

    def trim() -> int:
        calls.append(1)
        return 1

    assert start_trimming(threading.Event(), {ENV: "0"}, trim) is None
    assert not threading.Event().wait(0.05)
    assert calls == []


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("", DEFAULT_SECONDS), ("12", 12.0), ("-3", 0.0), ("soon", DEFAULT_SECONDS)],
)
def test_the_interval_read_from_the_environment(value: str, seconds: float) -> None:
    assert interval_from({ENV: value} if value else {}) == seconds


def test_glibc_trim_gives_memory_back_on_this_machine() -> None:
    trim = glibc_trim()
    assert trim is not None  # these machines are Linux with glibc (docs/TESTING.md)
    assert trim() in (0, 1)  # 1: memory was released, 0: there was none to release
