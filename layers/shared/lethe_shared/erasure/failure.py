"""How a FAILED erase run is recorded: an audit record and a signed *partial* certificate.

A request whose run fails after Mark Erasing (the erase or verify Spark run, the index update or
the certificate step) may have destroyed data already: the workflow's Record Failure step
(statemachines/erasure.asl.json, after Mark Failed) writes what was done so far, so that no
destruction goes unrecorded:

- what was done: each object's result as its executor recorded it
  (lethe_shared.erasure.progress.done_so_far: only results of this report), and for an object
  without one the erase job's `results.json` when it is of this report (the run got as far as
  writing it: the verify run, the index update or the certify step failed);
- everything else of the report is *not done*: each such object is listed as a place not
  (fully) erased (`not_done_run_failed`, with the rows the report expected), as are the frozen
  report's own gaps and those the done objects name;
- the cause, scrubbed: the error's name and, for a Spark run, the run's id and final state;
  never the error's text (it may name an object key or hold a value).

The partial certificate is an ErasureCertificate with `partial` set (status FAILED, kind
partial, run number, counts), `complete: false` and no verification: it is not a certificate of
completion, and `lethe erasure certificate ID --verify` says so and exits 1. It is the next link
of the deployment's chain (certificate_chain.sign_chained) under its own name,
`failed-run-<run>/certificate.json` (run 1 is the request's first erase run, each resume adds
one), with its audit record `failed-run-<run>/audit.json` (written once) and page. The request
stays FAILED; its record points at the partial certificate (`certificate.partial: true`) and
lists every one (`partial_certificates`), so a resumed run's full certificate never hides one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lethe_shared.erasure.certificate_chain import sign_chained
from lethe_shared.erasure.certificate_statement import (
    AUDIT_SIGNATURE_MEMBER,
    DeploymentFacts,
    JobRun,
    statement,
)
from lethe_shared.erasure.completion import (
    INCOMPLETE,
    audit_digest,
    erased_objects,
    frozen_report,
    gathered_gaps,
    not_searched_places,
    require_approval,
)
from lethe_shared.erasure.progress import done_so_far
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    NotSearched,
    ObjectResult,
    canonical_json,
    report_key,
    results_totals,
    sha256_hex,
)
from lethe_shared.erasure.requests import ErasureRequest, ErasureRequests, ErasureStatus
from lethe_shared.erasure.shown import KEYLESS, shown_gap, shown_result
from lethe_shared.erasure.workflow import notification

if TYPE_CHECKING:
    from lethe_shared.erasure.certificate import ErasureCertificate, Signer
    from lethe_shared.erasure.certificate_statement import ChainLink
    from lethe_shared.erasure.workflow import DocumentStore
    from lethe_shared.subject_hashing.shown_keys import Namer

NOT_DONE = "not_done_run_failed"  # certificate.PARTIAL_GAP
_JSON, _HTML = "application/json", "text/html; charset=utf-8"


def partial_name(run: int, name: str) -> str:
    """A document of a failed run under its request: `failed-run-<run>/<name>`."""
    return f"failed-run-{run}/{name}"


def run_of(record: ErasureRequest) -> int:
    """The request's current erase run: 1, or the run its last resume started."""
    resume = (record.model_extra or {}).get("resume")
    try:
        return max(1, int(resume.get("run", 1))) if isinstance(resume, Mapping) else 1
    except (TypeError, ValueError):
        return 1


def scrubbed_cause(error: str, cause: str) -> str:
    """The failure as a certificate may state it: the error's name, and for a Spark run (a
    .sync task's cause is the job run's JSON) its id and final state; no free text."""
    name = error.strip()[:120] or "unknown error"
    try:
        run = json.loads(cause)
    except (TypeError, ValueError):
        run = None
    if isinstance(run, Mapping):
        run_id = run.get("Id") or run.get("JobRunId")
        state = run.get("JobRunState") or run.get("State")
        if isinstance(run_id, str) and isinstance(state, str):
            return f"{name}: Spark job run {run_id[:120]} ended {state[:40]}"
    return f"{name} (its message is not repeated here: it may name objects)"


def failed_run_id(cause: str) -> str:
    """The Spark run id of a failed .sync task's cause ("" when it is not one)."""
    try:
        run = json.loads(cause)
    except (TypeError, ValueError):
        return ""
    found = run.get("Id") or run.get("JobRunId") if isinstance(run, Mapping) else None
    return found if isinstance(found, str) else ""


