"""What each step of an erasure does: report, status changes, index update, certificate.

The handler (functions/erasure_steps) and the state machine (statemachines/erasure.asl.json)
call these functions with their ports; nothing here reads the environment. Filing and cancelling
a request are lethe_shared.erasure.intake. Every step can run twice with one effect (Lambda and
Step Functions retry): the report overwrites its own documents and moves the request to REPORTED
from RECEIVED or REPORTED only, the index update deletes what is there, and the audit record is
written once (an S3 conditional write).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from lethe_shared.aws.s3 import ObjectStore, s3_url
from lethe_shared.aws.scrub import scrub_cause
from lethe_shared.erasure.authority import (
    ERASABLE_FROM,
    RESUMABLE_FROM,
    ErasureNotApprovedError,
    recorded_approval,
    why_not_approved,
    why_not_resumable,
)
from lethe_shared.erasure.evidence import EvidenceLock, put_arguments
from lethe_shared.erasure.index_update import DOCUMENT as INDEX_UPDATE_DOCUMENT
from lethe_shared.erasure.index_update import settle_index
from lethe_shared.erasure.pins import PinRegistry, pin_manifest
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ReportSummary,
    Verification,
    build_manifest,
    canonical_json,
    dataset_counts,
    report_key,
    report_notes,
    sha256_hex,
    summary_html,
    summary_text,
)
from lethe_shared.erasure.requests import (
    ALLOWED_FROM,
    ErasureRequest,
    ErasureRequests,
    ErasureStatus,
    InvalidTransitionError,
    RequestClosedError,
    RequestNotFoundError,
)
from lethe_shared.errors import LetheError
from lethe_shared.index.subject_index import SubjectIndex

if TYPE_CHECKING:
    # lethe_shared.erasure.certificate (its pydantic models) and .completion are imported by
    # the certify step only, at its first call: the other steps never load them.
    from lethe_shared.erasure.certificate import Signer
    from lethe_shared.erasure.certificate_statement import JobRun
    from lethe_shared.erasure.completion import Certified
    from lethe_shared.subject_hashing.shown_keys import Namer

LOG = logging.getLogger("lethe.erasure")
WORKFLOW = "workflow"  # who the history names for the state machine's own steps


class VerificationMissingError(LetheError):
    """The certificate step found no successful verification: nothing is certified."""


class DocumentStore(Protocol):
    """The reports bucket: put documents, read them, write one once."""

    def put(self, key: str, body: bytes, content_type: str) -> str:
        """Write a document; returns its s3:// URL."""

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        """Write a document unless one is there (If-None-Match); False when it was there."""

    def get(self, key: str) -> bytes | None: ...

    def url(self, key: str) -> str:
        """The s3:// URL of a document."""


# ----------------------------------------------------------------------------------- report


def _open_request(requests: ErasureRequests, request_id: str) -> ErasureRequest:
    record = requests.get(request_id)
    if record is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if record.terminal:
        raise RequestClosedError(f"request {request_id} is {record.status.value}")
    return record


