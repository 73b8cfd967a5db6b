"""AWS::SNS::Topic, TopicPolicy and Subscription in moto's SNS."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import json_text, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::SNS::Topic")
def _sns_topic(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    fifo = str(props.get("FifoTopic", "")).lower() == "true"
    name = stack.name(lid, props.get("TopicName"), 251 if fifo else 256)
    if fifo and not name.endswith(".fifo"):
        name += ".fifo"
    attribute_names = [
        "DisplayName",
        "KmsMasterKeyId",
        "FifoTopic",
        "ContentBasedDeduplication",
        "SignatureVersion",
        "TracingConfig",
    ]
    attributes = {k: to_text(props[k], k) for k in attribute_names if k in props}
    params: dict[str, Any] = {"Name": name, "Attributes": attributes}
    if "Tags" in props:
        params["Tags"] = tag_list(props["Tags"])
    arn = stack.call("sns", "create_topic", **params)["TopicArn"]
    for subscription in props.get("Subscription", []):
        stack.call(
            "sns",
            "subscribe",
            TopicArn=arn,
            Protocol=subscription["Protocol"],
            Endpoint=subscription["Endpoint"],
        )
    stack.warn_unhandled(lid, props, {"TopicName", "Tags", "Subscription", *attribute_names})
    return Created(arn, {"TopicArn": arn, "TopicName": name})


@handles("AWS::SNS::TopicPolicy")
def _sns_topic_policy(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    for arn in props["Topics"]:
        stack.call(
            "sns",
            "set_topic_attributes",
            TopicArn=arn,
            AttributeName="Policy",
            AttributeValue=json_text(props["PolicyDocument"]),
        )
    return Created(stack.name(lid, None, 128))


@handles("AWS::SNS::Subscription")
def _sns_subscription(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    attribute_names = [
        "DeliveryPolicy",
        "FilterPolicy",
        "FilterPolicyScope",
        "RawMessageDelivery",
        "RedrivePolicy",
        "SubscriptionRoleArn",
    ]
    attributes = {
        k: json_text(props[k]) if isinstance(props[k], dict) else to_text(props[k], k)
        for k in attribute_names
        if k in props
    }
    arn = stack.call(
        "sns",
        "subscribe",
        TopicArn=props["TopicArn"],
        Protocol=props["Protocol"],
        Endpoint=props.get("Endpoint", ""),
        Attributes=attributes,
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    stack.warn_unhandled(
        lid, props, {"TopicArn", "Protocol", "Endpoint", "Region", *attribute_names}
    )
    return Created(arn, {"Arn": arn})
