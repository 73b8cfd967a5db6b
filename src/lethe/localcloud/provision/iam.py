"""AWS::IAM::Role (inline and managed policies) in moto's IAM."""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from lethe.localcloud.provision.coercion import json_text, pick, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles
from lethe_shared.aws.errors import is_no_such_entity

logger = logging.getLogger("lethe.localcloud.provision")


@handles("AWS::IAM::Role")
def _iam_role(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("RoleName"), 64)
    params: dict[str, Any] = {
        "RoleName": name,
        "AssumeRolePolicyDocument": json_text(props["AssumeRolePolicyDocument"]),
        **pick(props, ["Path", "Description", "MaxSessionDuration", "PermissionsBoundary"]),
    }
    if "Tags" in props:
        params["Tags"] = tag_list(props["Tags"])
    role = stack.call("iam", "create_role", **params)["Role"]
    for policy in props.get("Policies", []):
        stack.call(
            "iam",
            "put_role_policy",
            RoleName=name,
            PolicyName=policy["PolicyName"],
            PolicyDocument=_policy_document(policy["PolicyDocument"]),
        )
    for arn in props.get("ManagedPolicyArns", []):
        _attach_role_policy(stack, name, arn)
    stack.warn_unhandled(lid, props, {*params, "Policies", "ManagedPolicyArns"})
    return Created(name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})


def _policy_document(document: Any) -> str:
    """IAM accepts a policy without Version (SAM emits some); moto wants 2012-10-17."""
    if isinstance(document, dict) and "Version" not in document:
        document = {"Version": "2012-10-17", **document}
    return json_text(document)


def _attach_role_policy(stack: Stack, role: str, arn: str) -> None:
    try:
        stack.call("iam", "attach_role_policy", RoleName=role, PolicyArn=arn)
    except ClientError as error:
        if not is_no_such_entity(error) or ":iam::aws:policy/" not in arn:
            raise
        logger.warning(
            "role %s: AWS managed policy %s is not loaded in moto; IAM is not enforced locally",
            role,
            arn,
        )
