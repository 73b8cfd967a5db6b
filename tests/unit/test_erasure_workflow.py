"""The erasure workflow's own steps on in-memory ports (lethe_shared.erasure.workflow): the
frozen report, status marks, the index update after erasing, the certificate, and cancelling.

SECRET is the raw id of the request's subject; OTHER is a subject of the same objects that the
request does not name. Neither raw id may reach a document, a record or a notification."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils

from lethe_shared.aws.s3 import KeyState, s3_url, split_s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.erasure.certificate import verify_envelope
from lethe_shared.erasure.index_update import IndexUpdate
from lethe_shared.erasure.intake import cancel_request
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ManifestObject,
    ObjectCheck,
    ObjectResult,
    Verification,
    VersionRef,
    canonical_json,
    report_key,
)
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureStatus,
    InvalidTransitionError,
    RequestClosedError,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.task_callbacks import TaskGoneError
from lethe_shared.erasure.workflow import (
    VerificationMissingError,
    build_report,
    certify,
    mark,
    update_index,
)
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id
from tests import fakes
from tests.fakes import MemoryErasureRequests, MemoryIndex, MemoryObjectStore

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
OTHER = "u-2002"
H_SECRET = hash_of_id(KEY, SECRET)
H_OTHER = hash_of_id(KEY, OTHER)
H_GONE = hash_of_id(KEY, "u-3003")  # left the rewritten object; an older version held its rows
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LAKE = "lethe-local-lake-123456789012-us-east-1"
RAW = "lethe-local-raw-123456789012-us-east-1"
REPORTS = "lethe-local-reports-123456789012-us-east-1"
LAKE_KEY = "reviews/review_date=2026-11-01/part-0.parquet"
RAW_KEY = "reviews/2026/11/01/upload.jsonl"
LAKE_URL = s3_url(LAKE, LAKE_KEY)
RAW_URL = s3_url(RAW, RAW_KEY)
ELSEWHERE_URL = s3_url(LAKE, "reviews/review_date=2026-11-02/part-0.parquet")


# The frozen report the certificate step reads back (its SHA-256 is the one the record holds)
def _listed(url: str, zone: Zone, rows: int) -> ManifestObject:
    bucket, key = split_s3_url(url)
    return ManifestObject(
        object_url=url, bucket=bucket, key=key, dataset_id="reviews", zone=zone,
        format="parquet" if zone is Zone.LAKE else "jsonl", state=KeyState.CURRENT,
        expected_rows=rows, subjects=(), versions=(),
    )  # fmt: skip


# the objects the erase job's results (REWRITTEN, DELETED below) name: the certificate step
# certifies only results of exactly the report's objects
MANIFEST = Manifest(
    request_id=RID, created_at=T0.isoformat(), subject_hashes=(H_SECRET,), subject_count=1,
    objects=(_listed(LAKE_URL, Zone.LAKE, 2), _listed(RAW_URL, Zone.RAW, 1)),
).bytes()  # fmt: skip
MANIFEST_SHA256 = hashlib.sha256(MANIFEST).hexdigest()
REPORT = {
    "manifest_url": f"s3://{REPORTS}/erasure/{RID}/manifest.json",
    "manifest_sha256": MANIFEST_SHA256,
    "summary_text_url": f"s3://{REPORTS}/erasure/{RID}/summary.txt",
    "summary_html_url": f"s3://{REPORTS}/erasure/{RID}/summary.html",
    "objects": 2,
    "versions": 3,
    "rows": 3,
    "datasets": [{"dataset_id": "reviews", "zone": "lake", "objects": 2, "versions": 3, "rows": 3}],
}


@pytest.fixture(autouse=True)
def _no_raw_id_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="lethe")
    yield
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET.casefold() not in logged.casefold()


class MemoryDocuments(fakes.MemoryDocuments):
    def json(self, name: str) -> Any:
        return json.loads(self.bodies[report_key(RID, name)])


class EcdsaSigner:
    """A P-256 key in memory, signing SHA-256 digests as KMS does (MessageType=DIGEST)."""

    def __init__(self) -> None:
        self.key_id = "arn:aws:kms:us-east-1:123456789012:key/test-certificates"
        self._key = ec.generate_private_key(ec.SECP256R1())

    def sign(self, digest: bytes) -> bytes:
        return self._key.sign(digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))

    def verify(self, digest: bytes, signature: bytes) -> bool:
        try:
            self._key.public_key().verify(
                signature, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256()))
            )
        except InvalidSignature:
            return False
        return True


class RecordingCallbacks:
    def __init__(self) -> None:
        self.successes: list[tuple[str, Mapping[str, Any]]] = []
        self.failures: list[tuple[str, str, str]] = []

    def success(self, token: str, output: Mapping[str, Any]) -> None:
        self.successes.append((token, output))

    def failure(self, token: str, error: str, cause: str) -> None:
        self.failures.append((token, error, cause))


class CompletionFailsOnce(MemoryErasureRequests):
    """The COMPLETED write fails the first time (DynamoDB throttled, the Lambda timed out)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def transition(
        self,
        request_id: str,
        target: ErasureStatus,
        *,
        by: str,
        detail: str = "",
        allowed_from: frozenset[ErasureStatus] | None = None,
        updates: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
        require: Mapping[str, str] | None = None,
    ) -> ErasureRequest:
        if target is ErasureStatus.COMPLETED and not self.failed:
            self.failed = True
            raise TimeoutError("the task timed out")
        return super().transition(
            request_id, target, by=by, detail=detail, allowed_from=allowed_from,
            updates=updates, remove=remove, require=require,
        )  # fmt: skip


