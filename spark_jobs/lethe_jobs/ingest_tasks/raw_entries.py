"""The raw objects' index entries: those a read task writes itself (the objects it reads whole,
`RawIndexWrites`), and the writer tasks that add up the partial entries of a split object's
pieces and write them (`write_raw_entries`).

A split object's pieces each send their partial entries as one ENTRY row of the task frame (an
Arrow IPC stream: per subject its rows and first hints, `EntryAccumulator.partial`). The job
shuffles them by object and hands them to Python as rows (OBJECT, POSITION: the piece's first
hint, PACKED: the stream), not Arrow batches, whose size would have to suit the lake writers as
well (a piece's entries can be tens of megabytes); a writer task adds each object's pieces up
in the order of their lines."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lethe_jobs.ingest_tasks.entries import EntryAccumulator
from lethe_jobs.ingest_tasks.frame import BatchObject, TaskSettings
from lethe_jobs.ingest_tasks.index_writes import then_flush
from lethe_jobs.ingest_tasks.packed import unpack
from lethe_jobs.ingest_tasks.write import TaskConnection
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.index.arrow_entries import ObjectRef


class RawIndexWrites:
    """The raw objects' entries a task writes, with the task's index writer, opened at the
    first object that has entries (`write.TaskConnection`: a task that has none opens no AWS
    client)."""

    def __init__(self, settings: TaskSettings) -> None:
        self.settings = settings
        self.connection = TaskConnection(settings)

    def add(self, obj: BatchObject, found: EntryAccumulator) -> int:
        """Hold the object's entries for the task's index write; how many."""
        settings = self.settings
        ref = ObjectRef(obj.url, Zone.RAW, settings.dataset.format.value, obj.version_id, obj.etag)
        entries = found.entries(ref, settings.dataset, settings.hash_key)
        self.connection.open()[1].add(settings.raw_bucket, obj.key, entries)
        return len(entries)

    def flush(self) -> None:
        self.connection.flush()


def write_raw_entries(rows: Iterable[Any], settings: TaskSettings) -> Iterator[tuple[int, int]]:
    """A task over pieces' partial entries (rows: object, first hint, IPC stream) sorted by
    object: each object's pieces added up, in the order of their lines, become its index
    entries, written before the task's last result leaves it; yields (object, entries) per
    object."""
    index = RawIndexWrites(settings)
    return then_flush(_write_raw_entries(index, rows, settings), index)


def _write_raw_entries(
    index: RawIndexWrites,
    rows: Iterable[Any],
    settings: TaskSettings,
) -> Iterator[tuple[int, int]]:
    parts: list[tuple[int, bytes]] = []
    current: int | None = None

    def done(obj: int, parts: list[tuple[int, bytes]]) -> tuple[int, int]:
        found = EntryAccumulator()
        for _, data in sorted(parts, key=lambda p: p[0]):  # the pieces in line order
            found.add_partial(unpack(data))
        return obj, index.add(settings.objects[obj], found)

    for obj, first, data in rows:
        if current is not None and current != obj:
            yield done(current, parts)
            parts = []
        current = obj
        parts.append((first, data))
    if current is not None:
        yield done(current, parts)
