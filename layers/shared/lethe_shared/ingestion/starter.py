"""Starting ingestion: raw object versions, collected per batch of object events, one execution
of the ingestion state machine per group of at most MAX_BATCH_OBJECTS versions.

The object events handler takes its events from SQS in batches. While it records a batch, each
new raw object version that needs ingesting is *collected* (`IngestionCollector`) instead of
started on its own; afterwards the collected versions are split into groups (`plan_groups`):
sorted by (dataset_id, object_url, version_id), at most MAX_BATCH_OBJECTS per group, and small
enough for Step Functions' input limit. Each group is one execution (`StepFunctionsBatchStarter`):
a manifest in the reports bucket, then `StartExecution` with

    {"manifest": "s3://<reports>/manifests/ingest/<name>.json",
     "objects": [{"dataset_id", "bucket", "key", "version_id", "object_url"}, ...]}

The execution name is derived from the group's object versions (`IngestionGroup.name`), so a
redelivered identical batch is refused by Step Functions (ExecutionAlreadyExists) instead of
ingesting twice. Two versions of one key may share a group: the ingest job decides, by the
catalog's sequencer order, which one is SUPERSEDED.

An operator's re-ingestion (`lethe objects reingest`) plans its groups the same way with a
`rerun` label (a UTC timestamp): the same input and manifest, under a name of its own, since the
name of the first attempt stays taken in Step Functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from lethe_shared.aws.executions import execution_name, version_digest
from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import CatalogItem

#: Most object versions one ingestion execution (and one Spark ingest run) takes. The state
#: machine records a few history events per object; 200 keeps an execution's history well under
#: Step Functions' 25,000-event limit.
MAX_BATCH_OBJECTS = 200
#: Largest execution input a group may have, in bytes of JSON. Step Functions refuses more than
#: 256 KiB; long keys (S3 allows 1,024 bytes) make a group of 200 come near that.
MAX_INPUT_BYTES = 200_000
#: Where the manifests go in the reports bucket: MANIFEST_PREFIX + "<execution name>.json".
MANIFEST_PREFIX = "manifests/ingest/"
#: Hex digits of the group digest in the execution name (sha256 of the group's versions).
_DIGEST_LENGTH = 48
#: The same for a rerun, whose name also holds its label.
_RERUN_DIGEST_LENGTH = 32


class IngestionStarter(Protocol):
    def start(self, item: CatalogItem) -> bool:
        """Ask for `item` (a RECEIVED raw object version) to be ingested. True when the request
        was taken (started now, or collected to be started with its batch)."""


def version_key(item: CatalogItem) -> tuple[str, str]:
    """What identifies one object version's ingestion: (object_url, version_id)."""
    return item.object_url, item.version_id


def ingestion_execution_name(item: CatalogItem) -> str:
    """`<dataset>-<hash of object url and version>`: the name one object version alone would get.

    Batches are named by `IngestionGroup.name`; this per-version name identifies a version's
    ingestion where one version is meant (tests/fakes.py's RecordingStarter de-duplicates by it).
    """
    return execution_name(
        item.dataset_id or "object", version_digest(item.object_url, item.version_id, 40)
    )


def object_entry(item: CatalogItem) -> dict[str, Any]:
    """One object of the execution input."""
    return {
        "dataset_id": item.dataset_id,
        "bucket": item.bucket,
        "key": item.key,
        "version_id": item.version_id,
        "object_url": item.object_url,
    }


def manifest_entry(item: CatalogItem) -> dict[str, Any]:
    """One object of the manifest (the raw bucket is implied)."""
    return {"dataset_id": item.dataset_id, "key": item.key, "version_id": item.version_id}


def sort_key(item: CatalogItem) -> tuple[str, str, str]:
    return item.dataset_id or "", item.object_url, item.version_id


def group_digest(items: Iterable[CatalogItem], length: int = _DIGEST_LENGTH) -> str:
    """Hex digits of sha256 over the sorted "<object url>#<version id>" lines of `items`."""
    lines = sorted(f"{url}#{version}" for url, version in map(version_key, items))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:length]


@dataclass(frozen=True)
class IngestionGroup:
    """Object versions ingested by one execution, and the SQS records that asked for them."""

    items: tuple[CatalogItem, ...]  # sorted by sort_key, no version twice
    record_ids: frozenset[str] = field(default_factory=frozenset)
    rerun: str = ""  # an operator's re-ingestion: its label (e.g. a UTC timestamp)

    @property
    def name(self) -> str:
        """`[<dataset>-]batch-<digest of the versions>`: the same versions, the same name; a
        rerun is `<dataset or batch>-rerun-<label>-<digest>` (the same versions, another
        attempt; a long dataset id is cut, never the rerun part)."""
        datasets = {item.dataset_id for item in self.items}
        if self.rerun:
            digest = group_digest(self.items, _RERUN_DIGEST_LENGTH)
            label = str(next(iter(datasets))) if len(datasets) == 1 else "batch"
            return execution_name(label, f"rerun-{self.rerun}-{digest}")
        label = f"{datasets.pop()}-batch" if len(datasets) == 1 else "batch"
        return execution_name(label, group_digest(self.items))

    @property
    def manifest_key(self) -> str:
        return f"{MANIFEST_PREFIX}{self.name}.json"

    def manifest(self) -> list[dict[str, Any]]:
        return [manifest_entry(item) for item in self.items]

    def execution_input(self, reports_bucket: str) -> dict[str, Any]:
        return {
            "manifest": s3_url(reports_bucket, self.manifest_key),
            "objects": [object_entry(item) for item in self.items],
        }