def filed(requests: MemoryErasureRequests) -> ErasureRequest:
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 88", "requested_by": "privacy@example.com"}
    )
    record, created = requests.create(new_request(RID, body, hash_subjects(body, KEY, []), now=T0))
    assert created
    return record


def advance(requests: MemoryErasureRequests, *statuses: ErasureStatus) -> ErasureRequest:
    """Walk the request along the workflow's edges, with what each step records."""
    updates: dict[ErasureStatus, dict[str, Any]] = {
        ErasureStatus.REPORTED: {"report": REPORT},
        ErasureStatus.AWAITING_APPROVAL: {
            "task_token": "task-token-1",
            "approval": {"deadline": (T0 + timedelta(hours=72)).isoformat()},
        },
        ErasureStatus.APPROVED: {
            "approval": {
                "decision": "approve",
                "decided_by": "dpo@example.com",
                "decided_at": (T0 + timedelta(hours=1)).isoformat(),
            }
        },
    }
    record = requests.get(RID)
    for status in statuses:
        record = requests.transition(
            RID, status, by="test", updates=updates.get(status),
            remove=("task_token",) if status is ErasureStatus.APPROVED else (),
        )  # fmt: skip
    assert record is not None
    return record


@pytest.fixture
def requests() -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    filed(store)
    return store


def entry(subject: str, url: str, rows: int, zone: Zone = Zone.LAKE) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject,
        object_url=url,
        dataset_id="reviews",
        zone=zone,
        format="parquet" if zone is Zone.LAKE else "jsonl",
        rows=rows,
        version_id="v2",
        etag="e2",
    )


def no_raw_id(text: str) -> bool:
    return SECRET.casefold() not in text.casefold() and OTHER not in text


# ------------------------------------------------------------------------------ report


