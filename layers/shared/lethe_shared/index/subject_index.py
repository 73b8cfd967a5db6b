"""The subject index, which maps subjects (as keyed hashes) to the objects holding their rows.

A subject id is personal data: the index stores only its keyed hash
(`lethe_shared.subject_hashing`: canonical text, HMAC-SHA256 with the deployment's secret key).
Rows with a null subject column are no subject's and never indexed.

An object's entries travel either as `IndexEntry` models or as one `EntryBatch`: the same
entries as columns (what `arrow_entries.entry_batch` computes), validated once per object, from
which the writer builds DynamoDB items without a model per entry.

`DynamoSubjectIndex` is the one reader and writer of `SubjectIndexTable`: ingestion, the index
and reconcile jobs, the indexer Lambda, object events and the CLI all go through it. The erasure's
index update reads what entries describe (`entry_states`) and removes them only while they still
describe it (`remove_unchanged`: conditional deletes, lethe_shared.index.entry_removal).
"""

from __future__ import annotations

import datetime as dt
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, overload

from botocore.exceptions import ClientError
from pydantic import ConfigDict, Field

from lethe_shared.aws.dynamo import batch_get_all, query_all
from lethe_shared.aws.errors import is_condition_failed
from lethe_shared.aws.s3 import NULL_VERSION
from lethe_shared.catalog.zones import Zone
from lethe_shared.index.concurrent_reads import ClientTable, run_all
from lethe_shared.index.entry_removal import EntryState, Removal, delete_unchanged
from lethe_shared.models import Model

# Kinds of drift a reconcile report names, in its order (spark_jobs/reconcile.py, the CLI).
DRIFT_KINDS = ("missing", "stale", "wrong_rows")
MAX_ROW_HINTS = 64  # row numbers kept per entry; beyond that the erase job scans the object


class IndexEntry(Model):
    """One (subject, object) pair: the object holds `rows` rows of that subject."""

    model_config = ConfigDict(frozen=True)

    subject_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    object_url: str
    dataset_id: str
    zone: Zone
    format: str  # csv | jsonl | parquet
    rows: int = Field(ge=1)
    row_hints: tuple[int, ...] = ()  # line numbers (csv/jsonl) or row indexes (parquet)
    version_id: str = NULL_VERSION
    etag: str = ""
    # The subject's rows are in older versions of the key only: its current version is a delete
    # marker, or no longer holds the subject. Lookups hide such entries; erasure still finds
    # them, because "every stored version counts" (docs/INDEX.md, "Older versions").
    deleted: bool = False
    updated_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    # What the entry was computed with (docs/ERASURE.md, "Pinned matching"): the dataset's
    # matching fingerprint (`datasets.matching`) and the subject hash key's fingerprint
    # (`subject_hashing.keys.key_fingerprint`). The erase job refuses an object whose entries
    # were computed with another definition or key than the request's report pins. "" in an
    # entry written before entries were pinned: the erase job treats it as a mismatch.
    matching_fingerprint: str = ""
    key_fingerprint: str = ""

    def to_item(self) -> dict[str, Any]:
        item = self.model_dump()
        item["zone"] = self.zone.value
        # the two fingerprints as one short attribute, `pin` = "<matching>/<key>" (52 bytes an
        # item instead of 83: every index item carries it); absent on an unpinned entry
        matching, key = item.pop("matching_fingerprint"), item.pop("key_fingerprint")
        if matching or key:
            item["pin"] = f"{matching}/{key}"
        item["row_hints"] = list(self.row_hints[:MAX_ROW_HINTS])
        item["hints_complete"] = len(self.row_hints) <= MAX_ROW_HINTS
        if not self.deleted:
            del item["deleted"]  # absent unless flagged: a re-index clears it by replacing
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> IndexEntry:
        return cls(
            subject_hash=item["subject_hash"],
            object_url=item["object_url"],
            dataset_id=item["dataset_id"],
            zone=Zone(item["zone"]),
            format=item["format"],
            rows=int(item["rows"]),
            row_hints=tuple(int(h) for h in item.get("row_hints", [])),
            version_id=item.get("version_id", NULL_VERSION),
            etag=item.get("etag", ""),
            deleted=bool(item.get("deleted", False)),
            updated_at=item.get("updated_at", ""),
            **_pin_fields(item.get("pin", "")),
        )


