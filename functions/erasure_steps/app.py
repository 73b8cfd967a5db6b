"""The erasure workflow's own steps (statemachines/erasure.asl.json), one domain function each:

    {"step": "watch_ingestion", "request_id", "waited_seconds", "max_wait_seconds",
     "settle_seconds"}                                      the ingestion watermark (uploads in
                                                            flight, pending re-indexes, a dataset
                                                            indexed with another hash key than the
                                                            request's): {settled}
    {"step": "report", "request_id"}                        build and freeze the report
    {"step": "mark", "request_id", "status", "detail"?, "error"?, "resume_execution"?,
     "approval_validity_seconds"?}                          ERASING (only an approved request;
                                                            with resume_execution: a FAILED one
                                                            whose resume started this run, with
                                                            an approval younger than the
                                                            validity), EXPIRED, FAILED
    {"step": "notification", "request_id"}                  what to publish about the request now
    {"step": "update_index", "request_id"}                  remove the entries erasure made untrue;
                                                            look the subjects up again and list
                                                            what the index still holds for them
                                                            (index_update.json)
    {"step": "certify_failure", "request_id", "error",     a FAILED run's audit record and
     "job_runs"}                                            signed partial certificate (what
                                                            was done; lethe_shared.erasure.failure)
    {"step": "certify", "request_id", "job_runs"?}          audit record, signed certificate;
                                                            COMPLETED, or FAILED with outcome
                                                            INCOMPLETE (a place not fully
                                                            searched: the erase job's, the frozen
                                                            report's or the index update's): its
                                                            notification either way

Errors leave the handler scrubbed of object keys and quoted values (lethe_shared.aws.scrub):
Step Functions keeps them in the execution history and Mark Failed in the request record.
Errors are typed (lethe_shared.errors): the state machine catches `RequestClosedError` (the
request was cancelled meanwhile) and `ErasureNotApprovedError` (mark ERASING of a request that
is not APPROVED with a valid recorded approval, lethe_shared.erasure.authority: never retried,
the workflow ends without a Spark run) by name, and retries the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import scrubbed_errors
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog
from lethe_shared.datasets.holds import DynamoHolds, HoldView
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure import scope
from lethe_shared.erasure.evidence import EvidenceLock
from lethe_shared.erasure.legal_holds import apply_holds
from lethe_shared.erasure.report import Manifest, report_key, sha256_hex
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureRequest,
    ErasureStatus,
    RequestNotFoundError,
)
from lethe_shared.erasure.workflow import (
    Resume,
    S3Documents,
    build_report,
    certify,
    mark,
    notification,
    update_index,
)
from lethe_shared.index.opening import IndexSettings as SettingsWithIndex
from lethe_shared.index.opening import open_subject_index
from lethe_shared.index.subject_index import SubjectIndex
from lethe_shared.models import Model
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key
from lethe_shared.subject_hashing.shown_keys import KeyNamer

if TYPE_CHECKING:
    from lethe_shared.erasure.certificate import KmsSigner
    from lethe_shared.erasure.certificate_statement import JobRun

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class ErasureStepsSettings(SettingsWithIndex):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)
    catalog_table: str = Field(alias="CATALOG_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    object_events_queue_url: str = Field(alias="OBJECT_EVENTS_QUEUE_URL", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)  # names a dataset's raw prefix
    reports_bucket: str = Field(alias="REPORTS_BUCKET", min_length=3)
    certificate_key_arn: str = Field(alias="CERTIFICATE_KEY_ARN", min_length=1)
    # the key's fingerprint only: which key a request's hashes must be under (scope)
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)


class StepError(Model):
    Error: str = ""
    Cause: str = ""


class JobRunEvent(Model):
    """A Spark run of the workflow, as the state machine passes it (from the .sync output)."""

    mode: str = ""
    engine: str = ""
    run_id: str = ""


class StepEvent(Model):
    step: Literal[
        "watch_ingestion",
        "report",
        "mark",
        "notification",
        "update_index",
        "certify",
        "certify_failure",
    ]
    request_id: str = Field(min_length=1)
    status: ErasureStatus | None = None
    detail: str = ""
    error: StepError | None = None
    # watch_ingestion: how long the workflow has waited, its bound, the catalog's own delay
    waited_seconds: int = Field(default=0, ge=0)
    max_wait_seconds: int = Field(default=0, ge=0)
    settle_seconds: int = Field(default=0, ge=0)
    # mark ERASING of a resumed run: the execution the resume recorded, the approval's validity
    resume_execution: str = ""
    approval_validity_seconds: int = Field(default=0, ge=0)
    # certify, certify_failure: the Spark runs of this workflow run (engine and run ids)
    job_runs: tuple[JobRunEvent, ...] = ()


_WAITING = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


@dataclass(frozen=True)
class _Dependencies:
    requests: DynamoErasureRequests
    index: SubjectIndex
    catalog: DynamoObjectCatalog
    registry: DynamoDatasetRegistry
    holds: DynamoHolds  # legal holds: items of the same DatasetsTable
    objects: S3ObjectStore
    documents: S3Documents
    kms: Any  # the boto3 KMS client of the certificate key
    certificate_key_arn: str
    sqs: Any  # the boto3 SQS client of the object events queue
    object_events_queue_url: str
    raw_bucket: str  # a dataset awaiting a re-index is named by its raw prefix (scope.widen)
    secrets: Any  # the boto3 Secrets Manager client of the subject hash key
    hash_key_secret_arn: str

    def current_key(self) -> str:
        """The subject hash key's fingerprint as its secret holds it now: read at each call,
        never cached (a rotation must be seen at once; the key itself is never kept)."""
        return key_fingerprint(load_hash_key(self.secrets, self.hash_key_secret_arn))

    def namer(self) -> KeyNamer:
        """Shown keys for the certificate and the audit record: under the current key, with the
        registered datasets' subject and partition columns (lethe_shared.erasure.shown)."""
        return KeyNamer(load_hash_key(self.secrets, self.hash_key_secret_arn), self.registry.get)

    def events_waiting(self) -> int:
        """Object events not yet recorded in the catalog: in the queue, visible or not."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.object_events_queue_url, AttributeNames=list(_WAITING)
        ).get("Attributes", {})
        return sum(int(attributes.get(name, 0)) for name in _WAITING)

    def signer(self) -> KmsSigner:
        """The certificate key's signer. lethe_shared.erasure.certificate (its pydantic models)
        is imported here, by the certify step only: the other steps never load it."""
        from lethe_shared.erasure.certificate import KmsSigner  # noqa: PLC0415

        return KmsSigner(self.kms, self.certificate_key_arn)


def _build(settings: ErasureStepsSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        requests=DynamoErasureRequests(aws.table(settings.requests_table)),
        index=open_subject_index(settings.index_location, s3=aws.client("s3"), dynamodb=aws.table),
        catalog=DynamoObjectCatalog(aws.table(settings.catalog_table)),
        registry=DynamoDatasetRegistry(aws.table(settings.datasets_table)),
        holds=DynamoHolds(aws.table(settings.datasets_table)),
        objects=S3ObjectStore(aws.client("s3")),
        # every erasure/ document locked as written (EVIDENCE_RETENTION_DAYS, EVIDENCE_LOCK_MODE)
        documents=S3Documents(
            aws.client("s3"), settings.reports_bucket, lock=EvidenceLock.from_environ()
        ),
        kms=aws.client("kms"),
        certificate_key_arn=settings.certificate_key_arn,
        sqs=aws.client("sqs"),
        object_events_queue_url=settings.object_events_queue_url,
        raw_bucket=settings.raw_bucket,
        secrets=aws.client("secretsmanager"),
        hash_key_secret_arn=settings.hash_key_secret_arn,
    )


_dependencies = wiring(ErasureStepsSettings, _build)


def _widen(deps: _Dependencies) -> Callable[[Manifest, ErasureRequest], Manifest]:
    def widen(manifest: Manifest, record: ErasureRequest) -> Manifest:
        widened = scope.widen(
            manifest, record, catalog=deps.catalog, registry=deps.registry, objects=deps.objects,
            raw_bucket=deps.raw_bucket, current_key=deps.current_key(),
        )  # fmt: skip
        # legal holds: what they keep is left out and named (lethe_shared.erasure.legal_holds)
        datasets = set(widened.looked_up) | {o.dataset_id for o in widened.objects}
        holds = HoldView.of(deps.holds.active_for(datasets), record.key_fingerprint)
        return apply_holds(widened, holds, deps.raw_bucket)

    return widen


def _watch_ingestion(step: StepEvent, deps: _Dependencies) -> dict[str, Any]:
    """The ingestion watermark (lethe_shared.erasure.scope)."""
    wait = scope.watch_ingestion(
        step.request_id,
        requests=deps.requests,
        catalog=deps.catalog,
        registry=deps.registry,
        waited_seconds=step.waited_seconds,
        max_wait_seconds=step.max_wait_seconds,
        settle_seconds=step.settle_seconds,
        events_waiting=deps.events_waiting,
        # a dataset indexed with another key than the request's (or a request whose key is no
        # longer current) holds it too
        current_key=deps.current_key(),
    )
    return {"request_id": step.request_id, "settled": wait.settled, "in_flight": wait.pending}


def _job_runs(step: StepEvent) -> tuple[JobRun, ...]:
    from lethe_shared.erasure.certificate_statement import JobRun  # noqa: PLC0415

    return tuple(
        JobRun(mode=r.mode, engine=r.engine, run_id=r.run_id) for r in step.job_runs if r.run_id
    )


def _resume(step: StepEvent, deps: _Dependencies) -> Resume | None:
    """A resumed run's Mark Erasing: the stored report's SHA-256 read now (a changed report is
    refused; lethe_shared.erasure.workflow.start_erasing)."""
    if step.status is not ErasureStatus.ERASING or not step.resume_execution:
        return None
    stored = deps.documents.get(report_key(step.request_id, "manifest.json"))
    return Resume(
        execution=step.resume_execution,
        validity=timedelta(seconds=step.approval_validity_seconds),
        now=datetime.now(UTC),
        stored_manifest_sha256=sha256_hex(stored) if stored is not None else "",
    )


def _certify_failure(step: StepEvent, deps: _Dependencies) -> dict[str, Any]:
    """A FAILED run's audit record and partial certificate (lethe_shared.erasure.failure)."""
    from lethe_shared.erasure.failure import certify_failure  # noqa: PLC0415

    error = step.error or StepError()
    result = certify_failure(
        step.request_id, requests=deps.requests, documents=deps.documents, signer=deps.signer(),
        error=error.Error, cause=error.Cause, job_runs=_job_runs(step), at=datetime.now(UTC),
        namer=deps.namer(),
    )  # fmt: skip
    if result.get("partial_certificate"):
        metrics.add_metric(name="ErasurePartialCertificates", unit=MetricUnit.Count, value=1)
    return result


