"""AWS::EMRServerless::Application in moto's EMR Serverless."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.provision.coercion import camel, pick, tag_dict
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::EMRServerless::Application")
def _emr_serverless_application(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 64)
    params: dict[str, Any] = {
        "name": name,
        **camel(
            pick(
                props,
                [
                    "ReleaseLabel",
                    "Type",
                    "MaximumCapacity",
                    "AutoStartConfiguration",
                    "AutoStopConfiguration",
                    "NetworkConfiguration",
                    "Architecture",
                ],
            )
        ),
    }
    if "InitialCapacity" in props:
        params["initialCapacity"] = {
            item["Key"]: camel(item["Value"]) for item in props["InitialCapacity"]
        }
    if "Tags" in props:
        params["tags"] = tag_dict(props["Tags"])
    application = stack.call("emr-serverless", "create_application", **params)
    stack.warn_unhandled(
        lid,
        props,
        {"Name", "Tags", "InitialCapacity", *(k[:1].upper() + k[1:] for k in params)},
    )
    return Created(
        application["applicationId"],
        {"ApplicationId": application["applicationId"], "Arn": application["arn"]},
    )
