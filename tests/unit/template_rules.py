"""What the template policy tests (test_template_policy.py, test_observability.py) share: the
template as loaded by the local cloud's CloudFormation-aware loader, and lookups by type."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

Template = dict[str, Any]


def resources_of(template: Template, *types: str) -> dict[str, dict[str, Any]]:
    """The resources of these types, by logical id."""
    return {
        lid: resource
        for lid, resource in template.get("Resources", {}).items()
        if resource.get("Type") in types
    }


def properties_of(resource: dict[str, Any]) -> dict[str, Any]:
    """A resource's Properties (a copy of the top level; {} when it has none)."""
    return dict(resource.get("Properties") or {})


def first_of(template: Template, *types: str) -> str:
    """The first logical id of these types, in sorted order (what a breaker breaks)."""
    return sorted(resources_of(template, *types))[0]


# The Lambda runtime: every function and layer on it, its layers' pins tested on it.
LAMBDA_RUNTIME = "python3.13"
LAMBDA_ARCHITECTURES = ["arm64"]


def function_settings(template: Template, lid: str) -> dict[str, Any]:
    """A function's Properties with Globals.Function under them, as SAM merges them (top level:
    a function's own value wins)."""
    resource = template["Resources"][lid]
    own = properties_of(resource)
    if resource.get("Type") != "AWS::Serverless::Function":
        return own
    return {**(template.get("Globals", {}).get("Function") or {}), **own}


def requirement_pins(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements or lock file (names
    normalised as pip does, extras dropped, comments ignored)."""
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        name, version = (part.strip() for part in line.split("==", 1))
        name = re.sub(r"[-_.]+", "-", name.split("[", 1)[0]).lower()
        pins[name] = version
    return pins


NO_VALUE = {"Ref": "AWS::NoValue"}


def conditions_in(value: Any) -> set[str]:
    """The template conditions value's Fn::If branches name."""
    if isinstance(value, dict):
        found = {value["Fn::If"][0]} if "Fn::If" in value else set()
        for item in value.values():
            found |= conditions_in(item)
        return found
    if isinstance(value, list):
        return set().union(*(conditions_in(item) for item in value)) if value else set()
    return set()


def under(value: Any, truth: dict[str, bool]) -> Any:
    """value with every Fn::If decided by truth; AWS::NoValue becomes None (absent)."""
    if isinstance(value, dict):
        if "Fn::If" in value:
            condition, when_true, when_false = value["Fn::If"]
            return under(when_true if truth[condition] else when_false, truth)
        if value == NO_VALUE:
            return None
        resolved = {k: under(v, truth) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not None}
    if isinstance(value, list):
        return [item for item in (under(v, truth) for v in value) if item is not None]
    return value


def every_branch(value: Any) -> Iterator[tuple[dict[str, bool], Any]]:
    """(truth, value decided by it) for every combination of the conditions value uses."""
    names = sorted(conditions_in(value))
    for values in itertools.product([True, False], repeat=len(names)):
        truth = dict(zip(names, values, strict=True))
        yield truth, under(value, truth)
