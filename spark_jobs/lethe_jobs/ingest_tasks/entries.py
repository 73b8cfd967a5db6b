"""Index entries of one object built a batch of its rows at a time (`EntryAccumulator`): per
subject, its rows added up and its first row hints kept; then the object's IndexEntry models,
built from one validated entry (`models_like`), not validated one by one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lethe_jobs.ingest_tasks.frame import HINTS_KEPT
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.counted_entries import CountedEntries, models_like
from lethe_shared.index.subject_index import EntryBatch, IndexEntry

__all__ = ["EntryAccumulator", "models_like"]

_TEMPLATE_HASH = "0" * 64  # the validated template's subject hash: every model replaces it


class EntryAccumulator:
    """Index entries of one object built a batch at a time: rows added up, the first hints
    kept (one more than stored, so that the entry knows its hints are incomplete)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.hints: dict[str, list[int]] = {}

    def add(self, subject: str, rows: int, hints: Iterable[int]) -> None:
        self.rows[subject] = self.rows.get(subject, 0) + rows
        kept = self.hints.setdefault(subject, [])
        if len(kept) < HINTS_KEPT:
            kept.extend(list(hints)[: HINTS_KEPT - len(kept)])

    def add_entries(self, entries: Iterable[IndexEntry], offset: int = 0) -> None:
        for entry in entries:
            self.add(entry.subject_hash, entry.rows, (h + offset for h in entry.row_hints))

    def add_batch(self, batch: EntryBatch, offset: int = 0) -> None:
        """`add_entries` of an EntryBatch, from its columns (no model per entry)."""
        hints, start = batch.row_hints, 0
        if offset:
            hints = [h + offset for h in hints]
        elif not isinstance(hints, list):
            hints = list(hints)
        for subject, end in zip(batch.subject_hashes, batch.ends, strict=True):
            kept = self.hints.get(subject)
            if kept is None:
                self.rows[subject] = end - start
                self.hints[subject] = hints[start : min(end, start + HINTS_KEPT)]
            else:
                self.rows[subject] += end - start
                if len(kept) < HINTS_KEPT:
                    room = start + HINTS_KEPT - len(kept)
                    kept.extend(hints[start : min(end, room)])
            start = end

    def entries(self, ref: ObjectRef, dataset: Dataset, key: bytes) -> Sequence[IndexEntry]:
        """The object's entries, ordered by subject hash, pinned to the dataset definition and
        the key they were computed with (`arrow_entries.entry_pin`); each with its rows and its
        smallest HINTS_KEPT hints of those kept. As columns (`CountedEntries`): the models, one
        validated and the others built from its fields (`models_like`, sharing its
        `updated_at`), are built only if something iterates them."""
        if not self.rows:
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
        hashes = sorted(self.rows)
        rows, hints = self.rows, self.hints
        return CountedEntries(
            template, hashes, [rows[h] for h in hashes], [hints[h] for h in hashes], HINTS_KEPT
        )
