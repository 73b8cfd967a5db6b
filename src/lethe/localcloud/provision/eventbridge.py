"""AWS::Events::Rule (with its targets) in moto's EventBridge."""

from __future__ import annotations

import json
from typing import Any

from lethe.localcloud.provision.coercion import json_text, pick
from lethe.localcloud.provision.stack import Created, ProvisionError, Stack, handles


@handles("AWS::Events::Rule")
def _events_rule(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 64)
    bus = str(props.get("EventBusName", "default")).rsplit("event-bus/", 1)[-1]
    params: dict[str, Any] = {
        "Name": name,
        "EventBusName": bus,
        "State": props.get("State", "ENABLED"),
        **pick(props, ["Description", "ScheduleExpression", "RoleArn"]),
    }
    if "EventPattern" in props:
        params["EventPattern"] = json_text(props["EventPattern"])
    targets = [_event_target(lid, target) for target in props.get("Targets", [])]
    arn = stack.call("events", "put_rule", **params)["RuleArn"]
    if targets:
        result = stack.call("events", "put_targets", Rule=name, EventBusName=bus, Targets=targets)
        if result.get("FailedEntryCount"):
            raise ProvisionError(f"{lid}: targets rejected: {result['FailedEntries']}")
    stack.warn_unhandled(lid, props, {*params, "Targets"})
    return Created(name if bus == "default" else f"{bus}|{name}", {"Arn": arn})


def _event_target(lid: str, target: dict[str, Any]) -> dict[str, Any]:
    if target.get("InputTransformer"):
        raise ProvisionError(
            f"{lid}: target {target.get('Id')} uses InputTransformer, which the local cloud "
            "does not emulate (lethe.localcloud.eventbridge delivers Input, InputPath or the event)"
        )
    result = dict(target)
    if isinstance(result.get("Input"), dict):
        result["Input"] = json.dumps(result["Input"])
    return result
