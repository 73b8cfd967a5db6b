"""How an erased request ends (the workflow's Certify step, `workflow.certify`): the audit record,
the signed certificate and the request's last status, from the erase job's results, the
verification, the frozen report and the index update.

**Erasure fails closed.** The verification must be this request's, cover exactly the erased
objects and have found each clean, or nothing is certified (the step fails; the request ends
FAILED with the error). The same when the frozen report (`manifest.json`) is missing or is not
the one approved (its SHA-256 differs from the request record's `report.manifest_sha256`), or
the index update's document (`index_update.json`) is missing or is not the update the record
summarises. When all is in order, every place the request's subjects may still be is gathered
(`gathered_gaps`), from three sources:

- the erase job's: what of an erased object it could not search (`EraseResults.not_searched`:
  records that could not be parsed, a subject column missing or ambiguous, rows that differ
  from the index's count, a widened raw version it could not read);
- the frozen report's: raw versions the erasure could not reach (`Manifest.not_searched`: still
  being ingested after the wait, quarantined whole, archived, beyond the report's cap);
- the index update's: every entry the index still holds for the subjects after the erasure
  (indexed after the report was frozen, or of a version the erasure never saw), all of them,
  from `index_update.json` (the request record lists only the first ones).

A gap found twice (same object, version and reason) is listed once, the first time. Then:

- no gap: the certificate says `complete: true`, the request becomes COMPLETED;
- any gap: the audit record and a signed certificate are still written, and say so
  (`complete: false`, every gap with its bucket, key, version, dataset, reason, count and
  detail), but the request does not complete: it ends FAILED with `outcome: INCOMPLETE` (the
  contract's statuses have no other value; REJECTED with `outcome: CANCELLED` is the precedent)
  and an `error` that says how many places were not fully searched. Nothing is ever COMPLETED
  for less than the whole.

**Nothing is signed without a recorded approval decision** (`require_approval`): a record
without an approver (`approval.decided_by` missing or "unknown") or a decision time
(`approval.decided_at`) is refused with ApprovalNotRecordedError.

The certificate (format_version 2, lethe_shared.erasure.certificate) names the SHA-256 of
manifest.json, results.json, verification.json and index_update.json as stored, and of the audit
record's content: the audit record names the certificate's signature (`certificate_signature`),
so it is written after signing, and the certificate signs the SHA-256 of the RFC 8785 JCS of the
audit record without that one member. The audit record is built from the certificate's own
`issued_at` (its `completed_at`), so a retry rebuilds the same record. The certificate is the
next link of the deployment's chain (lethe_shared.erasure.certificate_chain) and carries the
sanitization statement (lethe_shared.erasure.certificate_statement, facts from the environment).

Every document holds keyed hashes of the subjects only; a gap's detail holds counts, line
numbers and declared column names, never a value. The request's record (which the API shows)
names the gaps by count and reason only: object keys stay in the documents of the reports
bucket, as the manifest's do. The certificate and the audit record name objects by their shown
keys only (a subject column's partition value or a producer's key hashed with the subject hash
key: lethe_shared.erasure.shown), and scrub gaps' details and deviations.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lethe_shared.aws.s3 import s3_url, split_s3_url
from lethe_shared.aws.scrub import scrub_text
from lethe_shared.erasure.certificate_chain import sign_chained
from lethe_shared.erasure.certificate_index import IndexErasure, index_erasure_of
from lethe_shared.erasure.certificate_statement import (
    AUDIT_SIGNATURE_MEMBER,
    DIGEST_OF_AUDIT,
    DeploymentFacts,
    statement,
)
from lethe_shared.erasure.index_update import DOCUMENT as INDEX_UPDATE_DOCUMENT
from lethe_shared.erasure.index_update import not_searched as index_not_searched
from lethe_shared.erasure.jcs import canonicalize
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    NotSearched,
    ObjectResult,
    Verification,
    canonical_json,
    report_key,
    results_totals,
    sha256_hex,
)
from lethe_shared.erasure.requests import ErasureRequest, ErasureRequests, ErasureStatus
from lethe_shared.erasure.shown import KEYLESS, shown_gap, shown_result
from lethe_shared.erasure.workflow import WORKFLOW, VerificationMissingError, notification

if TYPE_CHECKING:
    from lethe_shared.erasure.certificate import (
        ErasedObject,
        ErasureCertificate,
        NotSearchedPlace,
        Signer,
    )
    from lethe_shared.erasure.certificate_statement import ChainLink, DocumentDigest, JobRun
    from lethe_shared.erasure.workflow import DocumentStore
    from lethe_shared.subject_hashing.shown_keys import Namer

INCOMPLETE = "INCOMPLETE"  # the outcome of a FAILED request that was not fully searched
INCOMPLETE_ERROR = "ErasureIncomplete"
_JSON, _HTML = "application/json", "text/html; charset=utf-8"


class ReportMismatchError(VerificationMissingError):
    """The frozen report or the index update the certificate step read is not the request's
    (a SHA-256 or a count differs): nothing is certified."""


class ApprovalNotRecordedError(VerificationMissingError):
    """The request record holds no approval decision (no approver, "unknown", or no decision
    time): nothing is signed."""


@dataclass(frozen=True)
class Certified:
    notification: dict[str, Any]
    certificate_url: str

    @property
    def complete(self) -> bool:
        return self.notification.get("outcome") != INCOMPLETE


def incomplete_cause(gaps: tuple[NotSearched, ...]) -> str:
    """The request's error text: how many places, by reason; no key, no value."""
    reasons = Counter(g.reason for g in gaps)
    listed = ", ".join(f"{reason}: {count}" for reason, count in sorted(reasons.items()))
    return (
        f"{len(gaps)} place(s) were not fully searched for the subjects ({listed}); the signed "
        "certificate (complete: false) and the audit record list each one"
    )


