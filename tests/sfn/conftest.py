"""State machine tier: the deployed ASL files, created by an in-process local cloud from
template.yaml with their DefinitionSubstitutions, executed by moto's interpreter with the hooks
(the Spark tasks run the real spark_jobs scripts).

Only one local cloud can live in a process at a time (its moto hooks are process-wide), so each
test module that needs one starts its own module-scoped cloud with `start_cloud`.

Every such cloud's erasure workflow takes the object catalog to have caught up at once
(`IngestionSettleSeconds` 0, where template.yaml puts the batch window + 30 s): the tests wait
until their own uploads are catalogued before they file a request, and with the deployed value
every request would wait a 30 s poll before its report. The watermark's own tests hold reports
with uploads still INGESTING (test_erasure_watermark.py); the deployed value is checked by
tests/unit/test_erasure_settle_substitution.py."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest

from lethe.localcloud import iam_log
from lethe.localcloud.cloud import LocalCloud
from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.provision.stepfunctions import OVERRIDES_ENV
from lethe_shared.index.opening import IndexLocation, open_subject_index
from tests import iam_coverage
from tests.conftest import REPO_ROOT

SAMPLES = REPO_ROOT / "samples"
# The tests' clouds' definition substitutions (module docstring; lethe.localcloud.provision.
# stepfunctions).
TEST_SUBSTITUTIONS = {"IngestionSettleSeconds": 0, "CompactionSettleSeconds": 0}
REVIEWS_KEY = "reviews/2026/11/21/batch-001.csv"


@pytest.fixture(autouse=True)
def every_call_allowed_by_the_template(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every cloud of the tier runs with the IAM check on (lethe.localcloud.iam): as in the e2e
    tier, a call of a function, state machine task or Spark job that the template's policies do
    not allow fails the test during which it was made, naming role, action and resource, even
    when the run the test watches survives the denial. So a statement that alone allowed a call
    of a test is needed by that test (tests/iam_coverage.py). A module that removes statements
    on purpose sets `EXPECTS_IAM_DENIALS = True` and checks its denials itself."""
    if getattr(request.module, "EXPECTS_IAM_DENIALS", False):
        yield
        return
    basetemp = request.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    before = iam_coverage.snapshot(basetemp)
    yield
    denied = iam_log.distinct_denials(iam_coverage.decisions_since(basetemp, before))
    assert not denied, "calls the template's IAM policies do not allow:\n" + "\n".join(denied)


