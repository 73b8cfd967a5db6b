"""AWS::KMS::Key and AWS::KMS::Alias in moto's KMS."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.provision.coercion import json_text, pick, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::KMS::Key")
def _kms_key(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    params: dict[str, Any] = pick(props, ["Description", "KeyUsage", "KeySpec", "MultiRegion"])
    if "KeyPolicy" in props:
        params["Policy"] = json_text(props["KeyPolicy"])
    if "Tags" in props:
        params["Tags"] = [
            {"TagKey": t["Key"], "TagValue": t["Value"]} for t in tag_list(props["Tags"])
        ]
    key = stack.call("kms", "create_key", **params)["KeyMetadata"]
    if props.get("EnableKeyRotation") in (True, "true"):
        stack.call("kms", "enable_key_rotation", KeyId=key["KeyId"])
    return Created(key["KeyId"], {"Arn": key["Arn"], "KeyId": key["KeyId"]})


@handles("AWS::KMS::Alias")
def _kms_alias(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    stack.call(
        "kms", "create_alias", AliasName=props["AliasName"], TargetKeyId=props["TargetKeyId"]
    )
    return Created(props["AliasName"])
