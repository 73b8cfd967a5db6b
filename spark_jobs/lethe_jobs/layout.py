"""Where ingested data lives in the lake bucket (docs: the lake layout).

    s3://<lake>/<dataset_id>/<p1>=<v1>/<p2>=<v2>/part-<h>.parquet    valid rows, Hive layout
    s3://<lake>/<dataset_id>/_quarantine/<h>.jsonl                     rejected rows
    s3://<lake>/<dataset_id>/_quarantine/<h>.file.json                 a wholly unreadable file

`h` is the first 16 hex digits of sha256("<raw bucket>/<raw key>"): one name per raw KEY, so
ingesting the same object again (the same or a newer version) overwrites its files instead of
adding duplicates. Spark and Hive skip paths that start with `_`, so quarantine never shows up
as a partition. Partition values are rendered and escaped as Hive does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from lethe_shared.datasets.document import (
    HIVE_DEFAULT_PARTITION,
    QUARANTINE_PREFIX,
    is_quarantine_key,
)

# Hive's FileUtils.escapePathName: these characters are written as %XX in partition values.
_HIVE_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def object_hash(bucket: str, key: str) -> str:
    return hashlib.sha256(f"{bucket}/{key}".encode()).hexdigest()[:16]


def escape_partition_value(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in text)


def render_partition_value(value: Any) -> str:
    """A partition value as Hive writes it in a path."""
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape_partition_value(str(value))  # dates ISO (2026-11-22), decimals as stored


def partition_path(names: Sequence[str], values: Sequence[Any]) -> str:
    """`p1=v1/p2=v2` ("" without partition columns)."""
    return "/".join(
        f"{escape_partition_value(n)}={render_partition_value(v)}"
        for n, v in zip(names, values, strict=True)
    )


def lake_key(dataset_id: str, partition: str, digest: str) -> str:
    parts = (
        [dataset_id, partition, f"part-{digest}.parquet"]
        if partition
        else [dataset_id, f"part-{digest}.parquet"]
    )
    return "/".join(parts)


def quarantine_rows_key(dataset_id: str, digest: str) -> str:
    return f"{dataset_id}/{QUARANTINE_PREFIX}/{digest}.jsonl"


def quarantine_file_key(dataset_id: str, digest: str) -> str:
    return f"{dataset_id}/{QUARANTINE_PREFIX}/{digest}.file.json"


def is_lake_object_of(key: str, dataset_id: str, digest: str) -> bool:
    """Whether `key` is a data file this layout gives the raw key with hash `digest`."""
    return key.startswith(f"{dataset_id}/") and key.endswith(f"/part-{digest}.parquet")


def partition_groups(table: Any, names: Sequence[str]) -> dict[str, list[int]]:
    """Row indices of an Arrow table per partition path, in row order, paths sorted."""
    if not names:
        return {"": list(range(table.num_rows))} if table.num_rows else {}
    columns = [table.column(n).to_pylist() for n in names]
    groups: dict[str, list[int]] = {}
    for index, values in enumerate(zip(*columns, strict=True)):
        groups.setdefault(partition_path(names, values), []).append(index)
    return dict(sorted(groups.items()))


def is_quarantine_rows_key(key: str, dataset_id: str) -> bool:
    """A quarantine file of rejected rows (JSON Lines) of the dataset, not the report of an
    unreadable file."""
    return key.startswith(f"{dataset_id}/") and is_quarantine_key(key) and key.endswith(".jsonl")


def is_hidden_key(key: str, dataset_id: str) -> bool:
    """Whether a lake key is hidden from Spark, Hive and Athena (a path segment below the
    dataset starts with `_` or `.`: quarantine, `_SUCCESS`, `_delta_log/`, `.hive-staging`), or
    names a "directory" (ends with `/`)."""
    rest = key.removeprefix(f"{dataset_id}/")
    return key.endswith("/") or any(s.startswith(("_", ".")) for s in rest.split("/"))
