"""What the certificate and the audit record show of the erase job's documents: the same
objects and gaps, every object named by its shown key (lethe_shared.subject_hashing.shown_keys)
and every text of Lethe's (a gap's detail, a deviation) scrubbed of keys and partition values
(lethe_shared.aws.scrub). The documents themselves (results.json, verification.json, the
manifest) keep the real keys: the certificate names their SHA-256, so `--verify` re-hashes them
as stored."""

from __future__ import annotations

import json
from typing import Any

from lethe_shared.aws.scrub import scrub_text
from lethe_shared.erasure.report import NotSearched, ObjectResult
from lethe_shared.subject_hashing.shown_keys import Namer, RedactingNamer

KEYLESS: Namer = RedactingNamer()


def shown_gap(gap: NotSearched, namer: Namer) -> dict[str, Any]:
    """A gap as the audit record shows it."""
    shown = gap.model_dump(mode="json")
    shown["object_url"] = namer.url(gap.object_url)
    shown["detail"] = scrub_text(gap.detail, namer, quoted=False)
    return shown


def shown_result(result: ObjectResult, namer: Namer) -> dict[str, Any]:
    """An object's result as the audit record shows it."""
    shown: dict[str, Any] = json.loads(result.model_dump_json())
    shown["object_url"] = namer.url(result.object_url)
    shown["deviations"] = [scrub_text(d, namer, quoted=False) for d in result.deviations]
    shown["not_searched"] = [shown_gap(g, namer) for g in result.not_searched]
    return shown