_OWN_STEPS: dict[str, Callable[[StepEvent, _Dependencies], dict[str, Any]]] = {
    "watch_ingestion": _watch_ingestion,
    "certify_failure": _certify_failure,
}


def _run(step: StepEvent, deps: _Dependencies) -> dict[str, Any]:
    rid = step.request_id
    own = _OWN_STEPS.get(step.step)
    if own is not None:
        return own(step, deps)
    if step.step == "report":
        summary = build_report(
            rid,
            requests=deps.requests,
            index=deps.index,
            objects=deps.objects,
            documents=deps.documents,
            widen=_widen(deps),
            registry=deps.registry,
        )
        metrics.add_metric(
            name="ErasureReportObjects", unit=MetricUnit.Count, value=summary.objects
        )
        return {"request_id": rid, "objects": summary.objects, "sha256": summary.manifest_sha256}
    if step.step == "mark":
        if step.status is None:
            raise ValueError("a mark step names the status")
        error = {"error": step.error.Error, "cause": step.error.Cause} if step.error else None
        return mark(
            rid, step.status, requests=deps.requests, detail=step.detail, error=error,
            resume=_resume(step, deps),
        )  # fmt: skip
    if step.step == "notification":
        record = deps.requests.get(rid)
        if record is None:
            raise RequestNotFoundError(f"no erasure request {rid}")
        return notification(record)
    if step.step == "update_index":
        updated = update_index(
            rid, requests=deps.requests, index=deps.index, documents=deps.documents,
            objects=deps.objects, namer=deps.namer(),
        )  # fmt: skip
        kept = len(updated["kept"]) + int(updated["kept_unlisted"])  # named by the certificate
        metrics.add_metric(name="ErasureEntriesAppearedAfter", unit=MetricUnit.Count, value=kept)
        return {"request_id": rid, **updated}
    certified = certify(
        rid, requests=deps.requests, documents=deps.documents, signer=deps.signer(),
        namer=deps.namer(), job_runs=_job_runs(step),
    )  # fmt: skip
    if certified.complete:
        metrics.add_metric(name="ErasuresCompleted", unit=MetricUnit.Count, value=1)
    else:  # FAILED, outcome INCOMPLETE: a place was not fully searched
        metrics.add_metric(name="ErasuresIncomplete", unit=MetricUnit.Count, value=1)
    return certified.notification


@logger.inject_lambda_context(correlation_id_path="request_id", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@scrubbed_errors  # Step Functions copies the error into the execution history and the record
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = StepEvent.model_validate(event)
    logger.append_keys(step=step.step)
    result = _run(step, _dependencies())
    logger.info("erasure step done", extra={"request_id": step.request_id})
    return result
