"""An object's entries as columns with their row counts (`CountedEntries`): what the ingest job's
writers hold for a file once its rows were added up batch by batch (per subject: its rows and
its first row hints). The same entries as the IndexEntry models `models_like` builds from them,
which are built only when something iterates the entries (the DynamoDB store's items); the
segment store writes a file's hashes and row counts from the columns (`segments.index.
object_write`), without a model per entry.

No pyarrow here: lethe_shared's other modules import this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from lethe_shared.index.subject_index import IndexEntry, collection_deferred


class CountedEntries(Sequence[IndexEntry]):
    """The entries of one object: `template`'s fields (validated once) with, per entry, its
    subject hash (ascending), its row count and its row hints as kept (`hints`: at most `keep`
    of each are stored, sorted, in the models). Equal, entry for entry, to
    `models_like(template, (hash, rows, tuple(sorted(hints)[:keep])))`."""

    __slots__ = ("_hashes", "_hints", "_keep", "_models", "_rows", "_template")

    def __init__(
        self,
        template: IndexEntry,
        hashes: Sequence[str],
        rows: Sequence[int],
        hints: Sequence[Sequence[int]],
        keep: int,
    ) -> None:
        if not len(hashes) == len(rows) == len(hints):
            raise ValueError("one row count and one list of hints per subject hash")
        self._template, self._keep = template, keep
        self._hashes, self._rows, self._hints = list(hashes), list(rows), hints
        self._models: list[IndexEntry] | None = None

    @property
    def object_url(self) -> str:
        return self._template.object_url

    @property
    def dataset_id(self) -> str:
        return self._template.dataset_id

    @property
    def subject_hashes(self) -> Sequence[str]:
        return self._hashes

    @property
    def rows(self) -> list[int]:
        return self._rows

    def __len__(self) -> int:
        return len(self._hashes)

    @overload
    def __getitem__(self, index: int) -> IndexEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[IndexEntry]: ...

    def __getitem__(self, index: int | slice) -> IndexEntry | list[IndexEntry]:
        return self._built()[index]

    def __iter__(self) -> Iterator[IndexEntry]:
        return iter(self._built())

    def __repr__(self) -> str:
        return f"CountedEntries({self.object_url!r}, {len(self)} entries)"

    def entries(self) -> list[IndexEntry]:
        return list(self._built())

    def _built(self) -> list[IndexEntry]:
        if self._models is None:
            keep = self._keep
            self._models = models_like(
                self._template,
                (
                    (subject, rows, tuple(sorted(hints)[:keep]))
                    for subject, rows, hints in zip(
                        self._hashes, self._rows, self._hints, strict=True
                    )
                ),
            )
        return self._models


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
