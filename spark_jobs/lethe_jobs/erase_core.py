"""The erase job: remove an approved request's subjects from every object and every stored
version its frozen report lists, then (a second run, `--mode verify`) prove it.

Before anything (either mode), the job reads the request record (GetItem, read-only) and refuses
unless it is ERASING with a recorded approval by an approver other than the requester, and its
recorded report is the manifest (URL and SHA-256) the job was handed
(lethe_shared.erasure.authority.check_erasable): whoever can start the job cannot erase what a
hand-made manifest names, nor a request that was not approved.

Erase (one Spark task per group of objects, `tasks.task_groups`: small objects share a task):

1. read the manifest and refuse it unless its SHA-256 is the one the approver saw;
2. per object, list every version and delete marker of the exact key (lethe_shared.aws.s3);
3. the key's current version: download it, find the subjects' rows with the index's own
   matching and write the object again without them, in its own format (`erase_rows`); the
   new version replaces the old only if the old is still current (an S3 conditional write on
   its ETag), keeping its metadata, tags, content headers and encryption; the writes ledger
   records it (run id: the request id, lethe_jobs.erase_ledger), so the object events path
   leaves the index to the erasure. An object left with no rows is deleted with every
   version. A version a producer wrote meanwhile is never overwritten: the object is read
   again and erased again (a bounded number of times). A current version with nothing left
   to remove that the ledger records as this request's own (an earlier run of it wrote it,
   then died before its results) credits the rows that run removed, from the version's
   `lethe-erased-rows`; metadata alone credits nothing;
4. every older version and delete marker of that exact key is deleted: the subjects' rows in
   overwritten versions go too (an object whose current version never held them still loses
   the older versions that might). A key hidden by a delete marker loses every version;
5. right after each object, its task records its result (its progress document, one small PUT:
   lethe_jobs.erase_progress), so a run that dies leaves a record of every object it finished;
   the driver collects one small result per object and writes `results.json`. A result names
   what of the object could not be searched (`not_searched`, lethe_jobs.not_searched: records
   that could not be parsed, a subject column missing or ambiguous, rows that differ from the
   index's count for the version it described, the unreadable current version of a raw key the
   report added because the index cannot know it); the request then ends INCOMPLETE, never
   COMPLETED. An object the index names whose current version cannot be read fails the run;
   one the report added (`ManifestObject.widened_from`: a FAILED or SUPERSEDED upload, often
   malformed) is named (`ingestion_failed`) and left as it is, its older versions purged, so one
   bad upload does not fail every request on its dataset.

Before any of this, the driver checks the report's pins (lethe_shared.erasure.pins): an object
whose dataset definition, subject hash key or index entries are not the ones the report was
frozen with (or of a report without pins) is refused: never read, rewritten or purged, its
result `refused` and named as not searched. The datasets and their generations are read with
the registry's consistent `registration()`.

Verify (lethe_jobs.erase_verify) reads every object of the results again: no version but the
one erasure left, no row of the subjects in it, and the expected number of rows (a widened
key's version named unreadable is accepted unread). An object that fails in a way erasing again
can fix (a producer wrote it after the erase run, the subjects' rows or older versions still
there) is erased again, at most `erase_again.MAX_ERASE_AGAIN` times, and checked again; its new
result replaces its old in `results.json` and its progress (lethe_jobs.erase_again). The run
writes `verification.json` and fails when any object still does not verify, so the request ends
FAILED, never COMPLETED. A refused object is accepted unread (`pins.accepts_refused`): the
request ends INCOMPLETE naming it.

Failures worth a retry raise. A re-run converges and starts from the record: an object its
progress shows as left by an earlier run of this report is that result, untouched; one changed
since is erased again and both results merged (lethe_jobs.erase_progress); one without progress
(its task died on it) has nothing left to remove and its older versions go.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from pyspark import TaskContext
from pyspark.sql import SparkSession

from lethe_jobs.erase_again import Rechecked, verify_partition
from lethe_jobs.erase_ledger import LedgerReader, erased_by, job_ledger, job_writes
from lethe_jobs.erase_progress import (
    EraseTask,
    as_recorded,
    put_document,
    recorded_results,
    recorder,
    resumed,
)
from lethe_jobs.erase_rows import EraseResult, erase_rows
from lethe_jobs.erase_settings import (
    EraseArgs,
    ErasePorts,
    EraseSettings,
    job_settings,
    refused_results,
)
from lethe_jobs.errors import JobError
from lethe_jobs.not_searched import (
    UNREADABLE,
    action_of,
    difference_metadata,
    earlier_difference,
    index_difference,
    object_gaps,
    unreadable,
    unreadable_reason,
)
from lethe_jobs.session import logging_shown_keys
from lethe_jobs.tasks import task_groups
from lethe_shared.aws.s3 import (
    ERASED_ROWS_METADATA,
    ERASURE_METADATA,
    PRODUCER_METADATA,
    KeyState,
    ObjectHead,
    ObjectVersion,
    S3ObjectStore,
    key_state,
    split_s3_url,
)
from lethe_shared.aws.scrub import scrub_text
from lethe_shared.erasure.authority import EraseNotAuthorisedError, check_erasable
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ManifestObject,
    NotSearched,
    ObjectAction,
    ObjectResult,
    Verification,
    VersionRef,
    report_key,
    results_totals,
    sha256_hex,
)
from lethe_shared.index.maintenance import ERASE_PRODUCER

LOG = logging.getLogger("lethe.erase")
MAX_ATTEMPTS = 5  # reads of one object while producers keep writing it
# A fault for tests only (tests/spark/test_erase_faults.py): this Spark local property, set to N
# on the driver's thread before a run, makes an erase task's Python worker SIGKILL itself right
# after its Nth rewrite (the new version written, older versions not yet purged), as a job dying
# there would. Nothing in Lethe sets it, Glue and EMR Serverless do not know it: unset, no hook
# is built and the run is unchanged.
TEST_KILL_AFTER_REWRITES = "lethe.test.erase.killWorkerAfterRewrites"


class ManifestMismatchError(JobError):
    """The manifest is not the frozen report the approver saw (its SHA-256 differs)."""


class ConcurrentWritesError(JobError):
    """Producers kept writing an object while it was being erased."""


class VerificationFailedError(JobError):
    """An object still holds a subject's rows, or older versions, after the erasure."""


