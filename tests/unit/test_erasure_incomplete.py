"""Erasure fails closed, end to end after the erase job (lethe_shared.erasure.completion through
workflow.certify, and the certificate): a request whose results name a place that was not fully
searched is never COMPLETED. Its audit record and signed certificate (`complete: false`) still
say what was erased and list every gap; the request ends FAILED with outcome INCOMPLETE, and
its notification says so. A request without a gap completes as before, `complete: true`.
Certificates signed before these fields existed still verify."""

from __future__ import annotations

import base64
import copy
import functools
import json
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.erasure import certificate as cf
from lethe_shared.erasure.completion import ReportMismatchError, gathered_gaps
from lethe_shared.erasure.index_update import IndexUpdate
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    NotSearched,
    ObjectCheck,
    ObjectResult,
    canonical_json,
    report_key,
    sha256_hex,
)
from lethe_shared.erasure.requests import ErasureStatus, RequestClosedError
from lethe_shared.erasure.workflow import VerificationMissingError, mark
from lethe_shared.erasure.workflow import certify as certify_with
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.fakes import MemoryErasureRequests
from tests.unit.test_certificate import MemorySigner, make_certificate
from tests.unit.test_erasure_workflow import (
    CLEAN,
    DELETED,
    H_SECRET,
    LAKE,
    LAKE_KEY,
    LAKE_URL,
    RAW,
    RAW_KEY,
    RAW_URL,
    REPORTS,
    REWRITTEN,
    RID,
    SECRET,
    T0,
    EcdsaSigner,
    MemoryDocuments,
    _results,
    _verification,
    advance,
    filed,
    frozen_and_indexed,
    no_raw_id,
)

# certificates and audit records name objects by their shown keys (no dataset is registered
# here: every object is shown `<dataset>/~<keyed hash>`), which these tests compare with
NAMER = KeyNamer(b"n" * 32, lambda _: None)
certify = functools.partial(certify_with, namer=NAMER)
shown = NAMER.key

pytestmark = pytest.mark.lambda_runtime

UNPARSEABLE = NotSearched(
    object_url=RAW_URL,
    version_id="v4",
    dataset_id="reviews",
    reason="unparseable_records",
    count=1,
    detail="1 record(s) that could not be parsed are kept as they are, their subjects unread "
    "(first at line 3)",
)
MISSING = NotSearched(
    object_url=LAKE_URL,
    version_id="v2",
    dataset_id="reviews",
    reason="missing_subject_column",
    count=5,
    detail="no field is subject column 'user_id' (exactly, or as its one case variant): 5 "
    "row(s) could not be matched",
)
DIFFERS = NotSearched(
    object_url=LAKE_URL,
    version_id="v2",
    dataset_id="reviews",
    reason="rows_differ_from_index",
    count=2,
    detail="the index counted 2 row(s) of 1 subject(s) in this version, erasure matched 0; "
    "1 subject(s) differ",
)
# The raw object kept a line it could not parse (it still removed the subject's row); the lake
# object lacks the subject column, so nothing of it was searched.
RAW_WITH_GAP = REWRITTEN.model_copy(
    update={
        "object_url": RAW_URL,
        "version_after": REWRITTEN.version_after.model_copy(update={"version_id": "v4"})
        if REWRITTEN.version_after
        else None,
        "not_searched": (UNPARSEABLE,),
    }
)
LAKE_INCOMPLETE = ObjectResult(
    object_url=LAKE_URL,
    dataset_id="reviews",
    zone=REWRITTEN.zone,
    action="incomplete",
    versions_before=REWRITTEN.versions_before,
    version_after=REWRITTEN.versions_before[0],
    rows_before=5,
    rows_removed=0,
    rows_after=5,
    versions_purged=1,
    not_searched=(MISSING, DIFFERS),
)


