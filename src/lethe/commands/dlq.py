"""`lethe dlq list | redrive`: the dead-letter queues (docs/RUNBOOK.md, docs/CLI.md).

Two queues (template.yaml): `object-events` (output `ObjectEventsDeadLetterQueueUrl`: S3 events,
as EventBridge events, that the object events function failed 5 times or that EventBridge could
not deliver) and `workflow` (output `WorkflowDeadLetterQueueUrl`: failed index-object
invocations as Lambda destination records, and Erasure Requested events EventBridge could not
deliver).

`list` reads messages without taking them away: each is received with a short visibility timeout
(so one listing sees each message once) and made visible again at once afterwards. It prints
the message id, times, receive count and a one-line summary built from named fields only
(bucket, key, version, detail-type, request id, function, error): never the body, because an
Erasure Requested event carries raw subject ids.

`redrive` starts an SQS message move task from the object events dead-letter queue back to the
object events queue (always with DestinationArn: messages EventBridge dead-lettered never came
from the queue) and prints the task handle; `--wait` follows it with ListMessageMoveTasks. The
workflow queue has no source queue to move back to, so `redrive --queue` takes only
`object-events`: `--queue workflow` is refused while parsing (exit 2) with a pointer to its
runbook section, which says how to replay each kind of message.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from lethe.commands import CommandError, UsageError
from lethe.progress import Waiting, waiting
from lethe.target import Target, add_target_arguments, resolve

QUEUES: Final = {
    "object-events": "ObjectEventsDeadLetterQueueUrl",
    "workflow": "WorkflowDeadLetterQueueUrl",
}
REDRIVE_QUEUE: Final = "object-events"  # the only queue with a queue to move messages back to
LIST_VISIBILITY_SECONDS: Final = 30  # hidden while listed, then made visible again at once
LIST_DEFAULT_MAX: Final = 100
SUMMARY_MAX: Final = 160
MOVE_DONE: Final = frozenset({"COMPLETED", "CANCELLED", "FAILED"})
WAIT_TIMEOUT_SECONDS: Final = 3600.0
POLL_FIRST_SECONDS: Final = 1.0
POLL_MAX_SECONDS: Final = 10.0

# Seams for tests: the wait loop's clock and sleep.
_sleep: Callable[[float], None] = time.sleep
_clock: Callable[[], float] = time.monotonic


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dlq", help="dead-letter queues: list and redrive")
    commands = parser.add_subparsers(dest="dlq_command", metavar="COMMAND", required=True)

    listing = commands.add_parser(
        "list",
        help="messages waiting in the dead-letter queues (not deleted)",
        description="Lists the messages of the dead-letter queues without deleting them: id, "
        "first receive, receive count and a one-line summary (never the body).",
    )
    listing.add_argument("--queue", choices=sorted(QUEUES), help="only this queue (default: both)")
    listing.add_argument(
        "--max",
        type=int,
        default=LIST_DEFAULT_MAX,
        help=f"most messages per queue (default {LIST_DEFAULT_MAX})",
    )
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(listing)
    listing.set_defaults(func=list_messages)

    redrive = commands.add_parser(
        "redrive",
        help="move the object events dead letters back to the object events queue",
        description="Starts an SQS message move task from the object events dead-letter queue "
        "to the object events queue and prints its task handle.",
    )
    redrive.add_argument(
        "--queue",
        type=_redrive_queue,
        default=REDRIVE_QUEUE,
        metavar=REDRIVE_QUEUE,
        help=f"the dead-letter queue: only {REDRIVE_QUEUE}, the default (the workflow queue "
        "has no source queue to move messages back to: docs/RUNBOOK.md says how to replay "
        "each kind of its messages)",
    )
    redrive.add_argument(
        "--max-per-second", type=int, help="MaxNumberOfMessagesPerSecond of the move task"
    )
    redrive.add_argument("--wait", action="store_true", help="follow the task until it ends")
    redrive.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        help="with --wait: seconds to wait (the task goes on after that)",
    )
    redrive.add_argument("--json", action="store_true", help="print the task as JSON")
    add_target_arguments(redrive)
    redrive.set_defaults(func=redrive_messages)


# ---------------------------------------------------------------------------------- list


def list_messages(args: argparse.Namespace) -> int:
    if args.max < 1:
        raise UsageError("--max must be at least 1")
    target = resolve(args)
    sqs = target.client("sqs")
    names = [args.queue] if args.queue else sorted(QUEUES)
    rows: list[dict[str, Any]] = []
    for name in names:
        rows.extend(peek(sqs, name, target.output(QUEUES[name]), limit=args.max))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no dead letters" + (f" in {args.queue}" if args.queue else ""))
        return 0
    print(f"{'QUEUE':13} {'MESSAGE ID':36} {'FIRST RECEIVED':20} {'RECV':>4}  SUMMARY")
    for row in rows:
        print(
            f"{row['queue']:13} {row['message_id']:36} {row['first_received_at'] or '-':20} "
            f"{row['receive_count']:>4}  {row['summary']}"
        )
    return 0


def peek(sqs: Any, queue: str, queue_url: str, *, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` messages of a queue, each once, left in the queue (visible again)."""
    seen: dict[str, dict[str, Any]] = {}
    receipts: list[str] = []
    try:
        while len(seen) < limit:
            answer = sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=min(10, limit - len(seen)),
                VisibilityTimeout=LIST_VISIBILITY_SECONDS,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
            )
            messages = answer.get("Messages") or []
            fresh = [m for m in messages if m["MessageId"] not in seen]
            receipts.extend(m["ReceiptHandle"] for m in messages)
            if not fresh:
                break
            for message in fresh:
                seen[message["MessageId"]] = describe_message(queue, message)
    finally:
        _release(sqs, queue_url, receipts)
    return list(seen.values())[:limit]


