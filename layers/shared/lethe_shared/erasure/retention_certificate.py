"""A retention run's certificate: what a scheduled run (lethe_shared.erasure.retention_runs)
removed, KMS-signed like an erasure's (the same envelope, digest and key:
lethe_shared.erasure.certificate), naming **no subject**.

It states the dataset, the rule as declared and its SHA-256 (the standing authorisation), the
cutoff, the frozen report's and the run report's SHA-256, each object with its shown key
(lethe_shared.subject_hashing.shown_keys), what the erase job did to it (rewritten, deleted,
unchanged, refused), the rows removed and the versions purged, the subject holds honoured (their
ids and how many subjects' rows were kept), the verification, the re-index, the Spark runs, and
`not_removed`: every place where rows past the period may remain and why (an object refused or
not fully read, an object that did not verify, objects deferred to the next run, a failed step).

Fails closed: `complete` is true only when the verification ran and found every object clean,
nothing is in `not_removed` and the re-index ran; the run's record is then COMPLETED, otherwise
FAILED with outcome INCOMPLETE (never COMPLETED for less).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, ValidationError

from lethe_shared.erasure.certificate import (
    SIGNING_ALGORITHM,
    CertificateInvalidError,
    Signer,
    Verifier,
    certificate_digest,
)
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    Verification,
    canonical_json,
    report_key,
    sha256_hex,
)
from lethe_shared.erasure.requests import ErasureRequests, ErasureStatus
from lethe_shared.models import Model

FORMAT: Literal["lethe-retention-certificate/1"] = "lethe-retention-certificate/1"
_JSON = "application/json"


class _Frozen(Model):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetainedObject(_Frozen):
    object_url: str  # shown key: a subject column's partition value hashed
    zone: str
    action: str
    rows_removed: int
    rows_after: int
    versions_purged: int
    version_after: str | None


class NotRemoved(_Frozen):
    object_url: str = ""  # "" for the run as a whole
    reason: str
    count: int = 0
    detail: str = ""


class RetentionCertificate(_Frozen):
    format: Literal["lethe-retention-certificate/1"] = FORMAT
    run_id: str
    dataset_id: str
    issued_at: str
    rule: dict[str, Any]
    rule_text: str
    rule_sha256: str
    dataset_version: int
    authorised_by: str  # the standing authorisation: the declared rule, from rule_since
    rule_since: str
    column: str | None
    cutoff: str
    manifest_sha256: str
    report_sha256: str
    objects: tuple[RetainedObject, ...]
    totals: dict[str, int]
    subject_holds_honoured: tuple[str, ...]
    held_subjects: int
    verification: dict[str, Any]
    reindexed: bool
    job_runs: tuple[dict[str, str], ...]
    not_removed: tuple[NotRemoved, ...]
    complete: bool


def sign_retention(certificate: RetentionCertificate, signer: Signer) -> dict[str, Any]:
    doc = certificate.model_dump(mode="json")
    digest = certificate_digest(doc)
    return {
        "certificate": doc,
        "signature": {
            "algorithm": SIGNING_ALGORITHM,
            "key_id": signer.key_id,
            "digest_sha256": digest.hex(),
            "value": base64.b64encode(signer.sign(digest)).decode("ascii"),
        },
    }


def verify_retention(envelope: Mapping[str, Any], verifier: Verifier) -> RetentionCertificate:
    """The certificate of a signed envelope; CertificateInvalidError unless its digest and
    signature verify (the same checks as an erasure's)."""
    doc, signature = envelope.get("certificate"), envelope.get("signature")
    if not isinstance(doc, Mapping) or not isinstance(signature, Mapping):
        raise CertificateInvalidError("malformed", "an envelope holds a certificate and signature")
    if signature.get("algorithm") != SIGNING_ALGORITHM:
        raise CertificateInvalidError("unsupported-algorithm", str(signature.get("algorithm")))
    digest = certificate_digest(doc)
    if digest.hex() != signature.get("digest_sha256"):
        raise CertificateInvalidError("digest-mismatch", "the certificate is not the one signed")
    try:
        value = base64.b64decode(str(signature.get("value", "")), validate=True)
    except ValueError as exc:
        raise CertificateInvalidError("bad-signature", "not base64") from exc
    if not verifier.verify(digest, value):
        raise CertificateInvalidError("bad-signature", "the signature does not verify")
    try:
        return RetentionCertificate.model_validate(dict(doc))
    except ValidationError as exc:
        raise CertificateInvalidError("malformed", "not a retention certificate") from exc


class Documents:
    """What certifying reads and writes: erasure/<run id>/ documents (a DocumentStore)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def read(self, run_id: str, name: str) -> bytes | None:
        body = self.store.get(report_key(run_id, name))
        return bytes(body) if body is not None else None


def _gaps(  # noqa: PLR0917 - one call site, the certificate's own inputs
    manifest: Manifest,
    results: EraseResults | None,
    verification: Verification | None,
    shown: Callable[[str], str],
    deferred: Sequence[str],
    error: str,
) -> list[NotRemoved]:
    gaps: list[NotRemoved] = []
    if error:
        gaps.append(NotRemoved(reason="run_failed", detail=error))
    if results is None:
        gaps.append(NotRemoved(reason="no_results", count=len(manifest.objects),
                               detail="the erase job recorded no results: the objects of the "
                               "report may hold expired rows"))  # fmt: skip
    else:
        for result in results.objects:
            for gap in result.not_searched:
                gaps.append(NotRemoved(
                    object_url=shown(result.object_url), reason=gap.reason, count=gap.count,
                    detail=gap.detail,
                ))  # fmt: skip
    if verification is None:
        gaps.append(NotRemoved(reason="not_verified",
                               detail="no verification: nothing is proven removed"))  # fmt: skip
    else:
        for check in verification.objects:
            if not check.ok:
                gaps.append(NotRemoved(
                    object_url=shown(check.object_url), reason="verification_failed",
                    count=check.matching_rows, detail=check.problem,
                ))  # fmt: skip
    if deferred:
        detail = "over the run's object limit: left to the next run"
        gaps.append(NotRemoved(reason="deferred", count=len(deferred), detail=detail))
    return gaps


def build_certificate(
    run_id: str,
    *,
    manifest_body: bytes,
    report_body: bytes,
    results: EraseResults | None,
    verification: Verification | None,
    reindexed: bool,
    job_runs: Sequence[Mapping[str, str]],
    error: str,
    shown: Callable[[str], str],
    now: datetime,
) -> RetentionCertificate:
    manifest = Manifest.model_validate_json(manifest_body)
    plan: dict[str, Any] = json.loads(report_body)
    auth: dict[str, Any] = dict(plan.get("authorisation") or {})
    spec = manifest.retention[0]
    objects = tuple(
        RetainedObject(
            object_url=shown(r.object_url), zone=str(r.zone), action=str(r.action),
            rows_removed=r.rows_removed, rows_after=r.rows_after,
            versions_purged=r.versions_purged,
            version_after=r.version_after.version_id if r.version_after else None,
        )
        for r in (results.objects if results else ())
    )  # fmt: skip
    gaps = _gaps(manifest, results, verification, shown, plan.get("deferred") or [], error)
    if not reindexed and not error:
        detail = (
            "the index still describes the rewritten objects as before: re-index the dataset "
            "(lethe index backfill --force)"
        )
        gaps.append(NotRemoved(reason="not_reindexed", detail=detail))
    totals = {
        "objects": len(objects),
        "rewritten": sum(o.action == "rewritten" for o in objects),
        "deleted": sum(o.action == "deleted" for o in objects),
        "rows_removed": sum(o.rows_removed for o in objects),
        "versions_purged": sum(o.versions_purged for o in objects),
    }
    return RetentionCertificate(
        run_id=run_id, dataset_id=spec.dataset_id, issued_at=now.isoformat(),
        rule=dict(auth.get("rule") or {}), rule_text=str(auth.get("rule_text", "")),
        rule_sha256=spec.rule_sha256, dataset_version=int(auth.get("dataset_version", 0)),
        authorised_by=str(auth.get("decided_by", "")), rule_since=str(auth.get("decided_at", "")),
        column=spec.column, cutoff=spec.cutoff, manifest_sha256=sha256_hex(manifest_body),
        report_sha256=sha256_hex(report_body), objects=objects, totals=totals,
        subject_holds_honoured=tuple(plan.get("subject_holds") or ()),
        held_subjects=len(spec.held_hashes),
        verification={
            "verified": verification is not None and verification.ok,
            "objects_checked": len(verification.objects) if verification else 0,
            "verified_at": verification.verified_at if verification else "",
        },
        reindexed=reindexed, job_runs=tuple(dict(r) for r in job_runs),
        not_removed=tuple(gaps), complete=not gaps,
    )  # fmt: skip


def certify_run(
    run_id: str,
    *,
    documents: Any,  # a DocumentStore of the reports bucket
    requests: ErasureRequests,
    signer: Signer,
    shown: Callable[[str], str],
    reindexed: bool,
    job_runs: Sequence[Mapping[str, str]],
    error: str,
    now: datetime,
) -> RetentionCertificate:
    """Certify a run from its documents, store the signed certificate (certificate.json) and
    close the run's record: COMPLETED when complete, else FAILED with outcome INCOMPLETE."""
    reader = Documents(documents)
    manifest_body, report_body = (
        reader.read(run_id, "manifest.json"),
        reader.read(run_id, "report.json"),
    )
    if manifest_body is None or report_body is None:
        raise FileNotFoundError(f"run {run_id} has no frozen report: nothing to certify")
    results_body = reader.read(run_id, "results.json")
    verification_body = reader.read(run_id, "verification.json")
    certificate = build_certificate(
        run_id, manifest_body=manifest_body, report_body=report_body,
        results=EraseResults.model_validate_json(results_body) if results_body else None,
        verification=(
            Verification.model_validate_json(verification_body) if verification_body else None
        ),
        reindexed=reindexed, job_runs=job_runs, error=error, shown=shown, now=now,
    )  # fmt: skip
    envelope = sign_retention(certificate, signer)
    body = canonical_json(envelope)
    url = documents.put(report_key(run_id, "certificate.json"), body, _JSON)
    summary = {"url": url, "sha256": sha256_hex(body), "complete": certificate.complete}
    result = {**certificate.totals, "not_removed": len(certificate.not_removed)}
    if certificate.complete:
        requests.transition(
            run_id, ErasureStatus.COMPLETED, by="workflow", detail="retention run certified",
            updates={"certificate": summary, "result": result},
        )  # fmt: skip
    else:
        requests.transition(
            run_id, ErasureStatus.FAILED, by="workflow",
            detail="retention run incomplete: see the certificate's not_removed",
            updates={"certificate": summary, "result": result, "outcome": "INCOMPLETE"},
        )  # fmt: skip
    return certificate
