"""statemachines/ingestion.asl.json with SparkEngine=EMR_SERVERLESS: a file ingested, a Spark
failure (retry, FAILED, notification), and a version that is gone before ingestion starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sfn.conftest import (
    Cloud,
    check_ingests_reviews_and_announces_it,
    entered_states,
    execution_input,
    start_cloud,
    wait_catalogued,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


def test_ingests_a_csv_and_announces_it(cloud: Cloud) -> None:
    check_ingests_reviews_and_announces_it(cloud)


def test_spark_failure_is_retried_then_failed_and_notified(cloud: Cloud) -> None:
    raw = cloud.outputs["RawBucketName"]
    notified = cloud.capture("failures", topic=cloud.outputs["NotificationsTopicArn"])
    key = "unregistered/2026/file.csv"
    version = cloud.upload(key, b"a,b\n1,2\n")
    wait_catalogued(cloud, key, version)

    # "ghost" is no registered dataset: the ingest job exits non-zero on every attempt.
    result = cloud.run("fails", execution_input(cloud, "ghost", key, version))

    assert result["execution"]["status"] == "FAILED"
    assert result["execution"]["error"] == "IngestionFailed"
    entered = entered_states(result["history"])
    assert entered[-3:] == ["Mark Failed", "Notify Failure", "Ingestion Failed"]
    failed_tasks = [e for e in result["history"] if e["type"] == "TaskFailed"]
    assert len(failed_tasks) == 2  # the first attempt and one retry
    item = cloud.catalog_item(raw, key, version)
    assert item["status"] == "FAILED"
    assert item["ingest_error"].startswith("States.TaskFailed: ")
    assert "ghost" in item["ingest_error"]
    (message,) = cloud.messages(notified, timeout=15)
    assert message["event"] == "IngestionFailed"
    assert message["object_url"] == f"s3://{raw}/{key}"
    assert message["error"] == "States.TaskFailed"


def test_a_version_that_is_gone_is_not_ingested(cloud: Cloud) -> None:
    result = cloud.run(
        f"gone-{cloud.state['parameters']['SparkEngine']}",
        execution_input(cloud, "reviews", "reviews/never-uploaded.csv", "no-such-version"),
        timeout=30,
    )

    assert result["execution"]["status"] == "SUCCEEDED"
    assert entered_states(result["history"]) == ["Mark Ingesting", "Object Gone"]