def _data_versions(versions: Iterable[ObjectVersion]) -> list[VersionRef]:
    return [
        VersionRef(version_id=v.version_id, etag=v.etag) for v in versions if not v.delete_marker
    ]


@dataclass
class _Attempt:
    """One read of the object: its versions, and what erasing its current version gave."""

    versions: list[ObjectVersion]
    erased: EraseResult | None = None
    after: VersionRef | None = None


def _purge(
    store: S3ObjectStore, item: ManifestObject, keep: str | None, seen: Sequence[ObjectVersion]
) -> tuple[int, bool]:
    """Delete what the erasure may delete, and say whether the key is settled.

    With `keep` (the version erasure left, or found clean), every version and delete marker
    older than it goes; without (the key goes), the versions seen before the erasure read it.
    Not settled: a version appeared that erasure has not read (a producer wrote meanwhile): it
    stays, and the caller reads the key again."""
    listing = store.versions_of(item.bucket, item.key)
    if keep is None:
        seen_ids = {v.version_id for v in seen}
        purged = store.delete_versions(
            item.bucket, [v for v in listing if v.version_id in seen_ids]
        )
        return purged, not store.versions_of(item.bucket, item.key)
    ids = [v.version_id for v in listing]
    if keep not in ids:  # erasure's own version was removed meanwhile: read the key again
        return 0, False
    purged = store.delete_versions(item.bucket, listing[ids.index(keep) + 1 :])
    left = store.versions_of(item.bucket, item.key)
    return purged, bool(left) and left[0].version_id == keep