def build_report(
    request_id: str,
    *,
    requests: ErasureRequests,
    index: SubjectIndex,
    objects: ObjectStore,
    documents: DocumentStore,
    now: datetime | None = None,
    widen: Callable[[Manifest, ErasureRequest], Manifest] | None = None,
    registry: PinRegistry | None = None,
) -> ReportSummary:
    """Freeze the report: the manifest from the index and S3 (widened, when given, by what the
    index cannot know: lethe_shared.erasure.scope.widen), pinned to the key the request was
    hashed with and, read from `registry`, each dataset's matching definition
    (lethe_shared.erasure.pins; without a registry, no pins: the erase job refuses every object
    of it), its SHA-256, the summaries; the request becomes REPORTED with them."""
    record = _open_request(requests, request_id)
    if record.status not in ALLOWED_FROM[ErasureStatus.REPORTED]:
        # approval was requested with the frozen report: it must never change now
        raise InvalidTransitionError(request_id, ErasureStatus.REPORTED, record.status.value)
    manifest = build_manifest(
        record.request_id,
        record.subject_hashes,
        record.subject_count,
        index=index,
        objects=objects,
        now=now or datetime.now(UTC),
        hash_groups=record.hash_groups,
        scope=record.scope,
        not_looked_up=record.not_looked_up,
    )
    if widen is not None:
        manifest = widen(manifest, record)
    if registry is not None:
        manifest = pin_manifest(manifest, key_fingerprint=record.key_fingerprint, registry=registry)
    body = manifest.bytes()
    digest = sha256_hex(body)
    text = summary_text(manifest, digest, record.requested_by).encode()
    page = summary_html(manifest, digest, record.requested_by).encode()
    counts = dataset_counts(manifest)
    summary = ReportSummary(
        manifest_url=documents.put(report_key(request_id, "manifest.json"), body, _JSON),
        manifest_sha256=digest,
        summary_text_url=documents.put(report_key(request_id, "summary.txt"), text, _TEXT),
        summary_html_url=documents.put(report_key(request_id, "summary.html"), page, _HTML),
        objects=len(manifest.objects),
        versions=sum(c.versions for c in counts),
        rows=sum(c.rows for c in counts),
        datasets=tuple(counts),
        notes=tuple(report_notes(manifest)),
    )
    requests.transition(
        request_id,
        ErasureStatus.REPORTED,
        by=WORKFLOW,
        detail=f"{summary.objects} object(s), {summary.versions} version(s), {summary.rows} row(s)"
        + (f", {len(manifest.not_searched)} not searched" if manifest.not_searched else ""),
        updates={"report": summary.model_dump(mode="json") | _gaps(manifest)},
    )
    return summary


_JSON, _TEXT, _HTML = "application/json", "text/plain; charset=utf-8", "text/html; charset=utf-8"


def _gaps(manifest: Manifest) -> dict[str, Any]:
    """The record's report names what is not searched, per dataset and reason (no keys)."""
    from lethe_shared.erasure.scope import not_searched_counts  # noqa: PLC0415

    return (
        {"not_searched": not_searched_counts(manifest.not_searched)}
        if manifest.not_searched
        else {}
    )


# ----------------------------------------------------------------------------------- status


def mark(
    request_id: str,
    status: ErasureStatus,
    *,
    requests: ErasureRequests,
    detail: str = "",
    error: Mapping[str, str] | None = None,
    resume: Resume | None = None,
) -> dict[str, Any]:
    """A status change the workflow makes (ERASING, EXPIRED, FAILED, with `error` as
    {"error": name, "cause": text}); returns the notification of the new state. A terminal
    request is left as it is (its notification is returned): a cancel or a decision got there
    first. ERASING is the exception: see start_erasing (and `resume`: a resumed run's)."""
    if status is ErasureStatus.ERASING:
        return notification(
            start_erasing(request_id, requests=requests, detail=detail, resume=resume)
        )
    updates: dict[str, Any] = {}
    if error:
        # the cause Step Functions caught (a Lambda's or a job's error text): scrubbed of keys
        # and quoted values before it is kept (lethe_shared.aws.scrub)
        updates["error"] = {k: scrub_cause(str(v))[:2000] for k, v in error.items()}
    current = requests.get(request_id)
    if current is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if current.terminal:
        return notification(current)
    allowed = None
    if status is ErasureStatus.EXPIRED:  # an approval may land as the task times out
        allowed = frozenset({ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED})
    record = requests.transition(
        request_id, status, by=WORKFLOW, detail=detail, allowed_from=allowed, updates=updates
    )
    return notification(record)


@dataclass(frozen=True)
class Resume:
    """A resumed run's Mark Erasing (lethe_shared.erasure.resume): the execution the resume
    recorded on the request, how long an approval is valid, now, and the SHA-256 of the frozen
    report as stored now (None: not read)."""

    execution: str
    validity: timedelta
    now: datetime
    stored_manifest_sha256: str | None = None