def test_build_report_freezes_the_manifest_and_summaries(
    requests: MemoryErasureRequests,
) -> None:
    # Given a lake object holding SECRET (2 rows) and OTHER (1 row) in two versions, and a raw
    # key whose current version is a delete marker, flagged in the index for SECRET
    index, objects, documents = MemoryIndex(), MemoryObjectStore(), MemoryDocuments()
    objects.put(LAKE, LAKE_KEY, b"first")  # v1
    objects.put(LAKE, LAKE_KEY, b"second")  # v2
    objects.put(RAW, RAW_KEY, b"raw rows")  # v3
    objects.delete(RAW, RAW_KEY)  # v4, a delete marker
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, 2), entry(H_OTHER, LAKE_URL, 1)])
    index.replace_object(RAW_URL, [entry(H_SECRET, RAW_URL, 1, Zone.RAW)])
    index.flag_deleted(RAW_URL)

    # When the report is built
    summary = build_report(
        RID, requests=requests, index=index, objects=objects, documents=documents, now=T0
    )

    # Then the counts are those of SECRET's objects: 2 objects, 3 stored versions holding data,
    # 2 rows in current versions (the flagged raw entry's row is in an older version)
    assert (summary.objects, summary.versions, summary.rows) == (2, 3, 2)
    assert [
        (d.dataset_id, d.zone.value, d.objects, d.versions, d.rows) for d in summary.datasets
    ] == [
        ("reviews", "lake", 1, 2, 2),
        ("reviews", "raw", 1, 1, 0),
    ]
    assert sorted(documents.bodies) == [
        f"erasure/{RID}/manifest.json",
        f"erasure/{RID}/summary.html",
        f"erasure/{RID}/summary.txt",
    ]
    stored = documents.bodies[f"erasure/{RID}/manifest.json"]
    assert summary.manifest_sha256 == hashlib.sha256(stored).hexdigest()
    assert summary.manifest_url == f"s3://{REPORTS}/erasure/{RID}/manifest.json"
    manifest = json.loads(stored)
    assert [
        (o["object_url"], o["state"], o["expected_rows"], [v["version_id"] for v in o["versions"]])
        for o in manifest["objects"]
    ] == [(LAKE_URL, "current", 2, ["v2", "v1"]), (RAW_URL, "hidden", 0, ["v4", "v3"])]
    assert [
        [(s["subject_hash"], s["rows"], s["older_versions_only"]) for s in o["subjects"]]
        for o in manifest["objects"]
    ] == [[(H_SECRET, 2, False)], [(H_SECRET, 1, True)]]
    assert H_OTHER not in stored.decode()  # the report names only the request's subjects
    assert summary.manifest_sha256 in documents.bodies[f"erasure/{RID}/summary.txt"].decode()
    for body in documents.bodies.values():
        assert no_raw_id(body.decode())

    # And the request is REPORTED with the report
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.REPORTED
    assert record.report["manifest_sha256"] == summary.manifest_sha256
    assert [(h.status, h.by, h.detail) for h in record.history[1:]] == [
        (ErasureStatus.REPORTED, "workflow", "2 object(s), 3 version(s), 2 row(s)")
    ]


def test_a_report_of_subjects_no_object_holds_is_empty(requests: MemoryErasureRequests) -> None:
    documents = MemoryDocuments()

    summary = build_report(
        RID, requests=requests, index=MemoryIndex(), objects=MemoryObjectStore(),
        documents=documents, now=T0,
    )  # fmt: skip

    assert (summary.objects, summary.versions, summary.rows, summary.datasets) == (0, 0, 0, ())
    assert (
        "(no object holds these subjects)"
        in documents.bodies[f"erasure/{RID}/summary.txt"].decode()
    )


def test_a_cancelled_request_gets_no_report(requests: MemoryErasureRequests) -> None:
    cancel_request(RID, "privacy@example.com", requests=requests, callbacks=RecordingCallbacks())
    documents = MemoryDocuments()

    with pytest.raises(RequestClosedError, match="REJECTED"):
        build_report(
            RID, requests=requests, index=MemoryIndex(), objects=MemoryObjectStore(),
            documents=documents,
        )  # fmt: skip

    assert documents.bodies == {}


def test_a_report_step_run_again_once_approval_was_requested_keeps_the_frozen_report(
    requests: MemoryErasureRequests,
) -> None:
    """The approver is shown the manifest's SHA-256 and the erase job refuses any other
    manifest: once the request awaits approval, a stray second run of the report step (an
    operator's invoke, a duplicate delivery) is refused and must leave the documents as frozen."""
    index, objects, documents = MemoryIndex(), MemoryObjectStore(), MemoryDocuments()
    objects.put(LAKE, LAKE_KEY, b"rows")
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, 2)])
    build_report(RID, requests=requests, index=index, objects=objects, documents=documents, now=T0)
    requests.transition(RID, ErasureStatus.AWAITING_APPROVAL, by="workflow")
    frozen = dict(documents.bodies)
    objects.put(LAKE, LAKE_KEY, b"rows, and a new version since")

    with pytest.raises(InvalidTransitionError):
        build_report(
            RID, requests=requests, index=index, objects=objects, documents=documents,
            now=T0 + timedelta(hours=1),
        )  # fmt: skip

    assert documents.bodies == frozen