def _erase_current(
    store: S3ObjectStore,
    item: ManifestObject,
    current: ObjectVersion,
    ctx: EraseSettings,
    tmp: Path,
    *,
    after_rewrite: Callable[[], None] | None = None,
) -> tuple[EraseResult, VersionRef | None, ObjectHead] | None:
    """Rewrite (or delete) the current version; None when a producer wrote meanwhile. With the
    result, the head of the version read."""
    source, target = tmp / "current", tmp / "erased"
    head = store.download(item.bucket, item.key, current.version_id, source)
    if head is None:
        return None  # deleted or replaced between the listing and the read
    try:
        erased = erase_rows(
            ctx.kind(item), source, target, item.key, ctx.matcher(item.dataset_id), workdir=tmp
        )
    except UNREADABLE as exc:
        if not item.widened_from:
            raise  # an object the index names: the run fails, as it always has
        # a widened raw key's malformed current version: nothing removed, nothing written, the
        # version kept (its older ones purged) and named as not searched (not_searched.py)
        LOG.warning(
            "%s (added to the report as %s): its current version cannot be read (%s): named "
            "as not searched", ctx.shown(item.object_url), item.widened_from,
            unreadable_reason(exc),
        )  # fmt: skip
        erased = unreadable(item, current.version_id, exc)
    if erased.rows_removed == 0:
        return erased, VersionRef(version_id=current.version_id, etag=current.etag), head
    if erased.rows_after == 0:
        return erased, None, head  # nothing left: the key goes with every version
    scanned = VersionRef(version_id=current.version_id, etag=current.etag)
    written = store.replace_version(
        item.bucket,
        item.key,
        target,
        like_version=current.version_id,
        if_match=current.etag,
        metadata={
            PRODUCER_METADATA: ERASE_PRODUCER,
            ERASURE_METADATA: ctx.request_id,
            ERASED_ROWS_METADATA: str(erased.rows_removed),
            **difference_metadata(ctx.request_id, index_difference(item, scanned, erased)),
        },
    )
    if written is None:
        return None
    if after_rewrite is not None:
        after_rewrite()
    return erased, VersionRef(version_id=written.version_id, etag=written.etag), head


def _erased_earlier(
    ledger: LedgerReader | None, item: ManifestObject, head: ObjectHead, request_id: str
) -> int:
    """Rows this request removed in writing `head`'s version, when an earlier run of it did:
    only when the writes ledger records the version as this request's erase job's
    (lethe_jobs.erase_ledger); its metadata then says how many. Metadata alone (a producer's
    version carrying `lethe-erasure: <this request>`, or a copy) credits nothing."""
    if erased_by(ledger, item.bucket, item.key, head.version_id) != request_id:
        return 0
    try:
        return max(int(head.metadata.get(ERASED_ROWS_METADATA, "0")), 0)
    except ValueError:
        return 0


def erase_object(
    store: S3ObjectStore,
    item: ManifestObject,
    ctx: EraseSettings,
    after_rewrite: Callable[[], None] | None = None,
    ledger: LedgerReader | None = None,
    *,
    earlier: ObjectResult | None = None,
    trust_recorded: bool = True,
) -> ObjectResult:
    """Erase the subjects from one key and all its versions (module docstring, 2-4).
    `after_rewrite` runs right after each conditional write of a new version (tests' faults).
    `ledger`: the writes ledger, which alone says a version is this request's own (None: no
    version is). `earlier`: what a run under the same report recorded of the object (its
    progress, or results.json in the verify run): the key as it left it is that result (unless
    not `trust_recorded`: the verify run erases again what its check found wrong); else the
    object is erased again and both are merged (lethe_jobs.erase_progress)."""
    trusted = earlier if trust_recorded else None
    now = _erase_object(store, item, ctx, after_rewrite, ledger, earlier=earlier, trusted=trusted)
    return now if earlier is None or now is earlier else resumed(earlier, now)