def what_was_done(
    record: ErasureRequest, manifest: Manifest, documents: DocumentStore
) -> tuple[ObjectResult, ...]:
    """Every result recorded for the report's objects, in the report's order: an object's
    progress document, else its result in `results.json` when that is of this report."""
    sha = str(record.report.get("manifest_sha256", ""))
    recorded = {r.object_url: r for r in done_so_far(manifest, sha, documents.get)}
    body = documents.get(report_key(record.request_id, "results.json"))
    if body is not None:
        try:
            results = EraseResults.model_validate_json(body)
        except ValueError:
            results = None
        if results is not None and results.manifest_sha256 == sha:
            wanted = {o.object_url for o in manifest.objects}
            for result in results.objects:
                if result.object_url in wanted:
                    recorded.setdefault(result.object_url, result)
    return tuple(recorded[o.object_url] for o in manifest.objects if o.object_url in recorded)


def not_done(manifest: Manifest, done: Sequence[ObjectResult]) -> tuple[NotSearched, ...]:
    """The report's objects the run did not finish (no result, or refused)."""
    finished = {r.object_url for r in done if not r.refused}
    return tuple(
        NotSearched.model_construct(
            object_url=o.object_url,
            version_id="",
            dataset_id=o.dataset_id,
            reason=NOT_DONE,  # type: ignore[arg-type]  # a certificate reason, not a GapReason
            count=o.expected_rows,
            detail="the erase run failed before this object was done: not erased",
        )
        for o in manifest.objects
        if o.object_url not in finished
    )


def certify_failure(
    request_id: str,
    *,
    requests: ErasureRequests,
    documents: DocumentStore,
    signer: Signer,
    error: str,
    cause: str,
    job_runs: Sequence[JobRun] = (),
    at: datetime,
    facts: DeploymentFacts | None = None,
    namer: Namer = KEYLESS,
) -> dict[str, Any]:
    """Write the failed run's audit record and partial certificate (module docstring); returns
    the request's notification with `partial_certificate` (its URL). A request that is not
    FAILED, or that ended FAILED with a full certificate (outcome INCOMPLETE), is left as it
    is. Raises (VerificationMissingError and kin) when the frozen report is missing or is not
    the approved one, or the request has no recorded approval: then nothing is signed.
    `namer` names objects in the certificate and the audit record by their shown keys
    (lethe_shared.erasure.shown; default: the dataset prefix only), as a full certificate does."""
    from lethe_shared.erasure.certificate import render_certificate_html  # noqa: PLC0415

    record = requests.get(request_id)
    if record is None:
        from lethe_shared.erasure.requests import RequestNotFoundError  # noqa: PLC0415

        raise RequestNotFoundError(f"no erasure request {request_id}")
    if record.status is not ErasureStatus.FAILED or record.outcome == INCOMPLETE:
        return notification(record)
    require_approval(record)
    run = run_of(record)
    manifest = frozen_report(record, documents)
    done = what_was_done(record, manifest, documents)
    left = not_done(manifest, done)
    gaps = gathered_gaps(left, manifest.not_searched, (g for r in done for g in r.not_searched))
    runs = tuple(job_runs)
    failed_id = failed_run_id(cause)
    scrubbed = scrubbed_cause(error, cause)
    deployment = facts or DeploymentFacts.from_environment()
    manifest_sha = str(record.report.get("manifest_sha256", ""))  # frozen_report checked it

    def build(link: ChainLink) -> ErasureCertificate:
        audit = _audit(
            record, done, gaps, run=run, error=error, cause=scrubbed, at=at, runs=runs, namer=namer
        )
        return _certificate(
            record, done, gaps, manifest, at, run=run, error=error, cause=scrubbed,
            manifest_sha=manifest_sha, audit=audit, chain=link, facts=deployment, runs=runs,
            failed_run=failed_id, namer=namer,
        )  # fmt: skip

    envelope, body = sign_chained(
        documents, request_id, build, signer, name=partial_name(run, "certificate.json")
    )
    issued = datetime.fromisoformat(str(envelope["certificate"]["issued_at"]))
    html_url = documents.put(
        report_key(request_id, partial_name(run, "certificate.html")),
        render_certificate_html(envelope).encode(),
        _HTML,
    )
    audit = _audit(
        record, done, gaps, run=run, error=error, cause=scrubbed, at=issued, runs=runs, namer=namer
    )
    audit[AUDIT_SIGNATURE_MEMBER] = dict(envelope["signature"])
    audit_key = report_key(request_id, partial_name(run, "audit.json"))
    documents.put_once(audit_key, canonical_json(audit), _JSON)
    url = documents.url(report_key(request_id, partial_name(run, "certificate.json")))
    pointer = {
        "url": url,
        "html_url": html_url,
        "sha256": sha256_hex(body),
        "key_id": str(envelope["signature"]["key_id"]),
        "audit_url": documents.url(audit_key),
        "chain_sequence": int((envelope["certificate"].get("chain") or {}).get("sequence", 0)),
        "partial": True,
        "run": run,
    }
    listed = list((record.model_extra or {}).get("partial_certificates") or [])
    if not any(isinstance(p, Mapping) and p.get("url") == url for p in listed):
        listed.append({"run": run, "url": url, "sha256": pointer["sha256"]})
    totals = results_totals(done)
    updated = requests.update(
        request_id,
        {
            "certificate": pointer,
            "partial_certificates": listed,
            "result": {**totals, "partial": True, "objects_not_done": len(left), "run": run},
        },
    )
    return {**notification(updated), "partial_certificate": url}


