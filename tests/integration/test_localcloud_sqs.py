"""SQS event source mappings in the local cloud (lethe.localcloud.sqs): batching, partial batch
failures, redrive to the dead-letter queue after maxReceiveCount, SQS's native redrive back, and
EventBridge -> SQS -> Lambda with `wait_settled`.

A ThreadedMotoServer on 127.0.0.1 (free port); the Lambda runtime, the SQS pollers, message move
tasks and EventBridge delivery installed into it. The function is the `sqs_batch` fixture: it
records every batch and fails records as their bodies ask. Each test has its own queues.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.exceptions import ClientError

from lethe.localcloud import eventbridge, lambdas, sqs
from lethe.localcloud.deployment import Deployment, Endpoints, FunctionSpec
from lethe.localcloud.eventbridge import EventDispatcher
from lethe.localcloud.lambdas import LambdaRuntime
from lethe.localcloud.sqs import SqsEventSources
from tests.integration.conftest import moto_server

REGION = "us-east-1"
ACCOUNT = "123456789012"
FIXTURES = Path(__file__).parent / "fixtures" / "localcloud"
FUNCTION = "lt-sqs-batch"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION}"
T = TypeVar("T")


@pytest.fixture(scope="module")
def endpoints() -> Iterator[Endpoints]:
    with moto_server(ACCOUNT) as started:
        yield started


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("localcloud-sqs")


@pytest.fixture(scope="module")
def cloud(endpoints: Endpoints, state_dir: Path) -> Iterator[dict[str, Any]]:
    spec = FunctionSpec(
        logical_id="SqsBatch",
        name=FUNCTION,
        arn=FUNCTION_ARN,
        code_uri=FIXTURES / "sqs_batch",
        handler="app.handler",
        layer_paths=(),
        environment={
            "RECORD_FILE": str(state_dir / "batches.jsonl"),
            "FAIL_FLAG": str(state_dir / "fail.flag"),
        },
        timeout_seconds=5,
        memory_mb=128,
    )
    deployment = Deployment(
        endpoints=endpoints,
        repo_root=FIXTURES,
        state_dir=state_dir,
        stack_name="lt-sqs",
        parameters={},
        physical_ids={},
        attributes={},
        outputs={},
        functions={"SqsBatch": spec},
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("app.py", "def handler(event, context):\n    return 'moto'\n")
    role = endpoints.client("iam").create_role(
        RoleName="lt-sqs-role", AssumeRolePolicyDocument="{}"
    )["Role"]["Arn"]
    endpoints.client("lambda").create_function(
        FunctionName=FUNCTION,
        Runtime="python3.11",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": archive.getvalue()},
    )
    runtime = LambdaRuntime(deployment)
    sources = SqsEventSources(runtime, retry_visibility_seconds=None)
    dispatcher = EventDispatcher(runtime)
    dispatcher.add_source(sources)
    undo = [
        lambdas.install(runtime),
        sqs.install_message_move_tasks(),
        sqs.install(sources),
        eventbridge.install(dispatcher),
    ]
    try:
        yield {
            "sources": sources,
            "dispatcher": dispatcher,
            "sqs": endpoints.client("sqs"),
            "lambda": endpoints.client("lambda"),
            "events": endpoints.client("events"),
            "records": state_dir / "batches.jsonl",
            "flag": state_dir / "fail.flag",
        }
    finally:
        for action in reversed(undo):
            action()
        dispatcher.stop()
        runtime.shutdown()


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _queue(
    cloud: dict[str, Any], name: str, *, visibility: int = 30, max_receives: int | None = None
) -> dict[str, str]:
    """A queue (and, with max_receives, its dead-letter queue): URLs and ARNs. Tests of retries
    use a 1 s visibility timeout and no batching window (a window at least as long as the
    visibility timeout would receive a failed message again within one batch)."""
    client = cloud["sqs"]
    result: dict[str, str] = {}
    attributes = {"VisibilityTimeout": str(visibility)}
    if max_receives is not None:
        dlq_url = client.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        result["dlq_url"] = dlq_url
        result["dlq_arn"] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}-dlq"
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": result["dlq_arn"], "maxReceiveCount": max_receives}
        )
    result["url"] = client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    result["arn"] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
    return result


def _map(
    cloud: dict[str, Any],
    queue: dict[str, str],
    *,
    batch_size: int = 10,
    window: int = 0,
    report_failures: bool = True,
) -> str:
    params: dict[str, Any] = {
        "FunctionName": FUNCTION,
        "EventSourceArn": queue["arn"],
        "BatchSize": batch_size,
        "MaximumBatchingWindowInSeconds": window,
    }
    if report_failures:
        params["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
    return str(cloud["lambda"].create_event_source_mapping(**params)["UUID"])


def _send(cloud: dict[str, Any], queue: dict[str, str], *bodies: str) -> list[str]:
    entries = [{"Id": str(n), "MessageBody": body} for n, body in enumerate(bodies)]
    sent = cloud["sqs"].send_message_batch(QueueUrl=queue["url"], Entries=entries)["Successful"]
    return [m["MessageId"] for m in sorted(sent, key=lambda m: int(m["Id"]))]


def _batches(cloud: dict[str, Any], queue: dict[str, str]) -> list[list[dict[str, Any]]]:
    """The record lists of the invocations that came from `queue`, in order."""
    path: Path = cloud["records"]
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["Records"] for e in events if e["Records"][0]["eventSourceARN"] == queue["arn"]]


def _bodies(batches: list[list[dict[str, Any]]]) -> list[list[str]]:
    return [[r["body"] for r in batch] for batch in batches]


def _counts(cloud: dict[str, Any], url: str) -> tuple[int, int]:
    attributes = cloud["sqs"].get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
    )


# ------------------------------------------------------------------------------ batching


def test_a_batch_arrives_as_lambdas_sqs_event_and_is_deleted(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-shape")
    _map(cloud, queue, window=1)
    cloud["sqs"].send_message(
        QueueUrl=queue["url"],
        MessageBody="with-attributes",
        MessageAttributes={
            "colour": {"DataType": "String", "StringValue": "blue"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    sent = _send(cloud, queue, "b-1", "b-2")

    assert cloud["sources"].wait_idle(20)

    (records,) = _batches(cloud, queue)
    assert [r["body"] for r in records] == ["with-attributes", "b-1", "b-2"]
    assert [r["messageId"] for r in records][1:] == sent
    first = records[0]
    assert set(first) == {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "md5OfMessageAttributes",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert first["md5OfBody"] == hashlib.md5(b"with-attributes").hexdigest()
    assert (first["eventSource"], first["eventSourceARN"], first["awsRegion"]) == (
        "aws:sqs",
        queue["arn"],
        REGION,
    )
    assert first["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} <= set(
        first["attributes"]
    )
    assert first["messageAttributes"] == {
        "colour": {
            "stringValue": "blue",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        },
        "blob": {
            "binaryValue": "AAE=",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Binary",
        },
    }
    assert "md5OfMessageAttributes" not in records[1]
    assert _counts(cloud, queue["url"]) == (0, 0)  # every message deleted


def test_batch_size_bounds_each_invocation(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-size")
    _send(cloud, queue, *(f"m{n}" for n in range(7)))  # waiting before the mapping exists

    _map(cloud, queue, batch_size=3, window=1)
    assert cloud["sources"].wait_idle(20)

    assert [len(b) for b in _batches(cloud, queue)] == [3, 3, 1]
    assert sorted(body for batch in _bodies(_batches(cloud, queue)) for body in batch) == [
        f"m{n}" for n in range(7)
    ]


def test_the_window_gathers_messages_that_arrive_while_it_is_open(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-window", visibility=30)  # longer than the window
    _map(cloud, queue, window=3)

    _send(cloud, queue, "early")
    time.sleep(1.2)  # within the 3 s window that the first message opened
    _send(cloud, queue, "late")
    assert cloud["sources"].wait_idle(20)

    assert _bodies(_batches(cloud, queue)) == [["early", "late"]]


def test_the_local_cloud_can_cap_the_window(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-cap")
    cloud["sources"].max_batching_window = 0.5
    try:
        _map(cloud, queue, window=300)
        started = time.monotonic()
        _send(cloud, queue, "alone")
        assert cloud["sources"].wait_idle(20)
        elapsed = time.monotonic() - started
    finally:
        cloud["sources"].max_batching_window = None

    assert _bodies(_batches(cloud, queue)) == [["alone"]]
    assert elapsed < 5  # not the mapping's 300 s


# ------------------------------------------------------------------------------ failures


def test_reported_failures_come_back_and_the_rest_is_deleted(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-partial", visibility=1)
    _map(cloud, queue)
    _send(cloud, queue, "ok", "fail:1", "ok-too")  # one SendMessageBatch: one receive

    batches = wait_for(
        lambda: (b := _batches(cloud, queue)) and len(b) >= 2 and b,
        timeout=20,
        what="the failed record's second delivery",
    )
    assert cloud["sources"].wait_idle(20)

    assert _bodies(batches) == [["ok", "fail:1", "ok-too"], ["fail:1"]]
    assert batches[1][0]["attributes"]["ApproximateReceiveCount"] == "2"
    assert batches[1][0]["messageId"] == batches[0][1]["messageId"]
    assert _counts(cloud, queue["url"]) == (0, 0)


def test_a_function_error_fails_the_whole_batch(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-crash", visibility=1, max_receives=1)
    _map(cloud, queue)
    _send(cloud, queue, "ok", "crash")

    dead = wait_for(
        lambda: (
            cloud["sqs"]
            .receive_message(QueueUrl=queue["dlq_url"], MaxNumberOfMessages=10, WaitTimeSeconds=1)
            .get("Messages")
        ),
        timeout=20,
        what="the crashed batch in the dead-letter queue",
    )
    dead += (
        cloud["sqs"]
        .receive_message(QueueUrl=queue["dlq_url"], MaxNumberOfMessages=10, WaitTimeSeconds=1)
        .get("Messages", [])
    )

    assert _bodies(_batches(cloud, queue)) == [["ok", "crash"]]
    assert sorted(m["Body"] for m in dead) == ["crash", "ok"]  # "ok" failed with its batch


def test_an_invalid_item_identifier_fails_the_whole_batch(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-bad-id", visibility=1, max_receives=1)
    _map(cloud, queue)
    _send(cloud, queue, "ok", "bad-id")

    wait_for(
        lambda: _counts(cloud, queue["dlq_url"])[0] == 2,
        timeout=20,
        what="both messages in the dead-letter queue",
    )
    assert _bodies(_batches(cloud, queue)) == [["ok", "bad-id"]]


def test_without_report_batch_item_failures_the_response_is_ignored(
    cloud: dict[str, Any],
) -> None:
    queue = _queue(cloud, "lt-sqs-no-report", visibility=1)
    _map(cloud, queue, report_failures=False)
    _send(cloud, queue, "fail:9", "ok")

    assert cloud["sources"].wait_idle(20)
    time.sleep(1.5)  # longer than the visibility timeout: nothing comes back

    assert _bodies(_batches(cloud, queue)) == [["fail:9", "ok"]]
    assert _counts(cloud, queue["url"]) == (0, 0)


def test_the_local_cloud_can_shorten_the_wait_before_a_retry(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-retry", visibility=600)
    cloud["sources"].retry_visibility_seconds = 1
    try:
        _map(cloud, queue)
        _send(cloud, queue, "fail:1")
        batches = wait_for(
            lambda: (b := _batches(cloud, queue)) and len(b) >= 2 and b,
            timeout=15,
            what="the retry after 1 s instead of 600 s",
        )
    finally:
        cloud["sources"].retry_visibility_seconds = None

    assert _bodies(batches) == [["fail:1"], ["fail:1"]]


# ------------------------------------------------------------------------------ dead letters


def test_a_record_failing_max_receive_count_times_moves_to_the_dead_letter_queue(
    cloud: dict[str, Any],
) -> None:
    queue = _queue(cloud, "lt-sqs-redrive", visibility=1, max_receives=3)
    _map(cloud, queue)
    (sent,) = _send(cloud, queue, "fail:99")

    wait_for(
        lambda: _counts(cloud, queue["dlq_url"])[0] == 1,
        timeout=30,
        what="the message in the dead-letter queue",
    )

    batches = _batches(cloud, queue)
    assert [b[0]["attributes"]["ApproximateReceiveCount"] for b in batches] == ["1", "2", "3"]
    assert {b[0]["messageId"] for b in batches} == {sent}
    assert _counts(cloud, queue["url"]) == (0, 0)
    (dead,) = cloud["sqs"].receive_message(QueueUrl=queue["dlq_url"], VisibilityTimeout=0)[
        "Messages"
    ]
    assert (dead["MessageId"], dead["Body"]) == (sent, "fail:99")


def test_native_redrive_moves_dead_letters_back_and_they_are_processed(
    cloud: dict[str, Any],
) -> None:
    queue = _queue(cloud, "lt-sqs-move", visibility=1, max_receives=2)
    _map(cloud, queue)
    cloud["flag"].write_text("failing")
    try:
        _send(cloud, queue, "flag", "flag")
        wait_for(
            lambda: _counts(cloud, queue["dlq_url"])[0] == 2,
            timeout=30,
            what="two dead letters",
        )
    finally:
        cloud["flag"].unlink()  # the cause is fixed
    before = len(_batches(cloud, queue))

    handle = cloud["sqs"].start_message_move_task(SourceArn=queue["dlq_arn"])["TaskHandle"]
    (task,) = cloud["sqs"].list_message_move_tasks(SourceArn=queue["dlq_arn"])["Results"]
    assert cloud["sources"].wait_idle(20)

    assert task["TaskHandle"] == handle
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 2
    assert _counts(cloud, queue["dlq_url"]) == (0, 0)
    assert _counts(cloud, queue["url"]) == (0, 0)
    redriven = [r for b in _batches(cloud, queue)[before:] for r in b]
    assert [r["body"] for r in redriven] == ["flag", "flag"]
    # moved messages are new messages: their receive count starts again
    assert {r["attributes"]["ApproximateReceiveCount"] for r in redriven} == {"1"}


def test_a_move_task_needs_a_dead_letter_queue_as_its_source(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-not-dlq")

    with pytest.raises(ClientError, match="must be configured as a Dead Letter Queue"):
        cloud["sqs"].start_message_move_task(SourceArn=queue["arn"])


def test_a_move_task_to_an_explicit_destination(cloud: dict[str, Any]) -> None:
    queue = _queue(cloud, "lt-sqs-move-dest", visibility=1, max_receives=1)
    other = _queue(cloud, "lt-sqs-move-other")
    _map(cloud, queue)
    _send(cloud, queue, "crash")
    wait_for(lambda: _counts(cloud, queue["dlq_url"])[0] == 1, 20, "the dead letter")

    cloud["sqs"].start_message_move_task(
        SourceArn=queue["dlq_arn"], DestinationArn=other["arn"], MaxNumberOfMessagesPerSecond=5
    )

    (task,) = cloud["sqs"].list_message_move_tasks(SourceArn=queue["dlq_arn"])["Results"]
    assert (task["DestinationArn"], task["MaxNumberOfMessagesPerSecond"]) == (other["arn"], 5)
    (moved,) = cloud["sqs"].receive_message(QueueUrl=other["url"])["Messages"]
    assert moved["Body"] == "crash"


# ------------------------------------------------------------------------------ the mapping


def test_a_disabled_mapping_leaves_messages_and_a_deleted_one_stops(
    cloud: dict[str, Any],
) -> None:
    queue = _queue(cloud, "lt-sqs-disabled")
    mapping = _map(cloud, queue)
    cloud["lambda"].update_event_source_mapping(UUID=mapping, Enabled=False)
    time.sleep(1.5)  # the poller reads its mapping between receives
    _send(cloud, queue, "waits")
    time.sleep(1.5)

    assert _batches(cloud, queue) == []
    assert _counts(cloud, queue["url"]) == (1, 0)

    cloud["lambda"].update_event_source_mapping(UUID=mapping, Enabled=True)
    wait_for(lambda: _batches(cloud, queue), 20, "the batch after enabling")
    cloud["lambda"].delete_event_source_mapping(UUID=mapping)
    time.sleep(2)
    _send(cloud, queue, "nobody")
    time.sleep(1.5)

    assert _bodies(_batches(cloud, queue)) == [["waits"]]
    assert _counts(cloud, queue["url"]) == (1, 0)


# ------------------------------------------------------------------------------ EventBridge


def test_eventbridge_to_sqs_to_lambda_and_wait_settled_waits_for_the_batch(
    cloud: dict[str, Any],
) -> None:
    queue = _queue(cloud, "lt-sqs-events")
    details = _queue(cloud, "lt-sqs-event-details")  # no mapping: read here
    _map(cloud, queue, window=1)
    events = cloud["events"]
    events.put_rule(Name="lt-sqs-events", EventPattern=json.dumps({"source": ["lethe.test"]}))
    events.put_targets(
        Rule="lt-sqs-events",
        Targets=[
            {"Id": "queue", "Arn": queue["arn"]},
            {"Id": "details", "Arn": details["arn"], "InputPath": "$.detail"},
        ],
    )

    events.put_events(
        Entries=[
            {"Source": "lethe.test", "DetailType": "Ping", "Detail": json.dumps({"n": n})}
            for n in range(3)
        ]
    )
    assert cloud["dispatcher"].wait_settled(30)

    # wait_settled returned only after the batch was handled: no sleep, no polling here
    bodies = [json.loads(r["body"]) for b in _batches(cloud, queue) for r in b]
    assert sorted(b["detail"]["n"] for b in bodies) == [0, 1, 2]
    for body in bodies:  # the whole event, as EventBridge sends it to a queue
        assert body["account"] == ACCOUNT
        assert body["source"] == "lethe.test"
        assert body["detail-type"] == "Ping"
        assert "ingestion-time" not in body
    assert _counts(cloud, queue["url"]) == (0, 0)
    # InputPath applies to SQS targets too (moto's own delivery ignored it)
    received = cloud["sqs"].receive_message(QueueUrl=details["url"], MaxNumberOfMessages=10)
    assert sorted(json.loads(m["Body"])["n"] for m in received["Messages"]) == [0, 1, 2]
