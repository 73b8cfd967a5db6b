"""The object catalog: one item per object version that Lethe has seen in the raw or lake bucket.

`DynamoObjectCatalog` is the one reader and writer of `ObjectCatalogTable`: the object events
handler records events through it; the ingestion workflow's steps (functions/ingestion_steps,
lethe_shared.catalog.ingestion_steps) mark a batch INGESTING, read each version's outcome and mark
a failed batch FAILED through it; the ingest job reads a key's versions and records its outcome
through it; and the CLI (objects, trace, demo) reads it through it. No state machine task and no
other code touches the table (docs/CATALOG.md, "Who writes what").

Table layout (template.yaml `ObjectCatalogTable`, docs/CATALOG.md):

    object_url (HASH)   s3://<bucket>/<key>
    version_id (RANGE)  the S3 version id, or "null" for an unversioned write
    GSI by_dataset      dataset_id (HASH), object_url (RANGE); sparse: IGNORED items have no dataset
    GSI by_dataset_status  dataset_id (HASH), status (RANGE), the attributes `in_status` reads;
                        what erasure's watermark asks (lethe_shared.erasure.scope): the raw
                        versions of a dataset still being ingested, or never indexed

S3 and EventBridge deliver at least once and out of order, so every write is conditional on the
event's `sequencer`: an item is only replaced by an event with a strictly greater sequencer. A
duplicate delivery (same sequencer) and a late, older event both leave the item as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from botocore.exceptions import ClientError
from pydantic import ConfigDict, Field

from lethe_shared.aws.dynamo import query_all
from lethe_shared.aws.errors import is_condition_failed
from lethe_shared.aws.s3 import NULL_VERSION, s3_url
from lethe_shared.catalog.zones import Buckets as Buckets  # noqa: PLC0414  (re-exported)
from lethe_shared.catalog.zones import Zone as Zone  # noqa: PLC0414  (re-exported)
from lethe_shared.errors import CatalogItemMissingError
from lethe_shared.models import Model

SEQUENCER_WIDTH = 32
BY_DATASET_STATUS = "by_dataset_status"  # the GSI `in_status` reads (template.yaml)


class ObjectStatus(StrEnum):
    RECEIVED = "RECEIVED"  # a raw object under a registered dataset, waiting for ingestion
    INGESTING = "INGESTING"  # the ingestion state machine runs the Spark ingest job for it
    INGESTED = "INGESTED"  # its valid rows are in the lake (rejected ones in quarantine)
    QUARANTINED = "QUARANTINED"  # unreadable, or every row rejected
    FAILED = "FAILED"  # the ingest job failed after its retries (ingest_error says why)
    SUPERSEDED = "SUPERSEDED"  # a newer version of the key exists: this one was not ingested
    STORED = "STORED"  # a lake object under a registered dataset
    REWRITTEN = "REWRITTEN"  # a raw version an erasure wrote: its rows are in the lake already
    IGNORED = "IGNORED"  # outside any registered dataset prefix
    DELETED = "DELETED"  # permanently deleted, or hidden by a delete marker


def normalize_sequencer(sequencer: str) -> str:
    """Make S3 sequencers comparable as strings.

    A sequencer is a hexadecimal number; two of them compare by value, and S3 does not promise a
    fixed width. Left-padding with zeros to a fixed width makes string order equal numeric order,
    which is what DynamoDB's `<` on strings needs.
    """
    value = sequencer.strip().upper()
    if not value or len(value) > SEQUENCER_WIDTH or any(c not in "0123456789ABCDEF" for c in value):
        raise ValueError(f"sequencer {sequencer!r} is not a hexadecimal string")
    return value.rjust(SEQUENCER_WIDTH, "0")


class CatalogItem(Model):
    """One object version as the catalog records it."""

    model_config = ConfigDict(frozen=True, use_enum_values=False)

    bucket: str
    key: str
    version_id: str = NULL_VERSION
    zone: Zone
    status: ObjectStatus
    sequencer: str  # normalized, see normalize_sequencer
    dataset_id: str | None = None
    etag: str = ""
    size: int | None = None
    delete_marker: bool = False
    event_reason: str = ""
    event_time: str = ""
    updated_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    expires_at: int | None = None  # epoch seconds; DynamoDB TTL removes the item after it
    # Written by the ingest job on a raw version (None until it ran):
    rows_read: int | None = None
    rows_written: int | None = None
    rows_quarantined: int | None = None
    ingest_correlation_id: str | None = None  # the ingestion execution's name
    ingest_error: str | None = None  # why the version is FAILED

    @property
    def object_url(self) -> str:
        return s3_url(self.bucket, self.key)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "object_url": self.object_url,
            "version_id": self.version_id,
            "bucket": self.bucket,
            "key": self.key,
            "zone": self.zone.value,
            "status": self.status.value,
            "sequencer": self.sequencer,
            "etag": self.etag,
            "delete_marker": self.delete_marker,
            "event_reason": self.event_reason,
            "event_time": self.event_time,
            "updated_at": self.updated_at,
        }
        if self.dataset_id is not None:  # absent, not empty: keeps the GSI sparse
            item["dataset_id"] = self.dataset_id
        if self.size is not None:
            item["size"] = self.size
        for name in _OPTIONAL_ATTRIBUTES:
            value = getattr(self, name)
            if value is not None:
                item[name] = value
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> CatalogItem:
        return cls(
            bucket=item["bucket"],
            key=item["key"],
            version_id=item["version_id"],
            zone=Zone(item["zone"]),
            status=ObjectStatus(item["status"]),
            sequencer=item["sequencer"],
            dataset_id=item.get("dataset_id"),
            etag=item.get("etag", ""),
            size=_optional_int(item.get("size")),
            delete_marker=bool(item.get("delete_marker", False)),
            event_reason=item.get("event_reason", ""),
            event_time=item.get("event_time", ""),
            updated_at=item.get("updated_at", ""),
            expires_at=_optional_int(item.get("expires_at")),
            rows_read=_optional_int(item.get("rows_read")),
            rows_written=_optional_int(item.get("rows_written")),
            rows_quarantined=_optional_int(item.get("rows_quarantined")),
            ingest_correlation_id=_optional_str(item.get("ingest_correlation_id")),
            ingest_error=_optional_str(item.get("ingest_error")),
        )


_KEY_ATTRIBUTES = ("object_url", "version_id")
# What the ingestion workflow writes on a version: an event leaves it as it is.
_INGESTION_ATTRIBUTES = (
    "rows_read",
    "rows_written",
    "rows_quarantined",
    "ingest_correlation_id",
    "ingest_error",
)
# Attributes written only when set (an event never sets the ingestion ones).
_OPTIONAL_ATTRIBUTES = (
    "expires_at",
    "rows_read",
    "rows_written",
    "rows_quarantined",
    "ingest_correlation_id",
    "ingest_error",
)
# Event attributes that an event may leave out; a newer event without them removes them.
_OPTIONAL_EVENT_ATTRIBUTES = ("dataset_id", "size", "expires_at")


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _optional_str(value: Any) -> str | None:
    return str(value) if value is not None else None


@dataclass(frozen=True)
class IngestionRecord:
    """What the ingest job records on the raw object version it ingested."""

    status: ObjectStatus  # INGESTED | QUARANTINED | SUPERSEDED
    rows_read: int
    rows_written: int
    rows_quarantined: int
    lake_objects: list[str]
    quarantine_object: str | None
    correlation_id: str
    ingested_at: datetime


class ObjectCatalog(Protocol):
    """Storage port of the object catalog (DynamoObjectCatalog; tests/fakes.py in memory)."""

    def put_if_newer(self, item: CatalogItem) -> bool:
        """Write `item` unless one with an equal or greater sequencer is there; True if written."""

    def get(self, bucket: str, key: str, version_id: str) -> CatalogItem | None:
        """One object version, read consistently."""

    def by_dataset(self, dataset_id: str) -> Iterator[CatalogItem]:
        """Every recorded version of every object of a dataset."""

    def in_status(self, dataset_id: str, statuses: Iterable[ObjectStatus]) -> Iterator[CatalogItem]:
        """Every recorded version of a dataset's objects whose status is one of `statuses`
        (eventually consistent: a status changed a moment ago may not show yet)."""

    def versions_of(self, object_url: str) -> list[CatalogItem]:
        """Every recorded version of one object, read consistently (`latest` picks the current
        one)."""

    def newer_version_of(self, object_url: str, version_id: str) -> str | None:
        """The version id of the newest event on this object if it is newer than the event
        `version_id` was recorded with; None when `version_id` is the newest (or unknown)."""

    def lake_objects_of(self, object_url: str) -> set[str]:
        """Every lake object that an ingestion of any version of this raw object wrote."""

    def start_ingestion(self, object_url: str, version_id: str, execution: str) -> bool:
        """Mark a catalogued raw object version INGESTING by the ingestion execution `execution`
        (`ingest_execution`), unless the catalog says DELETED; False when it was not marked
        (deleted, or never catalogued: there is nothing to ingest)."""

    def fail_ingestion(self, object_url: str, version_id: str, error: str) -> bool:
        """Mark a version that is still INGESTING FAILED with the reason (`ingest_error`), as the
        ingestion workflow does when its Spark job run (or the workflow itself) failed; False
        when it is not INGESTING (the job recorded its outcome, or it was deleted), which is
        left as it is."""

    def record_ingestion(self, object_url: str, version_id: str, record: IngestionRecord) -> None:
        """Record the ingest job's outcome on the raw object version's item. Raises
        CatalogItemMissingError when the catalog has no item for that version."""

    def record_failure(
        self, object_url: str, version_id: str, error: str, correlation_id: str, at: datetime
    ) -> None:
        """Mark the raw object version FAILED with the reason (`ingest_error`), as the ingestion
        workflow does when a whole run fails. Raises CatalogItemMissingError."""

    def record_gone(self, object_url: str, version_id: str, correlation_id: str) -> bool:
        """Mark a recorded raw object version DELETED because S3 no longer has it (an erasure
        purged it before it was ingested), unless the catalog says DELETED already; True when
        written. The version's own Object Deleted event, when read, finds it DELETED."""