def start_erasing(
    request_id: str, *, requests: ErasureRequests, detail: str = "", resume: Resume | None = None
) -> ErasureRequest:
    """Move the request to ERASING, the last step before data is destroyed: only from APPROVED
    (or ERASING: a retry) with a valid recorded approval (lethe_shared.erasure.authority), in
    one conditional write that pins the status and the approval it checked. Anything else (a
    request rejected, cancelled, expired, failed, completed, still awaiting a decision, or
    approved without a valid recorded decision) raises ErasureNotApprovedError and changes
    nothing: whoever answers the approval task's token with SendTaskSuccess erases nothing."""
    current = requests.get(request_id)
    if current is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if resume is not None:
        return _resume_erasing(current, requests=requests, detail=detail, resume=resume)
    refusal = why_not_approved(current)
    approval = recorded_approval(current)
    if refusal or approval is None:
        LOG.warning("request %s: not erased: %s", request_id, refusal)
        raise ErasureNotApprovedError(refusal)
    try:
        return requests.transition(
            request_id,
            ErasureStatus.ERASING,
            by=WORKFLOW,
            detail=detail,
            allowed_from=ERASABLE_FROM,
            require={
                "approval.decision": "approve",
                "approval.decided_by": approval.decided_by,
                "approval.decided_at": approval.decided_at,
                "requested_by": current.requested_by,
            },
        )
    except InvalidTransitionError as exc:  # changed since it was read: judged as it is now
        now = requests.get(request_id)
        raise ErasureNotApprovedError(
            (why_not_approved(now) if now is not None else "") or str(exc)
        ) from None


def _resume_erasing(
    current: ErasureRequest, *, requests: ErasureRequests, detail: str, resume: Resume
) -> ErasureRequest:
    """FAILED -> ERASING for the run a resume started: only with a valid recorded approval of
    the frozen report, younger than the validity (authority.why_not_resumable), the stored
    report unchanged, and the request's recorded resume naming this execution; in one
    conditional write that pins the status, the approval and the resume it checked."""
    request_id = current.request_id
    refusal = why_not_resumable(
        current, now=resume.now, validity=resume.validity, execution=resume.execution
    )
    frozen = str(current.report.get("manifest_sha256") or "")
    if not refusal and resume.stored_manifest_sha256 not in {None, frozen}:
        refusal = f"request {request_id}: its stored report changed since it was approved"
    recorded = (current.model_extra or {}).get("resume")
    named = recorded.get("execution") if isinstance(recorded, Mapping) else None
    if not refusal and named != resume.execution:
        refusal = f"request {request_id}: no resume of it started this run ({resume.execution})"
    approval = recorded_approval(current)
    if refusal or approval is None:
        LOG.warning("request %s: not resumed: %s", request_id, refusal)
        raise ErasureNotApprovedError(refusal or "no recorded approval")
    recorded = recorded if isinstance(recorded, Mapping) else {}
    by = str(recorded.get("by") or WORKFLOW)
    try:
        return requests.transition(
            request_id,
            ErasureStatus.ERASING,
            by=WORKFLOW,
            detail=f"resumed (run {recorded.get('run', '?')}) at the request of {by}: "
            f"{detail or 'erasing'}",
            allowed_from=RESUMABLE_FROM,
            remove=("error",),
            require={
                "approval.decision": "approve",
                "approval.decided_by": approval.decided_by,
                "approval.decided_at": approval.decided_at,
                "requested_by": current.requested_by,
                "resume.execution": resume.execution,
            },
        )
    except InvalidTransitionError as exc:
        raise ErasureNotApprovedError(str(exc)) from None


def notification(record: ErasureRequest) -> dict[str, Any]:
    """What SNS and EventBridge carry about a request: ids, statuses, counts, where the
    certificate is; never a subject id (hashes are not sent either)."""
    return {
        "request_id": record.request_id,
        "status": record.status.value,
        "outcome": record.outcome or record.status.value,
        "requested_by": record.requested_by,
        "subject_count": record.subject_count,
        "objects": int(record.report.get("objects", 0)),
        "rows_removed": int(record.result.get("rows_removed", 0)),
        "versions_purged": int(record.result.get("versions_purged", 0)),
        "certificate": record.certificate.get("url", ""),
        "error": record.error.get("error", ""),
        "at": record.updated_at,
    }


# ------------------------------------------------------------------------------ after erase


def _document(documents: DocumentStore, request_id: str, name: str) -> bytes:
    body = documents.get(report_key(request_id, name))
    if body is None:
        raise VerificationMissingError(f"{name} of request {request_id} does not exist")
    return body


