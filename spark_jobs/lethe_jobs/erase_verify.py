"""The erase job's verify run (`--mode verify`, lethe_jobs.erase_core.run_verify), one object at a
time: no version but the one erasure left, no row of the subjects in it, and the expected
number of rows.

A widened raw key (`ManifestObject.widened_from`) whose current version the erase run could not
read was left as it is and named as a gap (`ingestion_failed`, lethe_jobs.not_searched): the
verify run cannot read it either, and accepts it when the erase result says exactly that
(`accepts_unreadable`); its versions are still checked. The request then ends INCOMPLETE, not
FAILED for the whole run. Any other version that cannot be read fails the run, as before.

An object the erase run refused because the frozen report's pins did not hold (action `refused`,
lethe_shared.erasure.pins) was deliberately left untouched, and is named as not searched: it is
accepted unread (`accepts_refused`), so the rest of the request is still proven and the request
ends INCOMPLETE naming it.

A version newer than the one erasure left is accepted only when the writes ledger records it as
written by the erase job for another request (lethe_jobs.erase_ledger). A version whose metadata
claims an erasure (`lethe-producer: erase`, `lethe-erasure: <another request>`) but that the
ledger does not know is a producer's, and fails the check like any producer's version.

A failed check is not yet a failed verification: the verify run's tasks (lethe_jobs.erase_again)
erase again, a bounded number of times, an object whose versions are not as erasure may leave
them (`versions_as_left`) or that holds the subjects' rows, then check it again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from lethe_jobs.erase_ledger import LedgerReader, erased_by
from lethe_jobs.erase_rows import SubjectMatcher, match_rows
from lethe_jobs.not_searched import UNREADABLE, accepts_unreadable
from lethe_jobs.objects import object_kind
from lethe_shared.aws.s3 import ObjectStore, ObjectVersion, split_s3_url
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.erasure.pins import accepts_refused
from lethe_shared.erasure.report import ObjectCheck, ObjectResult


class VerifyContext(Protocol):
    """What the verify run needs of the job's settings (erase_core.EraseSettings)."""

    @property
    def request_id(self) -> str: ...

    @property
    def correlation_id(self) -> str: ...

    @property
    def buckets(self) -> Buckets: ...

    @property
    def catalog_table(self) -> str:
        """The writes ledger's table ("": none, so no version is known as an erasure's)."""

    @property
    def widened(self) -> frozenset[str]:
        """The URLs of the manifest's widened raw keys."""

    def matcher(self, dataset_id: str) -> SubjectMatcher: ...


