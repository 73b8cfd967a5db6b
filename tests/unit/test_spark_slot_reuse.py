"""lethe.localcloud.spark_slots.RunSlots hands out the slot freed last: Spark runs one after
another reuse one slot, so one warm driver (one JVM start) serves them; a second slot is taken
only while the first is busy."""

from __future__ import annotations

import pytest

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
