"""A legal hold (lethe_shared.datasets.holds) through statemachines/erasure.asl.json on the local
cloud: a subject held when the request is filed survives its erasure while the other subject is
erased, and a dataset held after the report was frozen (after approval was asked) still wins in
the Spark erase job. Both requests end FAILED with outcome INCOMPLETE, their signed
certificates naming `legal_hold`: never COMPLETED for less."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lethe_shared.datasets.holds import DynamoHolds, new_hold
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint, load_hash_key
from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()
    return driver


def _holds(cloud: Cloud, driver: ErasureDriver) -> DynamoHolds:
    table = driver.target.resource("dynamodb").Table(cloud.outputs["DatasetsTableName"])
    return DynamoHolds(table)


def _key(cloud: Cloud) -> bytes:
    return load_hash_key(cloud.client("secretsmanager"), cloud.outputs["SubjectHashKeySecretArn"])


def _certificate(cloud: Cloud, record: dict[str, Any]) -> dict[str, Any]:
    bucket, key = record["certificate"]["url"].removeprefix("s3://").split("/", 1)
    body = cloud.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    return dict(json.loads(body)["certificate"])


@pytest.mark.timeout(900)  # the cloud's start and the sample's ingestion, then two Spark runs
def test_a_held_subject_survives_its_erasure_and_the_certificate_says_why(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given u-1001 under a legal hold in reviews (its keyed hash only)
    key = _key(cloud)
    hold = new_hold(
        dataset_id="reviews", reason="litigation", held_by="dpo@example.com",
        subject_hashes={"reviews": hash_of_id(key, "u-1001")}, key_fingerprint=key_fingerprint(key),
    )  # fmt: skip
    _holds(cloud, driver).add(hold)
    try:
        _held_subject_survives(cloud, driver, hold.hold_id)
    finally:
        _holds(cloud, driver).release(hold.hold_id, by="dpo@example.com", reason="case closed")


def _held_subject_survives(cloud: Cloud, driver: ErasureDriver, hold_id: str) -> None:
    # When a request for u-1001 and u-1002 is approved
    request_id = driver.file("u-1001", "u-1002")
    waiting = driver.wait(request_id, "AWAITING_APPROVAL")
    assert (
        f"Legal hold {hold_id}: 1 subject(s) not erased in dataset reviews"
        in (waiting["report"]["notes"])
    )
    assert driver.decide(driver.link(request_id), "approve") == "approved"

    # Then u-1002 is erased, u-1001's rows stay, and the request is FAILED / INCOMPLETE
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "FAILED"
    record = driver.record(request_id)
    assert (record["status"], record["outcome"]) == ("FAILED", "INCOMPLETE")
    raw = driver.raw_bytes()
    assert b"u-1002" not in raw
    assert raw.count(b"u-1001") == 2
    assert record["index"]["kept"] == []  # the held entries are not "appeared after erase"
    certificate = _certificate(cloud, record)
    assert certificate["complete"] is False
    held = [g for g in certificate["not_searched"] if g["reason"] == "legal_hold"]
    assert len(held) == 1
    assert hold_id in json.dumps(held)
    assert "u-1001" not in json.dumps(certificate)


@pytest.mark.timeout(900)
def test_a_dataset_held_after_the_report_is_refused_by_the_erase_job(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given a request for u-1001 reported and waiting for approval, with no hold
    request_id = driver.file("u-1001")
    waiting = driver.wait(request_id, "AWAITING_APPROVAL")
    assert not any("Legal hold" in n for n in waiting["report"]["notes"])
    before = driver.raw_bytes()

    # When the dataset is put under a hold, then the request is approved
    hold = new_hold(dataset_id="reviews", reason="tax audit", held_by="dpo@example.com")
    _holds(cloud, driver).add(hold)
    try:
        assert driver.decide(driver.link(request_id), "approve") == "approved"
        _refused_whole(cloud, driver, request_id, before)
    finally:
        _holds(cloud, driver).release(hold.hold_id, by="dpo@example.com", reason="audit closed")


def _refused_whole(cloud: Cloud, driver: ErasureDriver, request_id: str, before: bytes) -> None:
    # Then the erase job touched nothing of reviews, and the certificate names the hold
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "FAILED"
    record = driver.record(request_id)
    assert (record["status"], record["outcome"]) == ("FAILED", "INCOMPLETE")
    assert driver.raw_bytes() == before
    assert record["result"]["rows_removed"] == 0
    certificate = _certificate(cloud, record)
    assert certificate["complete"] is False
    reasons = {g["reason"] for g in certificate["not_searched"]}
    assert reasons == {"legal_hold"}
