"""Scheduled retention runs: planning (lethe_shared.erasure.retention_runs: holds, the notice
period, the frozen report and the run record with its standing authorisation), the erase job's
authorisation of a run (lethe_shared.erasure.authority, lethe_jobs.erase_settings), and the run's
certificate (lethe_shared.erasure.retention_certificate: complete only for everything, signed,
no subject)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe.commands import CommandError, certificate_verify
from lethe.commands.erasure_certificate import VerifyOptions
from lethe.commands.retention_certificate import (
    IncompleteRetentionError,
    is_retention,
    retention_lines,
    verify_retention_certificate,
)
from lethe_jobs.erase_settings import EraseArgs, ErasePorts, job_settings
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.holds import HoldView, LegalHold, new_hold
from lethe_shared.datasets.retention import rule_sha256
from lethe_shared.erasure.authority import (
    EraseNotAuthorisedError,
    RequestView,
    check_erasable,
)
from lethe_shared.erasure.certificate import CertificateInvalidError
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    NotSearched,
    ObjectCheck,
    ObjectResult,
    Verification,
    VersionRef,
    report_key,
)
from lethe_shared.erasure.requests import ErasureStatus
from lethe_shared.erasure.retention_certificate import (
    certify_run,
    sign_retention,
    verify_retention,
)
from lethe_shared.erasure.retention_runs import (
    Planner,
    RunState,
    next_scheduled,
)
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryObjectStore, MemoryRegistry

KEY = b"retention-runs-unit-test-key-0123456789"
KEY_FP = key_fingerprint(KEY)
NOW = datetime(2026, 11, 27, 3, 30, tzinfo=UTC)
RAW, LAKE = "raw-bucket", "lake-bucket"


def _dataset(dataset_id: str = "events", days: int = 30) -> Dataset:
    return parse_dataset({
        "dataset_id": dataset_id, "format": "csv", "subject_columns": ["user_id"],
        "partition_by": ["day"], "retention": {"column": "day", "days": days},
        "schema": [{"name": "user_id", "type": "string"}, {"name": "day", "type": "date"}],
    })  # fmt: skip


class States:
    def __init__(self) -> None:
        self.items: dict[str, RunState] = {}

    def get(self, dataset_id: str) -> RunState | None:
        return self.items.get(dataset_id)

    def put(self, state: RunState) -> None:
        self.items[state.dataset_id] = state


class Setup:
    def __init__(self, *datasets: Dataset, holds: tuple[LegalHold, ...] = (), notice: int = 7):
        self.objects = MemoryObjectStore()
        self.registry = MemoryRegistry(*datasets)
        self.states = States()
        self.requests = MemoryErasureRequests()
        self.documents = MemoryDocuments()
        self.holds = list(holds)
        self.planner = Planner(
            objects=self.objects, buckets={"raw": RAW, "lake": LAKE},
            registry=self.registry, states=self.states, requests=self.requests,
            documents=self.documents, key_fingerprint=KEY_FP,
            holds=lambda ids: HoldView.of(
                [h for h in self.holds if h.active and set(ids) & set(h.datasets())], KEY_FP
            ),
            notice_days=notice, new_id=lambda d, now: f"rt-{d}-1",
        )  # fmt: skip

    def plan(self, now: datetime = NOW) -> tuple[list[Any], list[Any]]:
        registrations = [self.registry.registration(d) for d in sorted(self.registry.datasets)]
        return self.planner.plan([r for r in registrations if r is not None], now)


def _stock(setup: Setup, dataset_id: str = "events") -> None:
    setup.objects.put(LAKE, f"{dataset_id}/day=2026-01-01/part-a.parquet", b"old")
    setup.objects.put(LAKE, f"{dataset_id}/day=2026-11-26/part-b.parquet", b"new")
    setup.objects.put(RAW, f"{dataset_id}/2026/upload.csv", b"user_id,day\n")
    setup.objects.put(RAW, f"{dataset_id}/2026/upload.csv", b"user_id,day\nu-1,2026-01-01\n")


# ---------------------------------------------------------------------------- planning


def test_a_first_run_starts_the_notice_and_a_later_run_freezes_the_report() -> None:
    setup = Setup(_dataset())
    _stock(setup)
    runs, skipped = setup.plan()
    assert runs == []
    assert [(s.dataset_id, s.reason) for s in skipped] == [("events", "notice")]
    state = setup.states.items["events"]
    assert (state.rule_since, state.applies_from) == (
        NOW.isoformat(),
        (NOW + timedelta(days=7)).isoformat(),
    )
    assert setup.requests.items == {}
    assert setup.documents.bodies == {}

    later = NOW + timedelta(days=7)
    (run,), skipped = setup.plan(later)
    assert skipped == []
    # the report is written before anything else: manifest, report, then the record
    assert setup.documents.writes == [
        report_key("rt-events-1", n) for n in ("manifest.json", "report.json")
    ]
    manifest = Manifest.model_validate_json(
        setup.documents.bodies[report_key("rt-events-1", "manifest.json")]
    )
    assert manifest.subject_hashes == ()
    assert manifest.retention[0].rule_sha256 == rule_sha256(_dataset())
    assert {o.key for o in manifest.objects} == {
        "events/day=2026-01-01/part-a.parquet",
        "events/2026/upload.csv",
    }
    upload = next(o for o in manifest.objects if o.zone == "raw")
    assert len(upload.versions) == 2  # every stored version, purged after the rewrite
    report = json.loads(setup.documents.bodies[report_key("rt-events-1", "report.json")])
    assert report["cutoff"] == "2026-11-04T00:00:00+00:00"
    assert {o["decided"] for o in report["objects"]} == {"expired_whole", "read_row_by_row"}
    assert report["authorisation"]["rule_sha256"] == rule_sha256(_dataset())
    assert report["manifest_sha256"] == run.manifest_sha256
    record = setup.requests.get("rt-events-1")
    assert record is not None
    assert record.status is ErasureStatus.ERASING
    assert record.approval["standing"] == "retention"
    assert record.subject_hashes == ()
    assert record.report["manifest_sha256"] == run.manifest_sha256
    assert setup.states.items["events"].last_run["outcome"] == "RUNNING"


def test_a_changed_rule_starts_its_notice_again() -> None:
    setup = Setup(_dataset(), notice=7)
    _stock(setup)
    setup.plan()
    setup.registry.put(_dataset(days=10))  # shortened: a new rule, a new notice
    runs, skipped = setup.plan(NOW + timedelta(days=8))
    assert runs == []
    assert skipped[0].reason == "notice"
    assert setup.states.items["events"].rule_sha256 == rule_sha256(_dataset(days=10))


def test_a_held_dataset_is_skipped_with_the_hold_and_a_held_subject_is_carried() -> None:
    hold = new_hold(dataset_id="ledger", reason="tax audit", held_by="dpo@example.com")
    subject = new_hold(
        dataset_id="events", reason="claim 17", held_by="dpo@example.com",
        subject_hashes={"events": hash_of_id(KEY, "u-1")}, key_fingerprint=KEY_FP,
    )  # fmt: skip
    setup = Setup(_dataset(), _dataset("ledger"), holds=(hold, subject), notice=0)
    _stock(setup)
    _stock(setup, "ledger")
    runs, skipped = setup.plan()
    assert [s.document() for s in skipped] == [{
        "dataset_id": "ledger", "reason": "legal_hold", "hold_id": hold.hold_id,
        "detail": f"legal hold {hold.hold_id}: tax audit",
    }]  # fmt: skip
    assert setup.states.items["ledger"].last_run["hold_id"] == hold.hold_id
    assert [r.dataset_id for r in runs] == ["events"]
    manifest = Manifest.model_validate_json(
        setup.documents.bodies[report_key("rt-events-1", "manifest.json")]
    )
    assert manifest.retention[0].held_hashes == (hash_of_id(KEY, "u-1"),)
    report = setup.documents.bodies[report_key("rt-events-1", "report.json")]
    assert json.loads(report)["subject_holds"] == [subject.hold_id]
    assert hash_of_id(KEY, "u-1").encode() not in report
    assert b"u-1" not in report


def test_nothing_expired_is_recorded_without_a_run_and_a_large_run_defers_the_rest() -> None:
    setup = Setup(_dataset(), notice=0)
    setup.objects.put(LAKE, "events/day=2026-11-26/part-b.parquet", b"new")
    runs, skipped = setup.plan()
    assert runs == []
    assert skipped[0].reason == "nothing_expired"

    setup = Setup(_dataset(), notice=0)
    for day in range(1, 4):
        setup.objects.put(LAKE, f"events/day=2026-01-0{day}/p.parquet", b"old")
    setup.planner = Planner(**{**setup.planner.__dict__, "max_objects": 2})
    (run,), _ = setup.plan()
    assert len(run.objects) == 2
    report = json.loads(setup.documents.bodies[report_key("rt-events-1", "report.json")])
    assert report["deferred"] == [f"s3://{LAKE}/events/day=2026-01-03/p.parquet"]


def test_next_scheduled() -> None:
    assert next_scheduled("cron(30 3 * * ? *)", NOW) == NOW + timedelta(days=1)
    assert next_scheduled("cron(45 3 * * ? *)", NOW) == NOW + timedelta(minutes=15)
    assert next_scheduled("rate(6 hours)", NOW) == NOW + timedelta(hours=6)
    assert next_scheduled("cron(0 3 ? * MON *)", NOW) is None


# ---------------------------------------------------------------- the erase job's check


def _view(request_id: str, **approval: Any) -> RequestView:
    report = {"manifest_url": "s3://r/m.json", "manifest_sha256": "a" * 64}
    return RequestView(request_id, ErasureStatus.ERASING, approval=approval, report=report)


STANDING = {"decision": "approve", "standing": "retention", "rule_sha256": "b" * 64}


def test_a_standing_authorisation_is_accepted_for_a_retention_run_only() -> None:
    check_erasable(
        _view("rt-events-1", **STANDING), manifest_url="s3://r/m.json", manifest_sha256="a" * 64
    )
    with pytest.raises(EraseNotAuthorisedError, match="no recorded approval"):
        check_erasable(
            _view("er-1", **STANDING), manifest_url="s3://r/m.json", manifest_sha256="a" * 64
        )
    with pytest.raises(EraseNotAuthorisedError, match="no recorded approval"):
        check_erasable(
            _view("rt-events-1", decision="approve", standing="retention"),
            manifest_url="s3://r/m.json", manifest_sha256="a" * 64,
        )  # fmt: skip


def _planned(notice: int = 0) -> tuple[Setup, Manifest]:
    setup = Setup(_dataset(), notice=notice)
    _stock(setup)
    setup.plan()
    body = setup.documents.bodies[report_key("rt-events-1", "manifest.json")]
    return setup, Manifest.model_validate_json(body)


def _job(setup: Setup, manifest: Manifest, request_id: str = "rt-events-1") -> Any:
    args = EraseArgs(
        request_id=request_id, manifest="s3://r/m.json", manifest_sha256="0" * 64,
        requests_table="r", raw_bucket=RAW, lake_bucket=LAKE, reports_bucket="reports",
        datasets_table="d", catalog_table="", hash_key_secret="s", correlation_id="c", mode="erase",
    )  # fmt: skip
    ports = ErasePorts(reports=MemoryObjectStore(), datasets=setup.registry, hash_key=KEY)  # type: ignore[arg-type]
    return job_settings(args, manifest, ports)


def test_the_erase_job_refuses_a_run_whose_rule_changed_or_that_is_not_a_retention_run() -> None:
    setup, manifest = _planned()
    assert set(_job(setup, manifest).retention) == {"events"}
    # an erasure's report (no retention rule) goes on as before
    erasure = manifest.model_copy(update={"retention": (), "request_id": "er-1"})
    assert _job(setup, erasure, request_id="er-1").retention == {}
    with pytest.raises(EraseNotAuthorisedError, match="only a retention run"):
        _job(setup, manifest, request_id="er-1")
    with pytest.raises(EraseNotAuthorisedError, match="no subject"):
        _job(setup, manifest.model_copy(update={"subject_hashes": ("x" * 64,)}))
    setup.registry.put(_dataset(days=3650))  # lengthened after the plan
    with pytest.raises(EraseNotAuthorisedError, match="changed since"):
        _job(setup, manifest)


# -------------------------------------------------------------------------- certificate


class Signer:
    key_id = "arn:aws:kms:eu-west-1:123456789012:key/test"

    def sign(self, digest: bytes) -> bytes:
        return hashlib.sha256(b"sig" + digest).digest()

    def verify(self, digest: bytes, signature: bytes) -> bool:
        return signature == self.sign(digest)


def _result(
    url: str, action: str, removed: int, gaps: tuple[NotSearched, ...] = ()
) -> ObjectResult:
    return ObjectResult(
        object_url=url, dataset_id="events", zone="lake" if "lake" in url else "raw",
        action=action, versions_before=(VersionRef(version_id="v1"),),
        version_after=None if action == "deleted" else VersionRef(version_id="v9"),
        rows_before=removed + 1, rows_removed=removed, rows_after=1, versions_purged=1,
        not_searched=gaps,
    )  # fmt: skip


def _write_results(
    setup: Setup, manifest: Manifest, *, gaps: tuple[NotSearched, ...] = (), ok: bool = True
) -> None:
    results = EraseResults(
        request_id="rt-events-1", manifest_sha256="0" * 64, correlation_id="c",
        finished_at=NOW.isoformat(),
        objects=tuple(
            _result(
                o.object_url, "deleted" if o.zone == "lake" else "rewritten", 2,
                gaps if o.zone == "raw" else (),
            )
            for o in manifest.objects
        ),
    )  # fmt: skip
    verification = Verification(
        request_id="rt-events-1", correlation_id="c", verified_at=NOW.isoformat(),
        objects=tuple(
            ObjectCheck(
                object_url=o.object_url, ok=ok, matching_rows=0 if ok else 1, rows=1,
                versions_left=1,
            )
            for o in manifest.objects
        ),
    )  # fmt: skip
    setup.documents.put(
        report_key("rt-events-1", "results.json"), results.model_dump_json().encode(), ""
    )
    setup.documents.put(
        report_key("rt-events-1", "verification.json"), verification.model_dump_json().encode(), ""
    )


def _certify(setup: Setup, **kw: Any) -> Any:
    options: dict[str, Any] = {"reindexed": True, "job_runs": [], "error": ""} | kw
    return certify_run(
        "rt-events-1", documents=setup.documents, requests=setup.requests, signer=Signer(),
        shown=lambda url: url, now=NOW, **options,
    )  # fmt: skip


def test_a_clean_run_is_certified_complete_signed_and_names_no_subject() -> None:
    setup, manifest = _planned()
    _write_results(setup, manifest)
    certificate = _certify(setup)
    assert certificate.complete
    assert certificate.not_removed == ()
    assert certificate.totals == {
        "objects": 2,
        "rewritten": 1,
        "deleted": 1,
        "rows_removed": 4,
        "versions_purged": 2,
    }
    assert certificate.rule_sha256 == rule_sha256(_dataset())
    assert certificate.cutoff.startswith("2026-10-28")
    record = setup.requests.get("rt-events-1")
    assert record is not None
    assert record.status is ErasureStatus.COMPLETED
    envelope = json.loads(setup.documents.bodies[report_key("rt-events-1", "certificate.json")])
    assert verify_retention(envelope, Signer()) == certificate
    assert "u-1" not in json.dumps(envelope)
    assert "subject_hashes" not in json.dumps(envelope)
    envelope["certificate"]["totals"]["rows_removed"] = 1
    with pytest.raises(CertificateInvalidError):
        verify_retention(envelope, Signer())
    forged = sign_retention(certificate, Signer())
    forged["signature"]["value"] = "AAAA"
    with pytest.raises(CertificateInvalidError):
        verify_retention(forged, Signer())


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("gap", "unparseable_records"),
        ("unverified", "verification_failed"),
        ("no_verification", "not_verified"),
        ("not_reindexed", "not_reindexed"),
        ("failed", "run_failed"),
    ],
)
def test_a_run_that_did_less_is_never_completed_and_says_what_and_why(
    case: str, reason: str
) -> None:
    setup, manifest = _planned()
    gap = NotSearched(
        object_url=manifest.objects[0].object_url, reason="unparseable_records", count=3
    )
    _write_results(setup, manifest, gaps=(gap,) if case == "gap" else (), ok=case != "unverified")
    if case == "no_verification":
        del setup.documents.bodies[report_key("rt-events-1", "verification.json")]
    certificate = _certify(
        setup,
        reindexed=case != "not_reindexed",
        error="States.TaskFailed: boom" if case == "failed" else "",
    )
    assert not certificate.complete
    assert reason in {g.reason for g in certificate.not_removed}
    record = setup.requests.get("rt-events-1")
    assert record is not None
    assert (record.status, record.outcome) == (
        ErasureStatus.FAILED,
        "INCOMPLETE",
    )


def test_a_run_whose_erase_job_wrote_nothing_names_every_object() -> None:
    setup, manifest = _planned()
    certificate = _certify(setup, reindexed=False, error="States.TaskFailed: refused")
    assert {g.reason for g in certificate.not_removed} == {
        "run_failed",
        "no_results",
        "not_verified",
    }
    assert next(g for g in certificate.not_removed if g.reason == "no_results").count == len(
        manifest.objects
    )
    assert certificate.totals["rows_removed"] == 0


# ------------------------------------------------------------- lethe erasure certificate


def _stored_certificate(complete: bool = True) -> tuple[Setup, dict[str, Any], bytes]:
    setup, manifest = _planned()
    _write_results(setup, manifest, ok=complete)
    _certify(setup)
    raw = setup.documents.bodies[report_key("rt-events-1", "certificate.json")]
    record = setup.requests.get("rt-events-1")
    assert record is not None
    return setup, record.model_dump(mode="json"), raw


def _verify_cli(record: dict[str, Any], raw: bytes, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(certificate_verify, "verifier_for", lambda *a, **k: Signer())
    return verify_retention_certificate(
        None,  # type: ignore[arg-type]  # the key is given, the verifier patched: no target read
        json.loads(raw), raw=raw, record=record,
        options=VerifyOptions(key_id=Signer.key_id),
    )  # fmt: skip


def test_the_cli_summarises_and_verifies_a_retention_certificate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, record, raw = _stored_certificate()
    envelope = json.loads(raw)
    assert is_retention(envelope)
    lines = retention_lines(envelope, "s3://r/c.json")
    assert "rows removed     4" in lines
    assert "complete         yes" in lines
    assert _verify_cli(record, raw, monkeypatch)[0].startswith(
        f"certificate verifies: signed by {Signer.key_id}"
    )
    other = {**record, "certificate": {**record["certificate"], "sha256": "0" * 64}}
    with pytest.raises(CommandError, match="record-mismatch"):
        _verify_cli(other, raw, monkeypatch)
    tampered = raw.replace(b'"rows_removed":4', b'"rows_removed":3')
    assert tampered != raw
    with pytest.raises(CommandError, match="digest-mismatch"):
        _verify_cli(record, tampered, monkeypatch)


def test_the_cli_fails_verify_for_an_incomplete_run(monkeypatch: pytest.MonkeyPatch) -> None:
    _, record, raw = _stored_certificate(complete=False)
    lines = retention_lines(json.loads(raw), "s3://r/c.json")
    assert any(line.startswith("  verification_failed  1  ") for line in lines)
    with pytest.raises(IncompleteRetentionError, match="INCOMPLETE"):
        _verify_cli(record, raw, monkeypatch)
