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
