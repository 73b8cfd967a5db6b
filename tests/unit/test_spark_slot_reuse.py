"""lethe.localcloud.spark_slots.RunSlots hands out the slot freed last: Spark runs one after
another reuse one slot, so one warm driver (one JVM start) serves them; a second slot is taken
only while the first is busy."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lethe.localcloud import spark_slots
from lethe.localcloud.spark_slots import RunSlots

pytestmark = pytest.mark.unit


def test_runs_one_after_another_take_the_same_slot() -> None:
    slots = RunSlots(2)
    first = slots.acquire(None)
    assert first is not None
    slots.release(first)

    taken = []
    for _ in range(3):
        slot = slots.acquire(None)
        assert slot is not None
        taken.append(slot)
        slots.release(slot)

    assert taken == [first] * 3


def test_overlapping_runs_take_both_slots_and_a_third_waits() -> None:
    slots = RunSlots(2)
    first, second = slots.acquire(None), slots.acquire(None)

    assert {first, second} == {0, 1}
    assert slots.acquire(lambda: False) is None  # no slot free: a run no longer wanted gives up
    assert second is not None
    slots.release(second)
    assert slots.acquire(None) == second


class _FakeDriver:
    """Stands in for WarmDriver (a JVM): counts its starts and its runs."""

    started: ClassVar[list[_FakeDriver]] = []

    def __init__(self, env: Any, idle_log: Path) -> None:
        self.base = dict(env)
        self.runs = 0
        self.stopped = False
        self.thread = threading.current_thread().name
        time.sleep(0.05)  # a start takes time
        _FakeDriver.started.append(self)

    def usable(self, env: Any) -> bool:
        return not self.stopped and self.runs < spark_slots.RUNS_PER_DRIVER

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def fake_drivers(monkeypatch: pytest.MonkeyPatch) -> type[_FakeDriver]:
    monkeypatch.setattr(spark_slots, "WarmDriver", _FakeDriver)
    _FakeDriver.started = []
    return _FakeDriver


def test_a_drivers_successor_starts_during_its_last_run(
    fake_drivers: type[_FakeDriver], tmp_path: Path
) -> None:
    slots = RunSlots(1, warm=True)
    first: Any = slots.driver(0, {}, tmp_path)
    for _ in range(spark_slots.RUNS_PER_DRIVER - 1):
        assert id(slots.driver(0, {}, tmp_path)) == id(first)
        first.runs += 1
    assert len(fake_drivers.started) == 1  # no successor before the last run

    assert id(slots.driver(0, {}, tmp_path)) == id(first)  # its last run...
    first.runs += 1
    for _ in range(100):  # ...during which the next one starts, in a thread of its own
        if len(fake_drivers.started) == 2:
            break
        time.sleep(0.02)
    successor: Any = fake_drivers.started[1]
    assert successor.thread == "spark-driver-next"

    taken: Any = slots.driver(0, {}, tmp_path)
    assert taken is successor  # the next run takes it, started
    assert first.stopped
    assert not successor.stopped
    assert len(fake_drivers.started) == 2
    slots.shutdown()
    assert successor.stopped


def test_a_retired_drivers_successor_starts_at_once_and_shutdown_stops_it(
    fake_drivers: type[_FakeDriver], tmp_path: Path
) -> None:
    slots = RunSlots(1, warm=True)
    failed: Any = slots.driver(0, {"A": "1"}, tmp_path)
    slots.retire(0, logs_dir=tmp_path)  # after a failed run

    assert failed.stopped
    nxt: Any = slots.driver(0, {"A": "1"}, tmp_path)
    assert nxt is not failed
    assert (nxt.thread, nxt.base) == ("spark-driver-next", {"A": "1"})

    slots.retire(0)  # without logs_dir: no successor (as before)
    slots.retire(0, logs_dir=tmp_path)  # no driver: nothing to succeed
    assert len(fake_drivers.started) == 2

    slots.retire(0, logs_dir=tmp_path)
    slots.driver(0, {}, tmp_path)
    third: Any = slots.driver(0, {}, tmp_path)
    slots.retire(0, logs_dir=tmp_path)  # a successor starting when the cloud stops
    slots.shutdown()
    for _ in range(100):
        if len(fake_drivers.started) == 4:
            break
        time.sleep(0.02)
    time.sleep(0.1)
    assert third.stopped
    assert all(driver.stopped for driver in fake_drivers.started)


def test_a_warm_runs_timings_line_reads_the_drivers_answer() -> None:
    line = spark_slots._timings_line(
        {"enter": 0.01, "script": 7.3, "context_start": 0.11, "context_stop": 0.16, "leave": 0}
    )
    assert line == (
        "# driver timings: enter 0.01 s, script 7.30 s (SparkContext start 0.11 s, stop 0.16 s),"
        " leave 0.00 s\n"
    )
    assert spark_slots._timings_line({"script": "x"}) == "# driver timings: {'script': 'x'}\n"
