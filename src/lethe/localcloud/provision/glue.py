"""AWS::Glue::Job and AWS::Glue::SecurityConfiguration in moto's Glue."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import pick, tag_dict
from lethe.localcloud.provision.stack import Created, Stack, handles

_GLUE_JOB_PARAMETERS = (
    "Description",
    "LogUri",
    "Role",
    "ExecutionProperty",
    "Command",
    "DefaultArguments",
    "NonOverridableArguments",
    "Connections",
    "MaxRetries",
    "Timeout",
    "MaxCapacity",
    "SecurityConfiguration",
    "NotificationProperty",
    "GlueVersion",
    "NumberOfWorkers",
    "WorkerType",
    "ExecutionClass",
    "JobMode",
    "MaintenanceWindow",
)


@handles("AWS::Glue::Job")
def _glue_job(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 255)
    params: dict[str, Any] = {"Name": name, **pick(props, _GLUE_JOB_PARAMETERS)}
    for key in ("DefaultArguments", "NonOverridableArguments"):
        if key in params:
            params[key] = {k: to_text(v, f"{lid}.{key}.{k}") for k, v in params[key].items()}
    if "Tags" in props:
        params["Tags"] = tag_dict(props["Tags"])
    stack.call("glue", "create_job", **params)
    stack.warn_unhandled(lid, props, {*params, "AllocatedCapacity"})
    return Created(name)


@handles("AWS::Glue::SecurityConfiguration")
def _glue_security_configuration(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 255)
    stack.call(
        "glue",
        "create_security_configuration",
        Name=name,
        EncryptionConfiguration={
            # CloudFormation says S3Encryptions where the API says S3Encryption
            ("S3Encryption" if key == "S3Encryptions" else key): value
            for key, value in props["EncryptionConfiguration"].items()
        },
    )
    return Created(name)
