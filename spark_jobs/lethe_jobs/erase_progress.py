"""What the erase job records as it goes, and how a later run of the same report starts from it
(lethe_shared.erasure.progress: the documents, one per object).

**Written as the job goes.** Right after an executor task has finished one object (rewritten,
deleted, found clean, left, or erased again by the verify run), it writes that object's
`ObjectProgress` to `erasure/<request>/progress/<hash of the URL>.json` in the reports bucket,
before it moves to the next object; the driver writes those of the objects it refused (pins)
before it hands the rest out. One small PUT per object (well under a kilobyte and a few tens of
milliseconds, against objects of megabytes to gigabytes that are downloaded and rewritten):
a run that dies leaves a record of every object it finished. An object whose task died part-way
(its new version written, its older versions not yet purged) has none: nothing is known to have
been done to it, and the next run erases it as if for the first time (the writes ledger credits
the rows the dead run removed, lethe_jobs.erase_core).

**A re-run starts from the record.** The driver lists the request's progress documents (one
LIST per thousand) and reads those of this report (`done_so_far`: the same manifest SHA-256, the
same object). Each object goes to its task with its recorded result (`EraseTask.earlier`):

- the key is exactly as that result left it (only the version it left, with its ETag; no
  version at all for a key it deleted): the recorded result is the object's result, unchanged
  (`as_recorded`); nothing is read or written;
- otherwise (a producer wrote or deleted meanwhile) the object is erased again and the two are
  merged (`resumed`): the versions seen by either, the rows removed and versions purged by both,
  attempts added, every gap and deviation of either kept.

So a run killed part-way then run again gives the `results.json` a single clean run gives (the
same rows removed, versions purged, actions), and each object's progress document ends with the
newer result. The verify run's re-erasure (lethe_jobs.erase_again) merges the same way.

Every document of the request the job writes (results, verification, progress) goes through
`put_document`: the one place that says how the job stores them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import ConfigDict

from lethe_jobs.not_searched import action_of
from lethe_shared.aws.s3 import ObjectVersion, S3ObjectStore, s3_url
from lethe_shared.erasure.evidence import EvidenceLock, put_arguments
from lethe_shared.erasure.progress import PROGRESS_DIR, ObjectProgress, done_so_far, progress_key
from lethe_shared.erasure.report import (
    Manifest,
    ManifestObject,
    NotSearched,
    ObjectAction,
    ObjectResult,
    VersionRef,
    canonical_json,
    report_key,
)
from lethe_shared.models import Model

T = TypeVar("T")


class EraseTask(Model):
    """One object handed to an executor: the manifest's entry and what is already recorded of
    it under this report (the erase run: its progress document; the verify run: results.json)."""

    model_config = ConfigDict(frozen=True)

    item: ManifestObject
    earlier: ObjectResult | None = None


def put_document(
    reports: S3ObjectStore, bucket: str, key: str, document: Any, *, lock: EvidenceLock | None
) -> str:
    """Store one document of the request (canonical JSON) in the reports bucket, as a new
    version locked as `lock` says (lethe_shared.erasure.evidence; None: not locked); its URL."""
    reports.put_bytes(
        bucket, key, canonical_json(document), content_type="application/json",
        extra=put_arguments(key, lock),
    )  # fmt: skip
    return s3_url(bucket, key)


def record_progress(
    reports: S3ObjectStore,
    bucket: str,
    *,
    request_id: str,
    manifest_sha256: str,
    result: ObjectResult,
    lock: EvidenceLock | None,
    now: datetime | None = None,
) -> str:
    """Write one finished object's progress (module docstring), locked as `lock` says; its
    URL."""
    progress = ObjectProgress(
        request_id=request_id,
        manifest_sha256=manifest_sha256,
        recorded_at=(now or datetime.now(UTC)).isoformat(),
        result=result,
    )
    key = progress_key(request_id, result.object_url)
    return put_document(reports, bucket, key, progress.model_dump(mode="json"), lock=lock)


class Recording(Protocol):
    """What recording progress needs of the job's settings (erase_settings.EraseSettings)."""

    @property
    def request_id(self) -> str: ...

    @property
    def reports_bucket(self) -> str:
        """ "": no progress is recorded (a caller outside the job)."""

    @property
    def manifest_sha256(self) -> str: ...

    @property
    def evidence(self) -> EvidenceLock | None:
        """How progress documents are locked (None: not locked)."""


def recorder(reports: S3ObjectStore, ctx: Recording) -> Callable[[ObjectResult], None]:
    """`record(result)`: write one finished object's progress under the job's report."""

    def record(result: ObjectResult) -> None:
        if ctx.reports_bucket:
            record_progress(
                reports, ctx.reports_bucket, request_id=ctx.request_id,
                manifest_sha256=ctx.manifest_sha256, result=result, lock=ctx.evidence,
            )  # fmt: skip

    return record


def recorded_results(
    reports: S3ObjectStore, bucket: str, manifest: Manifest, manifest_sha256: str
) -> dict[str, ObjectResult]:
    """The results recorded for this report's objects, by URL: only the documents a LIST of the
    request's progress directory names are read (a first run reads none)."""
    prefix = report_key(manifest.request_id, f"{PROGRESS_DIR}/")
    listed = {
        v.key for v in reports.list_versions(bucket, prefix) if v.is_latest and not v.delete_marker
    }

    def get(key: str) -> bytes | None:
        return reports.read_bytes(bucket, key) if key in listed else None

    return {r.object_url: r for r in done_so_far(manifest, manifest_sha256, get)}


def as_recorded(earlier: ObjectResult, versions: Iterable[ObjectVersion]) -> bool:
    """The key is exactly as `earlier` left it: its one version, the one the result left (same
    ETag where both say it), or no version at all when the result left none."""
    listed = list(versions)
    after = earlier.version_after
    if after is None:
        return not listed
    if len(listed) != 1 or listed[0].delete_marker:
        return False
    only = listed[0]
    return only.version_id == after.version_id and (
        not only.etag or not after.etag or only.etag == after.etag
    )


def _union(first: Iterable[T], then: Iterable[T]) -> tuple[T, ...]:
    seen: list[T] = []
    for value in (*first, *then):
        if value not in seen:
            seen.append(value)
    return tuple(seen)


def resumed(earlier: ObjectResult, now: ObjectResult) -> ObjectResult:
    """One result for an object erased under the same report by an earlier run (`earlier`) and
    again (`now`, which credited none of `earlier`'s rows): the versions either saw (the
    earlier's first: what the object held before this request touched it), the rows removed and
    the versions purged by both, attempts added, every gap and deviation of either. Rows the
    earlier run removed count as rows before, as they do within one run."""
    removed = earlier.rows_removed + now.rows_removed
    gaps: tuple[NotSearched, ...] = _union(earlier.not_searched, now.not_searched)
    action: ObjectAction
    if now.action in ("gone", "purged"):  # no version left to read now
        action = "deleted" if removed else now.action
    elif now.action == "refused":
        action = now.action
    else:
        action = action_of(removed, now.version_after, gaps)
    before: tuple[VersionRef, ...] = _union(earlier.versions_before, now.versions_before)
    return now.model_copy(
        update={
            "action": action,
            "versions_before": before,
            "rows_before": now.rows_before + earlier.rows_removed,
            "rows_removed": removed,
            "versions_purged": earlier.versions_purged + now.versions_purged,
            "attempts": earlier.attempts + now.attempts,
            "deviations": _union(earlier.deviations, now.deviations),
            "not_searched": gaps,
        }
    )
