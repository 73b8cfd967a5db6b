"""`lethe dlq` and `lethe objects reingest` against a moto server set up as the local cloud sets
it up (SQS message move tasks installed, state machines executed), through a state file: what
the CLI prints, its exit codes, and what changed in the queues, the reports bucket and Step
Functions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from lethe import cli
from lethe.localcloud import sqs as local_sqs
from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.template import load_template
from lethe_shared.catalog.object_catalog import CatalogItem, DynamoObjectCatalog, ObjectStatus, Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from tests.conftest import EVENTS_DIR, REPO_ROOT
from tests.integration.conftest import moto_server

RAW = "lt-raw"
REPORTS = "lt-reports"
RAW_ID = "u-SECRET-7007"
PASS_MACHINE = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})


@pytest.fixture(scope="module")
def endpoints() -> Iterator[Endpoints]:
    with moto_server() as started:
        undo = local_sqs.install_message_move_tasks()
        try:
            yield started
        finally:
            undo()


def _table(endpoints: Endpoints, logical_id: str, name: str) -> Any:
    props = load_template()["Resources"][logical_id]["Properties"]
    indexes = props.get("GlobalSecondaryIndexes")
    extra = {"GlobalSecondaryIndexes": indexes} if indexes else {}
    endpoints.client("dynamodb").create_table(
        TableName=name,
        KeySchema=props["KeySchema"],
        AttributeDefinitions=props["AttributeDefinitions"],
        BillingMode=props["BillingMode"],
        **extra,
    )
    import boto3  # noqa: PLC0415

    return boto3.resource(
        "dynamodb",
        endpoint_url=endpoints.endpoint_url,
        region_name=endpoints.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).Table(name)


@pytest.fixture
def deployment(
    endpoints: Endpoints, tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """A fresh set of resources per test (names carry the test's name) and its state file."""
    tag = f"t{abs(hash(request.node.name)) % 10**8}"
    sqs = endpoints.client("sqs")
    dlq_url = sqs.create_queue(QueueName=f"{tag}-object-events-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    queue_url = sqs.create_queue(
        QueueName=f"{tag}-object-events",
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    workflow_url = sqs.create_queue(QueueName=f"{tag}-workflows-dlq")["QueueUrl"]
    s3 = endpoints.client("s3")
    for bucket in (f"{tag}-{RAW}", f"{tag}-{REPORTS}"):
        s3.create_bucket(Bucket=bucket)
    machine = endpoints.client("stepfunctions").create_state_machine(
        name=f"{tag}-ingestion",
        definition=PASS_MACHINE,
        roleArn="arn:aws:iam::123456789012:role/lt-ingestion",
    )["stateMachineArn"]
    datasets = _table(endpoints, "DatasetsTable", f"{tag}-datasets")
    catalog = _table(endpoints, "ObjectCatalogTable", f"{tag}-catalog")
    outputs = {
        "ObjectEventsDeadLetterQueueUrl": dlq_url,
        "ObjectEventsQueueUrl": queue_url,
        "ObjectEventsQueueArn": queue_arn,
        "WorkflowDeadLetterQueueUrl": workflow_url,
        "RawBucketName": f"{tag}-{RAW}",
        "ReportsBucketName": f"{tag}-{REPORTS}",
        "IngestionStateMachineArn": machine,
        "DatasetsTableName": f"{tag}-datasets",
        "ObjectCatalogTableName": f"{tag}-catalog",
    }
    state_file = tmp_path / "local.json"
    state_file.write_text(
        json.dumps(
            {
                "outputs": outputs,
                "region": endpoints.region,
                "api_url": "http://127.0.0.1:1/local",
                "endpoint_url": endpoints.endpoint_url,
            }
        )
    )
    return {
        "outputs": outputs,
        "state_file": state_file,
        "sqs": sqs,
        "s3": s3,
        "sfn": endpoints.client("stepfunctions"),
        "datasets": DynamoDatasetRegistry(datasets),
        "catalog": DynamoObjectCatalog(catalog),
    }


def run(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    code = cli.main([*argv, "--state-file", str(deployment["state_file"])])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _s3_event_body() -> str:
    sqs_event = json.loads((EVENTS_DIR / "object_created_raw.json").read_text())
    return str(sqs_event["Records"][0]["body"])


def _erasure_event_body() -> str:
    event = json.loads((EVENTS_DIR / "erasure_requested_event.json").read_text())
    event["detail"]["subject_ids"] = [RAW_ID]
    return json.dumps(event)


def _all_bodies(sqs: Any, url: str) -> list[str]:
    bodies: dict[str, str] = {}
    for _ in range(5):
        for message in sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60
        ).get("Messages", []):
            bodies[message["MessageId"]] = message["Body"]
    return sorted(bodies.values())


# ------------------------------------------------------------------------------------- dlq


def test_dlq_list_shows_summaries_and_leaves_the_messages(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    sqs, outputs = deployment["sqs"], deployment["outputs"]
    s3_id = sqs.send_message(
        QueueUrl=outputs["ObjectEventsDeadLetterQueueUrl"], MessageBody=_s3_event_body()
    )["MessageId"]
    erasure_id = sqs.send_message(
        QueueUrl=outputs["WorkflowDeadLetterQueueUrl"], MessageBody=_erasure_event_body()
    )["MessageId"]

    code, out, err = run(deployment, capsys, "dlq", "list", "--json")

    assert code == 0, err
    rows = {row["message_id"]: row for row in json.loads(out)}
    assert set(rows) == {s3_id, erasure_id}
    assert rows[s3_id]["queue"] == "object-events"
    key = json.loads(_s3_event_body())["detail"]["object"]["key"]
    assert rows[s3_id]["summary"].startswith("aws.s3 Object Created s3://")
    assert key in rows[s3_id]["summary"]
    assert rows[erasure_id]["queue"] == "workflow"
    assert rows[erasure_id]["summary"].startswith("lethe.requests Erasure Requested")
    for row in rows.values():
        assert set(row) == {
            "queue",
            "message_id",
            "sent_at",
            "first_received_at",
            "receive_count",
            "summary",
        }
        assert row["receive_count"] >= 1
        assert row["first_received_at"].endswith("Z")
    assert RAW_ID not in out + err
    # nothing was taken away: both are visible again at once, and a second listing agrees
    code, again, _ = run(deployment, capsys, "dlq", "list", "--queue", "object-events", "--json")
    assert code == 0
    assert [row["message_id"] for row in json.loads(again)] == [s3_id]
    assert _all_bodies(sqs, outputs["ObjectEventsDeadLetterQueueUrl"]) == [_s3_event_body()]


def test_dlq_list_text_and_an_empty_queue(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(deployment, capsys, "dlq", "list")
    assert (code, out) == (0, "no dead letters\n")
    deployment["sqs"].send_message(
        QueueUrl=deployment["outputs"]["WorkflowDeadLetterQueueUrl"],
        MessageBody=_erasure_event_body(),
    )
    code, out, _ = run(deployment, capsys, "dlq", "list", "--queue", "workflow")
    assert code == 0
    assert out.splitlines()[0].startswith("QUEUE")
    assert "workflow" in out.splitlines()[1]
    assert RAW_ID not in out


def test_dlq_redrive_moves_the_messages_back_to_the_object_events_queue(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    sqs, outputs = deployment["sqs"], deployment["outputs"]
    bodies = sorted([_s3_event_body(), json.dumps({"detail-type": "Object Created", "n": 2})])
    for body in bodies:
        sqs.send_message(QueueUrl=outputs["ObjectEventsDeadLetterQueueUrl"], MessageBody=body)

    code, out, err = run(deployment, capsys, "dlq", "redrive", "--wait", "--json")

    assert code == 0, err
    task = json.loads(out)
    assert task["status"] == "COMPLETED"
    assert (task["moved"], task["to_move"]) == (2, 2)
    assert task["destination_arn"] == outputs["ObjectEventsQueueArn"]
    assert task["task_handle"]
    assert _all_bodies(sqs, outputs["ObjectEventsDeadLetterQueueUrl"]) == []
    assert _all_bodies(sqs, outputs["ObjectEventsQueueUrl"]) == bodies


def test_dlq_redrive_without_wait_prints_the_handle_only(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(deployment, capsys, "dlq", "redrive")
    assert code == 0
    (handle,) = out.splitlines()
    source = deployment["sqs"].get_queue_attributes(
        QueueUrl=deployment["outputs"]["ObjectEventsDeadLetterQueueUrl"],
        AttributeNames=["QueueArn"],
    )["Attributes"]["QueueArn"]
    tasks = deployment["sqs"].list_message_move_tasks(SourceArn=source)["Results"]
    assert tasks[0]["TaskHandle"] == handle


# -------------------------------------------------------------------------------- reingest


def _register(deployment: dict[str, Any]) -> None:
    document = json.loads((REPO_ROOT / "samples" / "reviews.dataset.json").read_text())
    deployment["datasets"].put(parse_dataset(document))


def _version(
    deployment: dict[str, Any], key: str, version: str, status: ObjectStatus, sequencer: str
) -> CatalogItem:
    item = CatalogItem(
        bucket=deployment["outputs"]["RawBucketName"],
        key=key,
        version_id=version,
        zone=Zone.RAW,
        status=status,
        sequencer=sequencer,
        dataset_id="reviews",
        delete_marker=status is ObjectStatus.DELETED,
    )
    assert deployment["catalog"].put_if_newer(item)
    return item


@pytest.fixture
def catalogued(deployment: dict[str, Any]) -> dict[str, Any]:
    _register(deployment)
    versions = {
        "failed-a": _version(deployment, "reviews/a.csv", "va", ObjectStatus.FAILED, "A1"),
        "failed-b": _version(deployment, "reviews/b.csv", "vb", ObjectStatus.FAILED, "B1"),
        "ingested": _version(deployment, "reviews/c.csv", "vc", ObjectStatus.INGESTED, "C1"),
        "deleted": _version(deployment, "reviews/d.csv", "vd", ObjectStatus.DELETED, "D1"),
    }
    return {**deployment, "versions": versions}


def _executions(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    sfn = deployment["sfn"]
    machine = deployment["outputs"]["IngestionStateMachineArn"]
    listed = sfn.list_executions(stateMachineArn=machine)["executions"]
    return [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]


def test_reingest_failed_starts_one_execution_for_exactly_those_versions(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews", "--status", "FAILED",
        "--json",
    )  # fmt: skip

    assert code == 0, err
    document = json.loads(out)
    assert document["dry_run"] is False
    assert [(v["key"], v["status"]) for v in document["versions"]] == [
        ("reviews/a.csv", "FAILED"),
        ("reviews/b.csv", "FAILED"),
    ]
    (execution,) = _executions(catalogued)
    (reported,) = document["executions"]
    assert reported["execution_arn"] == execution["executionArn"]
    assert reported["outcome"] == "started"
    assert "-rerun-" in reported["name"]
    started = json.loads(execution["input"])
    raw = catalogued["outputs"]["RawBucketName"]
    assert started["objects"] == [
        {
            "dataset_id": "reviews",
            "bucket": raw,
            "key": key,
            "version_id": version,
            "object_url": f"s3://{raw}/{key}",
        }
        for key, version in (("reviews/a.csv", "va"), ("reviews/b.csv", "vb"))
    ]
    bucket, key = started["manifest"].removeprefix("s3://").split("/", 1)
    assert bucket == catalogued["outputs"]["ReportsBucketName"]
    manifest = json.loads(catalogued["s3"].get_object(Bucket=bucket, Key=key)["Body"].read())
    assert [m["key"] for m in manifest] == ["reviews/a.csv", "reviews/b.csv"]


def test_reingest_one_key_and_a_dry_run(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews",
        "--key", "reviews/c.csv", "--dry-run",
    )  # fmt: skip
    assert code == 0
    assert "would re-ingest 1 version(s) of reviews" in out
    assert "INGESTED" in out
    assert _executions(catalogued) == []

    code, out, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews",
        "--key", "reviews/a.csv", "--version-id", "va",
    )  # fmt: skip
    assert code == 0, err
    (execution,) = _executions(catalogued)
    assert [o["key"] for o in json.loads(execution["input"])["objects"]] == ["reviews/a.csv"]
    assert out.splitlines()[-1] == f"started: {execution['executionArn']}"


def test_reingest_refuses_deleted_versions_and_starts_nothing(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews", "--key", "reviews/d.csv"
    )
    assert code == 1
    assert "is DELETED" in err
    code, _, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews", "--status", "DELETED"
    )
    assert code == 2
    assert _executions(catalogued) == []


def test_reingest_exit_3_for_what_does_not_exist(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews", "--key", "nope.csv"
    )
    assert code == 3
    assert "lethe objects list --dataset reviews" in err
    code, _, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews",
        "--key", "reviews/a.csv", "--version-id", "v-missing",
    )  # fmt: skip
    assert code == 3
    code, _, err = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "ghost", "--status", "FAILED"
    )
    assert code == 3
    assert "list them with `lethe datasets list`" in err
    code, _, err = run(catalogued, capsys, "objects", "list", "--dataset", "ghost", "--json")
    assert code == 3
    assert _executions(catalogued) == []


def test_reingest_nothing_matching_starts_nothing(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        catalogued, capsys, "objects", "reingest", "--dataset", "reviews", "--status", "RECEIVED",
        "--json",
    )  # fmt: skip
    assert code == 0
    assert json.loads(out) == {
        "dataset": "reviews",
        "dry_run": False,
        "versions": [],
        "executions": [],
    }
    assert _executions(catalogued) == []


def test_an_unreachable_local_cloud_exits_4(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = json.loads(deployment["state_file"].read_text())
    state["endpoint_url"] = "http://127.0.0.1:9"  # nothing listens there
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(state))
    code = cli.main(["dlq", "list", "--state-file", str(stale)])
    err = capsys.readouterr().err
    assert code == 4
    assert "lethe local up --detach --state-file F" in err


# ------------------------------------------------ safe to repeat (issue 24, "Safe filing")
# `objects reingest` and `dlq redrive` call AWS directly, not the REST API: they carry no
# Idempotency-Key. What keeps them safe to repeat is shown here.


def test_reingest_started_again_under_its_name_starts_nothing_new(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution's name is its idempotency key: StartExecution sent again with the same name
    and input (what botocore's own retry of a lost answer sends) starts no second execution."""
    from lethe.commands import objects  # noqa: PLC0415

    class Frozen(datetime):  # the same second for both runs: the same execution names
        @classmethod
        def now(cls, tz: Any = None) -> Frozen:
            return cls(2026, 11, 27, 16, 0, 0, tzinfo=tz)

    monkeypatch.setattr(objects, "datetime", Frozen)
    argv = ("objects", "reingest", "--dataset", "reviews", "--status", "FAILED", "--json")
    first = json.loads(run(catalogued, capsys, *argv)[1])
    code, out, err = run(catalogued, capsys, *argv)

    assert code == 0, err
    second = json.loads(out)
    assert [e["name"] for e in second["executions"]] == [e["name"] for e in first["executions"]]
    assert [e["outcome"] for e in first["executions"]] == ["started"]
    assert [e["outcome"] for e in second["executions"]] == ["already-started"]
    assert len(_executions(catalogued)) == 1


def test_dlq_redrive_repeated_moves_each_message_once(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A move task takes each message out of the dead-letter queue as it moves it: a redrive run
    again (after a lost answer, say) finds only what is left, and moves nothing twice."""
    sqs, outputs = deployment["sqs"], deployment["outputs"]
    bodies = sorted([_s3_event_body(), json.dumps({"detail-type": "Object Created", "n": 3})])
    for body in bodies:
        sqs.send_message(QueueUrl=outputs["ObjectEventsDeadLetterQueueUrl"], MessageBody=body)

    first = run(deployment, capsys, "dlq", "redrive", "--wait", "--json")
    code, out, err = run(deployment, capsys, "dlq", "redrive", "--wait", "--json")

    assert first[0] == 0
    assert code == 0, err
    assert (json.loads(first[1])["moved"], json.loads(out)["moved"]) == (2, 0)
    assert _all_bodies(sqs, outputs["ObjectEventsQueueUrl"]) == bodies  # each once
    assert _all_bodies(sqs, outputs["ObjectEventsDeadLetterQueueUrl"]) == []


# ---------------------------------------------------------------- objects list: errors (issue 23)


def _with_hash_key(deployment: dict[str, Any], endpoints: Endpoints) -> None:
    """The subject hash key secret in the deployment's outputs (and its state file)."""
    secret = endpoints.client("secretsmanager").create_secret(
        Name=f"{deployment['outputs']['DatasetsTableName']}-hash-key",
        SecretString="objects-list-key-0123456789abcdefghijklmnop",
    )["ARN"]
    deployment["outputs"]["SubjectHashKeySecretArn"] = secret
    state = json.loads(deployment["state_file"].read_text())
    state["outputs"] = deployment["outputs"]
    deployment["state_file"].write_text(json.dumps(state))


def test_objects_list_shows_why_a_version_failed_scrubbed(
    catalogued: dict[str, Any], endpoints: Endpoints, capsys: pytest.CaptureFixture[str]
) -> None:
    _with_hash_key(catalogued, endpoints)
    raw = catalogued["outputs"]["RawBucketName"]
    key = f"reviews/user_id={RAW_ID}/e.csv"
    _version(catalogued, key, "ve", ObjectStatus.INGESTING, "E1")
    error = (
        f"States.TaskFailed: ValueError: cannot cast '{RAW_ID}' to int in s3://{raw}/{key} (row 3)"
    )
    assert catalogued["catalog"].fail_ingestion(f"s3://{raw}/{key}", "ve", error)

    code, out, err = run(catalogued, capsys, "objects", "list", "--dataset", "reviews", "--json")

    assert code == 0, err
    rows = {row["key"]: row for row in json.loads(out)}
    shown = rows[key]["error"]
    assert shown.startswith("States.TaskFailed: ValueError: cannot cast '…' to int in s3://")
    assert "(row 3)" in shown
    assert RAW_ID not in shown  # neither the quoted value nor the key's partition value
    assert f"s3://{raw}/reviews/~" in shown  # the key in its shown (keyed-hash) form
    assert rows["reviews/c.csv"]["error"] is None  # INGESTED: no error

    code, out, _ = run(catalogued, capsys, "objects", "list", "--dataset", "reviews")
    assert code == 0
    lines = out.splitlines()
    failed = next(n for n, line in enumerate(lines) if line.endswith(f"{key} (ve)"))
    assert lines[failed + 1].strip() == f"error: {shown}"
    assert out.count("error: ") == 1
    assert RAW_ID not in out.replace(key, "")  # only the operator's own listing of real keys


def test_objects_list_without_errors_needs_no_hash_key(
    catalogued: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # no SubjectHashKeySecretArn in the outputs: the key is read only when an error is shown
    code, out, err = run(catalogued, capsys, "objects", "list", "--dataset", "reviews", "--json")
    assert code == 0, err
    assert all(row["error"] is None for row in json.loads(out))
