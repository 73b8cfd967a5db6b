"""AWS::StepFunctions::StateMachine in moto's Step Functions (DefinitionSubstitutions
applied as CloudFormation applies them).

For tests only, `LETHE_LOCAL_DEFINITION_SUBSTITUTIONS` (a JSON object, name -> value) replaces
the value of substitutions a state machine already declares, e.g.
`{"IngestionPollSeconds": 1}` for the erasure workflow's watermark poll, which template.yaml
fixes at 30 s: the definition file stays the deployed one, only the value put in differs. A
name no state machine declares is an error; each override is logged.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import load_document, tag_list
from lethe.localcloud.provision.stack import Created, ProvisionError, Stack, handles

_SUBSTITUTION = re.compile(r"\$\{([^}]+)\}")
OVERRIDES_ENV = "LETHE_LOCAL_DEFINITION_SUBSTITUTIONS"
LOG = logging.getLogger("lethe.localcloud.provision")


def substitution_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The test-only overrides of `OVERRIDES_ENV` (none when it is unset or empty)."""
    text = (os.environ if environ is None else environ).get(OVERRIDES_ENV, "").strip()
    if not text:
        return {}
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProvisionError(f"{OVERRIDES_ENV} is not JSON: {error}") from None
    if not isinstance(overrides, dict):
        raise ProvisionError(f"{OVERRIDES_ENV} must be a JSON object of name -> value")
    return overrides


def overridden(
    lid: str, substitutions: Mapping[str, Any], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """`substitutions` with the overrides of the names it declares (logged)."""
    applied = {name: value for name, value in overrides.items() if name in substitutions}
    if applied:
        LOG.warning("%s: DefinitionSubstitutions overridden for tests: %s", lid, applied)
    return {**substitutions, **applied}


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
    overrides = substitution_overrides()
    unknown = set(overrides) - {
        name
        for resource in stack.template.get("Resources", {}).values()
        if resource.get("Type") == "AWS::StepFunctions::StateMachine"
        for name in resource.get("Properties", {}).get("DefinitionSubstitutions", {})
    }
    if unknown:
        raise ProvisionError(f"{OVERRIDES_ENV}: no state machine substitutes {sorted(unknown)}")
    definition = substitute_definition(
        _definition_text(stack, lid, props),
        overridden(lid, props.get("DefinitionSubstitutions", {}), overrides),
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
