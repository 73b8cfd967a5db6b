"""What an erase run has done so far, one document per object, written as the run goes.

`results.json` is written by the erase job's driver once every object is done. A run that dies
after rewriting some objects (an executor lost, the job's timeout, a Spark failure) would leave
no record of what it destroyed. So each executor task also writes, right after it has finished
one object (rewritten, deleted, left or refused), that object's result to

    erasure/<request id>/progress/<first 32 hex digits of SHA-256(object URL)>.json

(an `ObjectProgress`: the result and the SHA-256 of the report it was done under). The name is a
hash of the URL, not the URL: object keys can hold a subject id. A re-run of the same report
overwrites an object's progress with its newer result (the reports bucket keeps every version of
`erasure/` documents: lethe_shared.erasure.evidence).

Who reads it: the step that ends a FAILED request (a partial certificate of what was done before
the failure: `done_so_far`), and a resumed run, which starts from what is recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from pydantic import ConfigDict, ValidationError

from lethe_shared.erasure.report import Manifest, ObjectResult, report_key
from lethe_shared.models import Model

PROGRESS_DIR = "progress"


class ObjectProgress(Model):
    """One object's result, recorded by the executor task that erased it."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    manifest_sha256: str  # the report the object was erased under
    recorded_at: str  # ISO 8601, UTC
    result: ObjectResult


def progress_name(object_url: str) -> str:
    """The document's name under the request's directory (no part of the URL in clear)."""
    digest = hashlib.sha256(object_url.encode()).hexdigest()[:32]
    return f"{PROGRESS_DIR}/{digest}.json"


def progress_key(request_id: str, object_url: str) -> str:
    """Where the progress of one object of a request lives in the reports bucket."""
    return report_key(request_id, progress_name(object_url))


def done_so_far(
    manifest: Manifest,
    manifest_sha256: str,
    get: Callable[[str], bytes | None],
) -> tuple[ObjectResult, ...]:
    """The results recorded for the report's objects, in the report's order: only those of this
    report (`manifest_sha256`) and of the object they are filed under. An object with no
    progress document, or one that does not parse or belongs to another report, is absent:
    nothing is known to have been done to it. `get(key)` reads a document of the reports bucket
    (None when there is none)."""
    done: list[ObjectResult] = []
    for item in manifest.objects:
        body = get(progress_key(manifest.request_id, item.object_url))
        if body is None:
            continue
        try:
            progress = ObjectProgress.model_validate_json(body)
        except ValidationError:
            continue
        if (
            progress.request_id == manifest.request_id
            and progress.manifest_sha256 == manifest_sha256
            and progress.result.object_url == item.object_url
        ):
            done.append(progress.result)
    return tuple(done)