class Cloud:
    def __init__(self, cloud: LocalCloud) -> None:
        self.cloud = cloud
        self.state = cloud.state
        self.outputs: dict[str, str] = cloud.state["outputs"]

    def client(self, service: str) -> Any:
        return Endpoints(
            self.state["endpoint_url"], self.state["region"], self.state["account_id"]
        ).client(service)

    def subject_index(self) -> Any:
        """The deployment's subject index (its `IndexStore`: segments by default), opened as
        every component opens it (lethe_shared.index.opening)."""
        environment = Endpoints(
            self.state["endpoint_url"], self.state["region"], self.state["account_id"]
        ).client_environment()
        dynamodb = boto3.resource(
            "dynamodb",
            endpoint_url=environment["AWS_ENDPOINT_URL"],
            region_name=environment["AWS_REGION"],
            aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=environment["AWS_SESSION_TOKEN"],
        )
        location = IndexLocation(
            store=self.outputs["IndexStore"],
            table=self.outputs["SubjectIndexTableName"],
            bucket=self.outputs["IndexBucketName"],
            manifest_table=self.outputs["IndexManifestTableName"],
        )
        return open_subject_index(location, s3=self.client("s3"), dynamodb=dynamodb)

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

    def run(
        self,
        name: str,
        document: dict[str, Any],
        *,
        timeout: float = 240,
        machine: str = "IngestionStateMachineArn",  # the output naming the state machine
    ) -> dict[str, Any]:
        sfn = self.client("stepfunctions")
        arn = sfn.start_execution(
            stateMachineArn=self.outputs[machine],
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

    def upload_unannounced(self, key: str, body: bytes) -> str:
        """Upload under a dataset's prefix (`<dataset_id>/...`, where the ingest job wants a
        dataset's raw objects) without the object events path ingesting it: the dataset's
        registry item is taken away until the upload is catalogued (IGNORED, as under no
        registered prefix), then put back as it was. For tests that run the ingestion machine
        themselves."""
        datasets = self.client("dynamodb")
        table = self.outputs["DatasetsTableName"]
        dataset_key = {"dataset_id": {"S": key.split("/", 1)[0]}}
        item = datasets.get_item(TableName=table, Key=dataset_key, ConsistentRead=True).get("Item")
        if item:
            datasets.delete_item(TableName=table, Key=dataset_key)
        try:
            version = self.upload(key, body)
            assert wait_catalogued(self, key, version)["status"] == "IGNORED"
        finally:
            if item:
                datasets.put_item(TableName=table, Item=item)
        return version


def entered_states(history: list[dict[str, Any]]) -> list[str]:
    return [
        e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e
    ]


@contextmanager
def start_cloud(tmp_path_factory: pytest.TempPathFactory, **parameters: str) -> Iterator[Cloud]:
    state_file = tmp_path_factory.mktemp("sfn-cloud") / "local.json"
    local = LocalCloud(repo_root=REPO_ROOT, state_file=state_file, parameters=parameters)
    before = os.environ.get(OVERRIDES_ENV)
    os.environ[OVERRIDES_ENV] = json.dumps(TEST_SUBSTITUTIONS)
    try:
        local.start()  # provisions the state machines, with the overrides
    finally:
        if before is None:
            del os.environ[OVERRIDES_ENV]
        else:
            os.environ[OVERRIDES_ENV] = before
    try:
        yield Cloud(local)
    finally:
        local.stop()


def spark_tasks(history: list[dict[str, Any]]) -> list[str]:
    """The Spark integrations (Glue, EMR Serverless) an execution scheduled."""
    return [
        e["taskScheduledEventDetails"]["resource"]
        for e in history
        if e.get("taskScheduledEventDetails", {}).get("resourceType") in {"glue", "emr-serverless"}
    ]


@contextmanager
def artifacts_missing(cloud: Cloud, *names: str) -> Iterator[str]:
    """Take `names` (files under spark_jobs/ in the artifacts bucket) away, as before a first
    `lethe deploy` uploaded them; yields the cause the pre-flight gives (the file names and
    the bucket, no s3:// URL: the erasure record scrubs object keys out of URLs) and puts them
    back afterwards."""
    s3, bucket = cloud.client("s3"), cloud.outputs["ArtifactsBucketName"]
    keys = [f"spark_jobs/{name}" for name in names]
    bodies = {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}
    for key in keys:
        s3.delete_object(Bucket=bucket, Key=key)  # a delete marker: the key is gone
    try:
        yield (
            f"Spark artifacts missing: {', '.join(names)} (bucket {bucket}, prefix "
            "spark_jobs/); run lethe deploy (docs/DEPLOY.md)"
        )
    finally:
        for key, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)


