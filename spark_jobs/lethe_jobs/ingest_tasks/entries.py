"""Index entries of one object built a batch of its rows at a time (`EntryAccumulator`): per
subject, its rows added up and its first row hints kept; then the object's IndexEntry models,
built from one validated entry (`models_like`), not validated one by one."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import overload

from lethe_jobs.ingest_tasks.frame import HINTS_KEPT
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.counted_entries import CountedEntries, models_like
from lethe_shared.index.subject_index import EntryBatch, IndexEntry

__all__ = ["EntryAccumulator", "models_like"]

_TEMPLATE_HASH = "0" * 64  # the validated template's subject hash: every model replaces it


class EntryAccumulator:
    """Index entries of one object built a batch at a time: rows added up, the first hints
    kept (one more than stored, so that the entry knows its hints are incomplete).

    Most objects and files arrive in one batch (an object of up to `batch_rows` records, a
    lake file of up to a row group): the first batch is held as it is, and added up into the
    per-subject dictionaries only when a second one arrives (or `rows`/`hints` are read), so
    that a single batch's entries are taken from its columns (`entries`) without a dictionary
    step per subject."""

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}
        self._hints: dict[str, list[int]] = {}
        self._held: tuple[EntryBatch, int] | None = None  # the first batch, and its offset

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
        if self._held is None and not self._rows:
            self._held = (batch, offset)
            return
        self._spread()
        self._add_columns(batch, offset)

    def _spread(self) -> None:
        """The held batch added up into the dictionaries."""
        if self._held is not None:
            batch, offset = self._held
            self._held = None
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
        return self._held is not None or bool(self._rows)

    def entries(self, ref: ObjectRef, dataset: Dataset, key: bytes) -> Sequence[IndexEntry]:
        """The object's entries, ordered by subject hash, pinned to the dataset definition and
        the key they were computed with (`arrow_entries.entry_pin`); each with its rows and its
        smallest HINTS_KEPT hints of those kept. As columns (`CountedEntries`): the models, one
        validated and the others built from its fields (`models_like`, sharing its
        `updated_at`), are built only if something iterates them. A single batch's entries are
        its own columns (its hashes are ascending and distinct): its row counts, and each
        subject's first HINTS_KEPT hints, cut from its hints when they are read."""
        if self._held is None and not self._rows:
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
        if self._held is not None and _ascending(self._held[0].subject_hashes):
            batch, offset = self._held
            ends = list(batch.ends)
            starts = [0, *ends[:-1]]
            rows = [end - start for start, end in zip(starts, ends, strict=True)]
            cut = _FirstHints(batch.row_hints, starts, ends, offset)
            return CountedEntries(template, batch.subject_hashes, rows, cut, HINTS_KEPT)
        self._spread()
        hashes = sorted(self._rows)
        counted, hints = self._rows, self._hints
        return CountedEntries(
            template, hashes, [counted[h] for h in hashes], [hints[h] for h in hashes], HINTS_KEPT
        )


def _ascending(hashes: Sequence[str]) -> bool:
    """Whether `hashes` ascend strictly (what `arrow_entries.entry_batches` gives)."""
    return all(map(operator.lt, hashes, hashes[1:]))


class _FirstHints(Sequence[list[int]]):
    """Each subject's first HINTS_KEPT row hints of a batch (the hints of subject `i` are
    `hints[starts[i]:ends[i]]`), plus `offset`, cut only when read."""

    def __init__(
        self, hints: Sequence[int], starts: list[int], ends: list[int], offset: int
    ) -> None:
        self._hints, self._starts, self._ends, self._offset = hints, starts, ends, offset

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | Sequence[list[int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start, end = self._starts[index], self._ends[index]
        kept = list(self._hints[start : min(end, start + HINTS_KEPT)])
        if self._offset:
            return [h + self._offset for h in kept]
        return kept