def _erase_object(
    store: S3ObjectStore,
    item: ManifestObject,
    ctx: EraseSettings,
    after_rewrite: Callable[[], None] | None,
    ledger: LedgerReader | None,
    *,
    earlier: ObjectResult | None,
    trusted: ObjectResult | None,
) -> ObjectResult:
    first: list[VersionRef] | None = None
    purged = 0
    removed = 0  # rows this erasure removed in versions it wrote that another one then replaced
    # versions whose removed rows are counted: this run's, credited, and the one an earlier
    # run recorded (its rows are in `earlier`)
    counted = {earlier.version_after.version_id} if earlier and earlier.version_after else set()
    inherited: list[NotSearched] = []  # an index difference an earlier run of it found
    for attempt in range(1, MAX_ATTEMPTS + 1):
        versions = store.versions_of(item.bucket, item.key)
        if attempt == 1 and trusted is not None and as_recorded(trusted, versions):
            return trusted  # as the earlier run left it: nothing to do
        first = _data_versions(versions) if first is None else first
        state = key_state(versions)
        if state is not KeyState.CURRENT:  # hidden by a marker, or only markers: all go
            count, settled = _purge(store, item, None, versions)
            purged += count
            if not settled:
                continue
            gone: ObjectAction = "gone" if state is KeyState.GONE else "purged"
            return _result(
                item, gone, first, erased=None, after=None, purged=purged, attempts=attempt
            )
        current = next(v for v in versions if v.is_latest)
        with tempfile.TemporaryDirectory(prefix="lethe-erase-") as tmp:
            outcome = _erase_current(
                store, item, current, ctx, Path(tmp), after_rewrite=after_rewrite
            )
        if outcome is None:
            LOG.warning("%s changed while erasing it: reading it again", ctx.shown(item.object_url))
            continue
        erased, after, read = outcome
        if erased.rows_removed == 0 and current.version_id not in counted:
            # a version this request wrote in an earlier run (one that died before its results):
            # its rows are this request's too (once, however often it is read)
            removed += _erased_earlier(ledger, item, read, ctx.request_id)
            difference = earlier_difference(item, read.metadata, ctx.request_id)
            inherited = [difference] if difference else inherited
            counted.add(current.version_id)
        if erased.written and after is not None:
            counted.add(after.version_id)
        count, settled = _purge(store, item, after.version_id if after else None, versions)
        purged += count
        if not settled:
            LOG.warning(
                "%s got a new version while erasing it: erasing it too", ctx.shown(item.object_url)
            )
            if after is not None and erased.written:
                removed += erased.rows_removed  # our version stood; the next read builds on it
            continue
        # `removed`: rows of ours in a version another erasure has rewritten since (both count)
        scanned = VersionRef(version_id=current.version_id, etag=current.etag)
        gaps = (*object_gaps(item, scanned, after, erased), *inherited)
        return _result(
            item, action_of(erased.rows_removed + removed, after, gaps), first, erased=erased,
            after=after, purged=purged, attempts=attempt, removed_before=removed, gaps=gaps,
        )  # fmt: skip
    raise ConcurrentWritesError(
        f"{ctx.shown(item.object_url)} changed {MAX_ATTEMPTS} times while it was being erased"
    )


def _result(
    item: ManifestObject,
    action: ObjectAction,
    before: list[VersionRef],
    *,
    erased: EraseResult | None,
    after: VersionRef | None,
    purged: int,
    attempts: int,
    removed_before: int = 0,
    gaps: tuple[NotSearched, ...] = (),
) -> ObjectResult:
    """`removed_before`: rows this erasure removed in a version of its own that another erasure
    rewrote before this one settled; they count as removed, and as rows before. `gaps`: what of
    the object could not be searched (lethe_jobs.not_searched)."""
    return ObjectResult(
        object_url=item.object_url,
        dataset_id=item.dataset_id,
        zone=item.zone,
        action=action,
        versions_before=tuple(before),
        version_after=after,
        rows_before=(erased.rows_before if erased else 0) + removed_before,
        rows_removed=(erased.rows_removed if erased else 0) + removed_before,
        rows_after=erased.rows_after if erased else 0,
        versions_purged=purged,
        attempts=attempts,
        deviations=erased.deviations if erased else (),
        not_searched=gaps,
    )