def verify_object(
    store: ObjectStore,
    result: ObjectResult,
    ctx: VerifyContext,
    ledger: LedgerReader | None = None,
) -> ObjectCheck:
    """One object after the erasure: only the version erasure left (or none), holding none of
    the subjects' rows and the rows it should.

    Another request's erasure may have rewritten the object since (requests touching one object
    are serialised by the conditional write, docs/ERASURE.md): versions newer than ours, each
    written by another request's erasure as the writes ledger (`ledger`) records it, never as
    their metadata claims, are accepted, and ours may be gone (that erasure purged it). Then
    every version left must hold none of the subjects' rows, ours the rows it should and the
    newer ones no more than that; anything else (a producer's version, an older version, a
    delete marker) fails as before. A widened key's version the erase run could not read, and
    named, is accepted unread (module docstring)."""
    bucket, key = split_s3_url(result.object_url)
    versions = store.versions_of(bucket, key)
    left = [v for v in versions if not v.delete_marker]
    if accepts_refused(result):  # untouched on purpose, named as not searched: not read
        return ObjectCheck(
            object_url=result.object_url, ok=True, matching_rows=0, rows=None,
            versions_left=len(versions),
        )  # fmt: skip
    if result.version_after is None:
        ok = versions_as_left(result, versions, ledger, ctx.request_id)
        problem = "" if ok else f"{len(versions)} version(s) left of a key erasure deleted"
        return ObjectCheck(
            object_url=result.object_url, ok=ok, matching_rows=0, rows=None,
            versions_left=len(versions), problem=problem,
        )  # fmt: skip
    ours = result.version_after.version_id
    newer = _newer(result, versions)
    if not versions_as_left(result, versions, ledger, ctx.request_id):
        listed = ", ".join(v.version_id for v in versions)
        return ObjectCheck(
            object_url=result.object_url, ok=False, matching_rows=0, rows=None,
            versions_left=len(versions),
            problem=f"expected only the erased version, found {listed}",
        )  # fmt: skip
    item_kind = object_kind(result.dataset_id, bucket, key, ctx.buckets)
    matched, problems, current_rows = 0, list[str](), None
    for version in left:
        with tempfile.TemporaryDirectory(prefix="lethe-verify-") as tmp:
            path = Path(tmp) / "object"
            if store.download(bucket, key, version.version_id, path) is None:
                problems.append(f"version {version.version_id} cannot be read")
                continue
            try:
                found = match_rows(
                    item_kind, path, key, ctx.matcher(result.dataset_id), workdir=Path(tmp)
                )
            except UNREADABLE:
                if accepts_unreadable(result, version.version_id, ctx.widened):
                    continue  # named as not searched by the erase run: the request is INCOMPLETE
                raise
        matched += found.matched
        current_rows = found.rows if current_rows is None else current_rows
        expected_rows = (
            found.rows == result.rows_after
            if version.version_id == ours
            else (found.rows <= result.rows_after)
        )
        if found.matched or not expected_rows:
            problems.append(
                f"{found.matched} matching row(s), {found.rows} rows (expected "
                f"{'' if version.version_id == ours else 'at most '}{result.rows_after})"
            )
    if problems and len(left) == 1 and not newer and problems[0].endswith("cannot be read"):
        problems = ["the erased version cannot be read"]
    return ObjectCheck(
        object_url=result.object_url, ok=not problems, matching_rows=matched,
        rows=current_rows, versions_left=len(versions), problem="; ".join(problems),
    )  # fmt: skip


def _newer(result: ObjectResult, versions: Sequence[ObjectVersion]) -> Sequence[ObjectVersion]:
    """The versions above the one erasure left (all of them when it is not there)."""
    ours = result.version_after.version_id if result.version_after else None
    ids = [v.version_id for v in versions]
    return versions[: ids.index(ours)] if ours in ids else versions


def versions_as_left(
    result: ObjectResult,
    versions: Sequence[ObjectVersion],
    ledger: LedgerReader | None,
    request_id: str,
) -> bool:
    """The key's versions are what the erasure may leave: none for a key it deleted; else the
    version it left (or none of it, purged by a later erasure) under only versions another
    request's erasure wrote (`verify_object`): no older version, no delete marker, no
    producer's version. What erasing the object again can fix when it is not so
    (lethe_jobs.erase_again)."""
    if result.version_after is None:
        return not versions
    ours = result.version_after.version_id
    ids = [v.version_id for v in versions]
    older = versions[ids.index(ours) + 1 :] if ours in ids else []
    data = [v for v in versions if not v.delete_marker]
    bucket, key = split_s3_url(result.object_url)
    return (
        not older
        and bool(data)
        and len(data) == len(versions)
        and _later_erasures(ledger, bucket, key, _newer(result, versions), request_id)
    )


def _later_erasures(
    ledger: LedgerReader | None,
    bucket: str,
    key: str,
    newer: Sequence[ObjectVersion],
    request_id: str,
) -> bool:
    """Every version newer than this erasure's own was written by another request's erasure,
    as the writes ledger recorded it (a version it does not know is a producer's)."""
    for version in newer:
        by = erased_by(ledger, bucket, key, version.version_id)
        if by is None or by == request_id:
            return False
    return True
