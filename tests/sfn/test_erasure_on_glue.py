"""statemachines/erasure.asl.json with SparkEngine=GLUE: an approved request erased and
certified on the Glue path. The states before and after the Spark tasks are shared by both
engines; their other paths are tested with EMR Serverless in test_erasure_workflow.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver, polls_folded, states_entered
from tests.sfn.test_erasure_workflow import APPROVED_PATH


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="GLUE") as started:
        yield started


def test_an_approved_request_is_erased_on_glue(cloud: Cloud) -> None:
    driver = ErasureDriver(cloud)
    driver.ingest_reviews()
    request_id = driver.file("u-1002")
    driver.wait(request_id, "AWAITING_APPROVAL")

    assert driver.decide(driver.link(request_id), "approve") == "approved"

    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    glue_path = [s.replace("On EMR Serverless", "On Glue") for s in APPROVED_PATH]
    assert polls_folded(states_entered(ended["history"])) == glue_path
    runs = cloud.client("glue").get_job_runs(JobName="lethe-local-erase")["JobRuns"]
    assert sorted(r["Arguments"]["--mode"] for r in runs) == ["erase", "verify"]
    assert all(r["JobRunState"] == "SUCCEEDED" for r in runs)
    record = driver.record(request_id)
    assert (record["status"], record["result"]["rows_removed"]) == ("COMPLETED", 2)
    assert b"u-1002" not in driver.raw_bytes()
    # and the certificate names the Glue runs that did the work (their JobRunIds), in order
    bucket, key = record["certificate"]["url"].removeprefix("s3://").split("/", 1)
    envelope = json.loads(cloud.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    tool = envelope["certificate"]["statement"]["tool"]
    by_id = {r["Id"]: r["Arguments"]["--mode"] for r in runs}
    assert [(r["mode"], r["engine"]) for r in tool["job_runs"]] == [
        ("erase", "GLUE"), ("verify", "GLUE"),
    ]  # fmt: skip
    assert {r["run_id"]: r["mode"] for r in tool["job_runs"]} == by_id
    assert tool["engine"] == "GLUE"
