"""The objects the index and reconcile jobs look at: what kind of rows they hold, their current
version, and whether a key that has no current version still holds data in older versions.

Which objects hold rows (docs/INDEX.md):

    raw bucket   <dataset>/...                            the dataset's format (csv, jsonl, parquet)
    lake bucket  <dataset>/<p>=<v>/.../file                Parquet, partition values in the path
                 <dataset>/_quarantine/<h>.jsonl            rejected rows, values in "record"
                 <dataset>/_quarantine/<h>.file.json        report of an unreadable file: no rows
                 other paths with a `_`/`.` segment         no rows (_SUCCESS, _delta_log/, ...)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from lethe_jobs import layout
from lethe_jobs.s3io import NOT_FOUND_CODES, error_code, plain_etag
from lethe_shared.catalog import NULL_VERSION
from lethe_shared.index_maintenance import PRODUCER_METADATA


class ObjectKind(StrEnum):
    RAW = "raw"  # a raw upload, in the dataset's format
    LAKE_PARQUET = "lake-parquet"
    QUARANTINE_ROWS = "quarantine-rows"  # JSON Lines of rejected rows
    NO_ROWS = "no-rows"  # holds no rows of the dataset: never indexed


def object_kind(
    dataset_id: str, bucket: str, key: str, *, raw_bucket: str, lake_bucket: str
) -> ObjectKind:
    """The kind of rows an object of the dataset holds. Raises ValueError for an object
    outside the dataset's prefix in its raw and lake buckets."""
    if not key.startswith(f"{dataset_id}/") or bucket not in (raw_bucket, lake_bucket):
        raise ValueError(
            f"s3://{bucket}/{key} is not under s3://{raw_bucket}/{dataset_id}/ "
            f"or s3://{lake_bucket}/{dataset_id}/"
        )
    if key.endswith("/"):
        return ObjectKind.NO_ROWS
    if bucket == raw_bucket:
        return ObjectKind.RAW
    if layout.is_quarantine_rows_key(key, dataset_id):
        return ObjectKind.QUARANTINE_ROWS
    return ObjectKind.NO_ROWS if layout.is_hidden_key(key, dataset_id) else ObjectKind.LAKE_PARQUET


@dataclass(frozen=True)
class ObjectHead:
    version_id: str
    etag: str
    producer: str | None = None


def head_current(s3: Any, bucket: str, key: str) -> ObjectHead | None:
    """The key's current version; None when there is none (deleted, or a delete marker)."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND_CODES or error_code(exc) == "405":
            return None
        raise
    return ObjectHead(
        version_id=str(head.get("VersionId") or NULL_VERSION),
        etag=plain_etag(head.get("ETag")),
        producer=head.get("Metadata", {}).get(PRODUCER_METADATA),
    )


def has_older_versions(s3: Any, bucket: str, key: str) -> bool:
    """Whether some version of exactly this key (not of keys sharing it as a prefix) still
    holds data: a key hidden by a delete marker keeps its rows until they expire or are
    erased, so its index entries must stay (flagged `deleted`)."""
    return any(v.key == key for v in _versions(s3, bucket, key) if not v.delete_marker)


@dataclass(frozen=True)
class _Version:
    key: str
    version_id: str
    etag: str
    latest: bool
    delete_marker: bool


def _versions(s3: Any, bucket: str, prefix: str) -> Iterator[_Version]:
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = s3.list_object_versions(**kwargs)
        for item in page.get("Versions", []):
            yield _Version(
                item["Key"],
                str(item.get("VersionId") or NULL_VERSION),
                plain_etag(item.get("ETag")),
                bool(item.get("IsLatest")),
                False,
            )
        for item in page.get("DeleteMarkers", []):
            yield _Version(
                item["Key"], str(item.get("VersionId")), "", bool(item.get("IsLatest")), True
            )
        if not page.get("IsTruncated"):
            return
        kwargs["KeyMarker"] = page.get("NextKeyMarker")
        kwargs["VersionIdMarker"] = page.get("NextVersionIdMarker")


@dataclass(frozen=True)
class Listing:
    """The keys under a prefix: current versions, and keys whose current version is a delete
    marker but that still have older versions ("hidden")."""

    current: dict[str, ObjectHead]
    hidden: set[str]


def list_prefix(s3: Any, bucket: str, prefix: str) -> Listing:
    current: dict[str, ObjectHead] = {}
    marked: set[str] = set()
    with_data: set[str] = set()
    for version in _versions(s3, bucket, prefix):
        if version.delete_marker:
            if version.latest:
                marked.add(version.key)
            continue
        with_data.add(version.key)
        if version.latest:
            current[version.key] = ObjectHead(version.version_id, version.etag)
    return Listing(current, (marked & with_data) - set(current))


def missing_object_error(exc: ClientError) -> bool:
    """A get_object of a listed or headed version that is gone meanwhile."""
    return error_code(exc) in {"NoSuchKey", "NoSuchVersion", "404", "405", "MethodNotAllowed"}
