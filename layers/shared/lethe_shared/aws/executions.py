"""Step Functions execution names: the one builder.

An execution name is at most 80 characters of `[A-Za-z0-9_-]`. Lethe derives names from what
an execution is for, so that a repeated start of the same work is refused by Step Functions
(`ExecutionAlreadyExists`) instead of running twice:

- per object version (ingestion, indexing one object): `<dataset>[-<kind>]-<hash of url#version>`;
- per request (an erasure): `erasure-<request id>`;
- per operator command (backfill, reconcile): `<dataset>-<kind>-<UTC timestamp>`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

EXECUTION_NAME_LIMIT = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def execution_name(label: str, unique: str) -> str:
    """`<label>-<unique>` within 80 characters. `unique` is kept whole; a label that does not
    fit is cut and followed by 8 hex digits of its own hash, so that cut labels stay distinct."""
    label, unique = _UNSAFE.sub("_", label), _UNSAFE.sub("_", unique)
    name = f"{label}-{unique}"
    if len(name) <= EXECUTION_NAME_LIMIT:
        return name
    digest = hashlib.sha256(label.encode()).hexdigest()[:8]
    room = EXECUTION_NAME_LIMIT - len(f"-{digest}-{unique}")
    if room < 1:
        raise ValueError(f"{unique!r} leaves no room for a label in an execution name")
    return f"{label[:room]}-{digest}-{unique}"


def version_digest(object_url: str, version_id: str, length: int) -> str:
    """Hex digits of sha256("<object url>#<version id>"): one object version."""
    return hashlib.sha256(f"{object_url}#{version_id}".encode()).hexdigest()[:length]


def timestamped(label: str, kind: str, now: datetime | None = None) -> str:
    """`<label>-<kind>-<UTC timestamp to the second>`: an operator's command."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return execution_name(label, f"{kind}-{stamp}")
