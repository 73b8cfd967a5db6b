"""AWS::SES::EmailIdentity, ConfigurationSet and ConfigurationSetEventDestination in moto's SES.

moto keeps configuration sets and event destinations but publishes no sending events: locally
no bounce or complaint ever reaches the notifications topic (docs/LOCAL_CLOUD.md).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::SES::EmailIdentity")
def _ses_identity(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    identity = props["EmailIdentity"]
    if "@" in identity:
        stack.call("ses", "verify_email_identity", EmailAddress=identity)
    else:
        stack.call("ses", "verify_domain_identity", Domain=identity)
    stack.warn_unhandled(lid, props, {"EmailIdentity", "DkimAttributes", "FeedbackAttributes"})
    return Created(identity)


def _already_exists(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code", "")).endswith("AlreadyExists")


@handles("AWS::SES::ConfigurationSet")
def _ses_configuration_set(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = props.get("Name") or f"{stack.stack_name}-{lid}"
    try:
        stack.call("ses", "create_configuration_set", ConfigurationSet={"Name": name})
    except ClientError as error:  # a second provisioning of the same local cloud
        if not _already_exists(error):
            raise
    stack.warn_unhandled(lid, props, {"Name"})
    return Created(name)


@handles("AWS::SES::ConfigurationSetEventDestination")
def _ses_event_destination(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    destination = props["EventDestination"]
    sns = destination.get("SnsDestination")
    shape: dict[str, Any] = {
        "Name": destination["Name"],
        "Enabled": destination.get("Enabled", False),
        "MatchingEventTypes": destination["MatchingEventTypes"],
    }
    if sns:
        shape["SNSDestination"] = {"TopicARN": sns["TopicARN"]}
    try:
        stack.call(
            "ses",
            "create_configuration_set_event_destination",
            ConfigurationSetName=props["ConfigurationSetName"],
            EventDestination=shape,
        )
    except ClientError as error:
        if not _already_exists(error):
            raise
    stack.warn_unhandled(lid, props, {"ConfigurationSetName", "EventDestination"})
    stack.warn_unhandled(
        f"{lid}.EventDestination",
        destination,
        {"Name", "Enabled", "MatchingEventTypes", "SnsDestination"},
    )
    return Created(f"{props['ConfigurationSetName']}|{destination['Name']}")
