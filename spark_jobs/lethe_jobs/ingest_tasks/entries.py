"""Index entries of one object built a batch of its rows at a time (`EntryAccumulator`): per
subject, its rows added up and its first row hints kept; then the object's IndexEntry models,
built from one validated entry (`models_like`), not validated one by one."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import overload

import pyarrow as pa
import pyarrow.compute as pc

from lethe_jobs.ingest_tasks.frame import HINTS_KEPT
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.counted_entries import CountedEntries, models_like
from lethe_shared.index.subject_index import EntryBatch, IndexEntry

__all__ = ["EntryAccumulator", "models_like"]

_TEMPLATE_HASH = "0" * 64  # the validated template's subject hash: every model replaces it
_MERGE_EVERY = 8  # held batches merged into one table (memory: about the distinct subjects)


class EntryAccumulator:
    """Index entries of one object built a batch at a time: rows added up, the first hints
    kept (one more than stored, so that the entry knows its hints are incomplete).

    The batches are held as they come and added up with Arrow, not subject by subject: a
    single batch (most objects up to `batch_rows` records, most lake files) gives its entries
    from its own columns (`entries`); several are reduced to one table per subject (`_Merged`:
    rows summed, each subject's first hints in arrival order), every `_MERGE_EVERY` batches
    and at the end. The per-subject dictionaries (`rows`, `hints`, and `add` of one subject's
    entry) are built only where they are read or added to."""

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}
        self._hints: dict[str, list[int]] = {}
        self._held: list[tuple[EntryBatch, int]] = []  # batches, each with its hints' offset
        self._merged: _Merged | None = None  # the batches reduced before those held

    @property
    def rows(self) -> dict[str, int]:
        self._spread()
        return self._rows

    @property
    def hints(self) -> dict[str, list[int]]:
        self._spread()
        return self._hints

    def add(self, subject: str, rows: int, hints: Iterable[int]) -> None:
        self._spread()
        self._rows[subject] = self._rows.get(subject, 0) + rows
        kept = self._hints.setdefault(subject, [])
        if len(kept) < HINTS_KEPT:
            kept.extend(list(hints)[: HINTS_KEPT - len(kept)])

    def add_entries(self, entries: Iterable[IndexEntry], offset: int = 0) -> None:
        for entry in entries:
            self.add(entry.subject_hash, entry.rows, (h + offset for h in entry.row_hints))

    def add_batch(self, batch: EntryBatch, offset: int = 0) -> None:
        """`add_entries` of an EntryBatch, from its columns (no model per entry)."""
        if not len(batch):
            return
        if self._rows:  # dictionaries already: added there
            self._add_columns(batch, offset)
            return
        self._held.append((batch, offset))
        if len(self._held) > _MERGE_EVERY:
            self._merged = _Merged.of(self._merged, self._held)
            self._held = []

    def add_partial(self, table: pa.Table) -> None:
        """Add a table of partial entries (`partial`'s: another accumulator's), after what was
        added before: its hints count as arriving after theirs."""
        if self._rows:
            for subject, rows, hints in zip(
                table.column("s").to_pylist(),
                table.column("r").to_pylist(),
                table.column("h").to_pylist(),
                strict=True,
            ):
                self.add(subject, rows, hints)
            return
        self._merged = _Merged.of(self._merged, self._held, table)
        self._held = []

    def partial(self) -> pa.Table:
        """What was added, as a table of partial entries (s: the hash, r: the rows, h: the
        first HINTS_KEPT hints in arrival order): what `add_partial` adds to another."""
        if self._rows:
            hashes = sorted(self._rows)
            return pa.table(
                {
                    "s": pa.array(hashes, pa.string()),
                    "r": pa.array([self._rows[h] for h in hashes], pa.int64()),
                    "h": pa.array([self._hints[h] for h in hashes], pa.list_(pa.int64())),
                }
            )
        return _Merged.of(self._merged, self._held).table

    def _spread(self) -> None:
        """What is held added up into the dictionaries."""
        if self._merged is not None:
            merged, self._merged = self._merged, None
            for subject, rows, hints in zip(merged.hashes, merged.rows, merged.hints, strict=True):
                self._rows[subject] = rows
                self._hints[subject] = list(hints)
        held, self._held = self._held, []
        for batch, offset in held:
            self._add_columns(batch, offset)

    def _add_columns(self, batch: EntryBatch, offset: int) -> None:
        hints, start = batch.row_hints, 0
        if offset:
            hints = [h + offset for h in hints]
        elif not isinstance(hints, list):
            hints = list(hints)
        for subject, end in zip(batch.subject_hashes, batch.ends, strict=True):
            kept = self._hints.get(subject)
            if kept is None:
                self._rows[subject] = end - start
                self._hints[subject] = hints[start : min(end, start + HINTS_KEPT)]
            else:
                self._rows[subject] += end - start
                if len(kept) < HINTS_KEPT:
                    room = start + HINTS_KEPT - len(kept)
                    kept.extend(hints[start : min(end, room)])
            start = end

    def __bool__(self) -> bool:
        """Whether any subject has rows."""
        return bool(self._held) or self._merged is not None or bool(self._rows)

    def entries(self, ref: ObjectRef, dataset: Dataset, key: bytes) -> Sequence[IndexEntry]:
        """The object's entries, ordered by subject hash, pinned to the dataset definition and
        the key they were computed with (`arrow_entries.entry_pin`); each with its rows and its
        smallest HINTS_KEPT hints of those kept. As columns (`CountedEntries`): the models, one
        validated and the others built from its fields (`models_like`, sharing its
        `updated_at`), are built only if something iterates them. A single batch's entries are
        its own columns (its hashes are ascending and distinct): its row counts, and each
        subject's first HINTS_KEPT hints, cut from its hints when they are read; several
        batches' are their merged table's (`_Merged`)."""
        if not self:
            return []
        pin = entry_pin(dataset, key)
        template = IndexEntry(
            subject_hash=_TEMPLATE_HASH,
            object_url=ref.object_url,
            dataset_id=dataset.dataset_id,
            zone=ref.zone,
            format=ref.format,
            rows=1,
            row_hints=(),
            version_id=ref.version_id,
            etag=ref.etag,
            matching_fingerprint=pin.matching_fingerprint,
            key_fingerprint=pin.key_fingerprint,
        )
        held = self._held
        if not self._rows and self._merged is None and len(held) == 1:
            batch, offset = held[0]
            if _ascending(batch.subject_hashes):
                first = functools.partial(_first_hints, batch, offset)  # built only if read
                cut = _ListHints(len(batch), first)
                return CountedEntries(template, batch.subject_hashes, batch.rows, cut, HINTS_KEPT)
        if not self._rows:
            merged = _Merged.of(self._merged, held)
            return CountedEntries(template, merged.hashes, merged.rows, merged.hints, HINTS_KEPT)
        self._spread()
        hashes = sorted(self._rows)
        counted, hints = self._rows, self._hints
        return CountedEntries(
            template, hashes, [counted[h] for h in hashes], [hints[h] for h in hashes], HINTS_KEPT
        )


def _ascending(hashes: Sequence[str]) -> bool:
    """Whether `hashes` ascend strictly (what `arrow_entries.entry_batches` gives)."""
    return all(map(operator.lt, hashes, hashes[1:]))


_PARTIAL = pa.schema(
    [pa.field("s", pa.string()), pa.field("r", pa.int64()), pa.field("h", pa.list_(pa.int64()))]
)


class _Merged:
    """Batches of entries reduced with Arrow: per subject (hashes ascending), its rows summed
    and its first HINTS_KEPT hints in arrival order (what the dictionaries keep)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table  # s (hex), r (rows), h (the first hints, a list per subject)

    @property
    def hashes(self) -> list[str]:
        return self.table.column("s").to_pylist()  # type: ignore[no-any-return]

    @property
    def rows(self) -> list[int]:
        return self.table.column("r").to_pylist()  # type: ignore[no-any-return]

    @property
    def hints(self) -> Sequence[list[int]]:
        lists = self.table.column("h").combine_chunks()
        return _ListHints(len(lists), lambda: lists)

    @staticmethod
    def of(
        before: _Merged | None,
        batches: Sequence[tuple[EntryBatch, int]],
        partial: pa.Table | None = None,
    ) -> _Merged:
        """`before`, then `batches`, then a `partial` table, in that order of arrival."""
        parts = [] if before is None else [before.table]
        parts += [_batch_table(batch, offset) for batch, offset in batches]
        if partial is not None:
            parts.append(partial.select(["s", "r", "h"]).cast(_PARTIAL))
        table = pa.concat_tables(parts)
        counts = table.group_by("s", use_threads=False).aggregate([("r", "sum")])
        lists = table.column("h").combine_chunks()
        exploded = pa.table(
            {
                "s": pc.take(table.column("s"), pc.list_parent_indices(lists)),
                "h": pc.list_flatten(lists),
            }
        )
        firsts = exploded.group_by("s", use_threads=False).aggregate([("h", "list")])
        counts = counts.sort_by("s")
        firsts = firsts.sort_by("s")
        if not counts.column("s").equals(firsts.column("s")):
            raise AssertionError("every entry has a hint")
        kept = pc.list_slice(firsts.column("h_list").combine_chunks(), 0, HINTS_KEPT)
        columns = [counts.column("s"), counts.column("r_sum"), kept]
        return _Merged(pa.Table.from_arrays(columns, schema=_PARTIAL))


def _first_hints(batch: EntryBatch, offset: int) -> pa.ListArray:
    """Each subject's first HINTS_KEPT hints of a batch, plus `offset`."""
    ends = pa.array([0, *batch.ends], pa.int32())
    hints = pa.array(batch.row_hints, pa.int64())
    if offset:
        hints = pc.add(hints, offset)
    return pc.list_slice(pa.ListArray.from_arrays(ends, hints), 0, HINTS_KEPT)


def _batch_table(batch: EntryBatch, offset: int) -> pa.Table:
    """A batch as (s, r, h): its hashes, row counts and each subject's first hints."""
    columns = [
        pa.array(batch.subject_hashes, pa.string()),
        pa.array(batch.rows, pa.int64()),
        _first_hints(batch, offset),
    ]
    return pa.Table.from_arrays(columns, schema=_PARTIAL)


class _ListHints(Sequence[list[int]]):
    """`count` subjects' hints, a list array built when first read, each a Python list."""

    def __init__(self, count: int, build: Callable[[], pa.ListArray]) -> None:
        self._count, self._build = count, build
        self._lists: pa.ListArray | None = None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | Sequence[list[int]]:
        if self._lists is None:
            self._lists = self._build()
        if isinstance(index, slice):
            return self._lists[index].to_pylist()  # type: ignore[no-any-return]
        return self._lists[index].as_py()  # type: ignore[no-any-return]
