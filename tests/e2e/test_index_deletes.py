"""Deletes keep the subject index current on the running local cloud, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.localcloud_support import LocalCloud, catalog_items, sample_dataset_as, wait_for

DATASET = "churn"  # its own dataset: the session's other tests count the samples' partitions
KEY = f"{DATASET}/2026/12/01/delete-me.csv"
BODY = b"user_id,review_date,stars,text\nu-9001,2026-12-01,4,to be deleted\n"


def _lookup(cloud: LocalCloud, *flags: str) -> list[dict[str, Any]]:
    result = cloud.lethe("index", "lookup", "--subject", "u-9001", "--json", *flags)
    return [e for e in json.loads(result.stdout) if e["key"] == KEY]


def _ingested(cloud: LocalCloud, version: str) -> bool:
    items = catalog_items(cloud, KEY)
    return any(i["version_id"] == version and i["status"] == "INGESTED" for i in items)


def test_a_delete_marker_hides_the_entries_and_removing_every_version_removes_them(
    registered: LocalCloud, tmp_path: Path
) -> None:
    registered.lethe("datasets", "put", str(sample_dataset_as("reviews", DATASET, tmp_path)))
    raw = registered.outputs["RawBucketName"]
    s3 = registered.client("s3")
    version = s3.put_object(Bucket=raw, Key=KEY, Body=BODY)["VersionId"]
    wait_for(lambda: _ingested(registered, version), timeout=300, what="ingestion of the upload")
    assert [(e["zone"], e["rows"]) for e in _lookup(registered)] == [("raw", 1)]

    marker = s3.delete_object(Bucket=raw, Key=KEY)["VersionId"]

    wait_for(lambda: _lookup(registered) == [], timeout=30, what="the entry to be hidden")
    (kept,) = _lookup(registered, "--all")  # the data still sits in the older version
    assert kept["deleted"] is True

    s3.delete_object(Bucket=raw, Key=KEY, VersionId=marker)
    s3.delete_object(Bucket=raw, Key=KEY, VersionId=version)

    wait_for(lambda: _lookup(registered, "--all") == [], timeout=30, what="the entry's removal")