@pytest.fixture
def requests() -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    filed(store)
    advance(
        store, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    return store


def _erased(*objects: ObjectResult) -> MemoryDocuments:
    documents = MemoryDocuments()
    documents.put(report_key(RID, "results.json"), _results(*objects), "application/json")
    frozen_and_indexed(documents)
    return documents


def _clean_verification(documents: MemoryDocuments) -> None:
    documents.put(report_key(RID, "verification.json"), _verification(*CLEAN), "x")


# ------------------------------------------------------------------ certify


def test_a_request_with_places_not_fully_searched_fails_incomplete_with_a_signed_account(
    requests: MemoryErasureRequests,
) -> None:
    # Given results where the raw object kept an unparseable line and the lake object lacked
    # the subject column (and matched fewer rows than the index counted), verified clean
    documents = _erased(LAKE_INCOMPLETE, RAW_WITH_GAP)
    _clean_verification(documents)
    signer = EcdsaSigner()

    # When the workflow certifies the request
    certified = certify(
        RID, requests=requests, documents=documents, signer=signer, now=T0 + timedelta(hours=4)
    )

    # Then the request is not COMPLETED: FAILED, outcome INCOMPLETE, an error with the count
    record = requests.get(RID)
    assert record is not None
    assert (record.status, record.outcome) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert record.error["error"] == "ErasureIncomplete"
    assert record.error["cause"].startswith(
        "3 place(s) were not fully searched for the subjects (missing_subject_column: 1, "
        "rows_differ_from_index: 1, unparseable_records: 1)"
    )
    assert record.history[-1].detail.startswith("INCOMPLETE: 3 place(s) not fully searched")
    assert record.result["not_searched"] == 3
    assert record.result["rows_removed"] == 2
    assert record.certificate["url"] == f"s3://{REPORTS}/erasure/{RID}/certificate.json"
    assert RAW_KEY not in json.dumps(record.public())  # keys stay in the documents
    # and the signed certificate says complete: false and names every gap
    envelope = documents.json("certificate.json")
    certificate = cf.verify_envelope(envelope, signer).certificate
    assert certificate.complete is False
    assert [
        (g.bucket, g.key, g.version_id, g.reason, g.count) for g in certificate.not_searched
    ] == [
        (LAKE, shown(LAKE_KEY), "v2", "missing_subject_column", 5),
        (LAKE, shown(LAKE_KEY), "v2", "rows_differ_from_index", 2),
        (RAW, shown(RAW_KEY), "v4", "unparseable_records", 1),
    ]
    assert certificate.not_searched[2].detail == UNPARSEABLE.detail
    assert certificate.not_searched[2].dataset_id == "reviews"
    assert certificate.subject_hashes == (H_SECRET,)
    assert certificate.totals.rows_removed == 2
    # and the audit record, written once, says it too
    audit = documents.json("audit.json")
    assert (audit["complete"], audit["outcome"]) == (False, "INCOMPLETE")
    assert [g["reason"] for g in audit["not_searched"]] == [
        "missing_subject_column", "rows_differ_from_index", "unparseable_records",
    ]  # fmt: skip
    assert audit["certificate_signature"] == envelope["signature"]
    # and the page shows the gaps
    page = documents.bodies[report_key(RID, "certificate.html")].decode()
    assert 'id="incomplete"' in page
    assert 'data-complete="false"' in page
    assert page.count('<tr><td>reviews</td><td class="mono">s3://') == 3
    # and the notification: FAILED, outcome INCOMPLETE, the certificate; no id, no hash
    note = certified.notification
    assert (note["status"], note["outcome"], note["error"]) == (
        "FAILED", "INCOMPLETE", "ErasureIncomplete",
    )  # fmt: skip
    assert note["certificate"] == certified.certificate_url
    assert not certified.complete
    assert H_SECRET not in json.dumps(note)
    for body in documents.bodies.values():
        assert no_raw_id(body.decode())


def test_a_request_without_a_gap_completes_with_a_complete_certificate(
    requests: MemoryErasureRequests,
) -> None:
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    signer = EcdsaSigner()

    certified = certify(RID, requests=requests, documents=documents, signer=signer)

    record = requests.get(RID)
    assert record is not None
    assert (record.status, record.outcome, record.error) == (ErasureStatus.COMPLETED, "", {})
    assert record.result["not_searched"] == 0
    certificate = cf.verify_envelope(documents.json("certificate.json"), signer).certificate
    assert (certificate.complete, certificate.not_searched) == (True, ())
    assert documents.json("certificate.json")["certificate"]["complete"] is True
    assert (documents.json("audit.json")["complete"], certified.complete) == (True, True)
    assert certified.notification["outcome"] == "COMPLETED"


def test_a_gap_never_excuses_a_failed_verification(requests: MemoryErasureRequests) -> None:
    documents = _erased(LAKE_INCOMPLETE, RAW_WITH_GAP)
    dirty = CLEAN[0].model_copy(update={"ok": False, "matching_rows": 1})
    documents.put(report_key(RID, "verification.json"), _verification(dirty, CLEAN[1]), "x")

    with pytest.raises(VerificationMissingError, match="did not verify"):
        certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    assert report_key(RID, "certificate.json") not in documents.bodies
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.ERASING


def test_an_incomplete_request_is_closed_a_retry_changes_nothing(
    requests: MemoryErasureRequests,
) -> None:
    documents = _erased(LAKE_INCOMPLETE, RAW_WITH_GAP)
    _clean_verification(documents)
    signer = EcdsaSigner()
    certify(RID, requests=requests, documents=documents, signer=signer)
    audit = documents.bodies[report_key(RID, "audit.json")]

    with pytest.raises(RequestClosedError, match="FAILED"):
        certify(RID, requests=requests, documents=documents, signer=signer)
    # the workflow's catch then marks FAILED: the request is left as it is, notified again
    again = mark(RID, ErasureStatus.FAILED, requests=requests, error={"error": "X", "cause": ""})

    assert documents.bodies[report_key(RID, "audit.json")] == audit
    assert (again["status"], again["outcome"], again["error"]) == (
        "FAILED", "INCOMPLETE", "ErasureIncomplete",
    )  # fmt: skip


def test_no_raw_id_in_an_incomplete_account(requests: MemoryErasureRequests) -> None:
    documents = _erased(LAKE_INCOMPLETE, RAW_WITH_GAP)
    _clean_verification(documents)
    certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    record = requests.get(RID)
    assert record is not None
    assert SECRET not in json.dumps(record.public())


# ------------------------------------------------------------------ every source of gaps
#
# Certify gathers the erase job's gaps, the frozen report's (Manifest.not_searched) and the
# index update's kept entries (index_update.json, every one of them).

IN_FLIGHT = NotSearched(
    object_url=f"s3://{RAW}/reviews/2026/11/22/last.csv",
    version_id="r7",
    dataset_id="reviews",
    reason="ingestion_in_flight",
    detail="still INGESTING when the report was frozen: let its ingestion finish, then file the "
    "request again",
)
LATER_URL = f"s3://{LAKE}/reviews/review_date=2026-11-30/later.parquet"


def _kept(url: str = LATER_URL, version: str = "v-later", rows: int = 1) -> dict[str, Any]:
    return {"object_url": url, "version_id": version, "dataset_id": "reviews", "rows": rows,
            "reason": "object_not_erased"}  # fmt: skip


def _frozen_with(
    requests: MemoryErasureRequests, documents: MemoryDocuments, *gaps: NotSearched
) -> str:
    """A frozen report of the same objects naming `gaps` (what it could not search), recorded
    as the approved one; the erase job's results (already stored) are of it."""
    listed = Manifest.model_validate_json(documents.bodies[report_key(RID, "manifest.json")])
    manifest = listed.model_copy(update={"not_searched": gaps}).bytes()
    documents.put(report_key(RID, "manifest.json"), manifest, "application/json")
    record = requests.get(RID)
    assert record is not None
    requests.update(RID, {"report": {**record.report, "manifest_sha256": sha256_hex(manifest)}})
    results = EraseResults.model_validate_json(documents.bodies[report_key(RID, "results.json")])
    again = results.model_copy(update={"manifest_sha256": sha256_hex(manifest)})
    documents.put(
        report_key(RID, "results.json"), canonical_json(again.model_dump(mode="json")), "x"
    )
    return sha256_hex(manifest)


def _index_kept(
    requests: MemoryErasureRequests, documents: MemoryDocuments, *kept: dict[str, Any]
) -> None:
    """The index update kept `kept` for the request's subjects: its document and the record."""
    update = IndexUpdate(kept=list(kept))
    url = documents.put(
        report_key(RID, "index_update.json"), canonical_json(update.document()), "x"
    )
    requests.update(RID, {"index": update.summary(url)})


def _gaps(documents: MemoryDocuments, signer: Any) -> list[tuple[str, str, str, str]]:
    cert = cf.verify_envelope(documents.json("certificate.json"), signer).certificate
    return [(g.bucket, g.key, g.version_id, g.reason) for g in cert.not_searched]


def _state(requests: MemoryErasureRequests) -> tuple[ErasureStatus, str]:
    record = requests.get(RID)
    assert record is not None
    return record.status, record.outcome


def test_what_the_frozen_report_could_not_search_makes_the_request_incomplete(
    requests: MemoryErasureRequests,
) -> None:
    # Given a clean erasure of a report that named a version still being ingested
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    sha = _frozen_with(requests, documents, IN_FLIGHT)
    signer = EcdsaSigner()

    certify(RID, requests=requests, documents=documents, signer=signer)

    # Then the request is INCOMPLETE and the certificate names that version
    assert _state(requests) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert _gaps(documents, signer) == [
        (RAW, shown("reviews/2026/11/22/last.csv"), "r7", "ingestion_in_flight")
    ]
    cert = cf.verify_envelope(documents.json("certificate.json"), signer).certificate
    assert (cert.report_sha256, cert.not_searched[0].detail) == (sha, IN_FLIGHT.detail)
    assert documents.json("audit.json")["not_searched"][0]["reason"] == "ingestion_in_flight"
    record = requests.get(RID)
    assert record is not None
    assert record.result["not_searched"] == 1
    assert "ingestion_in_flight: 1" in record.error["cause"]


def test_an_entry_the_index_update_kept_makes_the_request_incomplete(
    requests: MemoryErasureRequests,
) -> None:
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    _index_kept(requests, documents, _kept(rows=3))
    signer = EcdsaSigner()

    certified = certify(RID, requests=requests, documents=documents, signer=signer)

    assert _state(requests) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert not certified.complete
    assert _gaps(documents, signer) == [
        (
            LAKE,
            shown("reviews/review_date=2026-11-30/later.parquet"),
            "v-later",
            "appeared_after_erase",
        )
    ]
    cert = cf.verify_envelope(documents.json("certificate.json"), signer).certificate
    assert cert.not_searched[0].count == 3
    assert "did not list" in cert.not_searched[0].detail


def test_every_kept_entry_is_named_not_only_those_the_record_lists(
    requests: MemoryErasureRequests,
) -> None:
    # Given an index update that kept more entries than the request record lists (100)
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    kept = [_kept(f"s3://{LAKE}/reviews/later/part-{n:03}.parquet") for n in range(105)]
    _index_kept(requests, documents, *kept)
    record = requests.get(RID)
    assert record is not None
    summary = (record.model_extra or {})["index"]
    assert (len(summary["kept"]), summary["kept_unlisted"]) == (100, 5)
    signer = EcdsaSigner()

    certify(RID, requests=requests, documents=documents, signer=signer)

    # Then the certificate names each of the 105 object versions, from the document
    named = _gaps(documents, signer)
    assert len(named) == 105
    assert {key for _, key, _, _ in named} == {
        shown(f"reviews/later/part-{n:03}.parquet") for n in range(105)
    }
    assert all(reason == "appeared_after_erase" for *_, reason in named)


def test_gaps_of_every_source_are_gathered_and_one_found_twice_is_listed_once(
    requests: MemoryErasureRequests,
) -> None:
    # Given the erase job's gaps (the unparseable line twice: a re-run found it again), the
    # report's (the in-flight version, and the unparseable one again) and the index update's
    # (the later object, and the raw version again but for another reason)
    twice = RAW_WITH_GAP.model_copy(update={"not_searched": (UNPARSEABLE, UNPARSEABLE)})
    documents = _erased(LAKE_INCOMPLETE, twice)
    _clean_verification(documents)
    _frozen_with(requests, documents, IN_FLIGHT, UNPARSEABLE)
    _index_kept(requests, documents, _kept(), _kept(RAW_URL, "v4"))
    signer = EcdsaSigner()

    certify(RID, requests=requests, documents=documents, signer=signer)

    assert _gaps(documents, signer) == [
        (LAKE, shown(LAKE_KEY), "v2", "missing_subject_column"),
        (LAKE, shown(LAKE_KEY), "v2", "rows_differ_from_index"),
        (RAW, shown(RAW_KEY), "v4", "unparseable_records"),
        (RAW, shown("reviews/2026/11/22/last.csv"), "r7", "ingestion_in_flight"),
        (
            LAKE,
            shown("reviews/review_date=2026-11-30/later.parquet"),
            "v-later",
            "appeared_after_erase",
        ),
        (RAW, shown(RAW_KEY), "v4", "appeared_after_erase"),  # same version, another reason
    ]
    audit = documents.json("audit.json")
    assert len(audit["not_searched"]) == 6
    record = requests.get(RID)
    assert record is not None
    assert record.result["not_searched"] == 6
    assert record.error["cause"].startswith("6 place(s) were not fully searched")


def test_gathered_gaps_keeps_the_first_of_a_place_and_reason() -> None:
    again = UNPARSEABLE.model_copy(update={"count": 9, "detail": "found again"})
    assert gathered_gaps((UNPARSEABLE,), (again, MISSING), (), (MISSING,)) == (UNPARSEABLE, MISSING)
    assert gathered_gaps() == ()


@pytest.mark.parametrize("tamper", ["changed", "missing", "not-recorded"])
def test_a_frozen_report_that_is_not_the_approved_one_is_never_certified(
    requests: MemoryErasureRequests, tamper: str
) -> None:
    # Given a clean erasure, but a manifest.json that is not the report the approver saw
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    key = report_key(RID, "manifest.json")
    if tamper == "changed":  # its gaps dropped after the approval, say
        documents.put(key, documents.bodies[key].replace(b'"objects"', b'"objects" '), "x")
    elif tamper == "missing":
        del documents.bodies[key]
    else:
        record = requests.get(RID)
        assert record is not None
        requests.update(RID, {"report": {k: v for k, v in record.report.items()
                                         if k != "manifest_sha256"}})  # fmt: skip

    with pytest.raises(VerificationMissingError, match=r"manifest\.json|not the report"):
        certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    # Then nothing is certified: no certificate, no audit record, the request still ERASING
    assert report_key(RID, "certificate.json") not in documents.bodies
    assert report_key(RID, "audit.json") not in documents.bodies
    assert _state(requests) == (ErasureStatus.ERASING, "")


LATER_RESULT = DELETED.model_copy(update={"object_url": s3_url(RAW, "reviews/not-in-report.jsonl")})


def _verified(*objects: ObjectResult) -> list[ObjectCheck]:
    return [
        ObjectCheck(object_url=o.object_url, ok=True, matching_rows=0, rows=None, versions_left=0)
        for o in objects
    ]


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ("one-missing", r"names 1 object\(s\), the report 2 \(1 of the report missing"),
        ("one-added", r"names 3 object\(s\), the report 2 \(0 of the report missing, 1 not in"),
        ("one-twice", r"names 3 object\(s\), the report 2 .*1 repeated"),
        ("another-report", r"results\.json is of the report c{64}"),
    ],
)
def test_results_that_do_not_cover_exactly_the_approved_report_are_never_certified(
    requests: MemoryErasureRequests, results: str, message: str
) -> None:
    # Given an erase run whose results (verified clean) are not of exactly the report's objects
    objects = {
        "one-missing": (REWRITTEN,),
        "one-added": (REWRITTEN, DELETED, LATER_RESULT),
        "one-twice": (REWRITTEN, DELETED, DELETED),
        "another-report": (REWRITTEN, DELETED),
    }[results]
    documents = _erased(*objects)
    if results == "another-report":
        key = report_key(RID, "results.json")
        stored = EraseResults.model_validate_json(documents.bodies[key])
        other = stored.model_copy(update={"manifest_sha256": "c" * 64})
        documents.put(key, canonical_json(other.model_dump(mode="json")), "x")
    checks = {o.object_url: o for o in _verified(*objects)}
    documents.put(report_key(RID, "verification.json"), _verification(*checks.values()), "x")

    with pytest.raises(VerificationMissingError, match=message):
        certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    # Then nothing is certified and the request is still ERASING
    assert report_key(RID, "certificate.json") not in documents.bodies
    assert _state(requests) == (ErasureStatus.ERASING, "")