def _test_kill_hook() -> Callable[[], None] | None:
    """The TEST_KILL_AFTER_REWRITES fault of this task, or None (always, outside that test)."""
    context = TaskContext.get()
    value = context.getLocalProperty(TEST_KILL_AFTER_REWRITES) if context is not None else None
    if not value:
        return None
    left = [int(value)]

    def after_rewrite() -> None:
        left[0] -= 1
        if left[0] == 0:
            LOG.warning("test fault %s: killing this worker", TEST_KILL_AFTER_REWRITES)
            os.kill(os.getpid(), signal.SIGKILL)

    return after_rewrite


def _erase_partition(tasks: Iterable[str], ctx: EraseSettings) -> Iterator[str]:
    # an executor's Python worker logs on its own
    logging_shown_keys(ctx.correlation_id, ctx.hash_key, ctx.datasets)
    # every rewrite recorded in the writes ledger (the request id as its run id): how the
    # object events path, verification and a re-run know the versions erasure wrote, never by
    # their metadata (lethe_jobs.erase_ledger)
    ledger = job_ledger(ctx.catalog_table)
    client = boto3.client("s3")
    store = S3ObjectStore(client, writes=job_writes(ledger, ctx.request_id))
    record = recorder(S3ObjectStore(client), ctx)  # each object's progress, as it is done
    after_rewrite = _test_kill_hook()
    for text in tasks:
        task = EraseTask.model_validate_json(text)
        item = task.item
        result = erase_object(store, item, ctx, after_rewrite, ledger, earlier=task.earlier)
        record(result)  # before the next object: a run that dies keeps what it finished
        LOG.info(
            "%s: %s, %d of %d rows removed, %d versions purged",
            ctx.shown(item.object_url), result.action, result.rows_removed, result.rows_before,
            result.versions_purged,
        )  # fmt: skip
        yield result.model_dump_json()


def _distribute(spark: SparkSession, groups: list[list[str]], func: Any) -> list[str]:
    if not groups:
        return []
    rdd = spark.sparkContext.parallelize(groups, numSlices=len(groups))
    return list(rdd.flatMap(func).collect())


def load_manifest(reports: S3ObjectStore, args: EraseArgs) -> Manifest:
    bucket, key = split_s3_url(args.manifest)
    body = reports.read_bytes(bucket, key)
    if body is None:
        raise ManifestMismatchError(f"the manifest {args.manifest} does not exist")
    if sha256_hex(body) != args.manifest_sha256:
        raise ManifestMismatchError(
            f"the manifest {args.manifest} is not the report that was approved (SHA-256 "
            f"{sha256_hex(body)}, approved {args.manifest_sha256})"
        )
    manifest = Manifest.model_validate_json(body)
    if manifest.request_id != args.request_id:
        raise ManifestMismatchError(f"the manifest is of request {manifest.request_id}")
    return manifest


def run_erase(
    spark: SparkSession, args: EraseArgs, ports: ErasePorts, now: datetime
) -> dict[str, Any]:
    manifest = load_manifest(ports.reports, args)
    ctx = job_settings(args, manifest, ports)
    by_url = refused_results(manifest, ctx)
    record = recorder(ports.reports, ctx)
    for refused in by_url.values():
        record(refused)
    items = [o for o in manifest.objects if o.object_url not in by_url]
    # what an earlier run of this report recorded (a re-run starts from it, erase_progress)
    earlier = recorded_results(ports.reports, args.reports_bucket, manifest, args.manifest_sha256)
    LOG.info(
        "erasing %d subject hashes from %d objects (%d recorded by an earlier run)",
        len(ctx.hashes), len(items), sum(o.object_url in earlier for o in items),
    )  # fmt: skip
    tasks = [EraseTask(item=o, earlier=earlier.get(o.object_url)).model_dump_json() for o in items]
    groups = [[tasks[i] for i in g] for g in task_groups([i.size for i in items])]
    by_url.update(
        (r.object_url, r)
        for r in map(
            ObjectResult.model_validate_json,
            _distribute(spark, groups, lambda p: _erase_partition(p, ctx)),
        )
    )
    results = EraseResults(
        request_id=args.request_id,
        manifest_sha256=args.manifest_sha256,
        correlation_id=args.correlation_id,
        finished_at=now.isoformat(),
        objects=tuple(by_url[i.object_url] for i in manifest.objects),
    )
    url = _write(ports.reports, args, "results.json", results.model_dump(mode="json"))
    totals = results_totals(results.objects)
    LOG.info("done: %s", json.dumps(totals, sort_keys=True))
    if results.not_searched:
        reasons = sorted({g.reason for g in results.not_searched})
        LOG.warning(
            "%d place(s) not fully searched (%s): the request cannot complete",
            len(results.not_searched), ", ".join(reasons),
        )  # fmt: skip
    return {"results": url, **totals}


