"""What each step of an erasure does: report, status changes, index update, certificate.

The handler (functions/erasure_steps) and the state machine (statemachines/erasure.asl.json)
call these functions with their ports; nothing here reads the environment. Filing and cancelling
a request are lethe_shared.erasure.intake. Every step can run twice with one effect (Lambda and
Step Functions retry): the report overwrites its own documents and moves the request to REPORTED
from RECEIVED or REPORTED only, the index update deletes what is there, and the audit record is
written once (an S3 conditional write).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from lethe_shared.aws.s3 import ObjectStore, s3_url, split_s3_url
from lethe_shared.erasure.report import (
    EraseResults,
    ReportSummary,
    Verification,
    build_manifest,
    canonical_json,
    dataset_counts,
    report_key,
    report_notes,
    results_totals,
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
    # lethe_shared.erasure.certificate (its pydantic models) is imported by the certify step
    # only, at its first call: the other steps never load it.
    from lethe_shared.erasure.certificate import ErasureCertificate, Signer

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
) -> ReportSummary:
    """Freeze the report: the manifest from the index and S3, its SHA-256, the summaries; the
    request becomes REPORTED with them."""
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
        detail=f"{summary.objects} object(s), {summary.versions} version(s), {summary.rows} row(s)",
        updates={"report": summary.model_dump(mode="json")},
    )
    return summary


_JSON, _TEXT, _HTML = "application/json", "text/plain; charset=utf-8", "text/html; charset=utf-8"


# ----------------------------------------------------------------------------------- status


def mark(
    request_id: str,
    status: ErasureStatus,
    *,
    requests: ErasureRequests,
    detail: str = "",
    error: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A status change the workflow makes (ERASING, EXPIRED, FAILED, with `error` as
    {"error": name, "cause": text}); returns the notification of the new state. A terminal
    request is left as it is (its notification is returned): a cancel or a decision got there
    first."""
    updates: dict[str, Any] = {}
    if error:
        updates["error"] = {k: str(v)[:2000] for k, v in error.items()}
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


def update_index(
    request_id: str,
    *,
    requests: ErasureRequests,
    index: SubjectIndex,
    documents: DocumentStore,
) -> dict[str, int]:
    """Delete the erased subjects' entries of every object the erasure touched (each object's
    dataset's hashes: a hash another dataset's id gave is another subject there), and nothing of
    other subjects but the flagged entries of keys whose older versions erasure purged (they
    point to versions that no longer exist). Keys erasure deleted lose every entry."""
    record = _open_request(requests, request_id)
    results = EraseResults.model_validate_json(_document(documents, request_id, "results.json"))
    removed = pruned = 0
    for item in results.objects:
        if item.version_after is None:
            removed += index.remove_object(item.object_url)
            continue
        removed += index.remove_subjects(item.object_url, record.hashes_for(item.dataset_id))
        pruned += index.prune_flagged(item.object_url)
    LOG.info(
        "index updated: %d entries of the subjects removed, %d flagged pruned", removed, pruned
    )
    return {"entries_removed": removed, "flagged_pruned": pruned}


@dataclass(frozen=True)
class Certified:
    notification: dict[str, Any]
    certificate_url: str


def certify(
    request_id: str,
    *,
    requests: ErasureRequests,
    documents: DocumentStore,
    signer: Signer,
    now: datetime | None = None,
) -> Certified:
    """Write the audit record (once) and the signed certificate; the request becomes
    COMPLETED. Refuses unless the verification found every object clean."""
    from lethe_shared.erasure.certificate import render_certificate_html  # noqa: PLC0415

    at = now or datetime.now(UTC)
    record = _open_request(requests, request_id)
    results = EraseResults.model_validate_json(_document(documents, request_id, "results.json"))
    verification = Verification.model_validate_json(
        _document(documents, request_id, "verification.json")
    )
    _require_verified(request_id, results, verification)
    envelope, envelope_bytes = _signed_once(
        documents, request_id, lambda: _certificate(record, results, verification, at), signer
    )
    url = documents.url(report_key(request_id, "certificate.json"))
    html_url = documents.put(
        report_key(request_id, "certificate.html"),
        render_certificate_html(envelope).encode(),
        _HTML,
    )
    audit = _audit(record, results, verification, envelope["signature"], at)
    documents.put_once(report_key(request_id, "audit.json"), canonical_json(audit), _JSON)
    totals = results_totals(results.objects)
    bucket, _ = split_s3_url(url)
    completed = requests.transition(
        request_id,
        ErasureStatus.COMPLETED,
        by=WORKFLOW,
        detail=(
            f"{totals['rows_removed']} row(s) removed, "
            f"{totals['versions_purged']} version(s) purged"
        ),
        updates={
            "result": {
                **totals,
                "results_url": s3_url(bucket, report_key(request_id, "results.json")),
                "verification_url": s3_url(bucket, report_key(request_id, "verification.json")),
            },
            "certificate": {
                "url": url,
                "html_url": html_url,
                "sha256": sha256_hex(envelope_bytes),
                "key_id": str(envelope["signature"]["key_id"]),
                "audit_url": s3_url(bucket, report_key(request_id, "audit.json")),
            },
        },
    )
    return Certified(notification(completed), url)


