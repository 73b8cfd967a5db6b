"""Read the local IAM check's decision log (`<logs_dir>/iam-decisions.jsonl`); light to import.

The e2e and soak tiers and `lethe demo` read it to fail when any call was denied; see
`lethe.localcloud.iam` for what writes it. Each line is one decision: `role`, `action`,
`resource`, `allowed`, `reason`, `mode` and, for HTTP calls, `service` and `operation`.

Statement coverage: `statement_coverage` tells, for one run, which statements of each role were
needed; `statements_used` and `coverage_by_test` tell it test by test (tests/iam_coverage.py
records each test's decisions when LETHE_IAM_COVERAGE_OUT is set), so that each statement
names a test that fails when the statement is removed: the call it alone allowed is denied,
and the tiers that record fail on any denial (or on the run the denial breaks).
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


def allowing_statements(decision: dict[str, Any]) -> list[str]:
    """The statements (`<policy>/<Sid>`) that allowed an allowed decision; [] for a denial."""
    if not decision.get("allowed"):
        return []
    return list(
        decision.get("allowed_by") or [str(decision.get("reason", "")).removeprefix("allowed by ")]
    )


def statements_used(decisions: list[dict[str, Any]]) -> dict[str, list[list[str]]]:
    """`{"sole": [[role, statement], ...], "shared": [...]}`: the (role name, `<policy>/<Sid>`)
    pairs that were the only statement allowing some call, and those that allowed calls only
    together with another statement; each pair once, sorted."""
    sole: set[tuple[str, str]] = set()
    shared: set[tuple[str, str]] = set()
    for decision in decisions:
        allowed_by = allowing_statements(decision)
        role = str(decision.get("role") or "")
        (sole if len(allowed_by) == 1 else shared).update((role, s) for s in allowed_by)
    return {
        "sole": [list(pair) for pair in sorted(sole)],
        "shared": [list(pair) for pair in sorted(shared - sole)],
    }


def role_logical_id(role_name: str, logical_ids: list[str] | set[str]) -> str | None:
    """The template role a local role name (`lethe-<stage>-<LogicalId>-<suffix>`) belongs to:
    the longest logical id that appears in it between hyphens."""
    found = [lid for lid in logical_ids if f"-{lid}-" in f"{role_name}-"]
    return max(found, key=len) if found else None


def coverage_by_test(
    records: list[dict[str, Any]], translated_template: dict[str, Any]
) -> dict[str, list[str]]:
    """`<LogicalId>/<policy>/<Sid>` -> the tests (sorted) during which that statement was the
    only one allowing some call, from records `{"test": id, "sole": [[role, statement]...]}`
    (`statements_used` of each test's decisions)."""
    roles = {
        lid
        for lid, resource in translated_template.get("Resources", {}).items()
        if resource.get("Type") == "AWS::IAM::Role"
    }
    tests: dict[str, set[str]] = {}
    for record in records:
        for role, statement in record.get("sole", []):
            logical_id = role_logical_id(role, roles)
            if logical_id is not None:
                tests.setdefault(f"{logical_id}/{statement}", set()).add(str(record["test"]))
    return {name: sorted(found) for name, found in sorted(tests.items())}


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
        allowed_by = allowing_statements(decision)
        if allowed_by:
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