# ------------------------------------------------------------------------------ mark


def test_expired_may_follow_an_approval_that_came_as_the_task_timed_out(
    requests: MemoryErasureRequests,
) -> None:
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED
    )

    note = mark(RID, ErasureStatus.EXPIRED, requests=requests, detail="no decision in time")

    assert (note["status"], note["outcome"]) == ("EXPIRED", "EXPIRED")
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.EXPIRED
    assert (record.history[-1].by, record.history[-1].detail) == ("workflow", "no decision in time")


def test_expired_cannot_follow_erasing(requests: MemoryErasureRequests) -> None:
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip

    with pytest.raises(InvalidTransitionError) as caught:
        mark(RID, ErasureStatus.EXPIRED, requests=requests)

    assert caught.value.current == "ERASING"


def test_mark_leaves_a_terminal_request_as_it_is(requests: MemoryErasureRequests) -> None:
    cancelled = cancel_request(
        RID, "privacy@example.com", requests=requests, callbacks=RecordingCallbacks()
    )

    note = mark(
        RID, ErasureStatus.FAILED, requests=requests,
        error={"error": "States.TaskFailed", "cause": "late failure"},
    )  # fmt: skip

    assert (note["status"], note["outcome"], note["error"]) == ("REJECTED", "CANCELLED", "")
    assert note["at"] == cancelled.updated_at
    assert requests.get(RID) == cancelled


def test_mark_failed_records_the_error_and_notifies_it(requests: MemoryErasureRequests) -> None:
    advance(requests, ErasureStatus.REPORTED)

    note = mark(
        RID, ErasureStatus.FAILED, requests=requests, detail="States.TaskFailed",
        error={"error": "States.TaskFailed", "cause": "x" * 3000},
    )  # fmt: skip

    assert (note["status"], note["error"]) == ("FAILED", "States.TaskFailed")
    record = requests.get(RID)
    assert record is not None
    assert record.error == {"error": "States.TaskFailed", "cause": "x" * 2000}


# ------------------------------------------------------------------------------ index


def _results(*objects: ObjectResult) -> bytes:
    return canonical_json(
        EraseResults(
            request_id=RID, manifest_sha256=MANIFEST_SHA256, correlation_id=RID,
            finished_at=(T0 + timedelta(hours=2)).isoformat(), objects=objects,
        ).model_dump(mode="json")
    )  # fmt: skip


REWRITTEN = ObjectResult(
    object_url=LAKE_URL,
    dataset_id="reviews",
    zone=Zone.LAKE,
    action="rewritten",
    versions_before=(
        VersionRef(version_id="v2", etag="e2"),
        VersionRef(version_id="v1", etag="e1"),
    ),
    version_after=VersionRef(version_id="v9", etag="e9"),
    rows_before=5,
    rows_removed=2,
    rows_after=3,
    versions_purged=2,
)
DELETED = ObjectResult(
    object_url=RAW_URL,
    dataset_id="reviews",
    zone=Zone.RAW,
    action="deleted",
    versions_before=(VersionRef(version_id="v3", etag="e3"),),
    version_after=None,
    rows_before=1,
    rows_removed=1,
    rows_after=0,
    versions_purged=1,
)


