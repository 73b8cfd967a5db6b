"""AWS::SQS::Queue and AWS::SQS::QueuePolicy in moto's SQS."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import json_text, tag_dict
from lethe.localcloud.provision.stack import Created, Stack, handles

_SQS_ATTRIBUTES = (
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "KmsDataKeyReusePeriodSeconds",
    "KmsMasterKeyId",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
)


@handles("AWS::SQS::Queue")
def _sqs_queue(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    fifo = str(props.get("FifoQueue", "")).lower() == "true"
    name = stack.name(lid, props.get("QueueName"), 75 if fifo else 80)
    if fifo and not name.endswith(".fifo"):
        name += ".fifo"
    attributes = {
        key: json_text(props[key]) if isinstance(props[key], dict) else to_text(props[key], key)
        for key in _SQS_ATTRIBUTES
        if key in props
    }
    params: dict[str, Any] = {"QueueName": name, "Attributes": attributes}
    if "Tags" in props:
        params["tags"] = tag_dict(props["Tags"])
    url = stack.call("sqs", "create_queue", **params)["QueueUrl"]
    arn = stack.call("sqs", "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    stack.warn_unhandled(lid, props, {"QueueName", "Tags", *_SQS_ATTRIBUTES})
    return Created(url, {"Arn": arn, "QueueName": name, "QueueUrl": url})


@handles("AWS::SQS::QueuePolicy")
def _sqs_queue_policy(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    for url in props["Queues"]:
        stack.call(
            "sqs",
            "set_queue_attributes",
            QueueUrl=url,
            Attributes={"Policy": json_text(props["PolicyDocument"])},
        )
    return Created(stack.name(lid, None, 128))
