"""State machine tier: the deployed ASL files, created by an in-process local cloud from
template.yaml with their DefinitionSubstitutions, executed by moto's interpreter with the hooks
(the Spark tasks run the real spark_jobs scripts).

Only one local cloud can live in a process at a time (its moto hooks are process-wide), so each
test module that needs one starts its own module-scoped cloud with `start_cloud`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lethe.localcloud.cloud import LocalCloud
from lethe.localcloud.deployment import Endpoints
from tests.conftest import REPO_ROOT

SAMPLES = REPO_ROOT / "samples"
REVIEWS_KEY = "reviews/2026/11/21/batch-001.csv"


class Cloud:
    def __init__(self, cloud: LocalCloud) -> None:
        self.cloud = cloud
        self.state = cloud.state
        self.outputs: dict[str, str] = cloud.state["outputs"]

    def client(self, service: str) -> Any:
        return Endpoints(
            self.state["endpoint_url"], self.state["region"], self.state["account_id"]
        ).client(service)

    def catalog_item(self, bucket: str, key: str, version: str) -> dict[str, Any]:
        item = self.client("dynamodb").get_item(
            TableName=self.outputs["ObjectCatalogTableName"],
            Key={"object_url": {"S": f"s3://{bucket}/{key}"}, "version_id": {"S": version}},
            ConsistentRead=True,
        )["Item"]
        return {k: next(iter(v.values())) for k, v in item.items()}

    def capture(self, name: str, *, topic: str | None = None, pattern: str | None = None) -> str:
        """An SQS queue receiving the topic's messages or the EventBridge events of a pattern."""
        sqs = self.client("sqs")
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        if topic:
            self.client("sns").subscribe(
                TopicArn=topic,
                Protocol="sqs",
                Endpoint=arn,
                Attributes={"RawMessageDelivery": "true"},
            )
        if pattern:
            events = self.client("events")
            events.put_rule(Name=name, EventPattern=pattern)
            events.put_targets(Rule=name, Targets=[{"Id": "capture", "Arn": arn}])
        return url

    def messages(self, url: str, *, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = (
                self.client("sqs")
                .receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
                .get("Messages", [])
            )
            if got:
                return [json.loads(m["Body"]) for m in got]
        return []

    def run(self, name: str, document: dict[str, Any], *, timeout: float = 240) -> dict[str, Any]:
        sfn = self.client("stepfunctions")
        arn = sfn.start_execution(
            stateMachineArn=self.outputs["IngestionStateMachineArn"],
            name=name,
            input=json.dumps(document),
        )["executionArn"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                history = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
                return {"execution": described, "history": history}
            time.sleep(0.5)
        raise AssertionError(f"execution {name} still running after {timeout} s")

    def upload(self, key: str, body: bytes) -> str:
        """Upload outside any registered dataset prefix would be IGNORED; callers pick keys."""
        put = self.client("s3").put_object(Bucket=self.outputs["RawBucketName"], Key=key, Body=body)
        return str(put["VersionId"])


def entered_states(history: list[dict[str, Any]]) -> list[str]:
    return [
        e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e
    ]


@contextmanager
def start_cloud(tmp_path_factory: pytest.TempPathFactory, **parameters: str) -> Iterator[Cloud]:
    state_file = tmp_path_factory.mktemp("sfn-cloud") / "local.json"
    local = LocalCloud(repo_root=REPO_ROOT, state_file=state_file, parameters=parameters)
    local.start()
    try:
        yield Cloud(local)
    finally:
        local.stop()


def wait_catalogued(cloud: Cloud, key: str, version: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            return cloud.catalog_item(cloud.outputs["RawBucketName"], key, version)
        except KeyError:
            time.sleep(0.25)
    raise AssertionError(f"{key} was not catalogued")


def execution_input(cloud: Cloud, dataset: str, key: str, version: str) -> dict[str, Any]:
    raw = cloud.outputs["RawBucketName"]
    return {
        "dataset_id": dataset,
        "bucket": raw,
        "key": key,
        "version_id": version,
        "object_url": f"s3://{raw}/{key}",
    }


def check_ingests_reviews_and_announces_it(cloud: Cloud) -> None:
    """Registered dataset, uploaded file: the object events handler starts this execution by
    itself; here we start the same machine directly to observe one execution end to end."""
    raw = cloud.outputs["RawBucketName"]
    lake = cloud.outputs["LakeBucketName"]
    announced = cloud.capture(
        "ingested-events", pattern=json.dumps({"source": ["lethe.ingestion"]})
    )
    cloud.client("dynamodb").put_item(
        TableName=cloud.outputs["DatasetsTableName"],
        Item={
            "dataset_id": {"S": "reviews"},
            "document": {"S": (SAMPLES / "reviews.dataset.json").read_text()},
        },
    )
    # The upload happens under a prefix no dataset owns, so that only our execution ingests it.
    key = "manual/" + REVIEWS_KEY
    version = cloud.upload(key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())
    wait_catalogued(cloud, key, version)

    result = cloud.run(
        f"ok-{cloud.state['parameters']['SparkEngine']}",
        execution_input(cloud, "reviews", key, version),
    )

    assert result["execution"]["status"] == "SUCCEEDED"
    engine_state = (
        "Run Ingest Job On Glue"
        if cloud.state["parameters"]["SparkEngine"] == "GLUE"
        else "Run Ingest Job On EMR Serverless"
    )
    assert entered_states(result["history"]) == [
        "Mark Ingesting",
        "Select Spark Engine",
        "Which Spark Engine",
        engine_state,
        "Read Ingestion Result",
        "Announce Ingestion",
        "Ingested",
    ]
    item = cloud.catalog_item(raw, key, version)
    assert (item["status"], item["rows_read"], item["rows_written"], item["rows_quarantined"]) == (
        "INGESTED",
        "3",
        "3",
        "0",
    )
    lake_keys = sorted(
        o["Key"]
        for o in cloud.client("s3").list_objects_v2(Bucket=lake, Prefix="reviews/review_date=")[
            "Contents"
        ]
    )
    assert [k.rsplit("/", 1)[0] for k in lake_keys] == [
        "reviews/review_date=2026-11-20",
        "reviews/review_date=2026-11-21",
    ]
    (event,) = cloud.messages(announced, timeout=15)
    assert event["detail-type"] == "Object Ingested"
    assert event["detail"]["status"] == "INGESTED"
    assert event["detail"]["rows_written"] == "3"
    assert event["detail"]["object_url"] == f"s3://{raw}/{key}"