def _permanently_deleted(status: Any, item: Any) -> bool:
    """A version that was deleted for good (not a delete marker, which is a version itself)."""
    return status == ObjectStatus.DELETED.value and not bool(item.get("delete_marker"))


def latest(items: Iterable[CatalogItem]) -> CatalogItem | None:
    """The version the newest event speaks of: the object's current state."""
    return max(items, key=lambda i: i.sequencer, default=None)


class DynamoObjectCatalog:
    """ObjectCatalog on the DynamoDB table described in the module docstring."""

    def __init__(self, table: Any) -> None:
        self._table = table  # a boto3 dynamodb Table resource

    def put_if_newer(self, item: CatalogItem) -> bool:
        """Conditional UpdateItem of the event's attributes only: what the ingestion workflow
        wrote on the version (counts, lake objects) survives a newer event, such as the
        permanent delete of that version."""
        event_fields = {
            k: v
            for k, v in item.to_item().items()
            if k not in _KEY_ATTRIBUTES and k not in _INGESTION_ATTRIBUTES
        }
        removed = [a for a in _OPTIONAL_EVENT_ATTRIBUTES if a not in event_fields]
        names = {f"#a{i}": name for i, name in enumerate(event_fields)}
        values = {f":v{i}": value for i, value in enumerate(event_fields.values())}
        expression = "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(event_fields)))
        if removed:
            names.update({f"#r{i}": name for i, name in enumerate(removed)})
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
        names["#seq"] = "sequencer"
        try:
            self._table.update_item(
                Key={"object_url": item.object_url, "version_id": item.version_id},
                UpdateExpression=expression,
                ConditionExpression="attribute_not_exists(#seq) OR #seq < :seq",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, ":seq": item.sequencer},
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    def get(self, bucket: str, key: str, version_id: str) -> CatalogItem | None:
        item = self._table.get_item(
            Key={"object_url": s3_url(bucket, key), "version_id": version_id},
            ConsistentRead=True,
        ).get("Item")
        return CatalogItem.from_item(item) if item else None

    def by_dataset(self, dataset_id: str) -> Iterator[CatalogItem]:
        items = query_all(
            self._table,
            IndexName="by_dataset",
            KeyConditionExpression="dataset_id = :d",
            ExpressionAttributeValues={":d": dataset_id},
        )
        return (CatalogItem.from_item(i) for i in items)

    def in_status(self, dataset_id: str, statuses: Iterable[ObjectStatus]) -> Iterator[CatalogItem]:
        """One Query of the GSI `by_dataset_status` per status: items of other statuses (a
        dataset's ingested and lake versions, the bulk) are never read."""
        for status in dict.fromkeys(statuses):
            items = query_all(
                self._table,
                IndexName=BY_DATASET_STATUS,
                KeyConditionExpression="dataset_id = :d AND #s = :s",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":d": dataset_id, ":s": status.value},
            )
            yield from (CatalogItem.from_item(i) for i in items)

    def versions_of(self, object_url: str) -> list[CatalogItem]:
        items = query_all(
            self._table,
            KeyConditionExpression="object_url = :url",
            ExpressionAttributeValues={":url": object_url},
            ConsistentRead=True,
        )
        return [CatalogItem.from_item(i) for i in items]

    def _versions(
        self, object_url: str, projection: str, names: dict[str, str] | None = None
    ) -> Iterator[dict[str, Any]]:
        return query_all(
            self._table,
            KeyConditionExpression="object_url = :url",
            ExpressionAttributeValues={":url": object_url},
            ProjectionExpression=projection,
            ConsistentRead=True,
            **({"ExpressionAttributeNames": names} if names else {}),
        )

    def newer_version_of(self, object_url: str, version_id: str) -> str | None:
        """S3 sequencers, normalized, order the events of one key: an older version ingested
        after a newer one must not replace the newer one's lake rows. A version's permanent
        delete is no newer version (it may be of an older one); a delete marker is."""
        items = list(
            self._versions(object_url, "version_id, sequencer, #s, delete_marker", {"#s": "status"})
        )
        own = next((str(i["sequencer"]) for i in items if i["version_id"] == version_id), None)
        if own is None:
            return None
        newer = [
            i
            for i in items
            if str(i["sequencer"]) > own and not _permanently_deleted(i.get("status"), i)
        ]
        return str(max(newer, key=lambda i: str(i["sequencer"]))["version_id"]) if newer else None

    def lake_objects_of(self, object_url: str) -> set[str]:
        found: set[str] = set()
        for item in self._versions(object_url, "lake_objects"):
            lake_objects = item.get("lake_objects")
            if isinstance(lake_objects, list | set | tuple):
                found.update(str(url) for url in lake_objects)
        return found

    def start_ingestion(self, object_url: str, version_id: str, execution: str) -> bool:
        return self._transition(
            object_url,
            version_id,
            "SET #status = :ingesting, ingest_execution = :execution",
            "attribute_exists(object_url) AND #status <> :deleted",
            {
                ":ingesting": ObjectStatus.INGESTING.value,
                ":deleted": ObjectStatus.DELETED.value,
                ":execution": execution,
            },
        )

    def fail_ingestion(self, object_url: str, version_id: str, error: str) -> bool:
        return self._transition(
            object_url,
            version_id,
            "SET #status = :failed, ingest_error = :error",
            "#status = :ingesting",
            {
                ":failed": ObjectStatus.FAILED.value,
                ":ingesting": ObjectStatus.INGESTING.value,
                ":error": error,
            },
        )

    def _transition(
        self,
        object_url: str,
        version_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
    ) -> bool:
        """A conditional status change of one version; False when its condition does not hold."""
        try:
            self._table.update_item(
                Key={"object_url": object_url, "version_id": version_id},
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    def record_ingestion(self, object_url: str, version_id: str, record: IngestionRecord) -> None:
        values: dict[str, Any] = {
            ":status": record.status.value,
            ":read": record.rows_read,
            ":written": record.rows_written,
            ":quarantined": record.rows_quarantined,
            ":lake": list(record.lake_objects),
            ":cid": record.correlation_id,
            ":at": record.ingested_at.isoformat(),
        }
        update = (
            "SET #status = :status, rows_read = :read, rows_written = :written, "
            "rows_quarantined = :quarantined, lake_objects = :lake, "
            "ingest_correlation_id = :cid, ingested_at = :at"
        )
        if record.quarantine_object:
            update += ", quarantine_object = :quarantine"
            values[":quarantine"] = record.quarantine_object
        else:
            update += " REMOVE quarantine_object"
        try:
            self._table.update_item(
                Key={"object_url": object_url, "version_id": version_id},
                UpdateExpression=update,
                ConditionExpression="attribute_exists(object_url)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                raise CatalogItemMissingError(
                    f"the object catalog has no item for {object_url} version {version_id}"
                ) from exc
            raise

    def record_failure(
        self, object_url: str, version_id: str, error: str, correlation_id: str, at: datetime
    ) -> None:
        try:
            self._table.update_item(
                Key={"object_url": object_url, "version_id": version_id},
                UpdateExpression=(
                    "SET #status = :failed, ingest_error = :error, "
                    "ingest_correlation_id = :cid, ingested_at = :at"
                ),
                ConditionExpression="attribute_exists(object_url)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":failed": ObjectStatus.FAILED.value,
                    ":error": error,
                    ":cid": correlation_id,
                    ":at": at.isoformat(),
                },
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                raise CatalogItemMissingError(
                    f"the object catalog has no item for {object_url} version {version_id}"
                ) from exc
            raise

    def record_gone(self, object_url: str, version_id: str, correlation_id: str) -> bool:
        return self._transition(
            object_url,
            version_id,
            "SET #status = :deleted, ingest_correlation_id = :cid",
            "attribute_exists(object_url) AND #status <> :deleted",
            {":deleted": ObjectStatus.DELETED.value, ":cid": correlation_id},
        )
