"""An ingest task's index writes (lethe_jobs.ingest_tasks.index_writes): held until the task
ends, written before its last summary row leaves it, in one call of the store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lethe_jobs.ingest_tasks import index_writes
from lethe_jobs.ingest_tasks.index_writes import TaskIndexWriter, then_flush
from lethe_shared.index.maintenance import replace_many

pytestmark = pytest.mark.unit


def test_the_entries_are_written_once_before_the_last_row_leaves_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[tuple[str, str, Any]]] = []
    monkeypatch.setattr(index_writes, "replace_many", lambda index, objects, w: calls.append(w))
    task = TaskIndexWriter(index=object(), objects=object())  # type: ignore[arg-type]
    seen: list[tuple[str, int]] = []

    def rows() -> Iterator[str]:
        for n in range(3):
            task.add("lake", f"k{n}", [object()] * 2)  # type: ignore[list-item]
            yield f"row{n}"

    for row in then_flush(rows(), task):
        seen.append((row, len(calls)))

    assert seen == [("row0", 0), ("row1", 0), ("row2", 1)]  # the last one after the write
    assert [[key for _, key, _ in call] for call in calls] == [["k0", "k1", "k2"]]
    assert task.writes == 1


def test_a_task_holding_too_many_entries_writes_them_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(index_writes, "FLUSH_ENTRIES", 5)
    monkeypatch.setattr(
        index_writes, "replace_many", lambda index, objects, w: calls.append(len(w))
    )
    task = TaskIndexWriter(index=object(), objects=object())  # type: ignore[arg-type]
    for n in range(4):
        task.add("lake", f"k{n}", [object()] * 2)  # type: ignore[list-item]
    task.flush()
    task.flush()  # nothing held: no write

    assert calls == [3, 1]


def test_a_task_with_no_row_still_writes_what_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(
        index_writes, "replace_many", lambda index, objects, w: calls.append(len(w))
    )
    task = TaskIndexWriter(index=object(), objects=object())  # type: ignore[arg-type]
    task.add("raw", "k", [])

    assert list(then_flush(iter([]), task)) == []
    assert calls == [1]


class _SegmentsLike:
    """A store that writes many objects at once and, like a segment, refuses two datasets."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def replace_objects(self, batches: Any) -> dict[str, int]:
        urls = [url for url, _ in batches]
        if len({url.split("/")[3] for url in urls}) != 1:
            raise ValueError("one segment holds the objects of one dataset")
        self.calls.append(urls)
        return {url: 0 for url in urls}

    def prune_flagged(self, object_url: str) -> None:
        raise AssertionError("nothing was flagged")


def test_a_task_spanning_two_datasets_writes_one_segment_per_dataset() -> None:
    # an ingestion batch may hold versions of several datasets (found by the sfn ingestion tests)
    store = _SegmentsLike()
    flagged = replace_many(
        store,  # type: ignore[arg-type]
        object(),  # type: ignore[arg-type]
        [("lake", "reviews/a.parquet", []), ("lake", "orders/b.parquet", []),
         ("lake", "reviews/c.parquet", [])],
    )  # fmt: skip

    assert sorted(store.calls) == [
        ["s3://lake/orders/b.parquet"],
        ["s3://lake/reviews/a.parquet", "s3://lake/reviews/c.parquet"],
    ]
    assert set(flagged) == {"s3://lake/reviews/a.parquet", "s3://lake/orders/b.parquet",
                            "s3://lake/reviews/c.parquet"}  # fmt: skip
