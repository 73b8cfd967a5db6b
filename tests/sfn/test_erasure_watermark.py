"""statemachines/erasure.asl.json's ingestion watermark and report scope, run by the real
interpreter on an in-process local cloud (lethe_shared.erasure.scope):

- a raw upload made before the request and still INGESTING holds the report (Watch Ingestion,
  Wait For Ingestion); once its ingestion ends (INGESTED, indexed) the report includes it;
- one still in flight when the wait is over is named `ingestion_in_flight` in the frozen report;
- a FAILED raw version holding the subject is added to the manifest and erased by the erase job
  like any raw object; an index entry written after the report is frozen is found by the index
  update's final look-up and named `appeared_after_erase` in the signed certificate, so the
  request ends FAILED with outcome INCOMPLETE.

The uploads sit under the dataset's prefix unannounced (`Cloud.upload_unannounced`), so that
the object events path does not ingest them by itself; the test gives their catalog items the
dataset and the status that an ingestion under way (or failed) would, and runs the ingestion
machine itself. Short-wait runs use the deployed definition with a 1 s poll and a bound of the
test's choosing, on a state machine of their own (as test_erasure_workflow's expiry does)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lethe_shared.aws.s3 import PRODUCER_METADATA, S3ObjectStore
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.index.maintenance import ERASE_PRODUCER
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, load_hash_key
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.sfn.conftest import Cloud, execution_input, start_cloud, wait_catalogued
from tests.sfn.erasure_flow import REQUESTER, ErasureDriver, states_entered

HEADER = b"user_id,review_date,stars,text\n"


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    # the DynamoDB store: these tests read and edit SubjectIndexTable (the segment store has
    # its own e2e and integration tests)
    with start_cloud(
        tmp_path_factory, SparkEngine="EMR_SERVERLESS", IndexStore="dynamodb"
    ) as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()  # registers the dataset, and the index is not empty
    return driver


def _upload(cloud: Cloud, name: str, body: bytes, status: str) -> tuple[str, str]:
    """A raw upload of the reviews dataset whose catalog item says `status`."""
    key = f"reviews/watermark/{name}"
    version = cloud.upload_unannounced(key, HEADER + body)
    _set_status(cloud, key, version, status)
    return key, version


def _set_status(cloud: Cloud, key: str, version: str, status: str) -> None:
    cloud.client("dynamodb").update_item(
        TableName=cloud.outputs["ObjectCatalogTableName"],
        Key={
            "object_url": {"S": f"s3://{cloud.outputs['RawBucketName']}/{key}"},
            "version_id": {"S": version},
        },
        UpdateExpression="SET dataset_id = :d, #s = :s REMOVE expires_at",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":d": {"S": "reviews"}, ":s": {"S": status}},
    )


def _short_machine(cloud: Cloud, name: str, max_wait_seconds: int) -> str:
    """The deployed erasure definition polling every second, waiting at most
    `max_wait_seconds`, without the catalog's batch-window delay."""
    sfn = cloud.client("stepfunctions")
    deployed = sfn.describe_state_machine(stateMachineArn=cloud.outputs["ErasureStateMachineArn"])
    definition = json.loads(deployed["definition"])
    assigned = definition["States"]["Read Input"]["Assign"]
    assert assigned["ingestion_max_wait_seconds"] == "{% $round(30 * 60) %}"  # the default
    assigned["ingestion_max_wait_seconds"] = max_wait_seconds
    assigned["ingestion_settle_seconds"] = 0
    poll = definition["States"]["Wait For Ingestion"]
    assert poll["Seconds"] == 30
    poll["Seconds"] = 1
    poll["Assign"]["ingestion_waited"] = "{% $ingestion_waited + 1 %}"
    machine = str(
        sfn.create_state_machine(
            name=f"lethe-local-erasure-{name}",
            definition=json.dumps(definition),
            roleArn=deployed["roleArn"],
        )["stateMachineArn"]
    )
    _grant_task_callbacks(cloud, machine)
    return machine


def _grant_task_callbacks(cloud: Cloud, machine: str) -> None:
    """The roles that answer the erasure workflow's approval task (the approval page's
    ResumeWorkflow, the erasure API's CancelWaitingApproval) may answer this test-only copy's
    too, as the template lets them answer the deployed machine's (the local IAM check
    authorises SendTaskSuccess/Failure on the machine that waits)."""
    iam = cloud.client("iam")
    roles = [
        role["RoleName"]
        for page in iam.get_paginator("list_roles").paginate()
        for role in page["Roles"]
        if role["RoleName"].startswith(
            ("lethe-local-ApprovalPageFunctionRole-", "lethe-local-ErasureApiFunctionRole-")
        )
    ]
    assert len(roles) == 2, roles
    statement = {
        "Effect": "Allow",
        "Action": ["states:SendTaskSuccess", "states:SendTaskFailure"],
        "Resource": machine,
    }
    for role in roles:
        iam.put_role_policy(
            RoleName=role,
            PolicyName=f"test-copy-{machine.rsplit(':', 1)[-1]}",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
        )


