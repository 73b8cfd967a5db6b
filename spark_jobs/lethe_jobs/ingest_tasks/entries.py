"""Index entries of one object built a batch of its rows at a time (`EntryAccumulator`): per
subject, its rows added up and its first row hints kept; then the object's IndexEntry models,
built from one validated entry (`models_like`), not validated one by one."""

from __future__ import annotations

from collections.abc import Iterable

from lethe_jobs.ingest_tasks.frame import HINTS_KEPT
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.subject_index import EntryBatch, IndexEntry, collection_deferred

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
        for subject, end in zip(batch.subject_hashes, batch.ends, strict=True):
            kept = self.hints.get(subject)
            if kept is None:
                self.rows[subject] = end - start
                self.hints[subject] = [
                    h + offset for h in hints[start : min(end, start + HINTS_KEPT)]
                ]
            else:
                self.rows[subject] += end - start
                if len(kept) < HINTS_KEPT:
                    room = start + HINTS_KEPT - len(kept)
                    kept.extend(h + offset for h in hints[start : min(end, room)])
            start = end

    def entries(self, ref: ObjectRef, dataset: Dataset, key: bytes) -> list[IndexEntry]:
        """The object's entries, ordered by subject hash, pinned to the dataset definition and
        the key they were computed with (`arrow_entries.entry_pin`); each with its rows and its
        smallest HINTS_KEPT hints of those kept. One entry is validated, the others are built
        from its fields (`models_like`): they share its `updated_at`."""
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
        hints = self.hints
        return models_like(
            template,
            (
                (subject, rows, tuple(sorted(hints[subject])[:HINTS_KEPT]))
                for subject, rows in sorted(self.rows.items())
            ),
        )


def models_like(
    template: IndexEntry, entries: Iterable[tuple[str, int, tuple[int, ...]]]
) -> list[IndexEntry]:
    """IndexEntry models with `template`'s fields but each (subject hash, rows, row hints) of
    `entries`: equal to validated models of those fields (`EntryBatch.entries` builds its models
    the same way) when each hash is 64 lowercase hex digits and each row count at least 1,
    which is what the accumulators hold (hashes from the subject hashing, rows counted)."""
    fields = template.__dict__
    fields_set = set(template.model_fields_set)
    extra, private = template.__pydantic_extra__, template.__pydantic_private__
    built: list[IndexEntry] = []
    append, new, set_ = built.append, object.__new__, object.__setattr__
    with collection_deferred():
        for subject, rows, row_hints in entries:
            entry = new(IndexEntry)
            set_(
                entry,
                "__dict__",
                {**fields, "subject_hash": subject, "rows": rows, "row_hints": row_hints},
            )
            set_(entry, "__pydantic_fields_set__", fields_set)
            set_(entry, "__pydantic_extra__", extra)
            set_(entry, "__pydantic_private__", private)
            append(entry)
    return built
