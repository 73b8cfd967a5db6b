"""statemachines/index_compaction.asl.json with SparkEngine=EMR_SERVERLESS, executed from the
deployed file with the real Spark compaction job (spark_jobs/compact.py) on the segment index.

One run: a dataset with a level-0 backlog at the threshold is folded into level-1 partitions
(lookups unchanged), a dataset under it is left alone, and a dataset whose compaction lease
another run holds is left alone too (runs never compact one dataset at the same time);
invalid input is refused."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lethe.localcloud.deployment import Endpoints
from lethe_shared.catalog.zones import Zone
from lethe_shared.index.segments import SegmentSubjectIndex
from lethe_shared.index.segments.manifest import ACTIVE
from lethe_shared.index.subject_index import IndexEntry
from tests.sfn.conftest import Cloud, entered_states, spark_tasks, start_cloud

TIMEOUT = 240.0


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


def subject(i: int) -> str:
    return hashlib.sha256(f"compaction-subject-{i}".encode()).hexdigest()


def entries(object_url: str, hashes: list[str]) -> list[IndexEntry]:
    return [
        IndexEntry(
            subject_hash=h, object_url=object_url, dataset_id=object_url.split("/")[3],
            zone=Zone.LAKE, format="parquet", rows=n + 1, row_hints=(1,), version_id="v1",
            etag="etag-v1", matching_fingerprint="m" * 16, key_fingerprint="k" * 16,
        )
        for n, h in enumerate(hashes)
    ]  # fmt: skip


def open_index(cloud: Cloud) -> SegmentSubjectIndex:
    endpoints = Endpoints(
        cloud.state["endpoint_url"], cloud.state["region"], cloud.state["account_id"]
    )
    credentials = endpoints.client_environment()
    dynamodb = boto3.resource(
        "dynamodb",
        endpoint_url=cloud.state["endpoint_url"],
        region_name=cloud.state["region"],
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=credentials["AWS_SESSION_TOKEN"],
    )
    return SegmentSubjectIndex(
        cloud.client("s3"),
        cloud.outputs["IndexBucketName"],
        dynamodb.Table(cloud.outputs["IndexManifestTableName"]),
    )


def execute(cloud: Cloud, name: str, document: dict[str, Any]) -> dict[str, Any]:
    return cloud.run(name, document, timeout=TIMEOUT, machine="IndexCompactionStateMachineArn")


def level(index: SegmentSubjectIndex, dataset: str, n: int) -> int:
    return sum(1 for s in index.manifest.listing(dataset) if s.level == n and s.state == ACTIVE)


def test_a_run_folds_a_backlog_at_the_threshold_and_leaves_a_smaller_one(cloud: Cloud) -> None:
    index = open_index(cloud)
    hashes = [subject(i) for i in range(8)]
    for i in range(3):
        url = f"s3://lake/compacted/part-{i}.parquet"
        index.replace_object(url, entries(url, hashes[i : i + 4]))
    url = "s3://lake/small/part-0.parquet"
    index.replace_object(url, entries(url, hashes[:2]))
    for i in range(3):
        url = f"s3://lake/held/part-{i}.parquet"
        index.replace_object(url, entries(url, hashes[i : i + 2]))
    lease = {"pk": "compaction-lease", "sk": "held", "owner": "another-run",
             "expires_at": int(time.time()) + 3600}  # fmt: skip
    index.manifest.table.put_item(Item=lease)
    before = {h: sorted((e.object_url, e.rows) for e in index.lookup(h)) for h in hashes}

    run = execute(cloud, "compact-3", {"min_level0": 3})

    assert run["execution"]["status"] == "SUCCEEDED", (
        run["execution"].get("error"),
        run["execution"].get("cause"),
        entered_states(run["history"]),
    )
    assert json.loads(run["execution"]["output"]) == {"compacted": True}
    assert "Compact On EMR Serverless" in entered_states(run["history"])
    assert len(spark_tasks(run["history"])) == 1
    assert level(index, "compacted", 0) == 0
    assert level(index, "compacted", 1) >= 1
    assert level(index, "small", 0) == 1
    assert level(index, "held", 0) == 3  # another run's lease: not touched
    held = index.manifest.table.get_item(Key={"pk": "compaction-lease", "sk": "held"})["Item"]
    assert held["owner"] == "another-run"
    assert "Item" not in index.manifest.table.get_item(
        Key={"pk": "compaction-lease", "sk": "compacted"}
    )  # the run's own lease released
    after = {h: sorted((e.object_url, e.rows) for e in index.lookup(h)) for h in hashes}
    assert after == before


def test_invalid_input_is_refused_and_notified(cloud: Cloud) -> None:
    run = execute(cloud, "compact-invalid", {"dataset_id": "Not A Dataset", "min_level0": 0})

    assert run["execution"]["status"] == "FAILED"
    assert run["execution"]["error"] == "IndexCompactionFailed"
    assert "dataset_id must be a dataset id" in run["execution"]["cause"]
    assert "min_level0 must be a whole number" in run["execution"]["cause"]
    assert spark_tasks(run["history"]) == []
