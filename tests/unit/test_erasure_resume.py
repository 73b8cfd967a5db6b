"""A FAILED erasure is recorded and resumable (issue 19, items 7 and 4):

- authority: Mark Erasing moves a FAILED request to ERASING only in a resumed run its resume
  recorded, with a valid approval of the unchanged report younger than the validity;
- the resume itself (lethe_shared.erasure.resume): the rules, one resume of two concurrent ones,
  the Idempotency-Key, the history naming who asked;
- the failed run's partial certificate (lethe_shared.erasure.failure): what was done per the
  progress documents, everything else not done, a scrubbed cause, signed as the chain's next
  link, never a certificate of completion; then a resumed run's full certificate, with its
  Spark run ids, after it in the chain.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lethe_shared.erasure.authority import ErasureNotApprovedError, why_not_resumable
from lethe_shared.erasure.certificate import render_certificate_html, verify_envelope
from lethe_shared.erasure.certificate_chain import walk_chain
from lethe_shared.erasure.certificate_statement import JobRun, build_revision
from lethe_shared.erasure.failure import certify_failure, partial_name, scrubbed_cause
from lethe_shared.erasure.progress import ObjectProgress, progress_key
from lethe_shared.erasure.requests import ErasureRequest, ErasureStatus
from lethe_shared.erasure.resume import ResumeRefusedError, resume_request
from lethe_shared.erasure.workflow import (
    Resume,
    certify,
    mark,
    start_erasing,
)
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.fakes import MemoryErasureRequests
from tests.unit.test_erasure_workflow import (
    CLEAN,
    DELETED,
    LAKE_KEY,
    LAKE_URL,
    MANIFEST_SHA256,
    RAW_URL,
    REPORT,
    REWRITTEN,
    RID,
    T0,
    EcdsaSigner,
    MemoryDocuments,
    _results,
    _verification,
    filed,
    frozen_and_indexed,
)

pytestmark = pytest.mark.lambda_runtime

DECIDED = T0 + timedelta(hours=1)
WEEK = timedelta(hours=168)
NAMER = KeyNamer(b"n" * 32, lambda _: None)  # shown keys: a fixed key, no dataset layout known
CALLER = "arn:aws:iam::123456789012:user/dpo"
SPARK_CAUSE = (
    '{"Id": "jr_0123abcd", "JobRunState": "FAILED", "ErrorMessage": "cannot read '
    f's3://lake/{LAKE_KEY}: u-SECRET-1001"}}'
)


class Starter:
    """ResumeStarter in memory: every started execution, none running unless told."""

    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []
        self.still_running: set[str] = set()

    def arn(self, name: str) -> str:
        return f"arn:aws:states:us-east-1:123456789012:execution:lethe-local-erasure:{name}"

    def start(self, name: str, document: Any) -> str:
        self.started.append((name, dict(document)))
        return self.arn(name)

    def running(self, arn: str) -> bool:
        return arn in self.still_running


def approved_and_failed(requests: MemoryErasureRequests, *, approve: bool = True) -> None:
    """The request walked to ERASING (approved by an approver it was sent to), then FAILED as
    Mark Failed records it."""
    requests.transition(RID, ErasureStatus.REPORTED, by="test", updates={"report": REPORT})
    requests.transition(
        RID, ErasureStatus.AWAITING_APPROVAL, by="test",
        updates={"approval": {"approvers": ["dpo@example.com"]}},
    )  # fmt: skip
    if not approve:
        mark(RID, ErasureStatus.FAILED, requests=requests, error={"error": "X", "cause": "y"})
        return
    requests.transition(
        RID, ErasureStatus.APPROVED, by="dpo@example.com",
        updates={"approval": {
            "approvers": ["dpo@example.com"], "decision": "approve",
            "decided_by": "dpo@example.com", "decided_at": DECIDED.isoformat(),
            "report_sha256": MANIFEST_SHA256,
        }},
    )  # fmt: skip
    start_erasing(RID, requests=requests)
    mark(
        RID, ErasureStatus.FAILED, requests=requests, detail="States.TaskFailed",
        error={"error": "States.TaskFailed", "cause": SPARK_CAUSE},
    )  # fmt: skip


@pytest.fixture
def requests() -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    filed(store)
    return store


def record(requests: MemoryErasureRequests) -> ErasureRequest:
    found = requests.get(RID)
    assert found is not None
    return found


# ------------------------------------------------------------------------------ the rules


def test_a_failed_request_with_a_valid_approval_may_be_resumed(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    now = DECIDED + timedelta(hours=2)
    assert why_not_resumable(record(requests), now=now, validity=WEEK) == ""


def test_an_approval_older_than_the_validity_refuses_a_resume(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    refusal = why_not_resumable(record(requests), now=DECIDED + WEEK, validity=WEEK)
    assert "expired" in refusal
    assert "file a new request" in refusal


def test_a_request_never_approved_is_not_resumed(requests: MemoryErasureRequests) -> None:
    approved_and_failed(requests, approve=False)
    refusal = why_not_resumable(record(requests), now=T0, validity=WEEK)
    assert "no recorded approval" in refusal
    assert "file a new request" in refusal


def test_a_report_other_than_the_approved_one_is_not_resumed(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    requests.update(RID, {"report": {**REPORT, "manifest_sha256": "f" * 64}})
    refusal = why_not_resumable(record(requests), now=DECIDED, validity=WEEK)
    assert "is not the one approved" in refusal


def test_an_incomplete_or_open_request_is_not_resumed(requests: MemoryErasureRequests) -> None:
    approved_and_failed(requests)
    requests.update(RID, {"outcome": "INCOMPLETE"})
    assert "INCOMPLETE" in why_not_resumable(record(requests), now=DECIDED, validity=WEEK)
    other = MemoryErasureRequests()
    filed(other)
    assert "not FAILED" in why_not_resumable(record(other), now=DECIDED, validity=WEEK)


# ---------------------------------------------------------------- Mark Erasing from FAILED


def test_mark_erasing_from_failed_needs_the_resume_that_started_the_run(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    now = DECIDED + timedelta(hours=3)
    # a plain Mark Erasing (no resume) never leaves FAILED
    with pytest.raises(ErasureNotApprovedError):
        start_erasing(RID, requests=requests)
    # a run no resume recorded is refused too
    stray = Resume(execution="erasure-x-resume-1", validity=WEEK, now=now)
    with pytest.raises(ErasureNotApprovedError, match="no resume of it started this run"):
        start_erasing(RID, requests=requests, resume=stray)
    assert record(requests).status is ErasureStatus.FAILED

    resumed = resume_request(
        RID, caller=CALLER, requests=requests, starter=Starter(), validity=WEEK, now=now
    )
    name = f"erasure-{RID}-resume-1"
    assert resumed.run == 2
    ok = Resume(execution=name, validity=WEEK, now=now, stored_manifest_sha256=MANIFEST_SHA256)
    erasing = start_erasing(RID, requests=requests, resume=ok)

    assert erasing.status is ErasureStatus.ERASING
    assert erasing.error == {}  # the failed run's error is in resume.previous_error
    assert f"at the request of {CALLER}" in erasing.history[-1].detail
    # a retried Mark Erasing of the same run is accepted again
    assert start_erasing(RID, requests=requests, resume=ok).status is ErasureStatus.ERASING


def test_mark_erasing_of_a_resume_refuses_an_expired_approval_or_a_changed_report(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    resume_request(
        RID, caller=CALLER, requests=requests, starter=Starter(), validity=WEEK,
        now=DECIDED + timedelta(hours=1),
    )  # fmt: skip
    name = f"erasure-{RID}-resume-1"
    late = Resume(execution=name, validity=WEEK, now=DECIDED + WEEK + timedelta(seconds=1))
    with pytest.raises(ErasureNotApprovedError, match="expired"):
        start_erasing(RID, requests=requests, resume=late)
    changed = Resume(execution=name, validity=WEEK, now=DECIDED, stored_manifest_sha256="0" * 64)
    with pytest.raises(ErasureNotApprovedError, match="stored report changed"):
        start_erasing(RID, requests=requests, resume=changed)
    assert record(requests).status is ErasureStatus.FAILED


# --------------------------------------------------------------------------- the resume


def test_a_resume_records_who_asked_and_starts_one_run(requests: MemoryErasureRequests) -> None:
    approved_and_failed(requests)
    starter = Starter()

    resumed = resume_request(
        RID, caller=CALLER, requests=requests, starter=starter, validity=WEEK,
        idempotency_key="k-1", now=DECIDED + timedelta(hours=2),
    )  # fmt: skip

    (started,) = starter.started
    assert started == (
        f"erasure-{RID}-resume-1",
        {
            "request_id": RID,
            "resume": f"erasure-{RID}-resume-1",
            "manifest_sha256": MANIFEST_SHA256,
        },
    )
    stored = record(requests)
    assert stored.status is ErasureStatus.FAILED  # Mark Erasing moves it, in the new run
    last = stored.history[-1]
    assert (last.status, last.by) == (ErasureStatus.FAILED, CALLER)
    assert last.detail.startswith("resume requested: run 2")
    assert stored.execution_arn == resumed.execution_arn == starter.arn(started[0])
    # the same Idempotency-Key answers the same resume (and starts the same execution again)
    again = resume_request(
        RID, caller=CALLER, requests=requests, starter=starter, validity=WEEK,
        idempotency_key="k-1", now=DECIDED + timedelta(hours=2),
    )  # fmt: skip
    assert (again.repeated, again.run) == (True, 2)
    assert {name for name, _ in starter.started} == {f"erasure-{RID}-resume-1"}


def test_of_two_concurrent_resumes_exactly_one_is_recorded(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    stale = record(requests)  # both callers read the record as it is now
    starter = Starter()
    resume_request(RID, caller=CALLER, requests=requests, starter=starter, validity=WEEK,
                   now=DECIDED)  # fmt: skip

    class Stale(MemoryErasureRequests):
        def get(self, request_id: str) -> ErasureRequest | None:
            return stale

    late = Stale()
    late.items = requests.items
    with pytest.raises(ResumeRefusedError, match="changed while its resume was recorded"):
        resume_request(RID, caller="arn:aws:iam::123456789012:user/other", requests=late,
                       starter=starter, validity=WEEK, now=DECIDED)  # fmt: skip
    assert len(starter.started) == 1


def test_a_resume_while_the_last_resumed_run_still_runs_is_refused(
    requests: MemoryErasureRequests,
) -> None:
    approved_and_failed(requests)
    starter = Starter()
    first = resume_request(RID, caller=CALLER, requests=requests, starter=starter,
                           validity=WEEK, now=DECIDED)  # fmt: skip
    starter.still_running.add(first.execution_arn)
    with pytest.raises(ResumeRefusedError, match="still running"):
        resume_request(RID, caller=CALLER, requests=requests, starter=starter, validity=WEEK,
                       now=DECIDED)  # fmt: skip


# -------------------------------------------------------------- the partial certificate


def progress(result: Any) -> bytes:
    return ObjectProgress(
        request_id=RID, manifest_sha256=MANIFEST_SHA256,
        recorded_at=(T0 + timedelta(hours=2)).isoformat(), result=result,
    ).model_dump_json().encode()  # fmt: skip


@pytest.fixture
def failed_halfway(requests: MemoryErasureRequests) -> MemoryDocuments:
    """The erase run rewrote the lake object (its progress document says so) and died."""
    approved_and_failed(requests)
    documents = MemoryDocuments()
    frozen_and_indexed(documents)
    documents.put(progress_key(RID, LAKE_URL), progress(REWRITTEN), "application/json")
    return documents


def test_a_failed_run_gets_an_audit_record_and_a_signed_partial_certificate(
    requests: MemoryErasureRequests, failed_halfway: MemoryDocuments
) -> None:
    signer = EcdsaSigner()
    runs = (JobRun(mode="erase", engine="GLUE", run_id="jr_0123abcd"),)

    result = certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=signer,
        error="States.TaskFailed", cause=SPARK_CAUSE, job_runs=runs,
        at=T0 + timedelta(hours=3), namer=NAMER,
    )  # fmt: skip

    envelope = failed_halfway.json(partial_name(1, "certificate.json"))
    cert = verify_envelope(envelope, signer).certificate
    assert cert.partial is not None
    assert cert.complete is False
    assert cert.verification is None
    assert (cert.partial.status, cert.partial.kind, cert.partial.run) == ("FAILED", "partial", 1)
    assert (cert.partial.objects_done, cert.partial.objects_not_done) == (1, 1)
    # what was done: the rewritten lake object, its rows and purged versions
    # (objects named by their shown keys, as a full certificate names them)
    assert [o.key for o in cert.objects] == [NAMER.key(LAKE_KEY)]
    assert (cert.totals.rows_removed, cert.totals.versions_purged) == (2, 2)
    # everything else: not done
    (gap,) = cert.not_searched
    assert (gap.reason, gap.count) == ("not_done_run_failed", 1)
    assert f"s3://{gap.bucket}/{gap.key}" == NAMER.url(RAW_URL)
    done = failed_halfway.json(partial_name(1, "audit.json"))["objects_done"]
    assert [o["object_url"] for o in done] == [NAMER.url(LAKE_URL)]
    # the cause is scrubbed: the run's id and state, no key, no value
    assert cert.partial.cause == "States.TaskFailed: Spark job run jr_0123abcd ended FAILED"
    assert LAKE_KEY not in envelope["certificate"]["partial"]["cause"]
    assert cert.statement is not None
    assert cert.statement.tool.job_runs == runs
    assert cert.statement.verification.result.startswith("not run")
    assert cert.chain is not None
    assert cert.chain.sequence == 1
    # the audit record names the signature; the record points at the partial certificate
    audit = failed_halfway.json(partial_name(1, "audit.json"))
    assert audit["certificate_signature"] == envelope["signature"]
    assert (audit["kind"], audit["status"], audit["complete"]) == ("partial", "FAILED", False)
    stored = record(requests)
    assert stored.status is ErasureStatus.FAILED
    assert stored.certificate["partial"] is True
    assert stored.certificate["url"].endswith(f"/{RID}/failed-run-1/certificate.json")
    assert result["partial_certificate"] == stored.certificate["url"]
    assert result["status"] == "FAILED"
    assert (stored.result["rows_removed"], stored.result["objects_not_done"]) == (2, 1)
    page = render_certificate_html(envelope)
    assert "PARTIAL certificate of a FAILED erasure run" in page
    # run again (a retried step): the same certificate, one audit record
    certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=signer,
        error="States.TaskFailed", cause=SPARK_CAUSE, at=T0 + timedelta(hours=4),
    )  # fmt: skip
    assert failed_halfway.json(partial_name(1, "certificate.json")) == envelope
    assert failed_halfway.writes.count(f"erasure/{RID}/failed-run-1/audit.json") == 1


def test_a_progress_document_of_another_report_counts_as_not_done(
    requests: MemoryErasureRequests, failed_halfway: MemoryDocuments
) -> None:
    other = (
        ObjectProgress(
            request_id=RID, manifest_sha256="e" * 64, recorded_at=T0.isoformat(), result=DELETED
        )
        .model_dump_json()
        .encode()
    )
    failed_halfway.put(progress_key(RID, RAW_URL), other, "application/json")

    certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=EcdsaSigner(),
        error="States.TaskFailed", cause="free text naming s3://x/key", at=T0,
    )  # fmt: skip

    cert = failed_halfway.json(partial_name(1, "certificate.json"))["certificate"]
    assert cert["partial"]["objects_done"] == 1
    assert cert["partial"]["cause"].startswith("States.TaskFailed (its message is not repeated")
    assert "s3://x/key" not in str(cert)


def test_the_cause_keeps_names_and_run_states_only() -> None:
    assert scrubbed_cause("Lambda.Unknown", "s3://bucket/u-1001.csv failed") == (
        "Lambda.Unknown (its message is not repeated here: it may name objects)"
    )
    emr = '{"JobRunId": "00fabc", "State": "FAILED", "StateDetails": "key u-1001"}'
    assert scrubbed_cause("States.TaskFailed", emr) == (
        "States.TaskFailed: Spark job run 00fabc ended FAILED"
    )


def test_a_request_not_failed_or_certified_incomplete_gets_no_partial_certificate(
    requests: MemoryErasureRequests, failed_halfway: MemoryDocuments
) -> None:
    requests.update(RID, {"outcome": "INCOMPLETE"})
    result = certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=EcdsaSigner(),
        error="X", cause="", at=T0,
    )  # fmt: skip
    assert "partial_certificate" not in result
    assert partial_name(1, "certificate.json") not in str(failed_halfway.bodies)


def test_a_resumed_run_certifies_with_its_run_ids_after_the_partial_one_in_the_chain(
    requests: MemoryErasureRequests, failed_halfway: MemoryDocuments
) -> None:
    signer = EcdsaSigner()
    certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=signer,
        error="States.TaskFailed", cause=SPARK_CAUSE, at=T0 + timedelta(hours=3),
    )  # fmt: skip
    now = DECIDED + timedelta(hours=4)
    resume_request(RID, caller=CALLER, requests=requests, starter=Starter(), validity=WEEK,
                   now=now)  # fmt: skip
    start_erasing(
        RID, requests=requests,
        resume=Resume(execution=f"erasure-{RID}-resume-1", validity=WEEK, now=now),
    )  # fmt: skip
    failed_halfway.put(
        f"erasure/{RID}/results.json", _results(REWRITTEN, DELETED), "application/json"
    )
    failed_halfway.put(
        f"erasure/{RID}/verification.json", _verification(*CLEAN), "application/json"
    )
    runs = (
        JobRun(mode="erase", engine="EMR_SERVERLESS", run_id="00f1"),
        JobRun(mode="verify", engine="EMR_SERVERLESS", run_id="00f2"),
    )

    certify(RID, requests=requests, documents=failed_halfway, signer=signer,
            now=T0 + timedelta(hours=5), job_runs=runs)  # fmt: skip

    stored = record(requests)
    assert stored.status is ErasureStatus.COMPLETED
    assert stored.certificate["url"].endswith(f"/{RID}/certificate.json")
    full = verify_envelope(failed_halfway.json("certificate.json"), signer).certificate
    assert full.partial is None
    assert full.complete is True
    assert full.statement is not None
    assert full.statement.tool.job_runs == runs
    assert full.statement.tool.engine == "EMR_SERVERLESS"
    assert full.statement.tool.git_revision == "unknown"  # the source tree is not stamped
    assert full.chain is not None
    assert full.chain.sequence == 2
    # the partial certificate stays listed and in the chain, which walks clean
    (listed,) = (stored.model_extra or {})["partial_certificates"]
    assert listed["run"] == 1
    walk = walk_chain(failed_halfway.get, signer)
    assert (walk.links, walk.problems) == (2, [])


def test_the_build_stamp_is_read_and_an_unstamped_layer_says_unknown(tmp_path: Any) -> None:
    assert build_revision(tmp_path / "missing.json") == "unknown"
    stamp = tmp_path / "build_info.json"
    stamp.write_text('{"git_revision": "0123abc"}')
    assert build_revision(stamp) == "0123abc"
    stamp.write_text("not json")
    assert build_revision(stamp) == "unknown"


def test_the_partial_certificate_names_the_key_the_request_was_hashed_with(
    requests: MemoryErasureRequests, failed_halfway: MemoryDocuments
) -> None:
    # issue 23: the key version is stamped on partial certificates too
    requests.update(RID, {"key_fingerprint": "0123456789abcdef"})
    signer = EcdsaSigner()
    certify_failure(
        RID, requests=requests, documents=failed_halfway, signer=signer,
        error="States.TaskFailed", cause=SPARK_CAUSE, at=T0 + timedelta(hours=3), namer=NAMER,
    )  # fmt: skip
    envelope = failed_halfway.json(partial_name(1, "certificate.json"))
    assert verify_envelope(envelope, signer).certificate.key_fingerprint == "0123456789abcdef"
