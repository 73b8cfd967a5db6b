"""The index backfill on the Glue branch (SparkEngine=GLUE). The workflow's other paths
(objects mode, retries, notification, reconcile) are engine-independent after the Spark task and
are tested with EMR Serverless in test_index_workflows.py, whose legacy-lake fixtures this module
reuses with a Glue cloud (a process holds one local cloud at a time).

The cloud indexes lake objects that arrive by other means than ingestion in Lambda up to
LAMBDA_MAX_BYTES (the deployed default is 64 MiB), so that one small and one larger object
take the two routes of the object events function: the index object function (its whole role,
and the events function's `IndexSmallObjects`) and the backfill in objects mode on Glue (the
events function's `StartIndexingOfLargeObjects`), each call checked by the local IAM check."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lethe.localcloud import iam_log
from tests.sfn.conftest import Cloud, entered_states, start_cloud
from tests.sfn.test_index_workflows import (  # noqa: F401 - module fixtures bound to this cloud
    DATASET,
    EXPECTED,
    Workflows,
    _parquet,
    _reconcile,
    backfilled,
    flows,
)

LAMBDA_MAX_BYTES = 2048
SMALL_ROWS: list[tuple[str | None, int]] = [("u-6", 1), ("u-6", 2), ("u-7", 3)]
LARGE_ROWS: list[tuple[str | None, int]] = [(f"u-{i:04d}", i) for i in range(400)]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(
        tmp_path_factory,
        SparkEngine="GLUE",
        LambdaIndexMaxBytes=str(LAMBDA_MAX_BYTES),
    ) as started:  # the deployed default store, segments: the index object function's role
        assert started.outputs["IndexStore"] == "segments"
        yield started


def test_backfill_runs_the_index_job_on_glue(
    flows: Workflows,  # noqa: F811 - the imported fixture
    backfilled: dict[str, Any],  # noqa: F811 - the imported fixture
) -> None:
    execution = backfilled["execution"]

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"])["batches"] == 4
    runs = flows.cloud.client("glue").get_job_runs(JobName="lethe-local-index")["JobRuns"]
    assert len(runs) == 4
    assert {r["JobRunState"] for r in runs} == {"SUCCEEDED"}
    assert flows.entries() == flows.hashed(EXPECTED)


def _indexed(workflows: Workflows, key: str, subject: str, timeout: float) -> int:
    """The rows the index gives `subject` in the lake object, once it has an entry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = workflows.rows_of("lake", key, subject)
        if rows is not None:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"no index entry of {subject} in {key} after {timeout} s")


def _roles(decisions: list[dict[str, Any]]) -> set[str]:
    return {d["role"].split("-")[2] for d in decisions if d.get("role")}


def test_a_small_lake_object_from_elsewhere_is_indexed_by_the_index_object_function(
    flows: Workflows,  # noqa: F811 - the imported fixture
    backfilled: dict[str, Any],  # noqa: F811 - the imported fixture: the dataset is indexed
) -> None:
    logs_dir = flows.cloud.state["logs_dir"]
    offset = iam_log.end_offset(logs_dir)
    backfills_before = _backfills(flows)
    key = f"{DATASET}/day=2026-02-01/part-0.parquet"
    body = _parquet(SMALL_ROWS)
    assert len(body) <= LAMBDA_MAX_BYTES
    flows.cloud.client("s3").put_object(Bucket=flows.lake, Key=key, Body=body)

    rows = _indexed(flows, key, "u-6", timeout=60)

    assert rows == 2
    assert _indexed(flows, key, "u-7", timeout=5) == 1
    assert _backfills(flows) == backfills_before  # not through Spark
    decisions, _ = iam_log.read_decisions(logs_dir, offset)
    assert iam_log.distinct_denials(decisions) == []
    assert {"ObjectEventsFunctionRole", "IndexObjectFunctionRole"} <= _roles(decisions)
    invoked = [d for d in decisions if d["action"] == "lambda:InvokeFunction"]
    assert any(d["resource"].endswith(":function:lethe-local-index-object") for d in invoked)