def complete(
    record: ErasureRequest,
    results: EraseResults,
    verification: Verification,
    *,
    requests: ErasureRequests,
    documents: DocumentStore,
    signer: Signer,
    at: datetime,
    facts: DeploymentFacts | None = None,
    namer: Namer = KEYLESS,
    job_runs: tuple[JobRun, ...] = (),
) -> Certified:
    """Certify a request whose documents were read (module docstring): signed certificate (the
    chain's next link), audit record, then COMPLETED, or FAILED with outcome INCOMPLETE when a
    place was not fully searched. `facts`: the deployment's (default: from the environment).
    `namer` names objects in the certificate and the audit record by their shown keys
    (lethe_shared.erasure.shown; default: the dataset prefix only)."""
    from lethe_shared.erasure.certificate import render_certificate_html  # noqa: PLC0415

    request_id = record.request_id
    require_approval(record)
    require_verified(request_id, results, verification)
    manifest = frozen_report(record, documents)
    require_covered(record, manifest, results)
    # every place the subjects may still be (the verification re-reads what the erase job read
    # and reports none of its own)
    gaps = gathered_gaps(
        results.not_searched,
        manifest.not_searched,
        index_update_gaps(record, documents),
    )
    digests = stored_digests(record, results, verification, documents)
    deployment = facts or DeploymentFacts.from_environment()
    index_erasure = index_erasure_of(
        json.loads(_read(documents, request_id, INDEX_UPDATE_DOCUMENT))
    )  # the segment store's evidence (lethe_shared.erasure.certificate_index); None: DynamoDB

    def build(link: ChainLink) -> ErasureCertificate:
        audit = _audit(record, results, verification, gaps=gaps, at=at, namer=namer)
        return _certificate(
            record, results, verification, gaps, at,
            documents=(*digests, audit_digest(audit)), chain=link, facts=deployment, namer=namer,
            job_runs=job_runs, index_erasure=index_erasure,
        )  # fmt: skip

    envelope, envelope_bytes = sign_chained(documents, request_id, build, signer)
    issued = datetime.fromisoformat(str(envelope["certificate"]["issued_at"]))
    url = documents.url(report_key(request_id, "certificate.json"))
    html_url = documents.put(
        report_key(request_id, "certificate.html"),
        render_certificate_html(envelope).encode(),
        _HTML,
    )
    audit = _audit(record, results, verification, gaps=gaps, at=issued, namer=namer)
    audit[AUDIT_SIGNATURE_MEMBER] = dict(envelope["signature"])
    documents.put_once(report_key(request_id, "audit.json"), canonical_json(audit), _JSON)
    totals = results_totals(results.objects)
    bucket, _ = split_s3_url(url)
    updates: dict[str, Any] = {
        "result": {
            **totals,
            "not_searched": len(gaps),
            "results_url": s3_url(bucket, report_key(request_id, "results.json")),
            "verification_url": s3_url(bucket, report_key(request_id, "verification.json")),
        },
        "certificate": {
            "url": url,
            "html_url": html_url,
            "sha256": sha256_hex(envelope_bytes),
            "key_id": str(envelope["signature"]["key_id"]),
            "audit_url": s3_url(bucket, report_key(request_id, "audit.json")),
            "chain_sequence": int((envelope["certificate"].get("chain") or {}).get("sequence", 0)),
        },
    }
    removed, purged = totals["rows_removed"], totals["versions_purged"]
    done = f"{removed} row(s) removed, {purged} version(s) purged"
    if not gaps:
        ended = requests.transition(
            request_id, ErasureStatus.COMPLETED, by=WORKFLOW, detail=done, updates=updates
        )
        return Certified(notification(ended), url)
    updates["outcome"] = INCOMPLETE
    updates["error"] = {"error": INCOMPLETE_ERROR, "cause": incomplete_cause(gaps)}
    ended = requests.transition(
        request_id,
        ErasureStatus.FAILED,
        by=WORKFLOW,
        detail=f"{INCOMPLETE}: {len(gaps)} place(s) not fully searched; {done}",
        updates=updates,
    )
    return Certified(notification(ended), url)