def _require_verified(request_id: str, results: EraseResults, verification: Verification) -> None:
    """The verification must be this request's, cover exactly the erased objects, and have
    found every one clean; otherwise nothing is certified."""
    if verification.request_id != request_id or results.request_id != request_id:
        raise VerificationMissingError(f"the documents of request {request_id} do not match it")
    erased = {r.object_url for r in results.objects}
    checked = {c.object_url for c in verification.objects}
    if checked != erased:
        raise VerificationMissingError(
            f"request {request_id}: the verification covers {len(checked)} object(s), the "
            f"erasure {len(erased)}: not certified"
        )
    if not verification.ok or verification.matching_rows:
        raise VerificationMissingError(f"request {request_id} did not verify: not certified")


def _signed_once(
    documents: DocumentStore,
    request_id: str,
    build: Callable[[], ErasureCertificate],
    signer: Signer,
) -> tuple[dict[str, Any], bytes]:
    """The request's one certificate envelope: signed and written once; a retry (the step
    failed after writing it) finds and reuses it, so the audit record and the request name the
    same signature."""
    from lethe_shared.erasure.certificate import sign_certificate  # noqa: PLC0415

    key = report_key(request_id, "certificate.json")
    stored = documents.get(key)
    if stored is None:
        body = canonical_json(sign_certificate(build(), signer))
        if documents.put_once(key, body, _JSON):
            return json.loads(body), body
        stored = documents.get(key)  # another attempt wrote it first
        if stored is None:
            raise VerificationMissingError(f"the certificate of {request_id} vanished")
    return json.loads(stored), stored


def _decision(record: ErasureRequest) -> tuple[str, datetime]:
    approval = record.approval
    decided_at = approval.get("decided_at") or record.updated_at
    return str(approval.get("decided_by") or "unknown"), datetime.fromisoformat(str(decided_at))


def _certificate(
    record: ErasureRequest, results: EraseResults, verification: Verification, at: datetime
) -> ErasureCertificate:
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        CertificateTotals,
        CertificateVerification,
        ErasedObject,
        ErasureCertificate,
        ObjectVersion,
    )

    erased = tuple(
        ErasedObject(
            dataset_id=r.dataset_id,
            zone=r.zone,
            bucket=split_s3_url(r.object_url)[0],
            key=split_s3_url(r.object_url)[1],
            versions_before=tuple(
                ObjectVersion(version_id=v.version_id, etag=v.etag) for v in r.versions_before
            ),
            version_after=(
                ObjectVersion(version_id=r.version_after.version_id, etag=r.version_after.etag)
                if r.version_after
                else None
            ),
            rows_before=r.rows_before,
            rows_removed=r.rows_removed,
            rows_after=r.rows_after,
            versions_purged=r.versions_purged,
        )
        for r in results.objects
        if r.versions_before
    )
    approved_by, approved_at = _decision(record)
    return ErasureCertificate(
        certificate_id=f"cert-{record.request_id}",
        request_id=record.request_id,
        issued_at=at,
        requested_by=record.requested_by,
        approved_by=approved_by,
        approved_at=approved_at,
        report_sha256=str(record.report.get("manifest_sha256", "")),
        subject_hashes=record.subject_hashes,
        objects=erased,
        totals=CertificateTotals.of(erased),
        verification=CertificateVerification(
            objects_verified=len(erased),  # _require_verified: the verification covers them
            matching_rows_found=verification.matching_rows,
            verified_at=datetime.fromisoformat(verification.verified_at),
        ),
    )


def _audit(
    record: ErasureRequest,
    results: EraseResults,
    verification: Verification,
    signature: Mapping[str, Any],
    at: datetime,
) -> dict[str, Any]:
    """The append-only audit record: who asked, who decided, when, what the report was, and
    per object its versions before and after and the row counts. Hashed ids only."""
    approved_by, approved_at = _decision(record)
    return {
        "request_id": record.request_id,
        "requested_by": record.requested_by,
        "reason": record.reason,
        "subject_hashes": list(record.subject_hashes),
        "subject_count": record.subject_count,
        "approved_by": approved_by,
        "approved_at": approved_at.isoformat(),
        "report_sha256": record.report.get("manifest_sha256", ""),
        "history": [h.model_dump(mode="json") for h in record.history],
        "objects": [json.loads(r.model_dump_json()) for r in results.objects],
        "verification": {"ok": verification.ok, "verified_at": verification.verified_at},
        "certificate_signature": dict(signature),
        "completed_at": at.isoformat(),
    }


@dataclass(frozen=True)
class S3Documents:
    """DocumentStore on the reports bucket."""

    client: Any
    bucket: str

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        return s3_url(self.bucket, key)

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        from lethe_shared.aws.errors import is_s3_condition_failed  # noqa: PLC0415

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfNoneMatch="*"
            )
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
