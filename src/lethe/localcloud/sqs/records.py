"""The event Lambda builds from SQS messages (Records), and what it makes of the function's
answer (`batchItemFailures`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from lethe.localcloud.lambdas import InvokeResult

ALL_FAILED: Final = None


def lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """An SQS message attribute as Lambda puts it in a record (camelCase, binary as base64)."""
    result: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues", [])),
        "binaryListValues": [_b64(v) for v in value.get("BinaryListValues", [])],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        result["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        result["binaryValue"] = _b64(value["BinaryValue"])
    return result


def _b64(value: Any) -> str:
    raw = value if isinstance(value, bytes | bytearray) else str(value).encode()
    return base64.b64encode(raw).decode("ascii")


def sqs_record(message: Mapping[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of Lambda's SQS event, from a ReceiveMessage message."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: lambda_message_attribute(value)
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def failed_message_ids(
    result: InvokeResult, message_ids: Iterable[str], report_item_failures: bool
) -> tuple[set[str] | None, str]:
    """(ids of the messages that failed, or None for the whole batch; why).

    Lambda's rules: a function error fails the batch. Without ReportBatchItemFailures any other
    answer succeeds. With it, null, ``{}`` and an empty or null ``batchItemFailures`` succeed;
    invalid JSON, a non-object, a ``batchItemFailures`` that is not a list, or an item whose
    ``itemIdentifier`` is missing, empty or not in the batch fail the batch.
    """
    if result.function_error:
        return ALL_FAILED, f"function error: {error_summary(result.payload)}"
    if not report_item_failures:
        return set(), "ok"
    try:
        response = json.loads(result.payload or b"null")
    except ValueError:
        return ALL_FAILED, "the response is not JSON"
    if response is None:
        return set(), "ok"
    if not isinstance(response, dict):
        return ALL_FAILED, f"the response is a JSON {type(response).__name__}, not an object"
    return item_failures(response.get("batchItemFailures"), set(message_ids))


def item_failures(failures: Any, batch: set[str]) -> tuple[set[str] | None, str]:
    if failures is None:
        return set(), "ok"
    if not isinstance(failures, list):
        return ALL_FAILED, "batchItemFailures is not a list"
    failed: set[str] = set()
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(identifier, str) or not identifier or identifier not in batch:
            return ALL_FAILED, f"invalid batchItemFailures entry {failure!r}"
        failed.add(identifier)
    return failed, "batchItemFailures" if failed else "ok"


def error_summary(payload: bytes) -> str:
    try:
        document = json.loads(payload)
    except ValueError:
        return payload[:200].decode("utf-8", "replace")
    if isinstance(document, dict):
        return f"{document.get('errorType', '?')}: {document.get('errorMessage', '')}"[:300]
    return str(document)[:200]