def test_update_index_removes_only_what_the_erasure_made_untrue(
    requests: MemoryErasureRequests,
) -> None:
    # Given the rewritten lake object indexed for SECRET, OTHER and (flagged) H_GONE, the
    # deleted raw key indexed for SECRET and OTHER, and another object of OTHER
    index, documents = MemoryIndex(), MemoryDocuments()
    index.replace_object(LAKE_URL, [entry(s, LAKE_URL, 1) for s in (H_SECRET, H_OTHER, H_GONE)])
    index.replace_object(LAKE_URL, [entry(s, LAKE_URL, 1) for s in (H_SECRET, H_OTHER)])
    index.replace_object(RAW_URL, [entry(s, RAW_URL, 1, Zone.RAW) for s in (H_SECRET, H_OTHER)])
    index.replace_object(ELSEWHERE_URL, [entry(H_OTHER, ELSEWHERE_URL, 4)])
    other_before = index.entries[(H_OTHER, LAKE_URL)]
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    documents.put(report_key(RID, "results.json"), _results(REWRITTEN, DELETED), "application/json")

    # When the index is updated after the erasure (S3 holds no version of either key now: the
    # raw key's entries describe v2, which its erasure never listed, so S3 is asked)
    counts = update_index(
        RID, requests=requests, index=index, documents=documents, objects=MemoryObjectStore()
    )

    # Then SECRET's entry of the rewritten object, every entry of the deleted key and the
    # flagged entry go; OTHER's entries of objects that still exist stay as they were
    assert {k: counts[k] for k in ("entries_removed", "flagged_pruned")} == {
        "entries_removed": 3,
        "flagged_pruned": 1,
    }
    assert (counts["entries_kept"], counts["kept"]) == (0, [])
    assert sorted(index.entries) == sorted([(H_OTHER, LAKE_URL), (H_OTHER, ELSEWHERE_URL)])
    assert index.entries[(H_OTHER, LAKE_URL)] == other_before
    assert index.lookup(H_SECRET) == []


def test_update_index_without_results_changes_nothing(requests: MemoryErasureRequests) -> None:
    index = MemoryIndex()
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, 1)])

    with pytest.raises(VerificationMissingError, match=r"results\.json"):
        update_index(
            RID, requests=requests, index=index, documents=MemoryDocuments(),
            objects=MemoryObjectStore(),
        )  # fmt: skip

    assert list(index.entries) == [(H_SECRET, LAKE_URL)]


# ------------------------------------------------------------------------------ certify


def _verification(*checks: ObjectCheck) -> bytes:
    return canonical_json(
        Verification(
            request_id=RID, correlation_id=RID,
            verified_at=(T0 + timedelta(hours=3)).isoformat(), objects=checks,
        ).model_dump(mode="json")
    )  # fmt: skip


CLEAN = (
    ObjectCheck(object_url=LAKE_URL, ok=True, matching_rows=0, rows=3, versions_left=1),
    ObjectCheck(object_url=RAW_URL, ok=True, matching_rows=0, rows=None, versions_left=0),
)


@pytest.fixture
def erased(requests: MemoryErasureRequests) -> MemoryDocuments:
    """The request ERASING, with the erase job's results in the reports bucket."""
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    documents = MemoryDocuments()
    documents.put(report_key(RID, "results.json"), _results(REWRITTEN, DELETED), "application/json")
    frozen_and_indexed(documents)
    return documents


def frozen_and_indexed(documents: MemoryDocuments, *kept: dict[str, Any]) -> None:
    """What the certificate step reads besides the erase job's documents: the frozen report
    (`MANIFEST`, whose SHA-256 `advance` records) and the index update's document, with the
    entries it kept for the request's subjects (`kept`)."""
    documents.put(report_key(RID, "manifest.json"), MANIFEST, "application/json")
    update = IndexUpdate(kept=list(kept))
    documents.put(
        report_key(RID, "index_update.json"), canonical_json(update.document()), "application/json"
    )


