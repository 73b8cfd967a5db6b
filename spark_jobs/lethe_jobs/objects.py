"""Which rows an object of a dataset holds, and a dataset's keys as the index and reconcile jobs
see them. S3 itself is asked through lethe_shared.aws.s3 (heads, versions, not-found).

Which objects hold rows (docs/INDEX.md):

    raw bucket   <dataset>/...                            the dataset's format (csv, jsonl, parquet)
    lake bucket  <dataset>/<p>=<v>/.../file                Parquet, partition values in the path
                 <dataset>/_quarantine/<h>.jsonl            rejected rows, values in "record"
                 <dataset>/_quarantine/<h>.file.json        report of an unreadable file: no rows
                 other paths with a `_`/`.` segment         no rows (_SUCCESS, _delta_log/, ...)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lethe_jobs import layout
from lethe_jobs.errors import InvalidObjectListError
from lethe_shared.aws.s3 import (
    KeyState,
    ObjectHead,
    ObjectStore,
    ObjectVersion,
    key_state,
    split_s3_url,
)
from lethe_shared.catalog.object_catalog import Buckets


class ObjectKind(StrEnum):
    RAW = "raw"  # a raw upload, in the dataset's format
    LAKE_PARQUET = "lake-parquet"
    QUARANTINE_ROWS = "quarantine-rows"  # JSON Lines of rejected rows
    NO_ROWS = "no-rows"  # holds no rows of the dataset: never indexed


def object_kind(dataset_id: str, bucket: str, key: str, buckets: Buckets) -> ObjectKind:
    """The kind of rows an object of the dataset holds. Raises ValueError for an object
    outside the dataset's prefix in its raw and lake buckets."""
    if not key.startswith(f"{dataset_id}/") or bucket not in buckets.names:
        raise ValueError(
            f"s3://{bucket}/{key} is not under s3://{buckets.raw}/{dataset_id}/ "
            f"or s3://{buckets.lake}/{dataset_id}/"
        )
    if key.endswith("/"):
        return ObjectKind.NO_ROWS
    if bucket == buckets.raw:
        return ObjectKind.RAW
    if layout.is_quarantine_rows_key(key, dataset_id):
        return ObjectKind.QUARANTINE_ROWS
    return ObjectKind.NO_ROWS if layout.is_hidden_key(key, dataset_id) else ObjectKind.LAKE_PARQUET


@dataclass(frozen=True)
class Listing:
    """The keys under a prefix: current versions, keys whose current version is a delete
    marker but that still have older versions ("hidden"), and current keys that also keep
    older versions holding data (their flagged index entries may describe those)."""

    current: dict[str, ObjectHead]
    hidden: set[str]
    with_older: set[str]


def list_prefix(objects: ObjectStore, bucket: str, prefix: str) -> Listing:
    """Every key under `prefix` by its state (lethe_shared.aws.s3.key_state); keys with no data
    left are not listed."""
    by_key: dict[str, list[ObjectVersion]] = {}
    for version in objects.list_versions(bucket, prefix):
        by_key.setdefault(version.key, []).append(version)
    current: dict[str, ObjectHead] = {}
    hidden: set[str] = set()
    with_older: set[str] = set()
    for key, own in by_key.items():
        state = key_state(own)
        if state is KeyState.CURRENT:
            latest = next(v for v in own if v.is_latest)
            current[key] = ObjectHead(latest.version_id, latest.etag, latest.size)
            if any(not v.is_latest and not v.delete_marker for v in own):
                with_older.add(key)
        elif state is KeyState.HIDDEN:
            hidden.add(key)
    return Listing(current, hidden, with_older)


def object_list(objects: ObjectStore, objects_json: str | None, manifest: str | None) -> Any:
    """The JSON document a job was given as its object list: `--objects-json` itself, or the
    manifest object `--objects-manifest` names (what Step Functions passes when the list is
    too large for job arguments). Raises InvalidObjectListError: a bad URL, a missing
    manifest, not JSON. The caller checks the document's shape."""
    if objects_json is not None:
        text = objects_json
    else:
        try:
            bucket, key = split_s3_url(manifest or "")
        except ValueError as exc:
            raise InvalidObjectListError(f"--objects-manifest: {exc}") from exc
        body = objects.read_bytes(bucket, key)
        if body is None:
            raise InvalidObjectListError(f"the manifest {manifest} does not exist")
        text = body.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidObjectListError(f"the object list is not JSON: {exc}") from exc