def test_an_index_update_document_that_is_missing_or_not_the_recorded_one_is_refused(
    requests: MemoryErasureRequests,
) -> None:
    documents = _erased(REWRITTEN, DELETED)
    _clean_verification(documents)
    _index_kept(requests, documents, _kept())
    # the document lost its kept item (the record summarises one)
    documents.put(
        report_key(RID, "index_update.json"), canonical_json(IndexUpdate().document()), "x"
    )
    with pytest.raises(ReportMismatchError, match=r"lists 0 kept item\(s\), the request record 1"):
        certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    del documents.bodies[report_key(RID, "index_update.json")]
    with pytest.raises(VerificationMissingError, match=r"index_update\.json"):
        certify(RID, requests=requests, documents=documents, signer=EcdsaSigner())

    assert report_key(RID, "certificate.json") not in documents.bodies
    assert _state(requests) == (ErasureStatus.ERASING, "")


# ------------------------------------------------------------------ the certificate


def _gap(**overrides: Any) -> dict[str, Any]:
    return {
        "dataset_id": "reviews",
        "bucket": "lethe-raw",
        "key": "reviews/2026/11/01/a.jsonl",
        "version_id": "v9",
        "reason": "unparseable_records",
        "count": 2,
        "detail": "2 record(s) that could not be parsed are kept as they are",
    } | overrides