def require_verified(request_id: str, results: EraseResults, verification: Verification) -> None:
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


def require_covered(record: ErasureRequest, manifest: Manifest, results: EraseResults) -> None:
    """The results must be of the approved report (its SHA-256) and name exactly its objects,
    each once: an object of the report the erase run left out was not erased, and one it added
    was never approved; either way nothing is certified (ReportMismatchError)."""
    request_id = record.request_id
    approved = str(record.report.get("manifest_sha256", ""))
    if results.manifest_sha256 != approved:
        raise ReportMismatchError(
            f"request {request_id}: results.json is of the report {results.manifest_sha256 or '?'}"
            f", the approved one is {approved or 'none recorded'}: not certified"
        )
    wanted = [o.object_url for o in manifest.objects]
    found = [r.object_url for r in results.objects]
    if sorted(found) != sorted(wanted) or len(set(found)) != len(found):
        missing = len(set(wanted) - set(found))
        extra = len(set(found) - set(wanted))
        raise ReportMismatchError(
            f"request {request_id}: results.json names {len(found)} object(s), the report "
            f"{len(wanted)} ({missing} of the report missing, {extra} not in it, "
            f"{len(found) - len(set(found))} repeated): not certified"
        )


def gathered_gaps(*sources: Iterable[NotSearched]) -> tuple[NotSearched, ...]:
    """Every gap of every source, in order; one found again (same object, version and reason)
    is listed once, as first found."""
    seen: set[tuple[str, str, str]] = set()
    gaps = []
    for gap in (g for source in sources for g in source):
        place = (gap.object_url, gap.version_id, gap.reason)
        if place not in seen:
            seen.add(place)
            gaps.append(gap)
    return tuple(gaps)


def _read(documents: DocumentStore, request_id: str, name: str) -> bytes:
    body = documents.get(report_key(request_id, name))
    if body is None:
        raise VerificationMissingError(
            f"{name} of request {request_id} does not exist: not certified"
        )
    return body


def frozen_report(record: ErasureRequest, documents: DocumentStore) -> Manifest:
    """The request's frozen report, refused unless its SHA-256 is the one the request recorded
    (and the approver saw)."""
    request_id = record.request_id
    approved = str(record.report.get("manifest_sha256", ""))
    body = _read(documents, request_id, "manifest.json")
    if not approved or sha256_hex(body) != approved:
        raise ReportMismatchError(
            f"request {request_id}: manifest.json (SHA-256 {sha256_hex(body)}) is not the report "
            f"that was approved ({approved or 'none recorded'}): not certified"
        )
    manifest = Manifest.model_validate_json(body)
    if manifest.request_id != request_id:
        raise ReportMismatchError(f"the manifest of {request_id} is of {manifest.request_id}")
    return manifest


