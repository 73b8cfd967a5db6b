"""What the template policy tests (test_template_policy.py, test_observability.py) share: the
template as loaded by the local cloud's CloudFormation-aware loader, and lookups by type."""

from __future__ import annotations

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