def _pin_fields(pin: str) -> dict[str, str]:
    """IndexEntry's two fingerprints from an item's `pin` ("<matching>/<key>"; "" unpinned)."""
    matching, _, key = str(pin).partition("/")
    return {"matching_fingerprint": matching, "key_fingerprint": key}


class collection_deferred:  # used as `with collection_deferred():`
    """No cyclic garbage collection while many objects that all survive are built (entries,
    items): collections triggered by their allocations would only walk them. The collector's
    previous state is restored on leaving, without allocating (a generator-based context
    manager would allocate while the new objects are young, and so trigger a collection that
    walks them all)."""

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *_: object) -> None:
        if self._enabled:
            gc.enable()


_NO_HASH = "0" * 64  # the template entry's: a valid hash that no entry of a batch uses


class EntryBatch(Sequence[IndexEntry]):
    """The entries of one object as columns: every entry's subject hash, and its row hints (all
    rows of the subject, ascending) as one list cut by `ends`; the fields every entry shares
    (object, dataset, zone, format, version, ETag, the matching and key fingerprints, one
    `updated_at`) once.

    The boundary: the shared fields are validated once, by validating one IndexEntry with them
    (so they are exactly what a validated entry holds), and the columns are checked as wholes
    (64 lowercase hex digits per hash, `ends` strictly increasing up to the number of hints);
    no entry is validated on its own. `to_items()` builds the DynamoDB items directly, equal to
    `IndexEntry.to_item()` of each entry (same keys in the same order, same values);
    `entries()` builds the IndexEntry models (once, on demand), equal to validated ones. As a
    `Sequence[IndexEntry]` a batch goes wherever entries go; `SubjectIndex.replace_object`
    writes it without models. Entry `i` has `rows = ends[i] - ends[i - 1]` (`ends[-1]` = 0):
    a batch lists every row of each subject, `to_item` keeps the first `MAX_ROW_HINTS`.
    """

    __slots__ = ("_ends", "_hashes", "_hints", "_item", "_models", "_template")

    def __init__(
        self,
        *,
        object_url: str,
        dataset_id: str,
        zone: Zone,
        format: str,
        version_id: str = NULL_VERSION,
        etag: str = "",
        matching_fingerprint: str = "",
        key_fingerprint: str = "",
        subject_hashes: Sequence[str] = (),
        ends: Sequence[int] = (),
        row_hints: Sequence[int] = (),
    ) -> None:
        template = IndexEntry(
            subject_hash=_NO_HASH,
            object_url=object_url,
            dataset_id=dataset_id,
            zone=zone,
            format=format,
            rows=1,
            row_hints=(),
            version_id=version_id,
            etag=etag,
            matching_fingerprint=matching_fingerprint,
            key_fingerprint=key_fingerprint,
        )
        hashes, cut, hints = list(subject_hashes), list(ends), list(row_hints)
        _check_columns(hashes, cut, len(hints))
        self._template = template
        self._item = template.to_item()
        self._hashes, self._ends, self._hints = hashes, cut, hints
        self._models: list[IndexEntry] | None = None

    # -- the shared fields, as validated
    @property
    def object_url(self) -> str:
        return self._template.object_url

    @property
    def dataset_id(self) -> str:
        return self._template.dataset_id

    @property
    def zone(self) -> Zone:
        return self._template.zone

    @property
    def format(self) -> str:
        return self._template.format

    @property
    def version_id(self) -> str:
        return self._template.version_id

    @property
    def etag(self) -> str:
        return self._template.etag

    @property
    def updated_at(self) -> str:
        return self._template.updated_at

    # -- the columns (not to be changed)
    @property
    def subject_hashes(self) -> Sequence[str]:
        return self._hashes

    @property
    def ends(self) -> Sequence[int]:
        return self._ends

    @property
    def row_hints(self) -> Sequence[int]:
        """Every entry's row hints, one after the other."""
        return self._hints

    @property
    def rows(self) -> list[int]:
        """Each entry's row count."""
        return [end - start for start, end in zip([0, *self._ends], self._ends, strict=False)]

    @property
    def total_rows(self) -> int:
        """The rows that belong to a subject (every entry's rows)."""
        return self._ends[-1] if self._ends else 0

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
        return (
            f"EntryBatch({self.object_url!r}, {len(self)} entries, {self.total_rows} rows, "
            f"version {self.version_id!r})"
        )

    def entries(self) -> list[IndexEntry]:
        """One IndexEntry per entry, equal to a validated IndexEntry with the same fields (built
        as `model_construct` does, without its cost, from the validated template's fields;
        tests/unit/test_arrow_index_equality.py checks it). They share one `model_fields_set`
        (a frozen model never changes it; model_copy copies it before an update)."""
        return list(self._built())

    def _built(self) -> list[IndexEntry]:
        if self._models is None:
            self._models = self._build()
        return self._models

    def _build(self) -> list[IndexEntry]:
        template = self._template
        fields = template.__dict__
        fields_set = set(template.model_fields_set)
        extra, private = template.__pydantic_extra__, template.__pydantic_private__
        hints = self._hints
        entries: list[IndexEntry] = []
        append, new, set_ = entries.append, object.__new__, object.__setattr__
        with collection_deferred():
            for subject, start, end in zip(
                self._hashes, [0, *self._ends], self._ends, strict=False
            ):
                entry = new(IndexEntry)
                set_(
                    entry,
                    "__dict__",
                    {
                        **fields,
                        "subject_hash": subject,
                        "rows": end - start,
                        "row_hints": tuple(hints[start:end]),
                    },
                )
                set_(entry, "__pydantic_fields_set__", fields_set)
                set_(entry, "__pydantic_extra__", extra)
                set_(entry, "__pydantic_private__", private)
                append(entry)
        return entries

    def to_items(self) -> list[dict[str, Any]]:
        """The DynamoDB item of every entry: `IndexEntry.to_item()` of each, without a model.
        Each item is a copy of the validated template's own `to_item` (so the shared values
        and the keys' order are what `to_item` gives) with the entry's subject hash, rows,
        first `MAX_ROW_HINTS` row hints and `hints_complete` set."""
        template, hints, most = self._item, self._hints, MAX_ROW_HINTS
        copy = template.copy
        items: list[dict[str, Any]] = []
        append = items.append
        with collection_deferred():
            for subject, start, end in zip(
                self._hashes, [0, *self._ends], self._ends, strict=False
            ):
                item = copy()
                item["subject_hash"] = subject
                item["rows"] = rows = end - start
                item["row_hints"] = hints[start : end if rows <= most else start + most]
                item["hints_complete"] = rows <= most
                append(item)
        return items


