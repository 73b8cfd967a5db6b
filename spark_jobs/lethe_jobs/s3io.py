"""S3 and DynamoDB I/O of the Spark jobs, through boto3.

boto3 honours AWS_ENDPOINT_URL by itself, so the same calls reach AWS on Glue / EMR Serverless
and the moto server of the local cloud. Objects are streamed to and from local files, never held
as one bytes object.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lethe_jobs.errors import CatalogItemMissingError, RawObjectNotFoundError
from lethe_shared.catalog import NULL_VERSION
from lethe_shared.index_maintenance import INGEST_PRODUCER, PRODUCER_METADATA

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client

LOG = logging.getLogger(__name__)
CHUNK_BYTES = 1024 * 1024

# get_object on a version that is not there: NoSuchKey / NoSuchVersion, a malformed version id:
# InvalidArgument, a delete marker: MethodNotAllowed (405).
_MISSING_OBJECT_CODES = frozenset(
    {"NoSuchKey", "NoSuchVersion", "InvalidArgument", "MethodNotAllowed", "404", "405"}
)
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class StoredVersion:
    """One object version as S3 reported it: version id ("null" when unversioned) and ETag
    (without the quotes S3 puts around it, as the object catalog and the index store it)."""

    version_id: str
    etag: str


def plain_etag(etag: Any) -> str:
    return str(etag or "").strip('"')


def download_version(
    s3: S3Client, bucket: str, key: str, version_id: str, target: Path
) -> StoredVersion:
    """Stream one exact object version to `target`. "null" names an unversioned object."""
    params: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id != NULL_VERSION:
        params["VersionId"] = version_id
    try:
        response = s3.get_object(**params)
    except ClientError as exc:
        if error_code(exc) in _MISSING_OBJECT_CODES:
            raise RawObjectNotFoundError(
                f"s3://{bucket}/{key} version {version_id} cannot be read: {error_code(exc)}"
            ) from exc
        raise
    with target.open("wb") as out:
        for chunk in response["Body"].iter_chunks(CHUNK_BYTES):
            out.write(chunk)
    return StoredVersion(
        str(response.get("VersionId") or version_id), plain_etag(response.get("ETag"))
    )


def put_file(s3: S3Client, bucket: str, key: str, path: Path, content_type: str) -> StoredVersion:
    """Upload a local file (streamed) as a lake object the ingest job produced: its
    `lethe-producer: ingest` metadata tells the object events path (which sees this write too)
    that the job indexed it. Returns the new version and its ETag."""
    with path.open("rb") as body:
        response = s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=body,
            ContentType=content_type,
            Metadata={PRODUCER_METADATA: INGEST_PRODUCER},
        )
    return StoredVersion(
        str(response.get("VersionId") or NULL_VERSION), plain_etag(response.get("ETag"))
    )


def delete_if_present(s3: S3Client, bucket: str, key: str) -> bool:
    """Delete the current version of an object (a delete marker in a versioned bucket). An
    object that is not there is left alone, so that no stray delete markers pile up."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND_CODES:
            return False
        raise
    s3.delete_object(Bucket=bucket, Key=key)
    return True


def earlier_lake_objects(catalog: Table, object_url: str) -> set[str]:
    """Every lake object an earlier ingestion of any version of this raw object wrote."""
    found: set[str] = set()
    kwargs: dict[str, Any] = {
        "KeyConditionExpression": "object_url = :url",
        "ExpressionAttributeValues": {":url": object_url},
        "ProjectionExpression": "lake_objects",
        "ConsistentRead": True,
    }
    while True:
        page = catalog.query(**kwargs)
        for item in page.get("Items", []):
            found.update(str(url) for url in _as_list(item.get("lake_objects")))
        if "LastEvaluatedKey" not in page:
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def newer_version_of(catalog: Table, object_url: str, version_id: str) -> str | None:
    """The version id of a newer event on this raw object than `version_id`'s, if the catalog
    has one (S3 sequencers, normalized, order events on one key). An older version ingested
    after a newer one must not replace the newer one's lake rows."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "KeyConditionExpression": "object_url = :url",
        "ExpressionAttributeValues": {":url": object_url},
        "ProjectionExpression": "version_id, sequencer",
        "ConsistentRead": True,
    }
    while True:
        page = catalog.query(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    own = next((str(i["sequencer"]) for i in items if i["version_id"] == version_id), None)
    if own is None:
        return None
    newer = [i for i in items if str(i["sequencer"]) > own]
    return str(max(newer, key=lambda i: str(i["sequencer"]))["version_id"]) if newer else None


def _as_list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list | set | tuple) else ()


@dataclass(frozen=True)
class IngestionRecord:
    """What the ingest job writes on the raw object's catalog item."""

    status: str
    rows_read: int
    rows_written: int
    rows_quarantined: int
    lake_objects: list[str]
    quarantine_object: str | None
    correlation_id: str
    ingested_at: datetime


def record_ingestion(
    catalog: Table, object_url: str, version_id: str, record: IngestionRecord
) -> None:
    """Update the raw object version's catalog item; it must exist (object_events wrote it)."""
    values: dict[str, Any] = {
        ":status": record.status,
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
        catalog.update_item(
            Key={"object_url": object_url, "version_id": version_id},
            UpdateExpression=update,
            ConditionExpression="attribute_exists(object_url)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values,
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            raise CatalogItemMissingError(
                f"the object catalog has no item for {object_url} version {version_id}"
            ) from exc
        raise