def _release(sqs: Any, queue_url: str, receipts: list[str]) -> None:
    """Make the listed messages visible again (visibility timeout 0)."""
    for start in range(0, len(receipts), 10):
        chunk = receipts[start : start + 10]
        sqs.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for n, handle in enumerate(chunk)
            ],
        )


def describe_message(queue: str, message: dict[str, Any]) -> dict[str, Any]:
    attributes = message.get("Attributes") or {}
    return {
        "queue": queue,
        "message_id": message["MessageId"],
        "sent_at": _timestamp(attributes.get("SentTimestamp")),
        "first_received_at": _timestamp(attributes.get("ApproximateFirstReceiveTimestamp")),
        "receive_count": int(attributes.get("ApproximateReceiveCount", 0)),
        "summary": summarize(message.get("Body") or ""),
    }


def _timestamp(millis: Any) -> str | None:
    if millis in (None, ""):
        return None
    moment = datetime.fromtimestamp(int(millis) / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(body: str) -> str:
    """One line about a dead letter, from named fields only: a body may hold raw subject ids
    (an Erasure Requested event), so nothing is copied from it that is not named here."""
    try:
        document = json.loads(body)
    except ValueError:
        return f"not JSON ({len(body.encode())} bytes)"
    if not isinstance(document, dict):
        return f"JSON {type(document).__name__}, not an event"
    if isinstance(document.get("requestContext"), dict):
        text = _lambda_record(document)
    elif "detail-type" in document:
        text = _event(document)
    else:
        text = f"JSON object with fields {', '.join(sorted(map(str, document))[:8])}"
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


def _event(event: dict[str, Any]) -> str:
    detail = event.get("detail") if isinstance(event.get("detail"), dict) else {}
    assert isinstance(detail, dict)
    head = f"{event.get('source', '?')} {event.get('detail-type', '?')}"
    if event.get("source") == "aws.s3":
        bucket = (detail.get("bucket") or {}).get("name", "?")
        obj = detail.get("object") or {}
        version = f" version {obj['version-id']}" if obj.get("version-id") else ""
        return f"{head} s3://{bucket}/{obj.get('key', '?')}{version}"
    if detail.get("request_id"):
        return f"{head} request {detail['request_id']}"
    return f"{head} (event {event.get('id', '?')})"


def _lambda_record(record: dict[str, Any]) -> str:
    context = record["requestContext"]
    function = str(context.get("functionArn", "?")).split(":function:")[-1]
    payload = record.get("requestPayload") if isinstance(record.get("requestPayload"), dict) else {}
    assert isinstance(payload, dict)
    where = payload.get("object_url") or (
        f"s3://{payload['bucket']}/{payload['key']}"
        if payload.get("bucket") and payload.get("key")
        else ""
    )
    response = record.get("responsePayload")
    error = ""
    if isinstance(response, dict):
        error = f": {response.get('errorType', '')}: {response.get('errorMessage', '')}"
    parts = [f"lambda {function} {context.get('condition', '')}".rstrip(), str(where)]
    return " ".join(p for p in parts if p) + error.rstrip(": ")


# ---------------------------------------------------------------------------------- redrive


def _redrive_queue(text: str) -> str:
    """`--queue` of redrive: only the object events queue has a queue to move messages back to;
    `workflow` is refused while parsing (exit 2), saying how its messages are replayed."""
    if text == REDRIVE_QUEUE:
        return text
    if text == "workflow":
        raise argparse.ArgumentTypeError(
            "the workflow dead-letter queue has no source queue to move messages back to: "
            "see `lethe dlq list --queue workflow` and docs/RUNBOOK.md (Alarm "
            "lethe-<stage>-workflow-dead-letters) to replay each kind of message"
        )
    raise argparse.ArgumentTypeError(f"only {REDRIVE_QUEUE} can be redriven")


def redrive_messages(args: argparse.Namespace) -> int:
    if args.max_per_second is not None and not 1 <= args.max_per_second <= 500:
        raise UsageError("--max-per-second must be from 1 to 500")
    target = resolve(args)
    sqs = target.client("sqs")
    source_arn = _queue_arn(sqs, target.output(QUEUES[args.queue]))
    destination_arn = _destination_arn(sqs, target)
    options = {"MaxNumberOfMessagesPerSecond": args.max_per_second} if args.max_per_second else {}
    try:
        handle = str(
            sqs.start_message_move_task(
                SourceArn=source_arn, DestinationArn=destination_arn, **options
            )["TaskHandle"]
        )
    except sqs.exceptions.UnsupportedOperation as exc:
        raise CommandError(
            f"cannot start the move task: {exc}; `aws sqs list-message-move-tasks "
            f"--source-arn {source_arn}` shows the running one"
        ) from None
    task: dict[str, Any] = {
        "task_handle": handle,
        "source_arn": source_arn,
        "destination_arn": destination_arn,
    }
    if not args.wait:
        print(json.dumps(task, indent=2) if args.json else handle)
        return 0
    if not args.json:
        print(handle, flush=True)
    with waiting(args, "redrive") as shown:
        described = wait_for_move_task(sqs, source_arn, handle, timeout=args.timeout, waiting=shown)
    task.update(
        status=described.get("Status"),
        moved=int(described.get("ApproximateNumberOfMessagesMoved", 0)),
        to_move=int(described.get("ApproximateNumberOfMessagesToMove", 0)),
    )
    if described.get("FailureReason"):
        task["failure"] = described["FailureReason"]
    if args.json:
        print(json.dumps(task, indent=2))
    else:
        print(f"{task['status']}: {task['moved']} of {task['to_move']} messages moved")
    if task["status"] != "COMPLETED":
        raise CommandError(
            f"the move task ended {task['status']}"
            + (f": {task['failure']}" if task.get("failure") else "")
        )
    return 0


def _queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def _destination_arn(sqs: Any, target: Target) -> str:
    arn = target.outputs.get("ObjectEventsQueueArn")
    return arn if arn else _queue_arn(sqs, target.output("ObjectEventsQueueUrl"))


def wait_for_move_task(
    sqs: Any,
    source_arn: str,
    handle: str,
    *,
    timeout: float,
    waiting: Waiting | None = None,
) -> dict[str, Any]:
    """ListMessageMoveTasks until the task `handle` is COMPLETED, CANCELLED or FAILED.

    SQS lists a task's handle only while it is RUNNING, and one task at a time runs per source
    queue: a listing without our handle whose newest task has ended is our task, ended."""
    progress = waiting if waiting is not None else Waiting("redrive")
    deadline = _clock() + timeout
    interval = POLL_FIRST_SECONDS
    while True:
        tasks = sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=10)["Results"]
        task = next((t for t in tasks if t.get("TaskHandle") == handle), None)
        if task is None and tasks and tasks[0].get("Status") in MOVE_DONE:
            task = tasks[0]
        if task is None:
            raise CommandError(f"the move task {handle} is not listed for {source_arn}")
        if task.get("Status") in MOVE_DONE:
            return dict(task)
        progress.update(
            f"{task.get('Status')}: {task.get('ApproximateNumberOfMessagesMoved', 0)} of "
            f"{task.get('ApproximateNumberOfMessagesToMove', '?')} moved"
        )
        if _clock() + interval > deadline:
            raise CommandError(f"the move task is still running after {timeout:.0f} s: {handle}")
        _sleep(interval)
        interval = min(interval * 1.5, POLL_MAX_SECONDS)
