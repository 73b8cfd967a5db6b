"""The verify run's tasks (`--mode verify`, lethe_jobs.erase_core.run_verify): each object is
checked (lethe_jobs.erase_verify.verify_object) and, when the check fails in a way erasing again
can fix, erased again, a bounded number of times, then checked again.

Between the erase run and the verify run a producer may write the object again (a new upload
of the same key, a backfill): the key then holds a version the erasure never read. It may hold
the subjects' rows again: the request covers the subjects in that object, so removing them is
right. It may hold none: there is nothing to remove, and only the older versions (the erasure's
own and anything under it) must go. Either way the check fails ("expected only the erased
version"), and so does a check that finds the subjects' rows in the version left or older
versions and delete markers still there (`erasable_again`). Such an object is erased again with
the same `erase_object` as the erase run (same pins, same writes ledger, the same conditional
write: a producer's version is never overwritten), starting from its result in results.json
(lethe_jobs.erase_progress: the versions both saw, rows removed and versions purged by both,
attempts added), with a deviation that says why; its progress document is replaced; then it is
checked again. At most MAX_ERASE_AGAIN rounds: an object a producer keeps writing still fails
verification and the request ends FAILED, as before (fail closed). A check that erasing again
cannot fix (a version that cannot be read, a row count that differs with no subject row in it)
fails at once, and so does an object erasing again fails on (producers writing it faster than it
can be erased, `ConcurrentWritesError`; a new version that cannot be read), its check saying so.
The verify run then rewrites results.json with the new results, and
verification.json says per object how often it was erased again and what each check before a
round found (`ObjectCheck.erased_again`, `.erased_again_because`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import boto3
from botocore.exceptions import ClientError
from pydantic import ConfigDict
from pyspark import TaskContext

from lethe_jobs.erase_ledger import LedgerReader, job_ledger, job_writes
from lethe_jobs.erase_progress import EraseTask, recorder
from lethe_jobs.erase_settings import EraseSettings
from lethe_jobs.erase_verify import verify_object, versions_as_left
from lethe_jobs.errors import JobError
from lethe_jobs.not_searched import UNREADABLE
from lethe_jobs.session import logging_shown_keys
from lethe_shared.aws.s3 import S3ObjectStore, split_s3_url
from lethe_shared.aws.scrub import scrub_text
from lethe_shared.erasure.report import ManifestObject, ObjectCheck, ObjectResult
from lethe_shared.models import Model

LOG = logging.getLogger("lethe.erase")
MAX_ERASE_AGAIN = 2  # rounds of erasing one object again in one verify run
# A fault for tests only (tests/spark/test_erase_job.py): this Spark local property,
# set to an object's URL on the driver's thread before a verify run, makes a producer write that
# object again (its current bytes, a plain PUT) right before each of its checks, as a producer
# that never stops would. Nothing in Lethe sets it; unset, no hook is built.
TEST_WRITE_BEFORE_CHECK = "lethe.test.erase.producerWritesBeforeCheck"


class EraseObject(Protocol):
    """lethe_jobs.erase_core.erase_object, handed in (a job module imports no other's core)."""

    def __call__(
        self,
        store: S3ObjectStore,
        item: ManifestObject,
        ctx: EraseSettings,
        after_rewrite: Callable[[], None] | None = None,
        ledger: LedgerReader | None = None,
        *,
        earlier: ObjectResult | None = None,
        trust_recorded: bool = True,
    ) -> ObjectResult: ...


class Rechecked(Model):
    """One object after the verify run: its last check and its result (erased again or not)."""

    model_config = ConfigDict(frozen=True)

    check: ObjectCheck
    result: ObjectResult


def erasable_again(
    store: S3ObjectStore,
    result: ObjectResult,
    check: ObjectCheck,
    ledger: LedgerReader | None,
    request_id: str,
) -> bool:
    """The check failed in a way erasing the object again can fix: the subjects' rows are in a
    version left, or the key holds versions erasure may not leave (a producer's, an older one,
    a delete marker: `versions_as_left`)."""
    if check.ok or result.refused:
        return False
    if check.matching_rows:
        return True
    bucket, key = split_s3_url(result.object_url)
    return not versions_as_left(result, store.versions_of(bucket, key), ledger, request_id)


def verify_or_erase_again(
    store: S3ObjectStore,
    task: EraseTask,
    ctx: EraseSettings,
    ledger: LedgerReader | None,
    erase: EraseObject,
    *,
    record: Callable[[ObjectResult], None] | None = None,
    before_check: Callable[[ManifestObject], None] | None = None,
) -> Rechecked:
    """Check the object of `task` (its result: `task.earlier`); erase it again and check again
    while the check fails in a way that can be fixed, at most MAX_ERASE_AGAIN times (module
    docstring). `record` is given each new result (its progress document)."""
    if task.earlier is None:
        raise ValueError(f"{task.item.object_url}: no result to verify")
    result = task.earlier
    because: list[str] = []
    while True:
        if before_check is not None:
            before_check(task.item)
        check = verify_object(store, result, ctx, ledger)
        if len(because) >= MAX_ERASE_AGAIN or not erasable_again(
            store, result, check, ledger, ctx.request_id
        ):
            break
        LOG.warning(
            "%s did not verify (%s): erasing it again (round %d of at most %d)",
            ctx.shown(task.item.object_url), scrub_text(check.problem, ctx.namer()),
            len(because) + 1, MAX_ERASE_AGAIN,
        )  # fmt: skip
        try:
            again = erase(store, task.item, ctx, None, ledger, earlier=result, trust_recorded=False)
        except (JobError, *UNREADABLE) as exc:  # producers kept writing; a version unreadable
            failed = f"erasing it again failed ({type(exc).__name__})"
            check = check.model_copy(update={"problem": f"{check.problem}; {failed}"})
            break
        because.append(check.problem)
        note = f"erased again by the verify run (round {len(because)}): {check.problem}"
        result = again.model_copy(update={"deviations": (*again.deviations, note)})
        if record is not None:
            record(result)
    if because:
        check = check.model_copy(
            update={"erased_again": len(because), "erased_again_because": tuple(because)}
        )
    return Rechecked(check=check, result=result)


def _test_producer_hook(client: Any) -> Callable[[ManifestObject], None] | None:
    """The TEST_WRITE_BEFORE_CHECK fault of this task, or None (always, outside that test)."""
    context = TaskContext.get()
    url = context.getLocalProperty(TEST_WRITE_BEFORE_CHECK) if context is not None else None
    if not url:
        return None

    def write(item: ManifestObject) -> None:
        if item.object_url != url:
            return
        try:
            body = client.get_object(Bucket=item.bucket, Key=item.key)["Body"].read()
        except ClientError:
            return  # no current version
        LOG.warning("test fault %s: a producer writes the object again", TEST_WRITE_BEFORE_CHECK)
        client.put_object(Bucket=item.bucket, Key=item.key, Body=body)

    return write


def verify_partition(tasks: Iterable[str], ctx: EraseSettings, erase: EraseObject) -> Iterator[str]:
    """A Spark task of the verify run: one Rechecked (JSON) per EraseTask (JSON)."""
    # an executor's Python worker logs on its own, URLs shown (lethe_jobs.session)
    logging_shown_keys(ctx.correlation_id, ctx.hash_key, ctx.datasets)
    client = boto3.client("s3")
    ledger = job_ledger(ctx.catalog_table)
    # what it erases again is recorded in the writes ledger as this request's, as in the erase run
    store = S3ObjectStore(client, writes=job_writes(ledger, ctx.request_id))
    record = recorder(S3ObjectStore(client), ctx)
    before_check = _test_producer_hook(client)
    for text in tasks:
        task = EraseTask.model_validate_json(text)
        rechecked = verify_or_erase_again(
            store, task, ctx, ledger, erase, record=record, before_check=before_check
        )
        yield rechecked.model_dump_json()