def _entry_bytes(item: CatalogItem) -> int:
    """Bytes one object adds to the execution input (its JSON and a separator)."""
    return len(json.dumps(object_entry(item))) + 2


# The execution input without objects, and room for the manifest URL (bucket and name).
_INPUT_OVERHEAD = len(json.dumps({"manifest": "", "objects": []})) + 300


def plan_groups(
    requests: Iterable[tuple[CatalogItem, str]],
    *,
    max_objects: int | None = None,
    rerun: str = "",
    max_input_bytes: int | None = None,
) -> list[IngestionGroup]:
    """Split (item, record id) requests into execution groups.

    A version asked for twice (a duplicated event in one batch) is one object, with both record
    ids. Items are sorted by (dataset_id, object_url, version_id) and cut into groups of at most
    `max_objects` (MAX_BATCH_OBJECTS) whose execution input stays within `max_input_bytes`
    (MAX_INPUT_BYTES). Deterministic: the same requests give the same groups, names included,
    whatever their order.
    """
    max_objects = MAX_BATCH_OBJECTS if max_objects is None else max_objects
    max_input_bytes = MAX_INPUT_BYTES if max_input_bytes is None else max_input_bytes
    if max_objects < 1:
        raise ValueError("max_objects must be at least 1")
    items: dict[tuple[str, str], CatalogItem] = {}
    records: dict[tuple[str, str], set[str]] = {}
    for item, record_id in requests:
        key = version_key(item)
        items.setdefault(key, item)
        records.setdefault(key, set()).add(record_id)
    ordered = sorted(items.values(), key=sort_key)
    groups: list[IngestionGroup] = []
    current: list[CatalogItem] = []
    size = _INPUT_OVERHEAD
    for item in ordered:
        entry = _entry_bytes(item)
        if current and (len(current) >= max_objects or size + entry > max_input_bytes):
            groups.append(_group(current, records, rerun))
            current, size = [], _INPUT_OVERHEAD
        current.append(item)
        size += entry
    if current:
        groups.append(_group(current, records, rerun))
    return groups


def _group(
    items: list[CatalogItem], records: dict[tuple[str, str], set[str]], rerun: str = ""
) -> IngestionGroup:
    ids = frozenset(rid for item in items for rid in records[version_key(item)])
    return IngestionGroup(items=tuple(items), record_ids=ids, rerun=rerun)


class IngestionCollector:
    """Collects the versions a batch of object events asks to ingest, by SQS record.

    `for_record(id)` is the IngestionStarter handed to `record_object_event` for one record: its
    `start` only notes the item. `groups(failed)` plans the executions from the records that did
    not fail (a failed record is redelivered by SQS and asks again then).
    """

    def __init__(self) -> None:
        self._requests: list[tuple[CatalogItem, str]] = []

    def for_record(self, record_id: str) -> IngestionStarter:
        return _RecordStarter(self, record_id)

    def add(self, item: CatalogItem, record_id: str) -> None:
        self._requests.append((item, record_id))

    def __len__(self) -> int:
        return len(self._requests)

    def groups(self, failed_records: Iterable[str] = ()) -> list[IngestionGroup]:
        failed = set(failed_records)
        return plan_groups((item, rid) for item, rid in self._requests if rid not in failed)


@dataclass(frozen=True)
class _RecordStarter:
    collector: IngestionCollector
    record_id: str

    def start(self, item: CatalogItem) -> bool:
        self.collector.add(item, self.record_id)
        return True


class StartOutcome(StrEnum):
    STARTED = "started"
    ALREADY_STARTED = "already-started"  # ExecutionAlreadyExists: a redelivered identical batch


class StepFunctionsBatchStarter:
    """Starts one ingestion execution per group: manifest first, then StartExecution.

    Errors from S3 or Step Functions (after boto3's own retries) propagate: the caller reports
    the group's SQS records as failed, and SQS redelivers them.
    """

    def __init__(
        self, sfn_client: Any, s3_client: Any, state_machine_arn: str, reports_bucket: str
    ) -> None:
        self._sfn = sfn_client  # boto3 stepfunctions client
        self._s3 = s3_client  # boto3 s3 client
        self._arn = state_machine_arn
        self._reports = reports_bucket

    def start(self, group: IngestionGroup) -> StartOutcome:
        # The manifest is written before the execution exists, so the state machine can always
        # read it; rewriting it on a redelivery writes the same bytes (the name is its content).
        self._s3.put_object(
            Bucket=self._reports,
            Key=group.manifest_key,
            Body=json.dumps(group.manifest(), indent=1).encode(),
            ContentType="application/json",
        )
        try:
            self._sfn.start_execution(
                stateMachineArn=self._arn,
                name=group.name,
                input=json.dumps(group.execution_input(self._reports)),
            )
        except self._sfn.exceptions.ExecutionAlreadyExists:
            return StartOutcome.ALREADY_STARTED
        return StartOutcome.STARTED