def index_update_gaps(record: ErasureRequest, documents: DocumentStore) -> tuple[NotSearched, ...]:
    """Every entry the index update kept for the request's subjects (all of them: the document
    lists each, the record only the first), as `appeared_after_erase` gaps. Refused when the
    document is missing, or lists another number of kept items than the record summarises."""
    request_id = record.request_id
    document = json.loads(_read(documents, request_id, INDEX_UPDATE_DOCUMENT))
    kept = document.get("kept") if isinstance(document, dict) else None
    if not isinstance(kept, list):
        raise ReportMismatchError(f"{INDEX_UPDATE_DOCUMENT} of {request_id} lists no kept items")
    summary = (record.model_extra or {}).get("index")
    if isinstance(summary, Mapping):
        recorded = len(summary.get("kept") or []) + int(summary.get("kept_unlisted") or 0)
        if recorded != len(kept):
            raise ReportMismatchError(
                f"request {request_id}: {INDEX_UPDATE_DOCUMENT} lists {len(kept)} kept item(s), "
                f"the request record {recorded}: not certified"
            )
    return index_not_searched({"kept": kept})


def require_approval(record: ErasureRequest) -> tuple[str, datetime]:
    """The recorded decision: who approved and when. Raises ApprovalNotRecordedError when the
    record has no approver (missing, empty or "unknown") or no decision time."""
    approval = record.approval
    by = str(approval.get("decided_by") or "").strip()
    decided_at = str(approval.get("decided_at") or "").strip()
    if not by or by.lower() == "unknown" or not decided_at:
        raise ApprovalNotRecordedError(
            f"request {record.request_id} has no recorded approval decision (approver "
            f"{'recorded' if by and by.lower() != 'unknown' else 'missing'}, decision time "
            f"{'recorded' if decided_at else 'missing'}): nothing is signed"
        )
    try:
        return by, datetime.fromisoformat(decided_at)
    except ValueError:
        raise ApprovalNotRecordedError(
            f"request {record.request_id}: the approval's decision time is not a time: nothing "
            "is signed"
        ) from None


def stored_digests(
    record: ErasureRequest,
    results: EraseResults,
    verification: Verification,
    documents: DocumentStore,
) -> tuple[DocumentDigest, ...]:
    """The SHA-256 of each document the certificate certifies, as stored now; results.json and
    verification.json must still be what was read (else nothing is certified)."""
    from lethe_shared.erasure.certificate_statement import DocumentDigest  # noqa: PLC0415

    request_id = record.request_id
    bodies = {
        name: _read(documents, request_id, name)
        for name in ("manifest.json", "results.json", "verification.json", INDEX_UPDATE_DOCUMENT)
    }
    if (
        EraseResults.model_validate_json(bodies["results.json"]) != results
        or Verification.model_validate_json(bodies["verification.json"]) != verification
    ):
        raise ReportMismatchError(
            f"request {request_id}: results.json or verification.json changed while it was "
            "certified: not certified"
        )
    return tuple(DocumentDigest(name=n, sha256=sha256_hex(b)) for n, b in bodies.items())


def audit_digest(audit: Mapping[str, Any]) -> DocumentDigest:
    """The audit record's digest as the certificate names it: SHA-256 of the JCS of its
    content without `certificate_signature`."""
    from lethe_shared.erasure.certificate_statement import DocumentDigest  # noqa: PLC0415

    content = {k: v for k, v in audit.items() if k != AUDIT_SIGNATURE_MEMBER}
    return DocumentDigest(
        name="audit.json",
        sha256=hashlib.sha256(canonicalize(content)).hexdigest(),
        digest_of=DIGEST_OF_AUDIT,
    )