def _unheld(record: ErasureRequest, documents: DocumentStore) -> Callable[[str], Any]:
    """The request's hashes per dataset without what the frozen report's legal holds kept
    (their entries stay true: lethe_shared.erasure.legal_holds); the certificate step checks the
    manifest's SHA-256, this only reads which holds it records."""
    body = documents.get(report_key(record.request_id, "manifest.json"))
    manifest = Manifest.model_validate_json(body) if body is not None else None
    if manifest is None or not manifest.legal_holds:
        return record.hashes_for
    from lethe_shared.erasure.legal_holds import without_held  # noqa: PLC0415

    return without_held(manifest, record.hashes_for)


def update_index(
    request_id: str,
    *,
    requests: ErasureRequests,
    index: SubjectIndex,
    documents: DocumentStore,
    objects: ObjectStore,
    namer: Namer | None = None,
) -> dict[str, Any]:
    """Remove the index entries the erasure made untrue and keep those of versions it never
    saw (lethe_shared.erasure.index_update: the rules, and what is kept). The whole update is
    written to the reports bucket (index_update.json); its summary, with the first kept items,
    is recorded on the request (`index`) for the certificate step, and returned."""
    record = _open_request(requests, request_id)
    results = EraseResults.model_validate_json(_document(documents, request_id, "results.json"))
    shown = {"namer": namer} if namer else {}  # objects by their shown keys (index_update)
    update = settle_index(
        results, record.subject_hashes, index=index, objects=objects,
        hashes_for=_unheld(record, documents), **shown,
    )  # fmt: skip
    url = documents.put(
        report_key(request_id, INDEX_UPDATE_DOCUMENT), canonical_json(update.document()), _JSON
    )
    summary = update.summary(url, **shown)
    requests.update(request_id, {"index": summary})
    return summary


def certify(
    request_id: str,
    *,
    requests: ErasureRequests,
    documents: DocumentStore,
    signer: Signer,
    now: datetime | None = None,
    namer: Namer | None = None,
    job_runs: tuple[JobRun, ...] = (),
) -> Certified:
    """Write the audit record (once) and the signed certificate; the request becomes COMPLETED,
    or FAILED with outcome INCOMPLETE when a place was not fully searched (the erase job's gaps,
    the frozen report's, the index update's kept entries). Refuses unless the verification
    found every object clean, the frozen report is the one approved and the index update's
    document is there (lethe_shared.erasure.completion)."""
    from lethe_shared.erasure.completion import complete  # noqa: PLC0415

    record = _open_request(requests, request_id)
    results = EraseResults.model_validate_json(_document(documents, request_id, "results.json"))
    verification = Verification.model_validate_json(
        _document(documents, request_id, "verification.json")
    )
    at = now or datetime.now(UTC)
    if namer is None:  # the certificate's default: the dataset prefix only (completion)
        return complete(
            record, results, verification, requests=requests, documents=documents,
            signer=signer, at=at, job_runs=job_runs,
        )  # fmt: skip
    return complete(
        record, results, verification, requests=requests, documents=documents, signer=signer,
        at=at, namer=namer, job_runs=job_runs,
    )  # fmt: skip


@dataclass(frozen=True)
class S3Documents:
    """DocumentStore on the reports bucket. With `lock` (lethe_shared.erasure.evidence, the
    deployed functions' EVIDENCE_* settings) every `erasure/` document version is written
    locked: a later PUT of the same key is a new version, the old one stays."""

    client: Any
    bucket: str
    lock: EvidenceLock | None = None

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self.client.put_object(
            Bucket=self.bucket, Key=key, Body=body, ContentType=content_type,
            **put_arguments(key, self.lock),
        )  # fmt: skip
        return s3_url(self.bucket, key)

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        from lethe_shared.aws.errors import is_s3_condition_failed  # noqa: PLC0415

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfNoneMatch="*",
                **put_arguments(key, self.lock),
            )  # fmt: skip
        except self.client.exceptions.ClientError as exc:
            if is_s3_condition_failed(exc):
                return False
            raise
        return True

    def get(self, key: str) -> bytes | None:
        from lethe_shared.aws.s3 import S3ObjectStore  # noqa: PLC0415

        return S3ObjectStore(self.client).read_bytes(self.bucket, key)

    def url(self, key: str) -> str:
        return s3_url(self.bucket, key)