def _audit(
    record: ErasureRequest,
    done: Sequence[ObjectResult],
    gaps: Sequence[NotSearched],
    *,
    run: int,
    error: str,
    cause: str,
    at: datetime,
    runs: Sequence[JobRun],
    namer: Namer,
) -> dict[str, Any]:
    """The failed run's append-only audit record: who asked and decided, the report, what was
    done per object, what was not, the scrubbed cause. Hashed ids only."""
    approved_by, approved_at = require_approval(record)
    return {
        "request_id": record.request_id,
        "kind": "partial",
        "status": ErasureStatus.FAILED.value,
        "run": run,
        "requested_by": record.requested_by,
        "reason": record.reason,
        "subject_hashes": list(record.subject_hashes),
        "subject_count": record.subject_count,
        "approved_by": approved_by,
        "approved_at": approved_at.isoformat(),
        "report_sha256": record.report.get("manifest_sha256", ""),
        "history": [h.model_dump(mode="json") for h in record.history],
        "objects_done": [shown_result(r, namer) for r in done],
        "not_done": [shown_gap(g, namer) for g in gaps],
        "error": error[:120],
        "cause": cause,
        "job_runs": [r.model_dump(mode="json") for r in runs],
        "complete": False,
        "failed_at": at.isoformat(),
    }


def _certificate(
    record: ErasureRequest,
    done: Sequence[ObjectResult],
    gaps: Sequence[NotSearched],
    manifest: Manifest,
    at: datetime,
    *,
    run: int,
    error: str,
    cause: str,
    manifest_sha: str,
    audit: Mapping[str, Any],
    chain: ChainLink,
    facts: DeploymentFacts,
    runs: tuple[JobRun, ...],
    failed_run: str,
    namer: Namer,
) -> ErasureCertificate:
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        FORMAT_VERSION,
        CertificateTotals,
        ErasureCertificate,
    )
    from lethe_shared.erasure.certificate_statement import (  # noqa: PLC0415
        DocumentDigest,
        PartialRun,
    )

    erased = erased_objects((r for r in done if not r.refused), namer)
    approved_by, approved_at = require_approval(record)
    wait = (record.model_extra or {}).get("ingestion_wait")
    finished = {r.object_url for r in done if not r.refused}
    return ErasureCertificate(
        format_version=FORMAT_VERSION,
        certificate_id=f"cert-{record.request_id}-failed-run-{run}",
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
        verification=None,
        complete=False,
        not_searched=not_searched_places(gaps, namer),
        documents=(
            DocumentDigest(name="manifest.json", sha256=manifest_sha),
            audit_digest(audit).model_copy(update={"name": partial_name(run, "audit.json")}),
        ),
        chain=chain,
        statement=statement(
            facts=facts,
            at=at,
            execution_arn=record.execution_arn,
            correlation_id=failed_run,
            objects_verified=0,
            matching_rows=0,
            datasets=record.scope,
            subject_count=record.subject_count,
            not_looked_up=len(record.not_looked_up),
            ingestion_wait=wait if isinstance(wait, Mapping) else {},
            places_not_searched=len(gaps),
            job_runs=runs,
            verified=False,
        ),
        partial=PartialRun(
            run=run,
            error=error[:120] or "unknown error",
            cause=cause,
            objects_in_report=len(manifest.objects),
            objects_done=sum(1 for o in manifest.objects if o.object_url in finished),
            objects_not_done=sum(1 for o in manifest.objects if o.object_url not in finished),
        ),
    )
