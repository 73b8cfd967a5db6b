"""statemachines/erasure.asl.json with SparkEngine=EMR_SERVERLESS, from the deployed file: an
approved request erased and certified, a rejected one, a cancelled one, a Spark failure, and an
approval that expires, and a task token answered for a request rejected, cancelled or undecided
(no Spark run, nothing erased). Each path ends published to SNS and EventBridge."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from lethe.localcloud import iam_log
from lethe_shared.erasure.intake import cancel_request
from lethe_shared.erasure.requests import DynamoErasureRequests, ErasureStatus
from lethe_shared.erasure.task_tokens import KmsTaskTokens, is_sealed
from lethe_shared.subject_hashing.keys import load_hash_key
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.conftest import EVENTS_DIR
from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver, polls_folded, published, states_entered

APPROVED_PATH = [
    "Read Input",
    "Is Input Valid",
    "Watch Ingestion",
    "Ingestion Settled",
    "Build Report",
    "Wait For Approval",
    "Mark Erasing",
    "Select Spark Engine",
    "Check Spark Artifacts",  # the pre-flight: the erase job's artifacts are in S3
    "Spark Artifacts Found",
    "Which Spark Engine",
    "Run Erase Job On EMR Serverless",  # --mode erase
    "Erased Or Verified",
    "Verify",
    "Which Spark Engine",
    "Run Erase Job On EMR Serverless",  # --mode verify
    "Erased Or Verified",
    "Update Index",
    "Certify",
    "Publish Outcome",
    "Announce Outcome",
    "Which Outcome",
    "Done",
]
CLOSED_PATH = [
    "Read Input",
    "Is Input Valid",
    "Watch Ingestion",
    "Ingestion Settled",
    "Build Report",
    "Wait For Approval",
    "Read Outcome",
    "Publish Outcome",
    "Announce Outcome",
    "Which Outcome",
    "Done",
]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()
    return driver


@pytest.fixture(scope="module")
def outcomes(cloud: Cloud) -> dict[str, str]:
    """Capture queues for the SNS topic and the lethe.erasure EventBridge events."""
    return {
        "sns": cloud.capture("erasure-sns", topic=cloud.outputs["NotificationsTopicArn"]),
        "events": cloud.capture(
            "erasure-events", pattern=json.dumps({"source": ["lethe.erasure"]})
        ),
    }


def _task_callbacks(cloud: Cloud, offset: int, role: str) -> list[str]:
    """The SendTaskSuccess/SendTaskFailure calls `role` made since `offset`, each allowed on
    the erasure state machine by the local IAM check (the action names, in order)."""
    decisions, _ = iam_log.read_decisions(cloud.state["logs_dir"], offset)
    machine = cloud.outputs["ErasureStateMachineArn"]
    found = [
        d
        for d in decisions
        if f"-{role}-" in d["role"] and d["action"].startswith("states:SendTask")
    ]
    assert all(d["allowed"] and d["resource"] == machine for d in found), found
    return [d["action"] for d in found]


def test_an_approved_request_is_erased_certified_and_published(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    # Given a request for u-1002 (one multi-line review in the raw CSV and one lake row)
    before = driver.raw_bytes()
    request_id = driver.file("u-1002")
    assert driver.wait(request_id, "AWAITING_APPROVAL")["status"] == "AWAITING_APPROVAL"

    # When the approver approves on the page
    offset = iam_log.end_offset(cloud.state["logs_dir"])
    assert driver.decide(driver.link(request_id), "approve") == "approved"
    # (the page resumed the workflow as its own role, checked: ResumeWorkflow)
    assert _task_callbacks(cloud, offset, "ApprovalPageFunctionRole") == ["states:SendTaskSuccess"]

    # Then the workflow runs every step once and completes
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    assert polls_folded(states_entered(ended["history"])) == APPROVED_PATH
    record = driver.record(request_id)
    assert record["status"] == "COMPLETED"
    assert [h["status"] for h in record["history"]] == [
        "RECEIVED", "REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING", "COMPLETED",
    ]  # fmt: skip
    assert record["result"]["rows_removed"] == 2  # the raw record and its lake row
    # and the index update removed the subject's entries of both and kept none
    assert (record["index"]["entries_removed"], record["index"]["kept"]) == (2, [])
    assert record["certificate"]["url"].endswith(f"/erasure/{request_id}/certificate.json")
    assert b"u-1002" in before
    assert b"u-1002" not in driver.raw_bytes()
    # and the outcome is published to SNS and EventBridge, with no subject id
    (message,) = published(cloud, outcomes["sns"], request_id)
    assert (message["status"], message["rows_removed"]) == ("COMPLETED", 2)
    (event,) = published(cloud, outcomes["events"], request_id)
    assert event["detail-type"] == "Erasure COMPLETED"
    assert "u-1002" not in json.dumps([message, event])


def test_a_rejected_request_erases_nothing(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    before = driver.raw_bytes()
    request_id = driver.file("u-1001")
    driver.wait(request_id, "AWAITING_APPROVAL")

    assert driver.decide(driver.link(request_id), "reject") == "rejected"

    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    assert polls_folded(states_entered(ended["history"])) == CLOSED_PATH
    assert driver.record(request_id)["status"] == "REJECTED"
    assert driver.raw_bytes() == before
    (message,) = published(cloud, outcomes["sns"], request_id)
    assert (message["status"], message["outcome"]) == ("REJECTED", "REJECTED")


def test_a_cancelled_request_stops_waiting_and_is_published(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    request_id = driver.file("u-1001")
    driver.wait(request_id, "AWAITING_APPROVAL")

    offset = iam_log.end_offset(cloud.state["logs_dir"])
    status, record = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/cancel", {"requested_by": "privacy@example.com"}
    )

    assert (status, record["status"], record["outcome"]) == (200, "REJECTED", "CANCELLED")
    # the API answered the waiting task as its own role, checked (CancelWaitingApproval)
    assert _task_callbacks(cloud, offset, "ErasureApiFunctionRole")
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    assert polls_folded(states_entered(ended["history"])) == CLOSED_PATH
    (event,) = published(cloud, outcomes["events"], request_id)
    assert event["detail-type"] == "Erasure CANCELLED"
    # the link emailed before the cancel decides nothing now
    assert driver.decide(driver.link(request_id), "approve") == "closed"


def test_a_spark_failure_is_retried_then_failed_and_published(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    # Given a request whose frozen manifest is changed after the approver saw its hash
    before = driver.raw_bytes()
    request_id = driver.file("u-1001")
    record = driver.wait(request_id, "AWAITING_APPROVAL")
    bucket, key = record["report"]["manifest_url"].removeprefix("s3://").split("/", 1)
    cloud.client("s3").put_object(Bucket=bucket, Key=key, Body=b'{"tampered": true}')

    # When it is approved, the erase job refuses the manifest on every attempt
    assert driver.decide(driver.link(request_id), "approve") == "approved"

    ended = driver.execution(request_id, timeout=400)
    assert ended["execution"]["status"] == "FAILED"
    assert ended["execution"]["error"] == "ErasureFailed"
    # the partial certificate cannot be written either (the report it would certify is not the
    # approved one): the request stays FAILED and its notification says the certificate is
    # missing
    assert states_entered(ended["history"])[-9:] == [
        "Run Erase Job On EMR Serverless", "Mark Failed", "Was Erasing", "Record Failure",
        "Partial Certificate Missing", "Publish Outcome", "Announce Outcome", "Which Outcome",
        "Erasure Failed",
    ]  # fmt: skip
    failed = [
        e for e in ended["history"]
        if e["type"] == "TaskFailed" and e["taskFailedEventDetails"]["error"] == "States.TaskFailed"
    ]  # fmt: skip
    assert len(failed) == 3  # the first attempt and two retries
    record = driver.record(request_id)
    assert record["status"] == "FAILED"
    assert record["error"]["error"] == "States.TaskFailed"
    assert "not the report that was approved" in record["error"]["cause"]
    assert driver.raw_bytes() == before
    (message,) = published(cloud, outcomes["sns"], request_id)
    assert (message["status"], message["error"]) == ("FAILED", "States.TaskFailed")
    assert message["partial_certificate"] == "missing"


def test_an_approval_that_expires_erases_nothing(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    """The deployed definition with its approval timeout (72 h, the template's default) set to
    four seconds: the same file and states, on a machine of its own so the wait is short."""
    sfn = cloud.client("stepfunctions")
    deployed = sfn.describe_state_machine(stateMachineArn=cloud.outputs["ErasureStateMachineArn"])
    assert "$round(72 * 3600)" in deployed["definition"]
    short = sfn.create_state_machine(
        name="lethe-local-erasure-short-approval",
        definition=deployed["definition"].replace("$round(72 * 3600)", "$round(0.001 * 3600)"),
        roleArn=deployed["roleArn"],
    )["stateMachineArn"]
    request_id = driver.stored_request("u-1001")
    arn = sfn.start_execution(
        stateMachineArn=short,
        name=f"expire-{request_id}",
        input=json.dumps({"request_id": request_id}),
    )["executionArn"]

    ended = driver.wait_execution(arn, timeout=120)

    assert ended["execution"]["status"] == "SUCCEEDED"
    assert polls_folded(states_entered(ended["history"]))[5:7] == [
        "Wait For Approval", "Mark Expired",
    ]  # fmt: skip
    assert driver.record(request_id)["status"] == "EXPIRED"
    (message,) = published(cloud, outcomes["sns"], request_id)
    assert message["status"] == "EXPIRED"


def test_an_erasure_that_could_not_search_everything_ends_failed_incomplete(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str]
) -> None:
    # Given a reviews upload whose second record has too few fields (the reader rejects it, so
    # its subject cannot be read), ingested by the object events path
    key = "reviews/2026/11/23/batch-short.csv"
    body = b"user_id,review_date,stars,text\nu-7001,2026-11-21,5,fine\nu-7002,2026-11-21\n"
    version = cloud.upload(key, body)
    deadline = time.monotonic() + 420  # a wait, not a speed check: a loaded machine is slower
    status = ""
    while time.monotonic() < deadline and status not in {"INGESTED", "QUARANTINED", "FAILED"}:
        time.sleep(1)
        try:
            status = str(cloud.catalog_item(driver.raw, key, version)["status"])
        except KeyError:
            status = ""
    assert status == "INGESTED"

    # When u-7001 is erased with approval
    request_id = driver.file("u-7001")
    driver.wait(request_id, "AWAITING_APPROVAL")
    assert driver.decide(driver.link(request_id), "approve") == "approved"

    # Then its row is erased and certified, but the request is not COMPLETED: the record the
    # reader could not parse is kept, so it ends FAILED with outcome INCOMPLETE
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "FAILED"
    assert ended["execution"]["error"] == "ErasureFailed"
    assert polls_folded(states_entered(ended["history"])) == [*APPROVED_PATH[:-1], "Erasure Failed"]
    record = driver.record(request_id)
    assert (record["status"], record["outcome"]) == ("FAILED", "INCOMPLETE")
    assert [h["status"] for h in record["history"]][-2:] == ["ERASING", "FAILED"]
    assert record["error"]["error"] == "ErasureIncomplete"
    assert record["error"]["cause"].startswith("1 place(s) were not fully searched")
    s3 = cloud.client("s3")
    erased = s3.get_object(Bucket=driver.raw, Key=key)["Body"].read()
    assert erased == b"user_id,review_date,stars,text\nu-7002,2026-11-21\n"
    # and the signed certificate says complete: false and names the raw object's gap
    bucket, cert_key = record["certificate"]["url"].removeprefix("s3://").split("/", 1)
    certificate = json.loads(s3.get_object(Bucket=bucket, Key=cert_key)["Body"].read())
    document = certificate["certificate"]
    assert document["complete"] is False
    # (named by its shown key: a raw key is hashed whole, its dataset and extension kept)
    hash_key = load_hash_key(
        cloud.client("secretsmanager"), cloud.outputs["SubjectHashKeySecretArn"]
    )
    assert [(g["key"], g["reason"], g["count"]) for g in document["not_searched"]] == [
        (KeyNamer(hash_key, lambda _: None).key(key), "unparseable_records", 1)
    ]
    # and the outcome is published as FAILED / INCOMPLETE, with no subject id
    (message,) = published(cloud, outcomes["sns"], request_id)
    assert (message["status"], message["outcome"]) == ("FAILED", "INCOMPLETE")
    (event,) = published(cloud, outcomes["events"], request_id)
    assert event["detail-type"] == "Erasure INCOMPLETE"
    assert "u-7001" not in json.dumps([message, event])


# ------------------------------------------------------------- a task token used anyway
# The approval task's token resumes the workflow whatever the request's record says: these
# requests are closed (or undecided) when someone who holds the token (and can open it: it is
# stored sealed with the task token key) answers it with SendTaskSuccess first. Mark Erasing
# refuses (ErasureNotApprovedError): no Spark run, nothing erased.
NOT_APPROVED_PATH = [
    "Read Input",
    "Is Input Valid",
    "Watch Ingestion",
    "Ingestion Settled",
    "Build Report",
    "Wait For Approval",
    "Mark Erasing",
    "Mark Failed",
    "Was Erasing",  # not erasing: no partial certificate
    "Publish Outcome",
    "Announce Outcome",
    "Which Outcome",
]


class _Lost:
    """TaskCallbacks whose calls never reach Step Functions (a throttled SendTaskFailure)."""

    def success(self, token: str, output: object) -> None:
        pass

    def failure(self, token: str, error: str, cause: str) -> None:
        pass


def _requests(cloud: Cloud, driver: ErasureDriver) -> DynamoErasureRequests:
    table = driver.target.resource("dynamodb").Table(cloud.outputs["ErasureRequestsTableName"])
    return DynamoErasureRequests(table)


def _opened_token(cloud: Cloud, driver: ErasureDriver, request_id: str) -> str:
    """The waiting task's token, as whoever can read the record and decrypt with the task
    token key gets it (the record holds it sealed)."""
    record = _requests(cloud, driver).get(request_id)
    assert record is not None
    assert is_sealed(record.task_token)
    functions = cloud.cloud.dispatcher.runtime.deployment.functions
    key = functions["ApprovalPageFunction"].environment["TASK_TOKEN_KEY_ARN"]
    return KmsTaskTokens(cloud.client("kms"), key).open(record.task_token)


def _spark_runs(cloud: Cloud, execution: str) -> list[str]:
    """The EMR Serverless job runs of an execution (named <execution>-<mode>)."""
    runs = cloud.client("emr-serverless").list_job_runs(
        applicationId=cloud.outputs["SparkApplicationId"]
    )["jobRuns"]
    return [str(r["name"]) for r in runs if str(r.get("name", "")).startswith(execution)]


@pytest.mark.parametrize("closed_by", ["rejected", "cancelled", "nobody"])
def test_a_task_token_used_on_a_request_not_approved_erases_nothing(
    cloud: Cloud, driver: ErasureDriver, outcomes: dict[str, str], closed_by: str
) -> None:
    # Given a request awaiting approval, its task token in someone's hands
    before = driver.raw_bytes()
    request_id = driver.file("u-1002")
    driver.wait(request_id, "AWAITING_APPROVAL")
    token = _opened_token(cloud, driver, request_id)
    requests = _requests(cloud, driver)
    # and the request rejected on the page, or cancelled, whose answer to the task did not land
    # yet (or not decided at all)
    if closed_by == "rejected":
        record = requests.get(request_id)
        assert record is not None
        requests.transition(
            request_id, ErasureStatus.REJECTED, by="dpo@example.com",
            allowed_from=frozenset({ErasureStatus.AWAITING_APPROVAL}),
            updates={"approval": {**record.approval, "decision": "reject",
                                  "decided_by": "approver@example.com",
                                  "decided_at": "2026-11-27T12:00:00+00:00"}},
        )  # fmt: skip
    elif closed_by == "cancelled":
        cancel_request(request_id, "privacy@example.com", requests=requests, callbacks=_Lost())

    # When the token is answered with SendTaskSuccess anyway
    cloud.client("stepfunctions").send_task_success(
        taskToken=token, output=json.dumps({"decision": "approve"})
    )

    # Then the workflow ends without any Spark run, and nothing is erased
    ended = driver.execution(request_id)
    states = polls_folded(states_entered(ended["history"]))
    assert not [s for s in states if s.startswith("Run Erase Job")]
    assert _spark_runs(cloud, ended["execution"]["name"]) == []
    assert driver.raw_bytes() == before
    record_now = driver.record(request_id)
    assert "ERASING" not in [h["status"] for h in record_now["history"]]
    if closed_by == "nobody":  # an open request the token was used on fails, named
        assert states == [*NOT_APPROVED_PATH, "Erasure Failed"]
        assert ended["execution"]["status"] == "FAILED"
        assert (record_now["status"], record_now["error"]["error"]) == (
            "FAILED", "ErasureNotApproved",
        )  # fmt: skip
    else:  # a closed one stays as it was closed
        assert states == [*NOT_APPROVED_PATH, "Done"]
        assert ended["execution"]["status"] == "SUCCEEDED"
        outcome = "CANCELLED" if closed_by == "cancelled" else ""  # a rejection has none
        assert (record_now["status"], record_now["outcome"]) == ("REJECTED", outcome)


def test_the_metrics_function_counts_the_open_requests_with_its_own_role(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    """ErasureMetricsFunction (scheduled every five minutes on AWS) invoked as the schedule
    would: it lists the open requests through the by_status index and reads them, as its own
    role (ListOpenRequests, ReadOpenRequests), and counts the one just stored."""
    driver.stored_request("u-1001")  # RECEIVED, no workflow: open until something closes it
    logs_dir = cloud.state["logs_dir"]
    offset = iam_log.end_offset(logs_dir)

    answer = cloud.client("lambda").invoke(
        FunctionName="lethe-local-erasure-metrics",
        Payload=(EVENTS_DIR / "erasure_metrics_schedule.json").read_bytes(),
    )

    assert "FunctionError" not in answer, answer["Payload"].read()
    figures = json.loads(answer["Payload"].read())
    assert figures["OpenErasureRequests_RECEIVED"] >= 1
    assert figures["OpenErasureRequests"] >= figures["OpenErasureRequests_RECEIVED"]
    decisions, _ = iam_log.read_decisions(logs_dir, offset)
    assert iam_log.distinct_denials(decisions) == []
    mine = [d for d in decisions if "-ErasureMetricsFunctionRole-" in d["role"]]
    assert {d["action"] for d in mine} >= {"dynamodb:Query", "dynamodb:BatchGetItem"}
