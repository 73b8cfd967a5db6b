"""In-memory stand-ins for Lethe's storage ports, for unit tests.

Each fake implements the Protocol of the adapter it stands for, with the same semantics, and
this module is type-checked strictly (`make mypy`), so a fake cannot drift from its port: the
assignments at the bottom fail mypy when a method is missing or has another signature.

    DatasetRegistry  lethe_shared.datasets.registry   DynamoDatasetRegistry   MemoryRegistry
    Registrations    lethe_shared.datasets.registry   DynamoDatasetRegistry   MemoryRegistry
    ObjectCatalog    lethe_shared.catalog.object_catalog    DynamoObjectCatalog     MemoryCatalog
    SubjectIndex     lethe_shared.index.subject_index   DynamoSubjectIndex      MemoryIndex
    ObjectStore      lethe_shared.aws.s3         S3ObjectStore           MemoryObjectStore
    WritesLedger     lethe_shared.catalog.writes_ledger  DynamoWritesLedger  MemoryWritesLedger
    IngestionStarter lethe_shared.ingestion.starter  StepFunctionsBatchStarter  RecordingStarter
    IndexRequester   lethe_shared.index.maintenance  AwsIndexRequester  RecordingRequester
    DocumentStore    lethe_shared.erasure.workflow   S3Documents        MemoryDocuments
    ErasureRequests  lethe_shared.erasure.requests    DynamoErasureRequests   MemoryErasureRequests
    Approvals        lethe_shared.erasure.requests    DynamoApprovals         MemoryApprovals
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lethe_shared.aws.s3 import ObjectHead, ObjectStore, ObjectVersion, WriteLog, s3_url
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    IngestionRecord,
    ObjectCatalog,
    ObjectStatus,
    latest,
)
from lethe_shared.catalog.writes_ledger import (
    Intent,
    Writer,
    WritesLedger,
    Written,
    intent_seconds,
    settle,
)
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.matching import Generations, matching_fingerprint, next_generations
from lethe_shared.datasets.registry import DatasetRegistry, Registration, Registrations
from lethe_shared.erasure.requests import (
    ALLOWED_FROM,
    ApprovalLink,
    Approvals,
    ErasureRequest,
    ErasureRequests,
    ErasureStatus,
    HistoryEvent,
    InvalidTransitionError,
    RequestNotFoundError,
)
from lethe_shared.erasure.workflow import DocumentStore
from lethe_shared.errors import CatalogItemMissingError
from lethe_shared.index.entry_removal import EntryState, Removal
from lethe_shared.index.maintenance import IndexRequester
from lethe_shared.index.subject_index import EntryBatch, FoundEntry, IndexEntry, SubjectIndex
from lethe_shared.ingestion.starter import IngestionStarter, ingestion_execution_name


class MemoryRegistry:
    """DatasetRegistry in a dict, with the matching generations of DynamoDatasetRegistry (a
    dataset given to the constructor is generation 1, indexed, as an item from before
    generations is read)."""

    def __init__(self, *datasets: Dataset) -> None:
        self.datasets = {d.dataset_id: d for d in datasets}
        self.versions: dict[str, int] = {}
        self.generations: dict[str, Generations] = {
            d.dataset_id: Generations(matching_fingerprint(d), 1, 1) for d in datasets
        }
        # indexed_key_fingerprint per dataset (none: unknown, as an item from before it)
        self.indexed_keys: dict[str, str] = {}

    def get(self, dataset_id: str) -> Dataset | None:
        return self.datasets.get(dataset_id)

    def put(self, dataset: Dataset) -> int:
        self.datasets[dataset.dataset_id] = dataset
        self.versions[dataset.dataset_id] = self.versions.get(dataset.dataset_id, 0) + 1
        self.generations[dataset.dataset_id] = next_generations(
            self.generations.get(dataset.dataset_id), matching_fingerprint(dataset)
        )
        return self.versions[dataset.dataset_id]

    def registration(self, dataset_id: str) -> Registration | None:
        dataset = self.datasets.get(dataset_id)
        if dataset is None:
            return None
        return Registration(
            dataset,
            self.versions.get(dataset_id, 0),
            self.generations[dataset_id],
            indexed_key_fingerprint=self.indexed_keys.get(dataset_id, ""),
        )

    def record_indexed(
        self, dataset_id: str, generation: int, key_fingerprint: str | None = None
    ) -> bool:
        """What the backfill's "Record Indexed Generation" does: only for the current one
        (and, given a key fingerprint, the key with it)."""
        current = self.generations.get(dataset_id)
        if current is None or current.matching != generation:
            return False
        self.generations[dataset_id] = Generations(current.fingerprint, generation, generation)
        if key_fingerprint is not None:
            self.indexed_keys[dataset_id] = key_fingerprint
        return True

    def list(self) -> Iterator[Dataset]:
        return iter(list(self.datasets.values()))


class MemoryCatalog:
    """ObjectCatalog in a dict: the same rules as DynamoObjectCatalog (a strictly newer
    sequencer wins; an ingestion record needs the version's item and survives newer events)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], CatalogItem] = {}
        self.ingestions: dict[tuple[str, str], IngestionRecord] = {}
        self.failures: dict[tuple[str, str], str] = {}
        self.executions: dict[tuple[str, str], str] = {}  # ingest_execution

    def put_if_newer(self, item: CatalogItem) -> bool:
        key = (item.object_url, item.version_id)
        current = self.items.get(key)
        if current is not None and not current.sequencer < item.sequencer:
            return False
        self.items[key] = item
        return True

    def get(self, bucket: str, key: str, version_id: str) -> CatalogItem | None:
        return self.items.get((s3_url(bucket, key), version_id))

    def by_dataset(self, dataset_id: str) -> Iterator[CatalogItem]:
        return iter([i for i in self.items.values() if i.dataset_id == dataset_id])

    def in_status(self, dataset_id: str, statuses: Iterable[ObjectStatus]) -> Iterator[CatalogItem]:
        wanted = set(statuses)
        return iter([i for i in self.by_dataset(dataset_id) if i.status in wanted])

    def versions_of(self, object_url: str) -> list[CatalogItem]:
        return [i for (url, _), i in self.items.items() if url == object_url]

    def start_ingestion(self, object_url: str, version_id: str, execution: str) -> bool:
        item = self.items.get((object_url, version_id))
        if item is None or item.status is ObjectStatus.DELETED:
            return False
        self.items[(object_url, version_id)] = item.model_copy(
            update={"status": ObjectStatus.INGESTING}
        )
        self.executions[(object_url, version_id)] = execution
        return True

    def fail_ingestion(self, object_url: str, version_id: str, error: str) -> bool:
        item = self.items.get((object_url, version_id))
        if item is None or item.status is not ObjectStatus.INGESTING:
            return False
        self.items[(object_url, version_id)] = item.model_copy(
            update={"status": ObjectStatus.FAILED, "ingest_error": error}
        )
        self.failures[(object_url, version_id)] = error
        return True

    def newer_version_of(self, object_url: str, version_id: str) -> str | None:
        versions = [i for (url, _), i in self.items.items() if url == object_url]
        own = next((i for i in versions if i.version_id == version_id), None)
        newest = latest(
            i for i in versions if i.status is not ObjectStatus.DELETED or i.delete_marker
        )
        if own is None or newest is None or newest.sequencer <= own.sequencer:
            return None
        return newest.version_id

    def lake_objects_of(self, object_url: str) -> set[str]:
        return {
            url
            for (raw_url, _), record in self.ingestions.items()
            if raw_url == object_url
            for url in record.lake_objects
        }

    def record_ingestion(self, object_url: str, version_id: str, record: IngestionRecord) -> None:
        if (object_url, version_id) not in self.items:
            raise CatalogItemMissingError(f"no item for {object_url} version {version_id}")
        self.ingestions[(object_url, version_id)] = record

    def record_failure(
        self, object_url: str, version_id: str, error: str, correlation_id: str, at: datetime
    ) -> None:
        if (object_url, version_id) not in self.items:
            raise CatalogItemMissingError(f"no item for {object_url} version {version_id}")
        item = self.items[(object_url, version_id)]
        self.items[(object_url, version_id)] = item.model_copy(
            update={"status": ObjectStatus.FAILED, "ingest_error": error}
        )
        self.failures[(object_url, version_id)] = error

    def record_gone(self, object_url: str, version_id: str, correlation_id: str) -> bool:
        item = self.items.get((object_url, version_id))
        if item is None or item.status is ObjectStatus.DELETED:
            return False
        self.items[(object_url, version_id)] = item.model_copy(
            update={"status": ObjectStatus.DELETED}
        )
        return True


class MemoryIndex:
    """SubjectIndex in a dict keyed by (subject hash, object URL), as the table is."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], IndexEntry] = {}

    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        return [e for (s, _), e in sorted(self.entries.items()) if s == subject_hash]

    def lookup_many(self, subject_hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        return {h: self.lookup(h) for h in dict.fromkeys(subject_hashes)}

    def subjects_of(self, object_url: str) -> set[str]:
        return {s for (s, url) in self.entries if url == object_url}

    def replace_object(self, object_url: str, entries: Iterable[IndexEntry] | EntryBatch) -> int:
        if isinstance(entries, EntryBatch) and entries.object_url != object_url:
            raise ValueError("every entry must belong to the object being replaced")
        wanted = entries.entries() if isinstance(entries, EntryBatch) else list(entries)
        if any(e.object_url != object_url for e in wanted):
            raise ValueError("every entry must belong to the object being replaced")
        stale = self.subjects_of(object_url) - {e.subject_hash for e in wanted}
        self.entries.update({(e.subject_hash, object_url): e for e in wanted})
        for subject in stale:
            key = (subject, object_url)
            self.entries[key] = self.entries[key].model_copy(update={"deleted": True})
        return len(stale)

    def flag_deleted(self, object_url: str, deleted: bool = True) -> int:
        keys = [k for k in self.entries if k[1] == object_url]
        for key in keys:
            self.entries[key] = self.entries[key].model_copy(update={"deleted": deleted})
        return len(keys)

    def remove_object(self, object_url: str) -> int:
        return len(self.remove_unchanged(object_url, self.entry_states(object_url)).removed)

    def remove_subjects(self, object_url: str, subject_hashes: Iterable[str]) -> int:
        keys = [(s, object_url) for s in set(subject_hashes) if (s, object_url) in self.entries]
        for key in keys:
            del self.entries[key]
        return len(keys)

    def prune_flagged(self, object_url: str) -> int:
        flagged = [s for s in self.entry_states(object_url) if s.deleted]
        return len(self.remove_unchanged(object_url, flagged).removed)

    def described_versions(self, object_url: str) -> set[str]:
        return {
            e.version_id
            for (_, url), e in self.entries.items()
            if url == object_url and not e.deleted
        }

    def entry_states(
        self, object_url: str, subjects: Iterable[str] | None = None
    ) -> list[EntryState]:
        wanted = self.subjects_of(object_url) if subjects is None else set(subjects)
        return [
            _state(self.entries[(s, object_url)])
            for s in sorted(wanted)
            if (s, object_url) in self.entries
        ]

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        removed: list[EntryState] = []
        changed: list[EntryState] = []
        for state in {s.subject_hash: s for s in expected}.values():
            key = (state.subject_hash, object_url)
            if key not in self.entries:
                continue  # gone meanwhile
            now = _state(self.entries[key])
            if now == state:
                del self.entries[key]
                removed.append(state)
            else:
                changed.append(now)
        return Removal(tuple(removed), tuple(changed))

    def describes_version(
        self, object_url: str, subjects: Sequence[str], *, version_id: str, etag: str
    ) -> bool:
        found = [self.entries.get((s, object_url)) for s in subjects]
        return all(
            e is not None and (e.version_id, e.etag) == (version_id, etag) and not e.deleted
            for e in found
        )

    def entries_of_dataset(self, dataset_id: str) -> Iterator[FoundEntry]:
        return iter(
            [
                FoundEntry(e.object_url, e.subject_hash, e.rows, e.deleted)
                for e in self.entries.values()
                if e.dataset_id == dataset_id
            ]
        )


def _state(entry: IndexEntry) -> EntryState:
    return EntryState(entry.subject_hash, entry.version_id, entry.etag, entry.deleted)


@dataclass
class _StoredVersion:
    version_id: str
    body: bytes | None  # None: a delete marker
    metadata: dict[str, str] = field(default_factory=dict)
    modified: datetime = field(default_factory=lambda: datetime.now(UTC))
    storage_class: str = "STANDARD"

    @property
    def etag(self) -> str:
        return hashlib.md5(self.body or b"", usedforsecurity=False).hexdigest()


class MemoryObjectStore:
    """ObjectStore over versioned buckets in memory, with S3's rules: a delete of a key adds
    a delete marker, a delete of a version removes it, listing by prefix sees sibling keys."""

    def __init__(self) -> None:
        self.keys: dict[tuple[str, str], list[_StoredVersion]] = {}  # oldest first
        self._ids = itertools.count(1)
        self._clock = datetime(2026, 11, 1, tzinfo=UTC)

    # -- test set-up, as a producer or S3 would act ------------------------------------
    def put(
        self, bucket: str, key: str, body: bytes, metadata: Mapping[str, str] | None = None
    ) -> str:
        return self._add(bucket, key, body, dict(metadata or {}))

    def put_version(self, bucket: str, key: str, version_id: str, body: bytes = b"{}\n") -> str:
        """A version under an id of the test's choosing (the id an event names)."""
        self._clock += timedelta(seconds=1)
        stored = _StoredVersion(version_id, body, {}, self._clock)
        self.keys.setdefault((bucket, key), []).append(stored)
        return version_id

    def archive(self, bucket: str, key: str, version_id: str, storage_class: str) -> None:
        """A lifecycle transition (or a producer's upload) into another storage class."""
        versions = self.keys.get((bucket, key), [])
        self.keys[(bucket, key)] = [
            replace(v, storage_class=storage_class) if v.version_id == version_id else v
            for v in versions
        ]

    def delete(self, bucket: str, key: str) -> str:
        """DeleteObject without a version: a delete marker becomes the current version."""
        return self._add(bucket, key, None, {})

    def delete_version(self, bucket: str, key: str, version_id: str) -> None:
        versions = self.keys.get((bucket, key), [])
        self.keys[(bucket, key)] = [v for v in versions if v.version_id != version_id]

    def _add(self, bucket: str, key: str, body: bytes | None, metadata: dict[str, str]) -> str:
        self._clock += timedelta(seconds=1)
        version = _StoredVersion(f"v{next(self._ids)}", body, metadata, self._clock)
        self.keys.setdefault((bucket, key), []).append(version)
        return version.version_id

    # -- ObjectStore --------------------------------------------------------------------
    def _find(self, bucket: str, key: str, version_id: str | None) -> _StoredVersion | None:
        versions = self.keys.get((bucket, key), [])
        if version_id is None or version_id == "null":
            found = versions[-1] if versions else None
        else:
            found = next((v for v in versions if v.version_id == version_id), None)
        return found if found is not None and found.body is not None else None

    def head(self, bucket: str, key: str, version_id: str | None = None) -> ObjectHead | None:
        found = self._find(bucket, key, version_id)
        if found is None or found.body is None:
            return None
        return ObjectHead(found.version_id, found.etag, len(found.body), dict(found.metadata))

    def versions_of(self, bucket: str, key: str) -> list[ObjectVersion]:
        return [v for v in self.list_versions(bucket, key) if v.key == key]

    def list_versions(self, bucket: str, prefix: str) -> Iterator[ObjectVersion]:
        listed: list[ObjectVersion] = []
        for (b, key), versions in sorted(self.keys.items()):
            if b != bucket or not key.startswith(prefix):
                continue
            for position, v in enumerate(reversed(versions)):
                listed.append(
                    ObjectVersion(
                        key=key,
                        version_id=v.version_id,
                        is_latest=position == 0,
                        delete_marker=v.body is None,
                        etag="" if v.body is None else v.etag,
                        size=len(v.body or b""),
                        last_modified=v.modified,
                        storage_class="" if v.body is None else v.storage_class,
                    )
                )
        return iter(listed)

    def read_bytes(self, bucket: str, key: str, version_id: str | None = None) -> bytes | None:
        found = self._find(bucket, key, version_id)
        return None if found is None else found.body

    def download(self, bucket: str, key: str, version_id: str, target: Path) -> ObjectHead | None:
        body = self.read_bytes(bucket, key, version_id)
        if body is None:
            return None
        target.write_bytes(body)
        return self.head(bucket, key, version_id)


class MemoryWritesLedger:
    """WritesLedger in dicts, deciding with the adapter's own rule (`writes_ledger.settle`),
    on a clock the test moves (`now`)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 11, 1, 12, tzinfo=UTC)
        self.versions: dict[tuple[str, str, str], tuple[str, str]] = {}  # -> (writer, run id)
        self.intents: dict[tuple[str, str], dict[str, Intent]] = {}
        self._tokens = itertools.count(1)

    def record(self, bucket: str, key: str, version_id: str, name: Writer = Writer.ERASE) -> None:
        """A test's shortcut: `name` wrote this version and recorded it."""
        writer = self.writer(name, "run-1")
        writer.written(bucket, key, writer.intend(bucket, key, 0), version_id)

    def writer_of(self, bucket: str, key: str, version_id: str) -> str | None:
        found = self.versions.get((bucket, key, version_id))
        return found[0] if found else None

    def written(self, bucket: str, key: str, version_id: str) -> Written | None:
        found = self.versions.get((bucket, key, version_id))
        return Written(writer=found[0], run_id=found[1]) if found else None

    def settled_writer_of(
        self, bucket: str, key: str, version_id: str, *, created_at: datetime | None
    ) -> str | None:
        pending = list(self.intents.get((bucket, key), {}).values())
        return settle(
            pending,
            self.writer_of(bucket, key, version_id),
            url=s3_url(bucket, key),
            version_id=version_id,
            created_at=created_at,
            now=self.now,
        )

    def forget(self, bucket: str, key: str, version_id: str) -> None:
        self.versions.pop((bucket, key, version_id), None)

    def writer(self, name: Writer, run_id: str) -> MemoryLedgerWriter:
        return MemoryLedgerWriter(self, name, run_id)

    def new_token(self) -> str:
        return f"t{next(self._tokens)}"


@dataclass
class MemoryLedgerWriter:
    """WriteLog of one job run on a MemoryWritesLedger."""

    ledger: MemoryWritesLedger
    name: Writer
    run_id: str

    def intend(self, bucket: str, key: str, size: int) -> str:
        token = self.ledger.new_token()
        now = self.ledger.now
        until = now + timedelta(seconds=intent_seconds(size))
        intent = Intent(token, self.name.value, self.run_id, now, until)
        self.ledger.intents.setdefault((bucket, key), {})[token] = intent
        return token

    def written(self, bucket: str, key: str, token: str, version_id: str) -> None:
        self.ledger.versions[(bucket, key, version_id)] = (self.name.value, self.run_id)
        self.abandoned(bucket, key, token)

    def abandoned(self, bucket: str, key: str, token: str) -> None:
        self.ledger.intents.get((bucket, key), {}).pop(token, None)


class MemoryDocuments:
    """DocumentStore on a dict: put overwrites, put_once writes only a new key."""

    def __init__(self, bucket: str = "lethe-local-reports-123456789012-us-east-1") -> None:
        self.bucket = bucket
        self.bodies: dict[str, bytes] = {}
        self.writes: list[str] = []

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self.bodies[key] = body
        self.writes.append(key)
        return self.url(key)

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        if key in self.bodies:
            return False
        self.put(key, body, content_type)
        return True

    def get(self, key: str) -> bytes | None:
        return self.bodies.get(key)

    def url(self, key: str) -> str:
        return s3_url(self.bucket, key)


class RecordingStarter:
    """IngestionStarter that records the distinct executions asked for (Step Functions
    de-duplicates by name, so a repeated start of the same version starts nothing)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, item: CatalogItem) -> bool:
        name = ingestion_execution_name(item)
        if name in self.started:
            return False
        self.started.append(name)
        return True


class RecordingRequester:
    """IndexRequester that records what was asked of the Lambda and of Spark."""

    def __init__(self) -> None:
        self.lambdas: list[dict[str, str]] = []
        self.sparks: list[tuple[str, dict[str, Any]]] = []

    def by_lambda(self, request: dict[str, str]) -> None:
        self.lambdas.append(request)

    def by_spark(self, name: str, request: dict[str, Any]) -> None:
        self.sparks.append((name, request))


def _as_stored(value: Any) -> Any:
    """A value as DynamoDB would keep it: JSON types only, and no float (boto3 refuses floats:
    "Float types are not supported. Use Decimal types instead.")."""

    def no_float(number: str) -> Any:
        raise TypeError("Float types are not supported. Use Decimal types instead.")

    return json.loads(json.dumps(value), parse_float=no_float)


class MemoryErasureRequests:
    """ErasureRequests in a dict of stored items, with DynamoErasureRequests' rules: create only
    when the id is new; a change of status only from a status the target may be entered from
    (ALLOWED_FROM, or `allowed_from`), appended to the history, in one step; `remove` drops the
    attribute (it reads back as its default)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def _read(self, request_id: str) -> ErasureRequest | None:
        item = self.items.get(request_id)
        return None if item is None else ErasureRequest.model_validate(copy.deepcopy(item))

    def create(self, request: ErasureRequest) -> tuple[ErasureRequest, bool]:
        stored = self._read(request.request_id)
        if stored is not None:
            return stored, False
        self.items[request.request_id] = _as_stored(request.model_dump(mode="json"))
        return request, True

    def get(self, request_id: str) -> ErasureRequest | None:
        return self._read(request_id)

    def list(self, status: ErasureStatus | None = None) -> Iterator[ErasureRequest]:
        found = [
            ErasureRequest.model_validate(copy.deepcopy(item))
            for item in self.items.values()
            if status is None or item["status"] == status.value
        ]
        return iter(sorted(found, key=lambda r: r.created_at, reverse=True))

    def transition(
        self,
        request_id: str,
        target: ErasureStatus,
        *,
        by: str,
        detail: str = "",
        allowed_from: frozenset[ErasureStatus] | None = None,
        updates: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
        require: Mapping[str, str] | None = None,
    ) -> ErasureRequest:
        sources = ALLOWED_FROM[target] if allowed_from is None else allowed_from
        item = self.items.get(request_id)
        if item is None:
            raise RequestNotFoundError(f"no erasure request {request_id}")
        if item["status"] not in {s.value for s in sources} or not all(
            _at_path(item, path) == expected for path, expected in (require or {}).items()
        ):
            raise InvalidTransitionError(request_id, target, str(item["status"]))
        now = datetime.now(UTC).isoformat()
        event = HistoryEvent(status=target, at=now, by=by, detail=detail)
        changed = copy.deepcopy(item)
        changed.update(_as_stored(dict(updates or {})))
        changed["status"] = target.value
        changed["history"] = [*changed["history"], event.model_dump(mode="json")]
        changed["updated_at"] = now
        for name in remove:
            changed.pop(name, None)
        record = ErasureRequest.model_validate(copy.deepcopy(changed))
        self.items[request_id] = changed
        return record

    def clear_task_token(self, request_id: str, token: str) -> bool:
        item = self.items.get(request_id)
        if item is None or not token or item.get("task_token") != token:
            return False
        changed = copy.deepcopy(item)
        del changed["task_token"]
        changed["updated_at"] = datetime.now(UTC).isoformat()
        self.items[request_id] = changed
        return True

    def update(self, request_id: str, updates: Mapping[str, Any]) -> ErasureRequest:
        item = self.items.get(request_id)
        if item is None:
            raise RequestNotFoundError(f"no erasure request {request_id}")
        changed = {**copy.deepcopy(item), **_as_stored(dict(updates))}
        changed["updated_at"] = datetime.now(UTC).isoformat()
        record = ErasureRequest.model_validate(copy.deepcopy(changed))
        self.items[request_id] = changed
        return record


class MemoryApprovals:
    """Approvals in a dict: a put replaces the link of the same approval id, as PutItem does."""

    def __init__(self) -> None:
        self.links: dict[str, ApprovalLink] = {}

    def put(self, link: ApprovalLink) -> None:
        self.links[link.approval_id] = link

    def get(self, approval_id: str) -> ApprovalLink | None:
        return self.links.get(approval_id)


# Each fake is its port: mypy checks these assignments (make mypy).
_registry: DatasetRegistry = MemoryRegistry()
_registrations: Registrations = MemoryRegistry()
_catalog: ObjectCatalog = MemoryCatalog()
_index: SubjectIndex = MemoryIndex()
_objects: ObjectStore = MemoryObjectStore()
_ledger: WritesLedger = MemoryWritesLedger()
_write_log: WriteLog = MemoryWritesLedger().writer(Writer.INGEST, "run")
_starter: IngestionStarter = RecordingStarter()
_requester: IndexRequester = RecordingRequester()
_requests: ErasureRequests = MemoryErasureRequests()
_approvals: Approvals = MemoryApprovals()
_documents: DocumentStore = MemoryDocuments()


def _at_path(item: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a stored item (None when a part is missing), as a
    DynamoDB condition reads it."""
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value