def test_certify_signs_a_certificate_writes_the_audit_and_completes(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    erased.put(report_key(RID, "verification.json"), _verification(*CLEAN), "application/json")
    signer = EcdsaSigner()

    certified = certify(
        RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=4)
    )

    # the certificate verifies with the key and says what was erased, approved by whom
    envelope = erased.json("certificate.json")
    verified = verify_envelope(envelope, signer)
    certificate = verified.certificate
    assert (certificate.request_id, certificate.approved_by) == (RID, "dpo@example.com")
    assert certificate.approved_at == T0 + timedelta(hours=1)
    assert certificate.report_sha256 == MANIFEST_SHA256
    assert certificate.subject_hashes == (H_SECRET,)
    assert (certificate.totals.objects, certificate.totals.rows_removed) == (2, 3)
    assert certificate.totals.versions_purged == 3
    assert certified.certificate_url == f"s3://{REPORTS}/erasure/{RID}/certificate.json"
    assert report_key(RID, "certificate.html") in erased.bodies
    # the audit record, written once
    audit = erased.json("audit.json")
    assert (audit["approved_by"], audit["requested_by"]) == (
        "dpo@example.com",
        "privacy@example.com",
    )
    assert audit["certificate_signature"] == envelope["signature"]
    assert erased.writes.count(report_key(RID, "audit.json")) == 1
    # the request is COMPLETED with the totals
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.COMPLETED
    assert record.result["rows_removed"] == 3
    assert (record.result["rewritten"], record.result["deleted"]) == (1, 1)
    assert record.certificate["key_id"] == signer.key_id
    assert (
        record.certificate["sha256"]
        == hashlib.sha256(erased.bodies[report_key(RID, "certificate.json")]).hexdigest()
    )
    # the notification: counts and where the certificate is; no subject hash, no raw id
    note = certified.notification
    assert {k: note[k] for k in ("status", "outcome", "rows_removed", "versions_purged")} == {
        "status": "COMPLETED",
        "outcome": "COMPLETED",
        "rows_removed": 3,
        "versions_purged": 3,
    }
    assert note["certificate"] == certified.certificate_url
    text = json.dumps(note)
    assert H_SECRET not in text
    assert no_raw_id(text)
    for body in erased.bodies.values():
        assert no_raw_id(body.decode())


def test_certify_without_a_verification_certifies_nothing(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    with pytest.raises(VerificationMissingError, match=r"verification\.json"):
        certify(RID, requests=requests, documents=erased, signer=EcdsaSigner())

    assert sorted(erased.bodies) == [
        report_key(RID, name) for name in ("index_update.json", "manifest.json", "results.json")
    ]  # what the step found; it wrote nothing
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.ERASING


def test_certify_with_a_failed_verification_certifies_nothing(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    dirty = ObjectCheck(
        object_url=LAKE_URL, ok=False, matching_rows=1, rows=4, versions_left=1,
        problem="1 matching row(s)",
    )  # fmt: skip
    erased.put(report_key(RID, "verification.json"), _verification(dirty, CLEAN[1]), "x")

    with pytest.raises(VerificationMissingError, match="did not verify"):
        certify(RID, requests=requests, documents=erased, signer=EcdsaSigner())

    assert report_key(RID, "certificate.json") not in erased.bodies
    assert report_key(RID, "audit.json") not in erased.bodies
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.ERASING


def test_certify_refuses_a_verification_that_checked_none_of_the_erased_objects(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    """The erase job erased two objects; a verification that checked no object (or other
    objects) found nothing because it looked at nothing: it is no proof."""
    erased.put(report_key(RID, "verification.json"), _verification(), "application/json")

    with pytest.raises(VerificationMissingError):
        certify(RID, requests=requests, documents=erased, signer=EcdsaSigner())

    assert report_key(RID, "certificate.json") not in erased.bodies


def test_a_second_certify_leaves_the_audit_record_as_written(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    erased.put(report_key(RID, "verification.json"), _verification(*CLEAN), "application/json")
    signer = EcdsaSigner()
    certify(RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=4))
    audit = erased.bodies[report_key(RID, "audit.json")]

    with pytest.raises(RequestClosedError, match="COMPLETED"):
        certify(RID, requests=requests, documents=erased, signer=signer)

    assert erased.bodies[report_key(RID, "audit.json")] == audit


def test_a_retried_certify_keeps_the_first_audit_record(erased: MemoryDocuments) -> None:
    # Given a certify whose COMPLETED write failed after the audit record was written
    requests = CompletionFailsOnce()
    filed(requests)
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    erased.put(report_key(RID, "verification.json"), _verification(*CLEAN), "application/json")
    signer = EcdsaSigner()
    with pytest.raises(TimeoutError):
        certify(
            RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=4)
        )
    first_audit = erased.bodies[report_key(RID, "audit.json")]

    # When Step Functions retries the step
    certify(RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=5))

    # Then the audit record is the first one, never overwritten
    assert erased.bodies[report_key(RID, "audit.json")] == first_audit
    assert json.loads(first_audit)["completed_at"] == (T0 + timedelta(hours=4)).isoformat()
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.COMPLETED


def test_a_retried_certify_leaves_an_audit_record_that_matches_the_certificate(
    erased: MemoryDocuments,
) -> None:
    """Step Functions retries a failed certify: the audit record (written once) and the stored
    certificate (and the request's certificate hash) must still describe the same certificate."""
    requests = CompletionFailsOnce()
    filed(requests)
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    erased.put(report_key(RID, "verification.json"), _verification(*CLEAN), "application/json")
    signer = EcdsaSigner()
    with pytest.raises(TimeoutError):
        certify(
            RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=4)
        )

    certify(RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=5))

    envelope = erased.json("certificate.json")
    audit = erased.json("audit.json")
    assert audit["certificate_signature"] == envelope["signature"]


