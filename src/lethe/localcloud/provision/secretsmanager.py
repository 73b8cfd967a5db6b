"""AWS::SecretsManager::Secret (given or generated) in moto's Secrets Manager."""

from __future__ import annotations

import json
from typing import Any

from lethe.localcloud.provision.coercion import pick, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::SecretsManager::Secret")
def _secret(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 512)
    params: dict[str, Any] = {"Name": name, **pick(props, ["Description", "KmsKeyId"])}
    if "SecretString" in props:
        params["SecretString"] = props["SecretString"]
    elif "GenerateSecretString" in props:
        params["SecretString"] = _generated_secret(stack, props["GenerateSecretString"])
    if "Tags" in props:
        params["Tags"] = tag_list(props["Tags"])
    arn = stack.call("secretsmanager", "create_secret", **params)["ARN"]
    return Created(arn, {"Id": arn})


def _generated_secret(stack: Stack, spec: dict[str, Any]) -> str:
    options = pick(
        spec,
        [
            "PasswordLength",
            "ExcludeCharacters",
            "ExcludeNumbers",
            "ExcludePunctuation",
            "ExcludeUppercase",
            "ExcludeLowercase",
            "IncludeSpace",
            "RequireEachIncludedType",
        ],
    )
    password = stack.call("secretsmanager", "get_random_password", **options)["RandomPassword"]
    if "SecretStringTemplate" not in spec:
        return str(password)
    document = json.loads(spec["SecretStringTemplate"])
    document[spec["GenerateStringKey"]] = password
    return json.dumps(document)
