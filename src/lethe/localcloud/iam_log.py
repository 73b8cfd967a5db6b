"""Read the local IAM check's decision log (`<logs_dir>/iam-decisions.jsonl`); light to import.

The e2e and soak tiers and `lethe demo` read it to fail when any call was denied; see
`lethe.localcloud.iam` for what writes it. Each line is one decision: `role`, `action`,
`resource`, `allowed`, `reason`, `mode` and, for HTTP calls, `service` and `operation`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DECISIONS_FILE = "iam-decisions.jsonl"


def decisions_path(logs_dir: Path | str) -> Path:
    return Path(logs_dir) / DECISIONS_FILE


def read_decisions(logs_dir: Path | str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The decisions written from byte `offset` on (whole lines only), and the next offset."""
    path = decisions_path(logs_dir)
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    complete = data[: data.rfind(b"\n") + 1]
    lines = complete.decode("utf-8", "replace").splitlines()
    return [json.loads(line) for line in lines if line.strip()], offset + len(complete)


def end_offset(logs_dir: Path | str) -> int:
    """Where the next decision will start (after the last complete line), without parsing."""
    path = decisions_path(logs_dir)
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 65536))
            tail = handle.read()
    except FileNotFoundError:
        return 0
    return size - len(tail) + tail.rfind(b"\n") + 1


def denials(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [decision for decision in decisions if not decision.get("allowed")]


def describe(decision: dict[str, Any]) -> str:
    """One line naming role, action, resource and why (for a test failure or the demo)."""
    return (
        f"role {decision.get('role') or '(none)'} may not {decision.get('action')} on "
        f"{decision.get('resource')}: {decision.get('reason')}"
    )


def distinct_denials(decisions: list[dict[str, Any]]) -> list[str]:
    """Each denied (role, action, resource, reason) once, described."""
    return sorted({describe(decision) for decision in denials(decisions)})


def statement_coverage(
    decisions: list[dict[str, Any]], translated_template: dict[str, Any]
) -> dict[str, dict[str, str]]:
    """For each role (logical id) of the translated template, each statement of its inline
    policies (`<policy>/<Sid>`, `#n` without a Sid): "sole" (the only statement allowing some
    call: removing it fails that call), "shared" (it allowed calls, each also allowed by another
    statement) or "unused" (no call of the run needed it; a condition-false `Fn::If` branch is
    left out). A Deny statement is "deny" (it never allows)."""
    sole: set[str] = set()
    shared: set[str] = set()
    for decision in decisions:
        if not decision.get("allowed"):
            continue
        allowed_by = decision.get("allowed_by") or [
            str(decision.get("reason", "")).removeprefix("allowed by ")
        ]
        (sole if len(allowed_by) == 1 else shared).update(allowed_by)
    coverage: dict[str, dict[str, str]] = {}
    for logical_id, resource in translated_template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::IAM::Role":
            continue
        statements: dict[str, str] = {}
        for policy in resource.get("Properties", {}).get("Policies", []):
            if not isinstance(policy, dict) or "PolicyName" not in policy:
                continue  # an Fn::If whose branch the run did not take is not counted
            document = policy.get("PolicyDocument", {})
            for index, statement in enumerate(document.get("Statement", [])):
                if not isinstance(statement, dict):
                    continue
                name = f"{policy['PolicyName']}/{statement.get('Sid') or f'#{index}'}"
                if statement.get("Effect") == "Deny":
                    statements[name] = "deny"
                else:
                    statements[name] = (
                        "sole" if name in sole else "shared" if name in shared else "unused"
                    )
        coverage[logical_id] = statements
    return coverage
