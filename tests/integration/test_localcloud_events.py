"""S3 -> EventBridge events in AWS's shape, delivered to SQS, Lambda and Step Functions targets.

A ThreadedMotoServer on 127.0.0.1 (free port); s3events, eventbridge and lambdas installed into
it. Targets: SQS queues (SendMessage of the event), the `recorder` fixture function (Lambda) and a
Pass state machine (Step Functions).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from moto.events.models import Rule
from moto.s3 import notifications
from moto.s3.models import S3Backend

from lethe.localcloud import eventbridge, lambdas, s3events
from lethe.localcloud.deployment import Deployment, Endpoints, FunctionSpec
from lethe.localcloud.eventbridge import EventDispatcher
from lethe.localcloud.lambdas import LambdaRuntime
from tests.integration.conftest import moto_server

# moto's methods as imported, before any install.
_ORIGINAL_SEND: Callable[..., None] = Rule.send_to_targets
_ORIGINAL_S3: Callable[..., None] = notifications._send_event_bridge_message
_ORIGINAL_DELETE: Callable[..., Any] = S3Backend.delete_object
_UNINSTALL: dict[str, Callable[[], None]] = {}

REGION = "us-east-1"
ACCOUNT = "123456789012"
FIXTURES = Path(__file__).parent / "fixtures" / "localcloud"
RECORDER_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lt-ev-recorder"
VERSIONED = "lt-ev-versioned"
UNVERSIONED = "lt-ev-unversioned"
SILENT = "lt-ev-no-eventbridge"
SEQUENCER = re.compile(r"^[0-9A-F]{18}$")
ISO_SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def endpoints() -> Iterator[Endpoints]:
    with moto_server(ACCOUNT) as started:
        yield started


@pytest.fixture(scope="module")
def record_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("localcloud-events") / "recorded.jsonl"


@pytest.fixture(scope="module")
def dispatcher(endpoints: Endpoints, record_file: Path) -> Iterator[EventDispatcher]:
    recorder = FunctionSpec(
        logical_id="Recorder",
        name="lt-ev-recorder",
        arn=RECORDER_ARN,
        code_uri=FIXTURES / "recorder",
        handler="app.handler",
        layer_paths=(),
        environment={"RECORD_FILE": str(record_file)},
        timeout_seconds=3,
        memory_mb=128,
    )
    emitter = FunctionSpec(
        logical_id="Emitter",
        name="lt-ev-emitter",
        arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lt-ev-emitter",
        code_uri=FIXTURES / "emitter",
        handler="app.handler",
        layer_paths=(),
        environment={},
        timeout_seconds=10,
        memory_mb=128,
    )
    deployment = Deployment(
        endpoints=endpoints,
        repo_root=FIXTURES,
        state_dir=record_file.parent,
        stack_name="lt-events",
        parameters={},
        physical_ids={},
        attributes={},
        outputs={},
        functions={"Recorder": recorder, "Emitter": emitter},
    )
    runtime = LambdaRuntime(deployment)
    dispatcher = EventDispatcher(runtime)
    _UNINSTALL["lambdas"] = lambdas.install(runtime)
    _UNINSTALL["eventbridge"] = eventbridge.install(dispatcher)
    _UNINSTALL["s3events"] = s3events.install(dispatcher.dispatch)
    try:
        yield dispatcher
    finally:
        for name in ("s3events", "eventbridge", "lambdas"):
            _UNINSTALL.pop(name)()
        dispatcher.stop()
        runtime.shutdown()


@pytest.fixture(scope="module")
def aws(endpoints: Endpoints, dispatcher: EventDispatcher) -> dict[str, Any]:
    """Buckets, queues and rules shared by the tests; returns clients and queue URLs."""
    s3 = endpoints.client("s3")
    sqs = endpoints.client("sqs")
    events = endpoints.client("events")
    for bucket in (VERSIONED, UNVERSIONED, SILENT):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=VERSIONED, VersioningConfiguration={"Status": "Enabled"})
    for bucket in (VERSIONED, UNVERSIONED):
        s3.put_bucket_notification_configuration(
            Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
    queues = {}
    for name in ("lt-ev-s3", "lt-ev-custom-bus", "lt-ev-app"):
        queues[name] = sqs.create_queue(QueueName=name)["QueueUrl"]
    # The Lambda rule comes first: with stock moto its NotImplementedError stopped later rules.
    events.put_rule(Name="lt-ev-s3-lambda", EventPattern=json.dumps({"source": ["aws.s3"]}))
    events.put_targets(Rule="lt-ev-s3-lambda", Targets=[{"Id": "recorder", "Arn": RECORDER_ARN}])
    events.put_rule(Name="lt-ev-s3-sqs", EventPattern=json.dumps({"source": ["aws.s3"]}))
    events.put_targets(
        Rule="lt-ev-s3-sqs",
        Targets=[{"Id": "capture", "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:lt-ev-s3"}],
    )
    events.create_event_bus(Name="lt-ev-custom")
    events.put_rule(
        Name="lt-ev-custom-s3",
        EventBusName="lt-ev-custom",
        EventPattern=json.dumps({"source": ["aws.s3"]}),
    )
    events.put_targets(
        Rule="lt-ev-custom-s3",
        EventBusName="lt-ev-custom",
        Targets=[{"Id": "custom", "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:lt-ev-custom-bus"}],
    )
    return {"s3": s3, "sqs": sqs, "events": events, "queues": queues}


def _drain(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get(
            "Messages", []
        )
        if not messages:
            return bodies
        for message in messages:
            bodies.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def _recorded(record_file: Path) -> list[dict[str, Any]]:
    if not record_file.exists():
        return []
    lines = record_file.read_text().splitlines()
    record_file.write_text("")
    return [json.loads(line) for line in lines]


def _settle(dispatcher: EventDispatcher) -> None:
    assert dispatcher.wait_settled(20)


def test_versioned_bucket_lifecycle_events_have_awss_shape(
    aws: dict[str, Any], dispatcher: EventDispatcher, record_file: Path
) -> None:
    s3, sqs = aws["s3"], aws["sqs"]
    key = "reviews/2026/part-1.jsonl"

    first = s3.put_object(Bucket=VERSIONED, Key=key, Body=b"first")
    second = s3.put_object(Bucket=VERSIONED, Key=key, Body=b"second version")
    marker = s3.delete_object(Bucket=VERSIONED, Key=key)
    removed = s3.delete_object(Bucket=VERSIONED, Key=key, VersionId=first["VersionId"])
    _settle(dispatcher)
    received = _drain(sqs, aws["queues"]["lt-ev-s3"])
    recorded = _recorded(record_file)

    assert marker["DeleteMarker"] is True
    assert [e["detail-type"] for e in received] == [
        "Object Created",
        "Object Created",
        "Object Deleted",
        "Object Deleted",
    ]
    assert [e["detail"]["reason"] for e in received] == [
        "PutObject",
        "PutObject",
        "DeleteObject",
        "DeleteObject",
    ]
    objects = [e["detail"]["object"] for e in received]
    assert [o.get("version-id") for o in objects] == [
        first["VersionId"],
        second["VersionId"],
        marker["VersionId"],
        removed["VersionId"],
    ]
    assert removed["VersionId"] == first["VersionId"]
    assert [o.get("etag") for o in objects] == [
        "8b04d5e3775d298e78455efc5ca404d5",  # MD5 of b"first", without S3's quotes
        "f084be37ed84e9d0d2a02d4d4be59745",  # MD5 of b"second version"
        None,
        None,
    ]
    assert [o.get("size") for o in objects] == [5, 14, None, None]
    assert [e["detail"].get("deletion-type") for e in received] == [
        None,
        None,
        "Delete Marker Created",
        "Permanently Deleted",
    ]
    sequencers = [o["sequencer"] for o in objects]
    assert all(SEQUENCER.match(s) for s in sequencers)
    assert sequencers == sorted(sequencers)
    assert len(set(sequencers)) == 4

    created = received[0]
    assert set(created) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    assert (created["version"], created["source"], created["account"], created["region"]) == (
        "0",
        "aws.s3",
        ACCOUNT,
        REGION,
    )
    assert created["resources"] == [f"arn:aws:s3:::{VERSIONED}"]
    assert ISO_SECONDS.match(created["time"])
    assert set(created["detail"]) == {
        "version",
        "bucket",
        "object",
        "request-id",
        "requester",
        "source-ip-address",
        "reason",
    }
    assert created["detail"]["bucket"] == {"name": VERSIONED}
    assert created["detail"]["object"]["key"] == key
    assert created["detail"]["source-ip-address"] == "127.0.0.1"
    assert set(received[2]["detail"]["object"]) == {"key", "version-id", "sequencer"}
    for event in received:
        parse(event=event, model=S3EventNotificationEventBridgeModel)  # Powertools accepts it

    # The Lambda target got the same four events, in AWS's shape.
    assert sorted(e["id"] for e in recorded) == sorted(e["id"] for e in received)
    assert all(ISO_SECONDS.match(e["time"]) for e in recorded)
    assert all("ingestion-time" not in e for e in recorded)


def test_unversioned_copy_multipart_and_batch_delete_events(
    aws: dict[str, Any], dispatcher: EventDispatcher, record_file: Path
) -> None:
    s3, sqs = aws["s3"], aws["sqs"]
    s3.put_object(Bucket=UNVERSIONED, Key="a.csv", Body=b"a,b\n")
    s3.copy_object(
        Bucket=UNVERSIONED, Key="b.csv", CopySource={"Bucket": UNVERSIONED, "Key": "a.csv"}
    )
    upload = s3.create_multipart_upload(Bucket=UNVERSIONED, Key="big.bin")
    part = s3.upload_part(
        Bucket=UNVERSIONED, Key="big.bin", UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 10
    )
    s3.complete_multipart_upload(
        Bucket=UNVERSIONED,
        Key="big.bin",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )
    s3.delete_objects(Bucket=UNVERSIONED, Delete={"Objects": [{"Key": "a.csv"}, {"Key": "b.csv"}]})
    s3.delete_object(Bucket=UNVERSIONED, Key="never-existed.csv")
    _settle(dispatcher)
    received = _drain(sqs, aws["queues"]["lt-ev-s3"])
    _recorded(record_file)

    assert [
        (e["detail-type"], e["detail"]["reason"], e["detail"]["object"]["key"]) for e in received
    ] == [
        ("Object Created", "PutObject", "a.csv"),
        ("Object Created", "CopyObject", "b.csv"),
        ("Object Created", "CompleteMultipartUpload", "big.bin"),
        ("Object Deleted", "DeleteObject", "a.csv"),
        ("Object Deleted", "DeleteObject", "b.csv"),
    ]
    assert all("version-id" not in e["detail"]["object"] for e in received)
    assert [e["detail"].get("deletion-type") for e in received[3:]] == [
        "Permanently Deleted",
        "Permanently Deleted",
    ]
    assert received[2]["detail"]["object"]["size"] == 10
    assert received[2]["detail"]["object"]["etag"].endswith("-1")  # a multipart ETag, unquoted


def test_buckets_without_eventbridge_and_custom_buses_get_no_s3_events(
    aws: dict[str, Any], dispatcher: EventDispatcher, record_file: Path
) -> None:
    s3, sqs = aws["s3"], aws["sqs"]
    s3.put_object(Bucket=SILENT, Key="quiet.txt", Body=b"shh")
    s3.delete_object(Bucket=SILENT, Key="quiet.txt")
    s3.put_object(Bucket=VERSIONED, Key="loud.txt", Body=b"hey")
    _settle(dispatcher)

    default_bus = _drain(sqs, aws["queues"]["lt-ev-s3"])
    assert [e["detail"]["bucket"]["name"] for e in default_bus] == [VERSIONED]
    assert _drain(sqs, aws["queues"]["lt-ev-custom-bus"]) == []  # AWS sends S3 events to default
    assert [e["detail"]["object"]["key"] for e in _recorded(record_file)] == ["loud.txt"]


def test_put_events_reaches_lambda_step_functions_and_sqs_targets(
    aws: dict[str, Any],
    endpoints: Endpoints,
    dispatcher: EventDispatcher,
    record_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events, sqs = aws["events"], aws["sqs"]
    sfn = endpoints.client("stepfunctions")
    machine = sfn.create_state_machine(
        name="lt-ev-pass",
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/lt-ev-sfn",
    )["stateMachineArn"]
    events.put_rule(Name="lt-ev-app", EventPattern=json.dumps({"source": ["lethe.test"]}))
    events.put_targets(
        Rule="lt-ev-app",
        Targets=[
            {"Id": "recorder", "Arn": RECORDER_ARN, "InputPath": "$.detail"},
            {
                "Id": "transformed",
                "Arn": RECORDER_ARN,
                "InputTransformer": {
                    "InputPathsMap": {"dataset": "$.detail.dataset"},
                    "InputTemplate": '{"dataset": <dataset>}',
                },
            },
            {"Id": "machine", "Arn": machine},
            {"Id": "capture", "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:lt-ev-app"},
        ],
    )

    with caplog.at_level(logging.INFO, logger="lethe.localcloud.events"):
        started = time.monotonic()
        entries = events.put_events(
            Entries=[
                {
                    "Source": "lethe.test",
                    "DetailType": "Dataset Loaded",
                    "Detail": json.dumps({"dataset": "reviews", "rows": 3}),
                }
            ]
        )["Entries"]
        put_seconds = time.monotonic() - started
        _settle(dispatcher)

    event_id = entries[0]["EventId"]
    assert put_seconds < 2
    # The InputTransformer target is refused (not emulated), loudly; the others still get it.
    assert _recorded(record_file) == [{"dataset": "reviews", "rows": 3}]
    executions = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert len(executions) == 1
    execution_input = json.loads(
        sfn.describe_execution(executionArn=executions[0]["executionArn"])["input"]
    )
    assert execution_input["id"] == event_id
    assert execution_input["source"] == "lethe.test"
    assert execution_input["detail-type"] == "Dataset Loaded"
    assert execution_input["detail"] == {"dataset": "reviews", "rows": 3}
    assert ISO_SECONDS.match(execution_input["time"])
    assert "ingestion-time" not in execution_input
    captured = _drain(sqs, aws["queues"]["lt-ev-app"])
    assert [e["detail"] for e in captured] == [{"dataset": "reviews", "rows": 3}]
    delivered = [r.getMessage() for r in caplog.records if r.name == "lethe.localcloud.events"]
    assert (
        f"rule lt-ev-app delivered event {event_id} to target recorder ({RECORDER_ARN})"
        in delivered
    )
    assert f"rule lt-ev-app delivered event {event_id} to target machine ({machine})" in delivered
    assert not any("to target transformed" in message for message in delivered)
    refusals = [
        r
        for r in caplog.records
        if r.name == "lethe.localcloud.events"
        and r.levelno == logging.ERROR
        and r.exc_info is not None
        and isinstance(r.exc_info[1], eventbridge.UnsupportedTargetError)
    ]
    assert [str(r.exc_info[1]) for r in refusals if r.exc_info] == [
        "rule lt-ev-app: target transformed uses InputTransformer, which the local cloud does "
        "not emulate (use Input or InputPath)"
    ]


def test_events_put_by_a_handler_reach_lambda_targets(
    aws: dict[str, Any], dispatcher: EventDispatcher, record_file: Path
) -> None:
    events = aws["events"]
    events.put_rule(Name="lt-ev-chain", EventPattern=json.dumps({"source": ["lethe.chain"]}))
    events.put_targets(Rule="lt-ev-chain", Targets=[{"Id": "recorder", "Arn": RECORDER_ARN}])

    dispatcher.runtime.invoke_async("Emitter", {"step": 1, "dataset": "reviews"})
    _settle(dispatcher)  # the emitter's invocation, its PutEvents, then the recorder's invocation

    recorded = _recorded(record_file)
    assert len(recorded) == 1
    assert recorded[0]["source"] == "lethe.chain"
    assert recorded[0]["detail-type"] == "Chained"
    assert recorded[0]["detail"] == {"step": 1, "dataset": "reviews"}
    assert recorded[0]["account"] == ACCOUNT


def test_installs_are_guarded_and_reversible(dispatcher: EventDispatcher) -> None:
    patched_send = Rule.send_to_targets
    patched_s3 = notifications._send_event_bridge_message

    with pytest.raises(RuntimeError, match="already installed"):
        eventbridge.install(dispatcher)
    with pytest.raises(RuntimeError, match="already installed"):
        s3events.install(dispatcher.dispatch)
    assert Rule.send_to_targets is patched_send
    assert notifications._send_event_bridge_message is patched_s3

    _UNINSTALL.pop("s3events")()
    _UNINSTALL.pop("eventbridge")()
    assert Rule.send_to_targets is _ORIGINAL_SEND
    assert notifications._send_event_bridge_message is _ORIGINAL_S3
    assert S3Backend.delete_object is _ORIGINAL_DELETE
    # Installed again; the module fixture uninstalls at the end.
    _UNINSTALL["eventbridge"] = eventbridge.install(dispatcher)
    _UNINSTALL["s3events"] = s3events.install(dispatcher.dispatch)
    assert Rule.send_to_targets is not _ORIGINAL_SEND
