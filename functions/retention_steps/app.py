"""The retention workflow's own steps (statemachines/retention.asl.json), started by the
retention schedule (template.yaml RetentionScheduleRule) or by hand:

    {"step": "plan", "dataset_ids"?: [...]}     plan a run for each dataset that declares
                                                retention (all, or these): a held dataset, a
                                                rule in its notice period and a dataset with
                                                nothing expired are skipped and recorded; each
                                                other gets its frozen report (manifest.json,
                                                report.json) and its run record, ERASING with
                                                the declared rule as standing authorisation
                                                (lethe_shared.erasure.retention_runs):
                                                {runs, skipped}
    {"step": "certify", "run_id", "reindexed",  the run's KMS-signed certificate, no subject
     "job_runs", "error"?}                      named (lethe_shared.erasure.retention_certificate);
                                                the record COMPLETED, or FAILED / INCOMPLETE;
                                                the dataset's run state records the last run

Metrics (namespace Lethe, service=lethe): RetentionRunsPlanned, RetentionRunsSkipped,
RetentionRunsHeld, RetentionRunsCompleted, RetentionRunsIncomplete, RetentionRowsRemoved,
RetentionVersionsPurged. Logs name datasets and run ids, never an object key or a subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import scrubbed_errors
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.config import Settings
from lethe_shared.datasets.holds import DynamoHolds, HoldView
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.certificate import KmsSigner
from lethe_shared.erasure.evidence import EvidenceLock
from lethe_shared.erasure.requests import DynamoErasureRequests
from lethe_shared.erasure.retention_certificate import certify_run
from lethe_shared.erasure.retention_runs import DynamoRunStates, Planner
from lethe_shared.erasure.workflow import S3Documents
from lethe_shared.models import Model
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key
from lethe_shared.subject_hashing.shown_keys import KeyNamer

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class RetentionStepsSettings(Settings):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)
    reports_bucket: str = Field(alias="REPORTS_BUCKET", min_length=3)
    certificate_key_arn: str = Field(alias="CERTIFICATE_KEY_ARN", min_length=1)
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)
    notice_days: int = Field(alias="RETENTION_NOTICE_DAYS", ge=0, le=365)


class JobRunEvent(Model):
    mode: str = ""
    engine: str = ""
    run_id: str = ""


class StepError(Model):
    Error: str = ""
    Cause: str = ""


class StepEvent(Model):
    step: Literal["plan", "certify"]
    dataset_ids: tuple[str, ...] | None = None
    run_id: str = ""
    reindexed: bool = False
    job_runs: tuple[JobRunEvent, ...] = ()
    error: StepError | None = None


@dataclass(frozen=True)
class _Dependencies:
    settings: RetentionStepsSettings
    registry: DynamoDatasetRegistry
    holds: DynamoHolds
    states: DynamoRunStates
    requests: DynamoErasureRequests
    objects: S3ObjectStore
    documents: S3Documents
    kms: Any
    secrets: Any

    def hash_key(self) -> bytes:
        return load_hash_key(self.secrets, self.settings.hash_key_secret_arn)


def _build(settings: RetentionStepsSettings, aws: Aws) -> _Dependencies:
    table = aws.table(settings.datasets_table)
    return _Dependencies(
        settings=settings,
        registry=DynamoDatasetRegistry(table),
        holds=DynamoHolds(table),
        states=DynamoRunStates(table),
        requests=DynamoErasureRequests(aws.table(settings.requests_table)),
        objects=S3ObjectStore(aws.client("s3")),
        documents=S3Documents(
            aws.client("s3"), settings.reports_bucket, lock=EvidenceLock.from_environ()
        ),
        kms=aws.client("kms"),
        secrets=aws.client("secretsmanager"),
    )


_dependencies = wiring(RetentionStepsSettings, _build)


def _plan(step: StepEvent, deps: _Dependencies) -> dict[str, Any]:
    fingerprint = key_fingerprint(deps.hash_key())
    planner = Planner(
        objects=deps.objects,
        buckets={"raw": deps.settings.raw_bucket, "lake": deps.settings.lake_bucket},
        registry=deps.registry, states=deps.states, requests=deps.requests,
        documents=deps.documents, key_fingerprint=fingerprint,
        holds=lambda ids: HoldView.of(deps.holds.active_for(ids), fingerprint),
        notice_days=deps.settings.notice_days,
    )  # fmt: skip
    wanted = set(step.dataset_ids) if step.dataset_ids is not None else None
    registrations = [
        r for r in deps.registry.registrations() if wanted is None or r.dataset.dataset_id in wanted
    ]
    runs, skipped = planner.plan(registrations, datetime.now(UTC))
    metrics.add_metric(name="RetentionRunsPlanned", unit=MetricUnit.Count, value=len(runs))
    metrics.add_metric(name="RetentionRunsSkipped", unit=MetricUnit.Count, value=len(skipped))
    held = sum(s.reason == "legal_hold" for s in skipped)
    metrics.add_metric(name="RetentionRunsHeld", unit=MetricUnit.Count, value=held)
    logger.info(
        "retention planned",
        extra={"runs": [r.run_id for r in runs], "skipped": [s.dataset_id for s in skipped]},
    )
    return {"runs": [r.document() for r in runs], "skipped": [s.document() for s in skipped]}


def _certify(step: StepEvent, deps: _Dependencies) -> dict[str, Any]:
    if not step.run_id:
        raise ValueError("a certify step names the run")
    namer = KeyNamer(deps.hash_key(), deps.registry.get)
    error = f"{step.error.Error}: {step.error.Cause}"[:500] if step.error else ""
    certificate = certify_run(
        step.run_id, documents=deps.documents, requests=deps.requests,
        signer=KmsSigner(deps.kms, deps.settings.certificate_key_arn), shown=namer.url,
        reindexed=step.reindexed, error=error, now=datetime.now(UTC),
        job_runs=[r.model_dump() for r in step.job_runs if r.run_id],
    )  # fmt: skip
    totals = certificate.totals
    if certificate.complete:
        metrics.add_metric(name="RetentionRunsCompleted", unit=MetricUnit.Count, value=1)
    else:  # FAILED, outcome INCOMPLETE: the certificate's not_removed says what and why
        metrics.add_metric(name="RetentionRunsIncomplete", unit=MetricUnit.Count, value=1)
    metrics.add_metric(
        name="RetentionRowsRemoved", unit=MetricUnit.Count, value=totals["rows_removed"]
    )
    metrics.add_metric(
        name="RetentionVersionsPurged", unit=MetricUnit.Count, value=totals["versions_purged"]
    )
    outcome = "COMPLETED" if certificate.complete else "INCOMPLETE"
    state = deps.states.get(certificate.dataset_id)
    if state is not None:
        last = {
            "at": certificate.issued_at, "outcome": outcome, "run_id": step.run_id,
            "cutoff": certificate.cutoff, **totals,
            "not_removed": [g.reason for g in certificate.not_removed],
        }  # fmt: skip
        deps.states.put(state.model_copy(update={"last_run": last}))
    return {"run_id": step.run_id, "dataset_id": certificate.dataset_id, "outcome": outcome,
            "complete": certificate.complete, **totals}  # fmt: skip


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@scrubbed_errors  # Step Functions copies the error into the execution history
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = StepEvent.model_validate(event)
    logger.append_keys(step=step.step)
    deps = _dependencies()
    result = _plan(step, deps) if step.step == "plan" else _certify(step, deps)
    logger.info("retention step done", extra={"run_id": step.run_id})
    return result