def _start(cloud: Cloud, machine: str, request_id: str) -> str:
    return str(
        cloud.client("stepfunctions").start_execution(
            stateMachineArn=machine,
            name=f"wm-{request_id}",
            input=json.dumps({"request_id": request_id}),
        )["executionArn"]
    )


def _until(check: Any, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what} did not happen in {timeout} s")


def _document(cloud: Cloud, request_id: str, name: str) -> Any:
    body = (
        cloud.client("s3")
        .get_object(Bucket=cloud.outputs["ReportsBucketName"], Key=f"erasure/{request_id}/{name}")[
            "Body"
        ]
        .read()
    )
    return body if name.endswith((".txt", ".html")) else json.loads(body)


def _cancel(driver: ErasureDriver, request_id: str, arn: str) -> None:
    status, _ = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/cancel", {"requested_by": REQUESTER}
    )
    assert status == 200
    assert driver.wait_execution(arn)["execution"]["status"] == "SUCCEEDED"


def test_the_report_waits_for_an_upload_still_ingesting_and_then_includes_it(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given an upload of u-7001's review, made before the request, whose ingestion is running
    key, version = _upload(cloud, "late.csv", b"u-7001,2026-11-22,4,late review\n", "INGESTING")
    request_id = driver.stored_request("u-7001")
    arn = _start(cloud, _short_machine(cloud, "wait-ingested", 300), request_id)

    # Then the workflow waits, and the request record says for what (counts, no key)
    def waiting() -> Any:
        wait = driver.record(request_id).get("ingestion_wait") or {}
        return wait if wait.get("in_flight") else None

    wait = _until(waiting, "the watermark holding the report")
    assert wait["in_flight"] == {"reviews": 1}
    assert key not in json.dumps(wait)
    assert driver.record(request_id)["status"] == "RECEIVED"

    # When the ingestion ends (the ingestion state machine runs the real ingest job)
    name = f"late-{version[:8]}"
    ingested = cloud.run(name, execution_input(cloud, name, [("reviews", key, version)]))
    assert ingested["execution"]["status"] == "SUCCEEDED"

    # Then the report is frozen with the upload's raw object (and its lake rows) in it
    record = driver.wait(request_id, "AWAITING_APPROVAL")
    assert record["status"] == "AWAITING_APPROVAL"
    assert record["ingestion_wait"]["settled"] is True
    manifest = _document(cloud, request_id, "manifest.json")
    urls = [o["object_url"] for o in manifest["objects"]]
    assert f"s3://{cloud.outputs['RawBucketName']}/{key}" in urls
    assert any(o["zone"] == "lake" for o in manifest["objects"])
    assert manifest["not_searched"] == []
    _cancel(driver, request_id, arn)
    entered = states_entered(driver.wait_execution(arn)["history"])
    assert entered[:5] == [
        "Read Input", "Is Input Valid", "Watch Ingestion", "Ingestion Settled",
        "Wait For Ingestion",
    ]  # fmt: skip
    built = entered.index("Build Report")
    assert entered[built - 2 : built] == ["Watch Ingestion", "Ingestion Settled"]


def test_an_upload_still_in_flight_when_the_wait_ends_is_named_not_searched(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    key, version = _upload(cloud, "stuck.csv", b"u-7002,2026-11-22,1,stuck\n", "INGESTING")
    try:
        request_id = driver.stored_request("u-7002")
        arn = _start(cloud, _short_machine(cloud, "wait-timeout", 3), request_id)

        record = driver.wait(request_id, "AWAITING_APPROVAL")

        assert record["status"] == "AWAITING_APPROVAL"
        assert record["report"]["not_searched"] == [
            {"dataset_id": "reviews", "reason": "ingestion_in_flight", "versions": 1}
        ]
        (gap,) = _document(cloud, request_id, "manifest.json")["not_searched"]
        assert (gap["object_url"], gap["version_id"], gap["reason"]) == (
            f"s3://{cloud.outputs['RawBucketName']}/{key}", version, "ingestion_in_flight",
        )  # fmt: skip
        assert "lethe objects reingest" in gap["detail"]
        text = _document(cloud, request_id, "summary.txt").decode()
        assert "NOT SEARCHED" in text
        assert "ingestion_in_flight" in text
        assert key not in text
        assert "Wait For Ingestion" in states_entered(
            cloud.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)[
                "events"
            ]
        )
        _cancel(driver, request_id, arn)
    finally:
        _set_status(cloud, key, version, "DELETED")  # no later request waits for it


def test_a_failed_upload_is_erased_and_an_entry_indexed_later_is_named(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given a raw upload of the reviews dataset holding u-8001 (and another subject) whose
    # ingestion FAILED: the index has never heard of it. (Written through a store that records
    # it in the writes ledger as the erase job's, as that job's rewrites are, the object events
    # path catalogues it without starting an ingestion; metadata alone no longer does, since
    # the writes ledger. The test then records the failure an ingestion would.)
    raw = cloud.outputs["RawBucketName"]
    key = "reviews/2026/11/22/failed.csv"
    ledger = DynamoWritesLedger(
        driver.target.resource("dynamodb").Table(cloud.outputs["ObjectCatalogTableName"])
    )
    store = S3ObjectStore(cloud.client("s3"), writes=ledger.writer(Writer.ERASE, "test-setup"))
    version = store.put_bytes(
        raw,
        key,
        HEADER + b"u-8001,2026-11-22,2,secret review\nu-8002,2026-11-22,5,stays\n",
        content_type="text/csv",
        metadata={PRODUCER_METADATA: ERASE_PRODUCER},
    ).version_id
    wait_catalogued(cloud, key, version)
    _set_status(cloud, key, version, "FAILED")
    request_id = driver.file("u-8001")
    record = driver.wait(request_id, "AWAITING_APPROVAL")
    manifest = _document(cloud, request_id, "manifest.json")
    added = [o for o in manifest["objects"] if o["object_url"] == f"s3://{raw}/{key}"]
    assert [(o["zone"], o["subjects"], o["expected_rows"]) for o in added] == [("raw", [], 0)]
    assert record["report"]["objects"] == 1
    # and, after the report was frozen, an object holding u-8001 is indexed
    hash_key = load_hash_key(
        cloud.client("secretsmanager"), cloud.outputs["SubjectHashKeySecretArn"]
    )
    later = f"s3://{cloud.outputs['LakeBucketName']}/reviews/review_date=2026-11-30/later.parquet"
    DynamoSubjectIndex(
        driver.target.resource("dynamodb").Table(cloud.outputs["SubjectIndexTableName"])
    ).replace_object(
        later,
        [
            IndexEntry(
                subject_hash=hash_of_id(hash_key, "u-8001"), object_url=later,
                dataset_id="reviews", zone=Zone.LAKE, format="parquet", rows=1,
                version_id="v-later",
            )
        ],
    )  # fmt: skip

    # When the request is approved
    assert driver.decide(driver.link(request_id), "approve") == "approved"
    ended = driver.execution(request_id, timeout=400)
    # (the run ends failed: the request did not complete, see below)
    assert ended["execution"]["status"] == "FAILED", driver.record(request_id).get("error")
    assert ended["execution"]["error"] == "ErasureFailed"

    # Then the erase job rewrote the failed upload without u-8001's row
    entered = states_entered(ended["history"])
    updated = entered.index("Update Index")
    assert entered[updated : updated + 2] == ["Update Index", "Certify"]
    body = cloud.client("s3").get_object(Bucket=raw, Key=key)["Body"].read()
    assert b"u-8001" not in body
    assert b"u-8002,2026-11-22,5,stays" in body
    results = _document(cloud, request_id, "results.json")
    (erased,) = [o for o in results["objects"] if o["object_url"] == f"s3://{raw}/{key}"]
    assert (erased["action"], erased["rows_removed"]) == ("rewritten", 1)
    # and the entry indexed after the report is named, not silently left: in the signed
    # certificate and the audit record, and the request is FAILED with outcome INCOMPLETE
    record = driver.record(request_id)
    assert (record["status"], record["outcome"]) == ("FAILED", "INCOMPLETE")
    assert record["error"]["error"] == "ErasureIncomplete"
    assert "appeared_after_erase: 1" in record["error"]["cause"]
    certificate = _document(cloud, request_id, "certificate.json")["certificate"]
    assert certificate["complete"] is False
    # (named by its shown key: `later.parquet` is not the lake layout, the whole key is hashed)
    shown = KeyNamer(hash_key, lambda _: None).url(later)
    assert [
        (f"s3://{g['bucket']}/{g['key']}", g["version_id"], g["reason"])
        for g in certificate["not_searched"]
    ] == [(shown, "v-later", "appeared_after_erase")]
    audit = _document(cloud, request_id, "audit.json")
    assert [(g["object_url"], g["reason"]) for g in audit["not_searched"]] == [
        (shown, "appeared_after_erase")
    ]
