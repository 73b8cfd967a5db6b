"""The index writes of one ingest task: every file's entries are held until the task ends, then
written together (`lethe_shared.index.maintenance.replace_many`): with the segment store, ONE
level-0 segment per task (its pending item and its commit: no manifest write per object),
instead of one DynamoDB item per (subject, object) pair. A task holding more than
FLUSH_ENTRIES entries writes them then (one more segment), so that a task's memory stays
bounded.

The entries are written before the task's last summary row leaves it (`then_flush`): a task
whose index write fails fails, and Spark runs it again; what it wrote before is indexed again
under the new versions (as a task that failed between its PUT and its index write always was).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

from lethe_shared.aws.s3 import ObjectStore
from lethe_shared.index.maintenance import replace_many
from lethe_shared.index.subject_index import IndexEntry, SubjectIndex

FLUSH_ENTRIES = 500_000  # entries a task holds before it writes them (about 100 MB of models)
T = TypeVar("T")


class TaskIndexWriter:
    """Entries of a task's objects, written together (module docstring)."""

    def __init__(self, index: SubjectIndex, objects: ObjectStore) -> None:
        self.index, self.objects = index, objects
        self.pending: list[tuple[str, str, Sequence[IndexEntry]]] = []
        self.held = 0
        self.writes = 0  # replace_many calls made (segments written, with the segment store)

    def add(self, bucket: str, key: str, entries: Sequence[IndexEntry]) -> None:
        self.pending.append((bucket, key, entries))
        self.held += len(entries)
        if self.held >= FLUSH_ENTRIES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        replace_many(self.index, self.objects, self.pending)
        self.writes += 1
        self.pending, self.held = [], 0


class Flushes(Protocol):
    def flush(self) -> None: ...


def then_flush(rows: Iterator[T], index: Flushes) -> Iterator[T]:
    """`rows`, the last one held back until the task's entries are written."""
    held: list[T] = []
    for row in rows:
        if held:
            yield held.pop()
        held.append(row)
    index.flush()
    yield from held