def _check_columns(hashes: list[str], ends: list[int], hints: int) -> None:
    """A batch's columns as wholes (not value by value: their producer computes them, valid by
    construction): one end per hash, the last end the number of hints. Raises ValueError."""
    if len(ends) != len(hashes):
        raise ValueError("one end per subject hash")
    if (ends[-1] if ends else 0) != hints or (ends and ends[0] < 1):
        raise ValueError("ends must increase strictly, up to the number of row hints")


@dataclass(frozen=True)
class FoundEntry:
    """An index entry as the by_dataset index shows it (keys, rows, deleted)."""

    object_url: str
    subject_hash: str
    rows: int
    deleted: bool


def entry_items(
    object_url: str, entries: Iterable[IndexEntry] | EntryBatch
) -> tuple[list[dict[str, Any]], set[str]]:
    """The DynamoDB items of an object's entries and their subject hashes; an EntryBatch's
    from its columns. Raises ValueError when an entry (or the batch) is another object's."""
    if isinstance(entries, EntryBatch):
        if entries.object_url != object_url:
            raise ValueError("every entry must belong to the object being replaced")
        return entries.to_items(), set(entries.subject_hashes)
    wanted = list(entries)
    if any(e.object_url != object_url for e in wanted):
        raise ValueError("every entry must belong to the object being replaced")
    return [e.to_item() for e in wanted], {e.subject_hash for e in wanted}


