"""A rotated subject hash key, end to end on an in-process local cloud (the real erasure and
index backfill state machines, the real Lambda handlers and Spark jobs):

- the reviews dataset, registered through the datasets API, records the key it was indexed with
  (`indexed_key_fingerprint`); the operator then puts a new value in the key's secret;
- a request filed after the rotation and before any re-index is hashed with the new key: the
  watermark holds its report (a key re-index pending), the wait runs out, the frozen report
  names the dataset `reindex_pending` (the key changed, fingerprints only), and once approved
  the request ends FAILED with outcome INCOMPLETE, never COMPLETED;
- `lethe datasets reindex --all` re-indexes the dataset with the new key, which its last step
  records; a request filed after that finds the subject and ends COMPLETED.

Short-wait runs use the deployed erasure definition with a 1 s poll and a 3 s bound on a state
machine of their own (test_erasure_watermark's `_short_machine`)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lethe.commands import datasets
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key
from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver, states_entered
from tests.sfn.test_erasure_watermark import _document, _short_machine, _start

SUBJECT = "u-1001"  # two rows of the reviews sample


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()  # registered through the API, ingested with the first key
    return driver


def _current_key(cloud: Cloud) -> str:
    secrets = cloud.client("secretsmanager")
    return key_fingerprint(load_hash_key(secrets, cloud.outputs["SubjectHashKeySecretArn"]))


def _registered(cloud: Cloud) -> dict[str, Any]:
    table = cloud.outputs["DatasetsTableName"]
    item = cloud.client("dynamodb").get_item(
        TableName=table, Key={"dataset_id": {"S": "reviews"}}, ConsistentRead=True
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items() if k != "document"}


def _erased(driver: ErasureDriver, request_id: str, arn: str) -> dict[str, Any]:
    """Approve the request and wait for its execution's end; its record."""
    driver.wait(request_id, "AWAITING_APPROVAL")
    assert driver.decide(driver.link(request_id), "approve") == "approved"
    driver.wait_execution(arn, timeout=400)
    return driver.record(request_id)


def _reindex_all(cloud: Cloud, driver: ErasureDriver, monkeypatch: pytest.MonkeyPatch) -> str:
    """`lethe datasets reindex --all` (its handler, against the local cloud); the execution
    ARN it started for reviews, once it ended."""
    monkeypatch.setattr(datasets, "resolve", lambda args: driver.target)
    args = argparse.Namespace(dataset_id=None, all=True, force=False)
    assert datasets.reindex_dataset(args) == 0
    sfn = cloud.client("stepfunctions")
    machine = cloud.outputs["IndexBackfillStateMachineArn"]
    (started,) = [
        e
        for e in sfn.list_executions(stateMachineArn=machine)["executions"]
        if e["name"].startswith("reviews-reindex-g1-k")
    ]
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        described = sfn.describe_execution(executionArn=started["executionArn"])
        if described["status"] != "RUNNING":
            assert described["status"] == "SUCCEEDED", described.get("cause")
            return str(started["executionArn"])
        time.sleep(1)
    raise AssertionError("the re-index did not end")


def test_requests_after_a_key_rotation_wait_for_the_reindex_and_then_find_the_subject(
    cloud: Cloud, driver: ErasureDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given reviews, registered and indexed with the first key
    old = _current_key(cloud)
    assert _registered(cloud)["indexed_key_fingerprint"] == old

    # When the operator rotates the key (a new secret value)
    cloud.client("secretsmanager").put_secret_value(
        SecretId=cloud.outputs["SubjectHashKeySecretArn"], SecretString="R0tated" * 10
    )
    new = _current_key(cloud)
    assert new != old

    # Then a request filed now (hashed with the new key) waits for the re-index, and when the
    # wait runs out its report names the dataset as not searched, saying the key changed
    before = driver.stored_request(SUBJECT)
    arn = _start(cloud, _short_machine(cloud, "key-rotated", 3), before)
    record = driver.wait(before, "AWAITING_APPROVAL")
    assert record["key_fingerprint"] == new
    assert record["ingestion_wait"]["reindex_pending"] == {
        "reviews": {
            "matching_generation": 1,
            "indexed_generation": 1,
            "key_fingerprint": new,
            "indexed_key_fingerprint": old,
        }
    }
    assert record["report"]["not_searched"] == [
        {"dataset_id": "reviews", "reason": "reindex_pending", "versions": 1}
    ]
    manifest = _document(cloud, before, "manifest.json")
    assert manifest["objects"] == []  # the index holds only old-key hashes: nothing found
    (gap,) = manifest["not_searched"]
    assert (gap["object_url"], gap["reason"]) == (
        f"s3://{cloud.outputs['RawBucketName']}/reviews/",
        "reindex_pending",
    )
    assert "the subject hash key changed" in gap["detail"]
    assert f"hashed with key {new}" in gap["detail"]
    assert f"last built with key {old}" in gap["detail"]
    history = cloud.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)
    assert "Wait For Ingestion" in states_entered(history["events"])
    # and, approved, it ends INCOMPLETE: never COMPLETED for an erasure that found nothing
    ended = _erased(driver, before, arn)
    assert (ended["status"], ended["outcome"]) == ("FAILED", "INCOMPLETE")
    assert "R0tated" not in json.dumps(ended)

    # When every dataset is re-indexed with the new key
    reindex = _reindex_all(cloud, driver, monkeypatch)

    # Then its last step recorded the new key, and a request filed now finds the subject in
    # both zones and erases it
    registered = _registered(cloud)
    assert registered["indexed_key_fingerprint"] == new
    assert registered["indexed_execution"] == reindex
    after = driver.stored_request(SUBJECT)
    arn = _start(cloud, _short_machine(cloud, "key-reindexed", 3), after)
    record = driver.wait(after, "AWAITING_APPROVAL")
    assert record["ingestion_wait"]["reindex_pending"] == {}
    manifest = _document(cloud, after, "manifest.json")
    assert manifest["not_searched"] == []
    assert {o["zone"] for o in manifest["objects"]} == {"raw", "lake"}
    ended = _erased(driver, after, arn)
    assert ended["status"] == "COMPLETED", ended.get("error")
