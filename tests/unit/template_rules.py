"""What the template policy tests (test_template_policy.py, test_observability.py) share: the
template as loaded by the local cloud's CloudFormation-aware loader, and lookups by type."""

from __future__ import annotations

import re
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
