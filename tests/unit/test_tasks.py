"""How the index, reconcile and erase jobs group objects into Spark tasks (lethe_jobs.tasks)."""

from __future__ import annotations

import pytest

from lethe_jobs.tasks import TASK_BYTES, TASK_OBJECTS, task_groups, wave_groups

MIB = 1024 * 1024


def test_small_objects_share_a_task_up_to_the_bytes_of_a_task() -> None:
    assert task_groups([100 * MIB, 100 * MIB, 50 * MIB, 10 * MIB, 200 * MIB]) == [
        [0, 1, 2],  # 250 MiB
        [3, 4],  # 210 MiB: the 256 MiB would be passed with the next
    ]


def test_a_large_object_has_a_task_of_its_own() -> None:
    sizes = [MIB, TASK_BYTES, 0, MIB, 3 * TASK_BYTES, None, MIB]
    assert task_groups(sizes) == [[0], [1], [2, 3], [4], [5, 6]]


def test_objects_of_unknown_size_are_grouped_by_count() -> None:
    groups = task_groups([None] * (2 * TASK_OBJECTS + 1))
    assert [len(g) for g in groups] == [TASK_OBJECTS, TASK_OBJECTS, 1]


def test_many_tiny_objects_are_capped_by_count() -> None:
    groups = task_groups([1] * 200, task_objects=64)
    assert [len(g) for g in groups] == [64, 64, 64, 8]


@pytest.mark.parametrize(
    ("count", "min_tasks", "lengths"),
    [
        (13, 2, [7, 6]),
        (4, 2, [2, 2]),
        (3, 8, [1, 1, 1]),  # fewer objects than cores: one each
        (1000, 4, [64] * 15 + [40]),  # the count cap still holds
        (0, 2, []),
    ],
)
def test_every_core_gets_a_task_when_there_are_objects_enough(
    count: int, min_tasks: int, lengths: list[int]
) -> None:
    groups = task_groups([None] * count, min_tasks=min_tasks)
    assert [len(g) for g in groups] == lengths


def test_groups_keep_the_order_and_every_object_once() -> None:
    sizes = [(i * 7919) % (300 * MIB) if i % 5 else None for i in range(500)]
    groups = task_groups(sizes, min_tasks=3)
    assert [i for g in groups for i in g] == list(range(500))
    for group in groups:
        held = sum(sizes[i] or 0 for i in group)
        assert len(group) <= TASK_OBJECTS
        assert held <= TASK_BYTES or len(group) == 1


def test_wave_groups_make_a_whole_number_of_waves_of_even_groups() -> None:
    sizes = [11 * MIB] * 100
    assert [len(g) for g in task_groups(sizes, min_tasks=2)] == [23, 23, 23, 23, 8]
    groups = wave_groups(sizes, 2)
    assert [len(g) for g in groups] == [17, 17, 17, 17, 17, 15]
    assert [i for g in groups for i in g] == list(range(100))  # consecutive, in order


@pytest.mark.parametrize(
    "sizes",
    [
        [11 * MIB] * 25,  # two groups: one wave already
        [128 * MIB] * 9,  # pieces of a large object: no cap gives six groups of them
        [None] * 300,  # unknown sizes: by count, as task_groups
        [300 * MIB, 5 * MIB, 5 * MIB],
    ],
)
def test_wave_groups_keep_task_groups_where_they_cannot_do_better(sizes: list[int | None]) -> None:
    groups = wave_groups(sizes, 2)
    assert groups == task_groups(sizes, min_tasks=2)
    assert all(sum(sizes[i] or 0 for i in g) <= TASK_BYTES or len(g) == 1 for g in groups)