def wait_catalogued(cloud: Cloud, key: str, version: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            return cloud.catalog_item(cloud.outputs["RawBucketName"], key, version)
        except KeyError:
            time.sleep(0.25)
    raise AssertionError(f"{key} was not catalogued")


def execution_input(cloud: Cloud, name: str, objects: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The ingestion state machine's input for a batch of (dataset id, key, version id), its
    manifest written to the reports bucket as the object events handler writes it."""
    raw, reports = cloud.outputs["RawBucketName"], cloud.outputs["ReportsBucketName"]
    manifest_key = f"manifests/ingest/{name}.json"
    manifest = [{"dataset_id": d, "key": k, "version_id": v} for d, k, v in objects]
    cloud.client("s3").put_object(Bucket=reports, Key=manifest_key, Body=json.dumps(manifest))
    return {
        "manifest": f"s3://{reports}/{manifest_key}",
        "objects": [
            {
                "dataset_id": d,
                "bucket": raw,
                "key": k,
                "version_id": v,
                "object_url": f"s3://{raw}/{k}",
            }
            for d, k, v in objects
        ],
    }


def register_reviews(cloud: Cloud) -> None:
    cloud.client("dynamodb").put_item(
        TableName=cloud.outputs["DatasetsTableName"],
        Item={
            "dataset_id": {"S": "reviews"},
            "document": {"S": (SAMPLES / "reviews.dataset.json").read_text()},
        },
    )


def check_ingests_a_batch_and_announces_each_version(cloud: Cloud) -> None:
    """Registered dataset, two uploaded files: the object events handler starts this execution
    by itself; here we start the same machine directly to observe one execution end to end."""
    raw = cloud.outputs["RawBucketName"]
    lake = cloud.outputs["LakeBucketName"]
    engine = cloud.state["parameters"]["SparkEngine"]
    announced = cloud.capture(
        f"ingested-events-{engine}", pattern=json.dumps({"source": ["lethe.ingestion"]})
    )
    register_reviews(cloud)
    # The uploads are not announced to the object events path: only our execution ingests them.
    key = f"reviews/{engine.lower()}/2026/11/21/batch-001.csv"
    version = cloud.upload_unannounced(key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())
    dirty_key = f"reviews/{engine.lower()}/dirty.csv"
    dirty = cloud.upload_unannounced(dirty_key, (SAMPLES / "reviews-dirty.csv").read_bytes())

    name = f"ok-{engine}"
    batch = [("reviews", key, version), ("reviews", dirty_key, dirty)]
    result = cloud.run(name, execution_input(cloud, name, batch))

    assert result["execution"]["status"] == "SUCCEEDED"
    engine_state = (
        "Run Ingest Job On Glue" if engine == "GLUE" else "Run Ingest Job On EMR Serverless"
    )
    entered = entered_states(result["history"])
    assert [s for s in entered if s not in ITERATION_STATES] == [
        "Read Input",
        "Is Input Valid",
        "Mark Ingesting",
        "Anything To Ingest",
        "Select Spark Engine",
        "Check Spark Artifacts",  # the pre-flight: the job's artifacts are in S3
        "Spark Artifacts Found",
        "Which Spark Engine",
        engine_state,
        "Read Outcomes",
        "Any Object Failed",
        "Ingested",
    ]
    # Mark Ingesting (the catalog step, one call for the batch) took both versions
    execution = result["execution"]["executionArn"]
    assert cloud.catalog_item(raw, key, version)["ingest_execution"] == execution
    assert cloud.catalog_item(raw, dirty_key, dirty)["ingest_execution"] == execution
    assert entered.count("Announce Ingestion") == 2
    spark_runs = [e for e in result["history"] if e["type"] == "TaskSubmitted"]
    assert len(spark_runs) == 1  # one Spark job run for the batch
    item = cloud.catalog_item(raw, key, version)
    assert (item["status"], item["rows_read"], item["rows_written"], item["rows_quarantined"]) == (
        "INGESTED",
        "3",
        "3",
        "0",
    )
    assert item["ingest_correlation_id"] == name
    assert cloud.catalog_item(raw, dirty_key, dirty)["status"] in {"INGESTED", "QUARANTINED"}
    lake_keys = sorted(
        o["Key"]
        for o in cloud.client("s3").list_objects_v2(Bucket=lake, Prefix="reviews/review_date=")[
            "Contents"
        ]
    )
    assert "reviews/review_date=2026-11-20" in [k.rsplit("/", 1)[0] for k in lake_keys]
    events = cloud.messages(announced, timeout=15)
    events += cloud.messages(announced, timeout=5) if len(events) < 2 else []
    by_url = {e["detail"]["object_url"]: e for e in events}
    assert set(by_url) == {f"s3://{raw}/{key}", f"s3://{raw}/{dirty_key}"}
    event = by_url[f"s3://{raw}/{key}"]
    assert event["detail-type"] == "Object Ingested"
    assert event["detail"]["status"] == "INGESTED"
    assert event["detail"]["rows_written"] == "3"
    assert event["detail"]["execution"] == name


# States entered once per object of the batch, inside the machine's Read Outcomes Map.
ITERATION_STATES = {
    "Read Outcome",
    "Which Outcome",
    "Announce Ingestion",
    "Notify Object Failed",
    "Not Ingested",
}
