"""AWS::Logs::LogGroup in moto's CloudWatch Logs."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.provision.coercion import tag_dict
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::Logs::LogGroup")
def _log_group(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("LogGroupName"), 512)
    params: dict[str, Any] = {"logGroupName": name}
    if "KmsKeyId" in props:
        params["kmsKeyId"] = props["KmsKeyId"]
    if "Tags" in props:
        params["tags"] = tag_dict(props["Tags"])
    stack.call("logs", "create_log_group", **params)
    if "RetentionInDays" in props:
        stack.call(
            "logs",
            "put_retention_policy",
            logGroupName=name,
            retentionInDays=props["RetentionInDays"],
        )
    stack.warn_unhandled(lid, props, {"LogGroupName", "KmsKeyId", "Tags", "RetentionInDays"})
    return Created(name, {"Arn": stack.arn("logs", f"log-group:{name}:*")})