def _certificate(
    record: ErasureRequest,
    results: EraseResults,
    verification: Verification,
    gaps: tuple[NotSearched, ...],
    at: datetime,
    *,
    documents: tuple[DocumentDigest, ...],
    chain: ChainLink,
    facts: DeploymentFacts,
    namer: Namer,
    job_runs: tuple[JobRun, ...] = (),
    index_erasure: IndexErasure | None = None,
) -> ErasureCertificate:
    """The certificate: what was erased, the verification, and whether it was complete (every
    place that was not fully searched); the documents' digests, its chain link and statement."""
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        FORMAT_VERSION,
        CertificateTotals,
        CertificateVerification,
        ErasureCertificate,
    )

    erased = erased_objects(results.objects, namer)
    approved_by, approved_at = require_approval(record)
    wait = (record.model_extra or {}).get("ingestion_wait")
    return ErasureCertificate(
        format_version=FORMAT_VERSION,
        certificate_id=f"cert-{record.request_id}",
        request_id=record.request_id,
        issued_at=at,
        requested_by=record.requested_by,
        approved_by=approved_by,
        approved_at=approved_at,
        report_sha256=str(record.report.get("manifest_sha256", "")),
        subject_hashes=record.subject_hashes,
        key_fingerprint=record.key_fingerprint,
        objects=erased,
        totals=CertificateTotals.of(erased),
        verification=CertificateVerification(
            objects_verified=len(erased),  # require_verified: the verification covers them
            matching_rows_found=verification.matching_rows,
            verified_at=datetime.fromisoformat(verification.verified_at),
        ),
        complete=not gaps,
        not_searched=not_searched_places(gaps, namer),
        documents=documents,
        chain=chain,
        index_erasure=index_erasure,
        statement=statement(
            facts=facts,
            at=at,
            execution_arn=record.execution_arn,
            correlation_id=results.correlation_id,
            objects_verified=len(erased),
            matching_rows=verification.matching_rows,
            datasets=record.scope,
            subject_count=record.subject_count,
            not_looked_up=len(record.not_looked_up),
            ingestion_wait=wait if isinstance(wait, Mapping) else {},
            places_not_searched=len(gaps),
            job_runs=job_runs,
        ),
    )


def erased_objects(results: Iterable[ObjectResult], namer: Namer) -> tuple[ErasedObject, ...]:
    """The certificate's objects: each result that had versions, named by its shown key (a full
    certificate's and a failed run's partial one alike)."""
    from lethe_shared.erasure.certificate import ErasedObject, ObjectVersion  # noqa: PLC0415

    return tuple(
        ErasedObject(
            dataset_id=r.dataset_id,
            zone=r.zone,
            bucket=split_s3_url(r.object_url)[0],
            key=namer.key(split_s3_url(r.object_url)[1]),
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
        for r in results
        if r.versions_before
    )


def not_searched_places(gaps: Iterable[NotSearched], namer: Namer) -> tuple[NotSearchedPlace, ...]:
    """The certificate's places not searched, named by their shown keys, details scrubbed."""
    from lethe_shared.erasure.certificate import NotSearchedPlace  # noqa: PLC0415

    return tuple(
        NotSearchedPlace(
            dataset_id=g.dataset_id,
            bucket=split_s3_url(g.object_url)[0],
            key=namer.key(split_s3_url(g.object_url)[1]),
            version_id=g.version_id,
            reason=g.reason,
            count=g.count,
            detail=scrub_text(g.detail, namer, quoted=False),
        )
        for g in gaps
    )


def _audit(
    record: ErasureRequest,
    results: EraseResults,
    verification: Verification,
    *,
    gaps: tuple[NotSearched, ...],
    at: datetime,
    namer: Namer,
) -> dict[str, Any]:
    """The append-only audit record: who asked, who decided, when, what the report was, and
    per object its versions before and after and the row counts; whether the erasure was
    complete, and every place that was not fully searched. Hashed ids only. The certificate's
    signature (`certificate_signature`) is added once it is signed (module docstring)."""
    approved_by, approved_at = require_approval(record)
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
        "objects": [shown_result(r, namer) for r in results.objects],
        "verification": {"ok": verification.ok, "verified_at": verification.verified_at},
        "complete": not gaps,
        "outcome": INCOMPLETE if gaps else ErasureStatus.COMPLETED.value,
        "not_searched": [shown_gap(g, namer) for g in gaps],
        "completed_at": at.isoformat(),
    }