class SubjectIndex(Protocol):
    """Storage port of the subject index (DynamoSubjectIndex; tests/fakes.py in memory)."""

    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        """Every entry of one subject, flagged ones included."""

    def lookup_many(self, subject_hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        """`lookup` of each hash (the same entries in the same order) in one call: every hash
        asked for is a key. Raises when any read fails: never fewer entries."""

    def subjects_of(self, object_url: str) -> set[str]:
        """The subject hashes an object has entries for."""

    def replace_object(self, object_url: str, entries: Iterable[IndexEntry] | EntryBatch) -> int:
        """Make `entries` (IndexEntry models, or an EntryBatch) the object's current entries;
        the entries of subjects its current version no longer holds are flagged `deleted`
        (older versions may still hold them). Raises ValueError for an entry of another
        object. Returns how many were flagged."""

    def flag_deleted(self, object_url: str, deleted: bool = True) -> int:
        """Flag (or unflag) every entry of the object; returns how many."""

    def remove_object(self, object_url: str) -> int:
        """Remove every entry of the object as read now, each only while it still describes
        what was read (`remove_unchanged`): an entry an indexer rewrites meanwhile (a version
        written after the caller judged the key) stays. Returns how many were removed."""

    def remove_subjects(self, object_url: str, subject_hashes: Iterable[str]) -> int:
        """Remove these subjects' entries of the object (erasure); returns how many existed."""

    def prune_flagged(self, object_url: str) -> int:
        """Remove the object's entries flagged `deleted` (no older version is left to hold
        them), each only while it is still flagged as read: an entry a new version's indexer
        rewrote meanwhile stays. Returns how many were removed."""

    def entry_states(
        self, object_url: str, subjects: Iterable[str] | None = None
    ) -> list[EntryState]:
        """What the object's entries (every one, or those of `subjects`) describe, read
        consistently: subject hash, version id, ETag, flag."""

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        """Remove each of the object's entries in `expected` only while it still describes that
        state (a conditional delete, lethe_shared.index.entry_removal): an entry a writer
        changed meanwhile stays and is returned as it is now."""

    def described_versions(self, object_url: str) -> set[str]:
        """The version ids the object's unflagged entries describe."""

    def describes_version(
        self, object_url: str, subjects: Sequence[str], *, version_id: str, etag: str
    ) -> bool:
        """Whether each of the object's entries for `subjects` describes this version."""

    def entries_of_dataset(self, dataset_id: str) -> Iterator[FoundEntry]:
        """Every entry of a dataset (eventually consistent)."""


class DynamoSubjectIndex:
    """`SubjectIndexTable`: subject_hash (HASH), object_url (RANGE); GSI by_object
    (object_url HASH, subject_hash RANGE, keys only) for maintenance by object; GSI
    by_dataset (dataset_id HASH, object_url RANGE; keys, rows, deleted) for reconcile."""

    def __init__(self, table: Any) -> None:
        self._table = table  # a boto3 dynamodb Table resource

    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        return self._lookup(self._table, subject_hash)

    def lookup_many(self, subject_hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        """One consistent Query per hash (DynamoDB has no Query of several partition keys, and
        BatchGetItem needs the object URLs), run concurrently through the table's client
        (`concurrent_reads`); each answers as `lookup` (by object URL, the sort key)."""
        wanted = list(dict.fromkeys(subject_hashes))
        reads = ClientTable(self._table) if len(wanted) > 1 else self._table
        found = run_all([partial(self._lookup, reads, h) for h in wanted])
        return dict(zip(wanted, found, strict=True))

    @staticmethod
    def _lookup(table: Any, subject_hash: str) -> list[IndexEntry]:
        return [
            IndexEntry.from_item(i)
            for i in query_all(
                table,
                KeyConditionExpression="subject_hash = :h",
                ExpressionAttributeValues={":h": subject_hash},
                ConsistentRead=True,
            )
        ]

    def subjects_of(self, object_url: str) -> set[str]:
        return {
            i["subject_hash"]
            for i in query_all(
                self._table,
                IndexName="by_object",
                KeyConditionExpression="object_url = :u",
                ExpressionAttributeValues={":u": object_url},
            )
        }

    def replace_object(self, object_url: str, entries: Iterable[IndexEntry] | EntryBatch) -> int:
        """Write the object's current entries, then flag `deleted` the entries of subjects its
        current version no longer holds: in a versioned bucket the version they were found in
        is still stored, and erasure must reach it. Other objects' entries are never touched.
        An EntryBatch is written from its columns (`to_items`), without a model per entry."""
        items, subjects = entry_items(object_url, entries)
        stale = self.subjects_of(object_url) - subjects
        with self._table.batch_writer() as batch:  # resends unprocessed items itself
            for item in items:
                batch.put_item(Item=item)
        self._flag(object_url, stale, True)
        return len(stale)

    def flag_deleted(self, object_url: str, deleted: bool = True) -> int:
        """Mark the object's entries as describing older versions only (the key's current
        version is a delete marker). The data still sits in those versions until erased or
        expired, so the entries stay (erasure needs them); lookups hide them. Re-indexing the
        key clears the flag."""
        subjects = self.subjects_of(object_url)
        self._flag(object_url, subjects, deleted)
        return len(subjects)

    def _flag(self, object_url: str, subjects: Iterable[str], deleted: bool) -> None:
        for subject in sorted(subjects):
            try:
                self._table.update_item(
                    Key={"subject_hash": subject, "object_url": object_url},
                    UpdateExpression="SET deleted = :d",
                    ConditionExpression="attribute_exists(subject_hash)",
                    ExpressionAttributeValues={":d": deleted},
                )
            except ClientError as exc:  # removed meanwhile: nothing to flag
                if not is_condition_failed(exc):
                    raise

    def remove_object(self, object_url: str) -> int:
        return len(self.remove_unchanged(object_url, self.entry_states(object_url)).removed)

    def remove_subjects(self, object_url: str, subject_hashes: Iterable[str]) -> int:
        present = self.subjects_of(object_url) & set(subject_hashes)
        with self._table.batch_writer() as batch:
            for subject in sorted(present):
                batch.delete_item(Key={"subject_hash": subject, "object_url": object_url})
        return len(present)

    def prune_flagged(self, object_url: str) -> int:
        flagged = [s for s in self.entry_states(object_url) if s.deleted]
        return len(self.remove_unchanged(object_url, flagged).removed) if flagged else 0

    def described_versions(self, object_url: str) -> set[str]:
        return {
            str(i.get("version_id", NULL_VERSION))
            for i in self._entries_of(object_url)
            if not i.get("deleted")
        }

    def entry_states(
        self, object_url: str, subjects: Iterable[str] | None = None
    ) -> list[EntryState]:
        """By key when `subjects` are given (the table, no index: an entry just written is
        seen); otherwise the subjects the by_object index lists (eventually consistent)."""
        wanted = self.subjects_of(object_url) if subjects is None else set(subjects)
        return sorted(
            (EntryState.of_item(i) for i in self._entries_of(object_url, wanted)),
            key=lambda s: s.subject_hash,
        )

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        return delete_unchanged(self._table, object_url, expected)

    def _entries_of(
        self, object_url: str, subjects: Iterable[str] | None = None
    ) -> list[dict[str, Any]]:
        """The object's entries (subject, version, etag, flag), read consistently."""
        wanted = self.subjects_of(object_url) if subjects is None else subjects
        keys = [{"subject_hash": s, "object_url": object_url} for s in sorted(set(wanted))]
        return list(
            batch_get_all(
                self._table,
                keys,
                ProjectionExpression="subject_hash, version_id, etag, deleted",
                ConsistentRead=True,
            )
        )

    def describes_version(
        self, object_url: str, subjects: Sequence[str], *, version_id: str, etag: str
    ) -> bool:
        """Whether every one of the object's entries (one per subject in `subjects`) describes
        exactly this version and ETag and is not flagged deleted: then the object is indexed."""
        keys = [{"subject_hash": s, "object_url": object_url} for s in subjects]
        found = list(
            batch_get_all(
                self._table,
                keys,
                ProjectionExpression="subject_hash, version_id, etag, deleted",
                ConsistentRead=True,
            )
        )
        if len(found) != len(keys):
            return False  # an entry went away meanwhile
        return all(
            (i.get("version_id"), i.get("etag")) == (version_id, etag) and not i.get("deleted")
            for i in found
        )

    def entries_of_dataset(self, dataset_id: str) -> Iterator[FoundEntry]:
        items = query_all(
            self._table,
            IndexName="by_dataset",
            KeyConditionExpression="dataset_id = :d",
            ExpressionAttributeValues={":d": dataset_id},
        )
        for item in items:
            yield FoundEntry(
                str(item["object_url"]),
                str(item["subject_hash"]),
                int(item.get("rows", 0)),
                bool(item.get("deleted", False)),
            )