def run_verify(
    spark: SparkSession, args: EraseArgs, ports: ErasePorts, now: datetime
) -> dict[str, Any]:
    manifest = load_manifest(ports.reports, args)
    ctx = job_settings(args, manifest, ports)
    body = ports.reports.read_bytes(
        args.reports_bucket, report_key(args.request_id, "results.json")
    )
    if body is None:
        raise VerificationFailedError("the erase run wrote no results.json to verify")
    results = EraseResults.model_validate_json(body)
    items = {o.object_url: o for o in manifest.objects}
    if any(r.object_url not in items for r in results.objects):
        raise VerificationFailedError("results.json names an object the report does not")
    tasks = [
        EraseTask(item=items[r.object_url], earlier=r).model_dump_json() for r in results.objects
    ]
    rechecked = [
        Rechecked.model_validate_json(t)
        for t in _distribute(
            spark, [[t] for t in tasks], lambda p: verify_partition(p, ctx, erase_object)
        )
    ]
    checks = [r.check for r in rechecked]
    again = [c for c in checks if c.erased_again]
    if again:  # the objects erased again: their new results (erase_again)
        by_url = {r.result.object_url: r.result for r in rechecked}
        objects = tuple(by_url[r.object_url] for r in results.objects)
        results = results.model_copy(update={"objects": objects, "finished_at": now.isoformat()})
        _write(ports.reports, args, "results.json", results.model_dump(mode="json"))
        LOG.warning(
            "%d object(s) erased again by the verify run (written after the erase run, or not "
            "as it left them)", len(again),
        )  # fmt: skip
    verification = Verification(
        request_id=args.request_id,
        correlation_id=args.correlation_id,
        verified_at=now.isoformat(),
        objects=tuple(sorted(checks, key=lambda c: c.object_url)),
    )
    url = _write(ports.reports, args, "verification.json", verification.model_dump(mode="json"))
    failed = [c for c in verification.objects if not c.ok]
    if failed:
        raise VerificationFailedError(
            f"{len(failed)} of {len(checks)} objects did not verify (see {url}); first: "
            f"{ctx.shown(failed[0].object_url)}: {scrub_text(failed[0].problem, ctx.namer())}"
        )
    LOG.info("verified %d objects: no matching row, no older version", len(checks))
    summary = {"verification": url, "objects_verified": len(checks), "matching_rows_found": 0}
    return {**summary, "objects_erased_again": len(again)} if again else summary


def _write(reports: S3ObjectStore, args: EraseArgs, name: str, document: Any) -> str:
    key = report_key(args.request_id, name)
    return put_document(reports, args.reports_bucket, key, document, lock=args.evidence)


def authorise(args: EraseArgs, ports: ErasePorts) -> None:
    """Refuse (EraseNotAuthorisedError), before anything is read, unless the request record
    says this run may go on: ERASING, a recorded approval by an approver other than the
    requester, and this manifest (URL and SHA-256) as its report (check_erasable)."""
    record = ports.requests.read(args.request_id) if ports.requests is not None else None
    try:
        check_erasable(record, manifest_url=args.manifest, manifest_sha256=args.manifest_sha256)
    except EraseNotAuthorisedError as exc:
        LOG.error("refused (%s): %s", args.mode, exc)
        raise


def run(spark: SparkSession, args: EraseArgs, ports: ErasePorts) -> dict[str, Any]:
    authorise(args, ports)
    runner = run_erase if args.mode == "erase" else run_verify
    return runner(spark, args, ports, datetime.now(UTC))