def test_a_certificate_is_complete_exactly_when_it_lists_no_gap() -> None:
    assert make_certificate().complete is True
    incomplete = make_certificate(complete=False, not_searched=[_gap()])
    assert incomplete.not_searched[0].reason == "unparseable_records"
    with pytest.raises(ValueError, match="complete exactly"):
        make_certificate(complete=False)
    with pytest.raises(ValueError, match="complete exactly"):
        make_certificate(not_searched=[_gap()])
    with pytest.raises(ValueError, match="pattern"):
        make_certificate(complete=False, not_searched=[_gap(reason="Not A Reason")])


def test_a_certificate_signed_before_completeness_existed_still_verifies() -> None:
    # Given an envelope signed over a document without `complete` and `not_searched`
    signer = MemorySigner()
    document = make_certificate().model_dump(mode="json")
    del document["complete"], document["not_searched"]
    digest = cf.certificate_digest(document)
    envelope = {
        "certificate": document,
        "signature": {
            "algorithm": cf.SIGNING_ALGORITHM,
            "key_id": signer.key_id,
            "digest_sha256": digest.hex(),
            "value": base64.b64encode(signer.sign(digest)).decode(),
        },
    }

    # Then it verifies, online and offline, and reads as complete with no gap
    verified = cf.verify_envelope(envelope, signer)
    assert (verified.certificate.complete, verified.certificate.not_searched) == (True, ())
    assert (
        cf.verify_envelope_offline(envelope, signer.public_key_der()).digest_sha256 == digest.hex()
    )
    # and its page says completeness was not recorded, rather than claiming it
    page = cf.render_certificate_html(envelope)
    assert 'data-complete=""' in page
    # and adding the fields afterwards breaks the signature, as any change does
    altered = copy.deepcopy(envelope)
    altered["certificate"]["complete"] = True
    with pytest.raises(cf.CertificateInvalidError, match="digest-mismatch"):
        cf.verify_envelope(altered, signer)


