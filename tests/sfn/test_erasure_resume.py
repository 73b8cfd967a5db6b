"""A FAILED erasure is recorded and resumed (issue 19, items 7 and 4), on
statemachines/erasure.asl.json as deployed by the local cloud, SparkEngine=EMR_SERVERLESS:

- an approved request whose erase run dies after it recorded one object's progress (the Spark
  run is killed: the local Spark runner fails the run, as a lost driver would, after the test
  wrote the object's progress document as the executor does) ends FAILED, with an audit record
  and a signed *partial* certificate of what was done, which verifies and joins the chain;
- `POST /erasure-requests/{id}/resume` runs the approved report again without a new approval:
  COMPLETED, with a full certificate naming the Spark run ids, after the partial one in the chain;
- a resume of a request whose approval is older than ApprovalValidityHours is refused (409);
- an approved request on a stack whose Spark artifacts are missing (deployed without them)
  fails at the pre-flight before any Spark run, FAILED with the missing objects named and a
  partial certificate of nothing erased, and is resumed to completion once they are uploaded.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lethe.commands import erasure_certificate as certificates
from lethe.localcloud import iam_log
from lethe.localcloud.sfn_hooks.context import Runtime
from lethe.localcloud.spark_runner import SparkRunResult
from lethe_shared.aws.s3 import split_s3_url
from lethe_shared.erasure.certificate import KmsSigner, verify_envelope
from lethe_shared.erasure.certificate_chain import walk_chain
from lethe_shared.erasure.progress import ObjectProgress, progress_key
from lethe_shared.erasure.report import Manifest, ObjectResult, VersionRef
from lethe_shared.erasure.requests import DynamoErasureRequests, ErasureStatus
from tests.sfn.conftest import Cloud, artifacts_missing, spark_tasks, start_cloud
from tests.sfn.erasure_flow import ErasureDriver, states_entered

FAILED_RUN_TAIL = [
    "Run Erase Job On EMR Serverless", "Mark Failed", "Was Erasing", "Record Failure",
    "Publish Outcome", "Announce Outcome", "Which Outcome", "Erasure Failed",
]  # fmt: skip
RESUMED_PATH = [
    "Read Input", "Is Input Valid", "Is Resume Valid", "Resume Erasing", "Mark Erasing",
    "Select Spark Engine", "Check Spark Artifacts", "Spark Artifacts Found", "Which Spark Engine",
    "Run Erase Job On EMR Serverless", "Erased Or Verified", "Verify", "Which Spark Engine",
    "Run Erase Job On EMR Serverless", "Erased Or Verified", "Update Index", "Certify",
    "Publish Outcome", "Announce Outcome", "Which Outcome", "Done",
]  # fmt: skip


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()
    return driver


class KilledEraseRuns:
    """While armed, every Spark run in erase mode dies before it ends (the runner reports it
    failed, as for a lost driver); verify runs and disarmed erase runs run for real."""

    def __init__(self) -> None:
        self.armed = False
        self.killed = 0

    def wrap(self, real: Any) -> Any:
        def run(runtime: Runtime, env: Any, **kwargs: Any) -> SparkRunResult:
            args = list(kwargs["args"])
            erase = "--mode" in args and args[args.index("--mode") + 1] == "erase"
            if self.armed and erase:
                self.killed += 1
                log = Path(runtime.logs_dir) / f"spark-{kwargs['run_id']}.log"
                log.write_text("killed by the test: the driver was lost\n")
                return SparkRunResult(
                    succeeded=False, exit_code=137, error_message="driver lost (killed)",
                    log_path=log, duration=0.1,
                )  # fmt: skip
            return real(runtime, env, **kwargs)  # type: ignore[no-any-return]

        return run


@pytest.fixture
def killed(monkeypatch: pytest.MonkeyPatch) -> KilledEraseRuns:
    fault = KilledEraseRuns()
    monkeypatch.setattr(Runtime, "run", fault.wrap(Runtime.run))
    return fault


def _s3_json(cloud: Cloud, url: str) -> Any:
    bucket, key = split_s3_url(url)
    return json.loads(cloud.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def _record_progress_of_first_object(cloud: Cloud, record: dict[str, Any]) -> ObjectResult:
    """What the erase job's executor writes once it finished one object: here the first object
    of the frozen report, as rewritten (the test's stand-in for the run's first task)."""
    manifest = Manifest.model_validate(_s3_json(cloud, record["report"]["manifest_url"]))
    first = manifest.objects[0]
    before = tuple(VersionRef(version_id=v.version_id, etag=v.etag) for v in first.versions[:1])
    result = ObjectResult(
        object_url=first.object_url, dataset_id=first.dataset_id, zone=first.zone,
        action="rewritten", versions_before=before,
        version_after=VersionRef(version_id="v-after-test", etag="e-after"),
        rows_before=first.expected_rows + 1, rows_removed=first.expected_rows, rows_after=1,
        versions_purged=len(before),
    )  # fmt: skip
    progress = ObjectProgress(
        request_id=manifest.request_id, manifest_sha256=record["report"]["manifest_sha256"],
        recorded_at=datetime.now(UTC).isoformat(), result=result,
    )  # fmt: skip
    cloud.client("s3").put_object(
        Bucket=cloud.outputs["ReportsBucketName"],
        Key=progress_key(manifest.request_id, first.object_url),
        Body=progress.model_dump_json().encode(),
    )
    return result


def _signer(cloud: Cloud) -> KmsSigner:
    return KmsSigner(cloud.client("kms"), cloud.outputs["ErasureCertificateKeyArn"])


def _reports_get(cloud: Cloud) -> Any:
    s3, bucket = cloud.client("s3"), cloud.outputs["ReportsBucketName"]

    def get(key: str) -> bytes | None:
        try:
            return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    return get


@pytest.mark.timeout(900)  # three killed attempts with their retry waits, then two Spark runs
def test_a_run_killed_mid_erasure_is_recorded_then_resumed_to_completion(
    cloud: Cloud, driver: ErasureDriver, killed: KilledEraseRuns
) -> None:
    # Given an approved request whose erase run dies after recording one object's progress
    request_id = driver.file("u-1002")
    record = driver.wait(request_id, "AWAITING_APPROVAL")
    done = _record_progress_of_first_object(cloud, record)
    killed.armed = True
    assert driver.decide(driver.link(request_id), "approve") == "approved"

    # Then the request ends FAILED, with an audit record and a signed partial certificate
    ended = driver.execution(request_id, timeout=400)
    assert ended["execution"]["status"] == "FAILED"
    assert states_entered(ended["history"])[-8:] == FAILED_RUN_TAIL
    assert killed.killed == 3  # the first attempt and two retries
    failed = driver.record(request_id)
    assert failed["status"] == "FAILED"
    assert (failed["certificate"]["partial"], failed["certificate"]["run"]) == (True, 1)
    envelope = _s3_json(cloud, failed["certificate"]["url"])
    partial = verify_envelope(envelope, _signer(cloud)).certificate
    assert partial.partial is not None
    assert partial.complete is False
    assert (partial.partial.objects_done, partial.partial.status) == (1, "FAILED")
    assert [f"s3://{o.bucket}/{o.key}" for o in partial.objects] == [done.object_url]
    assert partial.totals.rows_removed == done.rows_removed
    assert partial.partial.cause.startswith("States.TaskFailed: Spark job run ")
    assert "u-1002" not in json.dumps(envelope)
    audit = _s3_json(cloud, failed["certificate"]["audit_url"])
    assert audit["certificate_signature"] == envelope["signature"]
    # and `lethe erasure certificate ID --verify` verifies it, then says it is partial (exit 1)
    with pytest.raises(certificates.IncompleteErasureError, match="PARTIAL certificate"):
        certificates.show_certificate(
            driver.target, request_id, failed, as_json=False, html=None, verify=True,
            options=certificates.VerifyOptions(chain=True),
        )  # fmt: skip

    # When it is resumed (no new approval), the erase run goes through
    killed.armed = False
    status, answer = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/resume", {}, headers={"Idempotency-Key": "r-1"}
    )
    assert status == 202, answer
    assert answer["resumed"]["run"] == 2
    resumed = driver.wait_execution(answer["resumed"]["execution_arn"], timeout=400)

    # Then it completes, with a full certificate naming its Spark runs, after the partial one
    assert resumed["execution"]["status"] == "SUCCEEDED"
    assert states_entered(resumed["history"]) == RESUMED_PATH
    record = driver.record(request_id)
    assert record["status"] == "COMPLETED"
    last = record["history"][-4:]
    assert [h["status"] for h in last] == ["FAILED", "FAILED", "ERASING", "COMPLETED"]
    assert last[0]["detail"] == "States.TaskFailed"
    assert last[1]["detail"].startswith("resume requested: run 2")
    assert last[1]["by"] == record["resume"]["by"]  # the IAM caller who asked
    assert last[1]["by"].startswith("arn:aws:iam::")
    assert last[2]["detail"].startswith(f"resumed (run 2) at the request of {last[1]['by']}")
    full = verify_envelope(_s3_json(cloud, record["certificate"]["url"]), _signer(cloud))
    cert = full.certificate
    assert cert.partial is None
    assert cert.complete is True
    assert cert.statement is not None
    runs = cert.statement.tool.job_runs
    assert [(r.mode, r.engine) for r in runs] == [
        ("erase", "EMR_SERVERLESS"), ("verify", "EMR_SERVERLESS"),
    ]  # fmt: skip
    applications = cloud.client("emr-serverless").list_job_runs(
        applicationId=cloud.outputs["SparkApplicationId"]
    )["jobRuns"]
    assert {r.run_id for r in runs} <= {j["id"] for j in applications}
    assert cert.statement.tool.git_revision == "unknown"  # the local cloud runs unstamped code
    assert cert.chain is not None
    assert partial.chain is not None
    assert cert.chain.sequence > partial.chain.sequence
    walk = walk_chain(_reports_get(cloud), _signer(cloud))
    assert walk.problems == []
    assert [p["run"] for p in record["partial_certificates"]] == [1]
    # a second resume of the completed request is refused
    status, answer = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/resume", {}, headers={"Idempotency-Key": "r-2"}
    )
    assert status == 409
    assert "not FAILED" in answer["message"]


def test_a_resume_after_the_approval_expired_is_refused(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given a request that failed after an approval older than ApprovalValidityHours (168)
    request_id = driver.stored_request("u-1001")
    table = driver.target.resource("dynamodb").Table(cloud.outputs["ErasureRequestsTableName"])
    decided = datetime.now(UTC) - timedelta(hours=169)
    DynamoErasureRequests(table).transition(
        request_id, ErasureStatus.FAILED, by="test",
        allowed_from=frozenset({ErasureStatus.RECEIVED}),
        updates={
            "report": {"manifest_sha256": "a" * 64, "manifest_url": "s3://x/manifest.json"},
            "approval": {
                "approvers": ["dpo@example.com"], "decision": "approve",
                "decided_by": "dpo@example.com", "decided_at": decided.isoformat(),
            },
            "error": {"error": "States.TaskFailed", "cause": "killed"},
        },
    )  # fmt: skip

    status, answer = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/resume", {}, headers={"Idempotency-Key": "r-3"}
    )

    assert status == 409
    assert "expired" in answer["message"]
    assert "file a new request" in answer["message"]
    time.sleep(0.1)
    assert driver.record(request_id)["status"] == "FAILED"
    assert "resume" not in driver.record(request_id)


PREFLIGHT_FAILED_TAIL = [
    "Mark Erasing", "Select Spark Engine", "Check Spark Artifacts", "Spark Artifacts Found",
    "Mark Failed", "Was Erasing", "Record Failure", "Publish Outcome", "Announce Outcome",
    "Which Outcome", "Erasure Failed",
]  # fmt: skip


@pytest.mark.timeout(900)  # the resumed run's two Spark runs
def test_an_erasure_without_its_spark_artifacts_fails_before_spark_then_resumes(
    cloud: Cloud, driver: ErasureDriver
) -> None:
    # Given an approved request on a stack whose erase script was never uploaded
    request_id = driver.file("u-1001")
    driver.wait(request_id, "AWAITING_APPROVAL")
    with artifacts_missing(cloud, "erase.py") as cause:
        assert driver.decide(driver.link(request_id), "approve") == "approved"
        ended = driver.execution(request_id, timeout=300)

    # Then it fails at the pre-flight, before any Spark run, and says what is missing
    assert ended["execution"]["status"] == "FAILED"
    assert ended["execution"]["error"] == "ErasureFailed"
    assert states_entered(ended["history"])[-11:] == PREFLIGHT_FAILED_TAIL
    assert spark_tasks(ended["history"]) == []  # no Spark run was started
    failed = driver.record(request_id)
    assert failed["status"] == "FAILED"
    assert failed["error"] == {"error": "SparkArtifactsMissing", "cause": cause}
    assert b"u-1001" in driver.raw_bytes()  # nothing erased
    # failing closed: a signed partial certificate of nothing done, every object not done
    assert (failed["certificate"]["partial"], failed["certificate"]["run"]) == (True, 1)
    envelope = _s3_json(cloud, failed["certificate"]["url"])
    partial = verify_envelope(envelope, _signer(cloud)).certificate
    assert partial.complete is False
    assert partial.partial is not None
    assert (partial.partial.objects_done, partial.partial.status) == (0, "FAILED")
    assert partial.objects == ()
    assert partial.partial.cause.startswith("SparkArtifactsMissing")
    assert "u-1001" not in json.dumps(envelope)

    # A resume while the artifacts are still missing fails at the pre-flight again (run 2)
    with artifacts_missing(cloud, "erase.py"):
        status, answer = driver.target.call_api(
            "POST",
            f"/erasure-requests/{request_id}/resume",
            {},
            headers={"Idempotency-Key": "r-4a"},
        )
        assert status == 202, answer
        run_2 = answer["resumed"]["execution_arn"]
        assert driver.wait_execution(run_2, timeout=300)["execution"]["status"] == "FAILED"
    assert driver.record(request_id)["status"] == "FAILED"

    # When the artifacts are back (lethe deploy) and the request is resumed, it completes; the
    # API first looks whether run 2 still runs, as its own role (WatchResumedRuns)
    offset = iam_log.end_offset(cloud.state["logs_dir"])
    status, answer = driver.target.call_api(
        "POST", f"/erasure-requests/{request_id}/resume", {}, headers={"Idempotency-Key": "r-4"}
    )
    decisions, _ = iam_log.read_decisions(cloud.state["logs_dir"], offset)
    assert [
        d["allowed"]
        for d in decisions
        if "-ErasureApiFunctionRole-" in d["role"]
        and (d["action"], d["resource"]) == ("states:DescribeExecution", run_2)
    ] == [True]
    assert status == 202, answer
    resumed = driver.wait_execution(answer["resumed"]["execution_arn"], timeout=400)
    assert resumed["execution"]["status"] == "SUCCEEDED"
    assert states_entered(resumed["history"]) == RESUMED_PATH
    assert len(spark_tasks(resumed["history"])) == 2  # erase, verify
    assert driver.record(request_id)["status"] == "COMPLETED"
    s3 = cloud.client("s3")
    # the object is rewritten without u-1001's rows, or deleted when none was left
    with contextlib.suppress(s3.exceptions.NoSuchKey):
        assert b"u-1001" not in driver.raw_bytes()
