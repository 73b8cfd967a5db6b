"""AWS::StepFunctions::StateMachine in moto's Step Functions (DefinitionSubstitutions
applied as CloudFormation applies them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import load_document, tag_list
from lethe.localcloud.provision.stack import Created, ProvisionError, Stack, handles

_SUBSTITUTION = re.compile(r"\$\{([^}]+)\}")


def substitute_definition(definition: str, substitutions: Mapping[str, Any]) -> str:
    """DefinitionSubstitutions as CloudFormation applies them: textual ${Name} for each key."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in substitutions:
            return match.group(0)
        return to_text(substitutions[name], f"DefinitionSubstitutions.{name}")

    return _SUBSTITUTION.sub(replace, definition)


@handles("AWS::StepFunctions::StateMachine")
def _state_machine(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("StateMachineName"), 80)
    definition = substitute_definition(
        _definition_text(stack, lid, props), props.get("DefinitionSubstitutions", {})
    )
    try:
        json.loads(definition)
    except json.JSONDecodeError as error:
        raise ProvisionError(
            f"{lid}: the definition is not JSON after substitution: {error}"
        ) from None
    copy = stack.state_dir / "statemachines" / f"{name}.asl.json"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(definition)
    params: dict[str, Any] = {
        "name": name,
        "definition": definition,
        "roleArn": props["RoleArn"],
        "type": props.get("StateMachineType", "STANDARD"),
    }
    if "Tags" in props:
        params["tags"] = [{"key": t["Key"], "value": t["Value"]} for t in tag_list(props["Tags"])]
    arn = stack.call("stepfunctions", "create_state_machine", **params)["stateMachineArn"]
    stack.warn_unhandled(
        lid,
        props,
        {
            "StateMachineName",
            "Definition",
            "DefinitionString",
            "DefinitionS3Location",
            "DefinitionSubstitutions",
            "RoleArn",
            "StateMachineType",
            "Tags",
            "LoggingConfiguration",
            "TracingConfiguration",
        },
    )
    return Created(arn, {"Arn": arn, "Name": name, "StateMachineRevisionId": arn})


def _definition_text(stack: Stack, lid: str, props: dict[str, Any]) -> str:
    if "DefinitionString" in props:
        return str(props["DefinitionString"])
    if "Definition" in props:
        return json.dumps(props["Definition"])
    location = props.get("DefinitionS3Location")
    if location is None:
        raise ProvisionError(f"{lid}: no Definition, DefinitionString or DefinitionS3Location")
    path = stack.local_path(lid, "DefinitionS3Location", location["Bucket"], location["Key"])
    if path.suffix in {".yaml", ".yml"}:
        return json.dumps(load_document(path))
    return path.read_text()