def test_removing_a_gap_from_a_signed_certificate_breaks_it() -> None:
    signer = MemorySigner()
    cert = make_certificate(complete=False, not_searched=[_gap(), _gap(key="other.jsonl")])
    envelope = cf.sign_certificate(cert, signer)
    assert cf.verify_envelope(envelope, signer).certificate.complete is False

    tampered = copy.deepcopy(envelope)
    tampered["certificate"]["not_searched"].pop()
    with pytest.raises(cf.CertificateInvalidError, match="digest-mismatch"):
        cf.verify_envelope(tampered, signer)
    claimed = copy.deepcopy(envelope)
    claimed["certificate"].update(complete=True, not_searched=[])
    with pytest.raises(cf.CertificateInvalidError, match="digest-mismatch"):
        cf.verify_envelope(claimed, signer)


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.rows: list[list[str]] = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.table = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.table = dict(attrs).get("id")
        elif tag == "tr" and self.table == "not-searched":
            self.rows.append([])

    def handle_data(self, data: str) -> None:
        if self.table == "not-searched" and self.rows and data.strip():
            self.rows[-1].append(data)


def test_the_page_of_an_incomplete_certificate_lists_every_gap_escaped() -> None:
    gaps = [_gap(), _gap(reason="missing_subject_column", key="<b>x</b>.csv", count=0)]
    envelope = cf.sign_certificate(
        make_certificate(complete=False, not_searched=gaps), MemorySigner()
    )

    page = cf.render_certificate_html(envelope)

    assert "INCOMPLETE erasure" in page
    assert "<b>x</b>" not in page
    cells = _Cells()
    cells.feed(page)
    assert cells.rows[1:] == [
        ["reviews", "s3://lethe-raw/reviews/2026/11/01/a.jsonl", "v9", "unparseable_records", "2",
         "2 record(s) that could not be parsed are kept as they are"],
        ["reviews", "s3://lethe-raw/<b>x</b>.csv", "v9", "missing_subject_column", "0",
         "2 record(s) that could not be parsed are kept as they are"],
    ]  # fmt: skip
