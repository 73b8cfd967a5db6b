"""statemachines/ingestion.asl.json with SparkEngine=EMR_SERVERLESS: a batch ingested in one job
run; a version that fails alone (notified, the others ingested); a job that fails (retried, the
batch FAILED, notified); versions gone before ingestion; an input that is not a batch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from lethe_shared.subject_hashing.keys import hash_of_id, load_hash_key
from tests.sfn.conftest import (
    ITERATION_STATES,
    SAMPLES,
    Cloud,
    artifacts_missing,
    check_ingests_a_batch_and_announces_each_version,
    entered_states,
    execution_input,
    register_reviews,
    spark_tasks,
    start_cloud,
    wait_catalogued,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="EMR_SERVERLESS") as started:
        yield started


def test_ingests_a_batch_and_announces_each_version(cloud: Cloud) -> None:
    check_ingests_a_batch_and_announces_each_version(cloud)


def test_a_dataset_declaring_partition_bits_is_indexed_in_that_many_partitions(
    cloud: Cloud,
) -> None:
    # Given a dataset whose document declares 2 ** 3 index partitions (docs/DATASETS.md)
    document = json.loads((SAMPLES / "reviews.dataset.json").read_text())
    document.update(dataset_id="wide", index_partition_bits=3)
    cloud.client("dynamodb").put_item(
        TableName=cloud.outputs["DatasetsTableName"],
        Item={"dataset_id": {"S": "wide"}, "document": {"S": json.dumps(document)}},
    )
    key = "wide/2026/11/21/batch-001.csv"
    version = cloud.upload_unannounced(key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())

    # When the ingestion machine runs the real ingest job on it (the dataset's first write)
    result = cloud.run("wide", execution_input(cloud, "wide", [("wide", key, version)]))

    # Then the manifest recorded the declared bits, and each subject is found through them
    assert result["execution"]["status"] == "SUCCEEDED"
    item = cloud.client("dynamodb").get_item(
        TableName=cloud.outputs["IndexManifestTableName"],
        Key={"pk": {"S": "cfg#wide"}, "sk": {"S": "partitions"}},
        ConsistentRead=True,
    )["Item"]
    assert int(item["bits"]["N"]) == 3
    secret = cloud.client("secretsmanager")
    key_bytes = load_hash_key(secret, cloud.outputs["SubjectHashKeySecretArn"])
    index = cloud.subject_index()
    found = {  # the module's other tests ingest the same sample into `reviews`: wide's only
        user: sorted(
            (str(e.zone), e.rows)
            for e in index.lookup(hash_of_id(key_bytes, user))
            if e.dataset_id == "wide"
        )
        for user in ("u-1001", "u-1002")
    }
    # u-1001: two rows of the raw object, one in each of two lake partitions (review_date)
    assert found == {
        "u-1001": [("lake", 1), ("lake", 1), ("raw", 2)],
        "u-1002": [("lake", 1), ("raw", 1)],
    }


def test_a_failed_version_is_notified_and_fails_the_execution_but_not_its_neighbours(
    cloud: Cloud,
) -> None:
    raw = cloud.outputs["RawBucketName"]
    notified = cloud.capture("object-failures", topic=cloud.outputs["NotificationsTopicArn"])
    register_reviews(cloud)
    good_key, ghost_key = "reviews/neighbour/good.csv", "ghost/2026/file.csv"
    good = cloud.upload_unannounced(good_key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())
    ghost = cloud.upload(ghost_key, b"a,b\n1,2\n")
    wait_catalogued(cloud, ghost_key, ghost)

    # "ghost" is no registered dataset: the job records that version FAILED, and only it
    batch = [("ghost", ghost_key, ghost), ("reviews", good_key, good)]
    result = cloud.run("one-fails", execution_input(cloud, "one-fails", batch))

    assert result["execution"]["status"] == "FAILED"
    assert result["execution"]["error"] == "ObjectsFailed"
    entered = entered_states(result["history"])
    assert entered.count("Notify Object Failed") == 1
    assert entered.count("Announce Ingestion") == 1
    assert [s for s in entered if s not in ITERATION_STATES][-3:] == [
        "Read Outcomes",
        "Any Object Failed",
        "Some Objects Failed",
    ]
    item = cloud.catalog_item(raw, ghost_key, ghost)
    assert (item["status"], item["ingest_error"]) == (
        "FAILED",
        "dataset 'ghost' is not registered",
    )
    assert cloud.catalog_item(raw, good_key, good)["status"] == "INGESTED"
    (message,) = cloud.messages(notified, timeout=15)
    assert message["event"] == "IngestionFailed"
    assert message["object_url"] == f"s3://{raw}/{ghost_key}"
    assert (message["error"], message["cause"]) == (
        "ObjectFailed",
        "dataset 'ghost' is not registered",
    )


def test_a_job_that_fails_is_retried_then_the_batch_is_failed_and_notified(
    cloud: Cloud,
) -> None:
    raw = cloud.outputs["RawBucketName"]
    notified = cloud.capture("batch-failures", topic=cloud.outputs["NotificationsTopicArn"])
    key = "unregistered/2026/whole-job.csv"
    version = cloud.upload(key, b"a,b\n1,2\n")
    wait_catalogued(cloud, key, version)
    document = execution_input(cloud, "job-fails", [("reviews", key, version)])
    document["manifest"] = document["manifest"].replace("job-fails", "no-such-manifest")

    # The manifest is not there: the job exits non-zero on every attempt
    result = cloud.run("job-fails", document)

    assert result["execution"]["status"] == "FAILED"
    assert result["execution"]["error"] == "IngestionFailed"
    entered = entered_states(result["history"])
    assert [s for s in entered if s not in ITERATION_STATES][-3:] == [
        "Mark Batch Failed",
        "Notify Batch Failed",
        "Ingestion Failed",
    ]
    failed_tasks = [e for e in result["history"] if e["type"] == "TaskFailed"]
    assert len(failed_tasks) == 2  # the first attempt and one retry
    item = cloud.catalog_item(raw, key, version)
    assert item["status"] == "FAILED"
    assert item["ingest_error"].startswith("States.TaskFailed: ")
    assert "no-such-manifest" in item["ingest_error"]
    (message,) = cloud.messages(notified, timeout=15)
    assert message["event"] == "IngestionFailed"
    assert message["objects"] == [f"s3://{raw}/{key}"]
    assert message["error"] == "States.TaskFailed"


def test_missing_spark_artifacts_fail_the_batch_before_spark_naming_each_one(
    cloud: Cloud,
) -> None:
    raw = cloud.outputs["RawBucketName"]
    notified = cloud.capture("artifacts-missing", topic=cloud.outputs["NotificationsTopicArn"])
    key = "reviews/artifacts/missing.csv"
    version = cloud.upload_unannounced(key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())

    # as on a stack deployed without its artifacts: the entry script and the EMR environment
    with artifacts_missing(cloud, "ingest.py", "pyspark_env.tar.gz") as cause:
        name = "artifacts-missing"
        result = cloud.run(name, execution_input(cloud, name, [("reviews", key, version)]))

    assert result["execution"]["status"] == "FAILED"
    assert result["execution"]["error"] == "IngestionFailed"
    assert entered_states(result["history"])[-6:] == [
        "Select Spark Engine",
        "Check Spark Artifacts",
        "Spark Artifacts Found",
        "Mark Batch Failed",
        "Notify Batch Failed",
        "Ingestion Failed",
    ]
    assert spark_tasks(result["history"]) == []  # no Spark run was started
    item = cloud.catalog_item(raw, key, version)
    assert (item["status"], item["ingest_error"]) == ("FAILED", f"SparkArtifactsMissing: {cause}")
    (message,) = cloud.messages(notified, timeout=15)
    assert message["event"] == "IngestionFailed"
    assert (message["error"], message["cause"]) == ("SparkArtifactsMissing", cause)
    assert message["objects"] == [f"s3://{raw}/{key}"]


def test_versions_that_are_gone_are_not_ingested(cloud: Cloud) -> None:
    name = f"gone-{cloud.state['parameters']['SparkEngine']}"
    batch = [("reviews", "reviews/never-uploaded.csv", "no-such-version")]
    result = cloud.run(name, execution_input(cloud, name, batch), timeout=30)

    assert result["execution"]["status"] == "SUCCEEDED"
    assert entered_states(result["history"]) == [
        "Read Input",
        "Is Input Valid",
        "Mark Ingesting",  # the catalog step: the version is not catalogued, nothing marked
        "Anything To Ingest",
        "Nothing To Ingest",
    ]
    with pytest.raises(KeyError):  # and no item was made up for it
        cloud.catalog_item(cloud.outputs["RawBucketName"], batch[0][1], batch[0][2])


def test_a_version_purged_before_the_job_read_it_ends_deleted_without_a_notification(
    cloud: Cloud,
) -> None:
    raw = cloud.outputs["RawBucketName"]
    notified = cloud.capture("purged-failures", topic=cloud.outputs["NotificationsTopicArn"])
    register_reviews(cloud)
    good_key, purged_key = "reviews/purged/good.csv", "reviews/purged/purged.csv"
    body = (SAMPLES / "reviews-2026-11-21.csv").read_bytes()
    good = cloud.upload_unannounced(good_key, body)
    purged = cloud.upload_unannounced(purged_key, body)
    # an erasure purges the version it rewrote; the catalog has not read that delete yet
    cloud.client("s3").delete_object(Bucket=raw, Key=purged_key, VersionId=purged)
    deadline = time.monotonic() + 15
    while cloud.catalog_item(raw, purged_key, purged)["status"] != "DELETED":
        assert time.monotonic() < deadline, "the delete was not catalogued"
        time.sleep(0.25)
    cloud.client("dynamodb").update_item(
        TableName=cloud.outputs["ObjectCatalogTableName"],
        Key={"object_url": {"S": f"s3://{raw}/{purged_key}"}, "version_id": {"S": purged}},
        UpdateExpression="SET #s = :received",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":received": {"S": "RECEIVED"}},
    )

    batch = [("reviews", good_key, good), ("reviews", purged_key, purged)]
    result = cloud.run("purged", execution_input(cloud, "purged", batch))

    assert result["execution"]["status"] == "SUCCEEDED"
    entered = entered_states(result["history"])
    assert entered.count("Announce Ingestion") == 1
    assert entered.count("Not Ingested") == 1
    assert "Notify Object Failed" not in entered
    assert cloud.catalog_item(raw, purged_key, purged)["status"] == "DELETED"
    assert cloud.catalog_item(raw, good_key, good)["status"] == "INGESTED"
    assert cloud.messages(notified, timeout=3) == []


@pytest.mark.parametrize(
    "document",
    [
        {"dataset_id": "reviews", "key": "reviews/a.csv"},  # the old per-object input
        {"manifest": "s3://reports/m.json", "objects": []},
        {"manifest": "/tmp/m.json", "objects": [{"object_url": "s3://raw/a", "version_id": "v"}]},
    ],
)
def test_an_input_that_is_not_a_batch_fails_at_once(
    cloud: Cloud, document: dict[str, object]
) -> None:
    result = cloud.run(f"invalid-{abs(hash(str(document)))}", document, timeout=30)

    assert result["execution"]["status"] == "FAILED"
    assert result["execution"]["error"] == "InvalidInput"
    assert entered_states(result["history"]) == ["Read Input", "Is Input Valid", "Invalid Input"]
