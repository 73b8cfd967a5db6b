"""How the jobs that work object by object (index, reconcile, erase) spread objects over Spark
tasks: small objects share a task, a large object has one of its own.

A Spark task costs a fixed overhead (scheduling, a Python worker's start-up and imports, the
task's AWS clients) that one small object does not repay: docs/BENCHMARKS.md measured 60-140 ms
per task on a local session against milliseconds to index a 2,000-row object. So consecutive
objects share a task while they hold at most `TASK_BYTES` together and are at most
`task_objects` (`TASK_OBJECTS`, fewer when there are few objects, so that every core has a
task). An object of `TASK_BYTES` or more runs alone. An object of unknown size (the index job's
object lists carry `{bucket, key}` only) counts by number alone: no HEAD on the driver.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

TASK_BYTES = 256 * 1024 * 1024  # bytes of objects per Spark task (current versions)
TASK_OBJECTS = 64  # objects per Spark task at most: each one costs requests, whatever its size


def task_groups(
    sizes: Sequence[int | None],
    *,
    task_bytes: int = TASK_BYTES,
    task_objects: int = TASK_OBJECTS,
    min_tasks: int = 1,
) -> list[list[int]]:
    """Indexes of the objects of `sizes` (bytes; None: unknown) grouped into tasks, consecutive
    and in order: a group holds at most `task_bytes` and at most `task_objects` objects, or
    `ceil(len(sizes) / min_tasks)` if fewer, so that there are `min_tasks` groups when there
    are that many objects. An object of `task_bytes` or more is a group of its own."""
    per_task = max(1, min(task_objects, math.ceil(len(sizes) / max(1, min_tasks))))
    groups: list[list[int]] = []
    held = 0
    closed = True
    for index, size in enumerate(sizes):
        weight = size or 0
        if closed or len(groups[-1]) >= per_task or held + weight > task_bytes:
            groups.append([])
            held = 0
        groups[-1].append(index)
        held += weight
        closed = weight >= task_bytes
    return groups


def wave_groups(sizes: Sequence[int | None], cores: int) -> list[list[int]]:
    """`task_groups` of `sizes` with `min_tasks=cores`, regrouped, where that gives more groups
    than `cores` but not a whole number of waves of them (5 groups on 2 cores: the last wave
    keeps one core idle), into the next multiple of `cores` groups of more even sizes (each
    still at most `task_bytes` and `task_objects`): the smallest cap on a group's bytes that
    gives no more groups than that. Unchanged when no cap does (objects of unknown size)."""
    groups = task_groups(sizes, min_tasks=cores)
    cores = max(1, cores)
    if len(groups) <= cores or len(groups) % cores == 0 or any(s is None for s in sizes):
        return groups
    wanted = -(-len(groups) // cores) * cores
    total = sum(s or 0 for s in sizes)
    low, high = max(1, -(-total // wanted)), TASK_BYTES  # high gives len(groups) <= wanted
    while low < high:  # the smallest cap giving at most `wanted` groups
        middle = (low + high) // 2
        if len(task_groups(sizes, task_bytes=middle, min_tasks=cores)) <= wanted:
            high = middle
        else:
            low = middle + 1
    return task_groups(sizes, task_bytes=high, min_tasks=cores)


def grouped_items(spark: Any, items: Sequence[str], sizes: Sequence[int | None]) -> Any:
    """`items` (one text per object) as an RDD with one partition per group of `task_groups`,
    at least one per core of the session (`defaultParallelism`); order kept, so a collect
    returns results in the order of `items`."""
    if len(items) != len(sizes):
        raise ValueError("one size per item")
    context = spark.sparkContext
    groups = task_groups(sizes, min_tasks=context.defaultParallelism)
    chunks = [[items[i] for i in group] for group in groups]
    return context.parallelize(chunks, numSlices=len(chunks)).flatMap(lambda chunk: chunk)