def _backfills(workflows: Workflows) -> list[str]:
    return sorted(
        e["name"]
        for e in workflows.sfn.list_executions(
            stateMachineArn=workflows.outputs["IndexBackfillStateMachineArn"]
        )["executions"]
    )


def test_a_larger_lake_object_from_elsewhere_is_indexed_by_the_backfill_on_glue(
    flows: Workflows,  # noqa: F811 - the imported fixture
    backfilled: dict[str, Any],  # noqa: F811 - the imported fixture: the dataset is indexed
) -> None:
    logs_dir = flows.cloud.state["logs_dir"]
    offset = iam_log.end_offset(logs_dir)
    backfills_before = _backfills(flows)
    key = f"{DATASET}/day=2026-02-02/part-0.parquet"
    body = _parquet(LARGE_ROWS)
    assert len(body) > LAMBDA_MAX_BYTES
    flows.cloud.client("s3").put_object(Bucket=flows.lake, Key=key, Body=body)

    rows = _indexed(flows, key, "u-0399", timeout=240)

    assert rows == 1
    (started,) = sorted(set(_backfills(flows)) - set(backfills_before))
    arn = flows.outputs["IndexBackfillStateMachineArn"].replace(":stateMachine:", ":execution:")
    ended = flows.sfn.describe_execution(executionArn=f"{arn}:{started}")
    deadline = time.monotonic() + 60
    while ended["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
        ended = flows.sfn.describe_execution(executionArn=f"{arn}:{started}")
    assert ended["status"] == "SUCCEEDED", ended.get("cause")
    assert json.loads(ended["input"])["objects"] == [{"bucket": flows.lake, "key": key}]
    decisions, _ = iam_log.read_decisions(logs_dir, offset)
    assert iam_log.distinct_denials(decisions) == []
    started_by_events = [
        d
        for d in decisions
        if d["action"] == "states:StartExecution" and "ObjectEventsFunctionRole" in d["role"]
    ]
    backfill = ":stateMachine:lethe-local-index-backfill"
    assert any(backfill in d["resource"] for d in started_by_events)


def test_reconcile_runs_the_reconcile_job_on_glue(
    flows: Workflows,  # noqa: F811 - the imported fixture
    backfilled: dict[str, Any],  # noqa: F811 - the imported fixture: the dataset is indexed
) -> None:
    """The reconcile workflow's Glue branch (its role's RunSparkOnGlue; the Spark role's
    WriteReconcileReports): everything indexed above, the small and the larger object
    included, is found as expected."""
    runs_before = len(
        flows.cloud.client("glue").get_job_runs(JobName="lethe-local-reconcile")["JobRuns"]
    )

    report = _reconcile(flows, "reconcile-on-glue")

    assert [report[k]["count"] for k in ("missing", "stale", "wrong_rows")] == [0, 0, 0]
    assert report["entries_found"] == report["entries_expected"] > 0
    runs = flows.cloud.client("glue").get_job_runs(JobName="lethe-local-reconcile")["JobRuns"]
    assert len(runs) == runs_before + 1
    assert {r["JobRunState"] for r in runs} == {"SUCCEEDED"}


def test_an_invalid_reconcile_is_refused_and_notified(flows: Workflows) -> None:  # noqa: F811
    """The reconcile workflow's failure notice (its role's Notify), as the backfill's is
    checked in test_index_workflows.py."""
    notified = flows.cloud.capture(
        "index-reconcile-refusals", topic=flows.outputs["NotificationsTopicArn"]
    )

    result = flows.execute(
        "IndexReconcileStateMachineArn", "reconcile-invalid", {"dataset_id": "Not/A/Dataset"}
    )

    assert result["execution"]["status"] == "FAILED"
    assert entered_states(result["history"]) == [
        "Normalise Input",
        "Is Input Valid",
        "Notify Failure",
        "Reconcile Failed",
    ]
    (message,) = flows.cloud.messages(notified, timeout=15)
    assert message["error"] == "InvalidInput"
    assert "dataset_id" in message["cause"]