# ------------------------------------------------------------------------------ cancel


def test_cancel_while_awaiting_approval_fails_the_waiting_task(
    requests: MemoryErasureRequests,
) -> None:
    advance(requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL)
    callbacks = RecordingCallbacks()

    record = cancel_request(RID, "privacy@example.com", requests=requests, callbacks=callbacks)

    assert (record.status, record.outcome) == (ErasureStatus.REJECTED, "CANCELLED")
    assert callbacks.failures == [
        ("task-token-1", "ErasureCancelled", "cancelled by privacy@example.com")
    ]
    assert callbacks.successes == []
    assert (record.history[-1].by, record.history[-1].detail) == (
        "privacy@example.com",
        "cancelled by the requester",
    )
    assert "task_token" not in record.public()


def test_cancel_before_the_approval_task_calls_back_nothing(
    requests: MemoryErasureRequests,
) -> None:
    callbacks = RecordingCallbacks()

    record = cancel_request(RID, "privacy@example.com", requests=requests, callbacks=callbacks)

    assert record.status is ErasureStatus.REJECTED
    assert (callbacks.failures, callbacks.successes) == ([], [])


def test_cancel_while_erasing_is_refused(requests: MemoryErasureRequests) -> None:
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    callbacks = RecordingCallbacks()

    with pytest.raises(InvalidTransitionError) as caught:
        cancel_request(RID, "privacy@example.com", requests=requests, callbacks=callbacks)

    assert caught.value.current == "ERASING"
    assert callbacks.failures == []
    record = requests.get(RID)
    assert record is not None
    assert (record.status, record.outcome) == (ErasureStatus.ERASING, "")


class GoneCallbacks(RecordingCallbacks):
    """The waiting task timed out (or its execution ended): Step Functions answers TaskTimedOut
    or InvalidToken, which StepFunctionsCallbacks raises as TaskGoneError."""

    def failure(self, token: str, error: str, cause: str) -> None:
        super().failure(token, error, cause)
        raise TaskGoneError("Task Timed Out")


def test_cancel_after_the_approval_task_timed_out_still_answers_cancelled(
    requests: MemoryErasureRequests,
) -> None:
    """The request is REJECTED (CANCELLED) as soon as the conditional write succeeds; that the
    task no longer waits changes nothing for the caller (the workflow's timeout path finds the
    request terminal and publishes it as cancelled)."""
    advance(requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL)
    callbacks = GoneCallbacks()

    record = cancel_request(RID, "privacy@example.com", requests=requests, callbacks=callbacks)

    assert (record.status, record.outcome) == (ErasureStatus.REJECTED, "CANCELLED")
    assert [f[1] for f in callbacks.failures] == ["ErasureCancelled"]


def test_the_certificate_names_the_key_the_request_was_hashed_with(
    requests: MemoryErasureRequests, erased: MemoryDocuments
) -> None:
    # issue 23: the key version is stamped on the certificate (the request's key_fingerprint)
    requests.update(RID, {"key_fingerprint": "0123456789abcdef"})
    erased.put(report_key(RID, "verification.json"), _verification(*CLEAN), "application/json")
    signer = EcdsaSigner()
    certify(RID, requests=requests, documents=erased, signer=signer, now=T0 + timedelta(hours=4))
    certificate = verify_envelope(erased.json("certificate.json"), signer).certificate
    assert certificate.key_fingerprint == "0123456789abcdef"
