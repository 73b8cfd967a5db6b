"""The erase job (`spark_jobs/erase.py` main, both modes) against the moto server: a frozen
manifest built from what ingestion indexed, every version of every object reached, byte-exact
rewrites that keep metadata and tags, objects left empty deleted, and a verify run that proves
it or fails."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from erase import main as erase_main
from pyspark.sql import SparkSession

from ingest import main as ingest_main
from lethe_jobs.erase_again import MAX_ERASE_AGAIN, TEST_WRITE_BEFORE_CHECK
from lethe_jobs.erase_core import ManifestMismatchError, VerificationFailedError
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer, Written
from lethe_shared.erasure.authority import EraseNotAuthorisedError
from lethe_shared.erasure.progress import progress_name
from lethe_shared.erasure.report import Manifest, build_manifest, report_key, sha256_hex
from lethe_shared.erasure.requests import ErasureStatus
from lethe_shared.erasure.workflow import S3Documents, certify, update_index
from lethe_shared.index.subject_index import DynamoSubjectIndex
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.spark.cloud import (
    CATALOG,
    DATASETS,
    GLUE_ARGS,
    HASH_KEY_SECRET,
    LAKE,
    RAW,
    REPORTS,
    REQUESTS,
    Cloud,
    JobRunner,
    h,
    ingest_args,
)
from tests.unit.test_certificate import MemorySigner

FIXTURES = Path(__file__).parent / "fixtures"
REVIEWS = json.loads((FIXTURES / "reviews.dataset.json").read_text())
KEY = "reviews/2026/11/batch-1.csv"
DIGEST = "bf6f28df84c0c9eb"  # sha256("lethe-test-raw/reviews/2026/11/batch-1.csv")[:16]
DAY1 = f"reviews/review_date=2026-11-22/part-{DIGEST}.parquet"
DAY2 = f"reviews/review_date=2026-11-23/part-{DIGEST}.parquet"
QUARANTINE = f"reviews/_quarantine/{DIGEST}.jsonl"
# u1 (line 2, 2026-11-22) and u3 (lines 4-5, 2026-11-23) are valid; u2 (line 3) is rejected
CSV = (FIXTURES / "reviews-batch-1.csv").read_bytes()
CSV_WITHOUT_U1 = (
    b"user_id,stars,review_date,amount,comment\n"
    b"u2,abc,2026-11-22,3.00,meh\n"
    b'u3,4,2026-11-23,7.25,"two\nlines"\n'
)
REQUEST = "er-20261123T120000Z-0a1b2c3d"
# certificates name objects by their shown keys (lethe_shared.subject_hashing.shown_keys): a
# fixed key; no dataset layout known, so a key keeps its first segment and extension
NAMER = KeyNamer(b"n" * 32, lambda _: None)


class Eraser:
    """Builds and stores the frozen manifest of a request for some subjects (as the report
    step does), then runs the erase job's main() in either mode."""

    def __init__(self, cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> None:
        self.cloud = cloud
        self.runner = JobRunner(erase_main, GLUE_ARGS, capsys)
        self.sha256 = ""

    def freeze(self, *subjects: str) -> dict[str, Any]:
        manifest = build_manifest(
            REQUEST,
            [h(s) for s in subjects],
            len(subjects),
            index=DynamoSubjectIndex(self.cloud.index),
            objects=S3ObjectStore(self.cloud.s3),
            now=datetime(2026, 11, 23, 12, tzinfo=UTC),
        )
        return self.store(manifest)

    def store(self, manifest: Manifest, *, pin: bool = True) -> dict[str, Any]:
        """Freeze `manifest` as the request's approved report, pinned as the report step pins
        it (`pin=False`: as given, e.g. a report made before pins)."""
        body = (self.cloud.pinned(manifest) if pin else manifest).bytes()
        self.sha256 = sha256_hex(body)
        self.cloud.s3.put_object(
            Bucket=REPORTS, Key=report_key(REQUEST, "manifest.json"), Body=body
        )
        return dict(json.loads(body))

    def __call__(self, mode: str, sha256: str | None = None, *, record: bool = True) -> Any:
        """Run the job; `record`: first record the request as the workflow leaves it (ERASING,
        approved, its report this manifest and `sha256`)."""
        url = f"s3://{REPORTS}/{report_key(REQUEST, 'manifest.json')}"
        if record:
            self.cloud.record_request(REQUEST, url, sha256 or self.sha256)
        return self.runner(
            "--mode", mode,
            "--request-id", REQUEST,
            "--manifest", url,
            "--manifest-sha256", sha256 or self.sha256,
            "--requests-table", REQUESTS,
            "--raw-bucket", RAW,
            "--lake-bucket", LAKE,
            "--reports-bucket", REPORTS,
            "--datasets-table", DATASETS,
            "--catalog-table", CATALOG,
            "--hash-key-secret", HASH_KEY_SECRET,
            "--correlation-id", f"erasure-{REQUEST}",
        )  # fmt: skip

    def document(self, name: str) -> Any:
        body = self.cloud.s3.get_object(Bucket=REPORTS, Key=report_key(REQUEST, name))["Body"]
        return json.loads(body.read())

    def certify_incomplete(self, requests: Any) -> dict[str, Any]:
        """The index update and the certificate step after verify, as the workflow runs them,
        for the request filed in `requests` (a MemoryErasureRequests): it is moved through an
        approval recorded as certify requires (who and when) to ERASING, then certified, which
        must end it FAILED with outcome INCOMPLETE. Returns the signed certificate's body."""
        updated = {
            "REPORTED": {"report": {"manifest_sha256": self.sha256}},
            "APPROVED": {
                "approval": {
                    "decided_by": "approver@x.org",
                    "decided_at": "2026-11-23T13:00:00+00:00",
                }
            },
        }
        for status in ("REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING"):
            requests.transition(
                REQUEST, ErasureStatus(status), by="test", updates=updated.get(status)
            )
        documents = S3Documents(self.cloud.s3, REPORTS)
        update_index(
            REQUEST, requests=requests, index=DynamoSubjectIndex(self.cloud.index),
            documents=documents, objects=S3ObjectStore(self.cloud.s3),
        )  # fmt: skip
        certified = certify(
            REQUEST, requests=requests, documents=documents, signer=MemorySigner(), namer=NAMER
        )
        assert (certified.notification["status"], certified.notification["outcome"]) == (
            "FAILED", "INCOMPLETE",
        )  # fmt: skip
        return dict(self.document("certificate.json")["certificate"])


@pytest.fixture
def eraser(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Eraser:
    return Eraser(cloud, capsys)


def _ingest(cloud: Cloud, capsys: pytest.CaptureFixture[str], body: bytes, seq: str) -> str:
    version = cloud.upload(KEY, body, "reviews", sequencer=seq)
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args("reviews", KEY, version, f"ing-{seq}"))
    return version


def _versions(cloud: Cloud, bucket: str, key: str) -> list[str]:
    listing = cloud.s3.list_object_versions(Bucket=bucket, Prefix=key)
    found = [*listing.get("Versions", []), *listing.get("DeleteMarkers", [])]
    return [v["VersionId"] for v in found if v["Key"] == key]


def test_a_subject_is_erased_from_the_raw_object_and_its_lake_file_goes(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the reviews CSV uploaded with metadata, a tag and a content type, and ingested
    cloud.register(REVIEWS)
    version = cloud.upload(
        KEY, CSV, "reviews", Metadata={"source": "crm"}, Tagging="team=data", ContentType="text/csv"
    )
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args("reviews", KEY, version))

    # When u1 is erased
    manifest = eraser.freeze("u1")
    summary = eraser("erase")

    # Then the manifest named u1's only lake file and the raw object (both versions)
    assert [o["key"] for o in manifest["objects"]] == [DAY1, KEY]  # by URL: lake, then raw
    assert [len(o["versions"]) for o in manifest["objects"]] == [1, 1]
    assert [o["expected_rows"] for o in manifest["objects"]] == [1, 1]
    # and the raw object is the same CSV without u1's line, as its only version
    assert summary == {
        "results": f"s3://{REPORTS}/erasure/{REQUEST}/results.json",
        "objects": 2, "rewritten": 1, "deleted": 1, "rows_removed": 2, "versions_purged": 2,
    }  # fmt: skip
    assert cloud.s3.get_object(Bucket=RAW, Key=KEY)["Body"].read() == CSV_WITHOUT_U1
    assert len(_versions(cloud, RAW, KEY)) == 1
    head = cloud.s3.head_object(Bucket=RAW, Key=KEY)
    assert head["Metadata"] == {
        "source": "crm",
        "lethe-producer": "erase",
        "lethe-erasure": REQUEST,
        "lethe-erased-rows": "1",
    }
    assert head["ContentType"] == "text/csv"
    assert cloud.s3.get_object_tagging(Bucket=RAW, Key=KEY)["TagSet"] == [
        {"Key": "team", "Value": "data"}
    ]
    # and the lake file that held only u1 is gone with every version; the other day is intact
    assert _versions(cloud, LAKE, DAY1) == []
    assert cloud.lake_parquet(DAY2).column("user_id").to_pylist() == ["u3"]
    results = eraser.document("results.json")
    raw_result = results["objects"][1]
    assert (raw_result["action"], raw_result["rows_before"], raw_result["rows_after"]) == (
        "rewritten", 3, 2,
    )  # fmt: skip
    assert raw_result["versions_purged"] == 1  # the version that held u1
    assert raw_result["versions_before"] == [
        {"version_id": version, "etag": raw_result["versions_before"][0]["etag"]}
    ]
    assert results["objects"][0]["action"] == "deleted"
    # and the writes ledger records the rewrite as the erase job's (run: the request id),
    # the version the object events path will know as Lethe's; the producer's upload is not
    ledger = DynamoWritesLedger(cloud.catalog)
    assert ledger.writer_of(RAW, KEY, raw_result["version_after"]["version_id"]) == "erase"
    assert ledger.written(RAW, KEY, raw_result["version_after"]["version_id"]) == Written(
        "erase", REQUEST
    )
    assert ledger.writer_of(RAW, KEY, version) is None
    assert ledger.intents(RAW, KEY) == []

    # When the erasure is verified
    verified = eraser("verify")

    # Then every object holds nothing of u1 and only the version erasure left
    assert verified == {
        "verification": f"s3://{REPORTS}/erasure/{REQUEST}/verification.json",
        "objects_verified": 2,
        "matching_rows_found": 0,
    }
    assert [c["ok"] for c in eraser.document("verification.json")["objects"]] == [True, True]


def test_the_tags_of_the_rewritten_version_are_kept(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    cloud.s3.put_object_tagging(
        Bucket=RAW, Key=KEY, Tagging={"TagSet": [{"Key": "team", "Value": "data eng"}]}
    )

    eraser.freeze("u3")
    eraser("erase")

    tags = cloud.s3.get_object_tagging(Bucket=RAW, Key=KEY)["TagSet"]
    assert tags == [{"Key": "team", "Value": "data eng"}]
    body = cloud.s3.get_object(Bucket=RAW, Key=KEY)["Body"].read()
    assert (
        body
        == b"user_id,stars,review_date,amount,comment\n"
        + CSV.split(b"\n", 1)[1].split(b"u3,", 1)[0]
    )  # the header, u1 and u2: the two lines of u3's record are gone


def test_an_overwritten_object_loses_the_older_version_that_held_the_subject(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given version 1 (u1, u2 rejected, u3) ingested, then version 2 without u2
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    v2_body = CSV.replace(b"u2,abc,2026-11-22,3.00,meh\n", b"")
    v2 = _ingest(cloud, capsys, v2_body, "2")

    # When u2 (now only in older versions: raw v1 and the removed quarantine file) is erased
    manifest = eraser.freeze("u2")
    eraser("erase")

    # Then the manifest reached those versions through the flagged entries
    by_key = {o["key"]: o for o in manifest["objects"]}
    assert set(by_key) == {KEY, QUARANTINE}
    assert [s["older_versions_only"] for s in by_key[KEY]["subjects"]] == [True]
    assert by_key[QUARANTINE]["state"] == "hidden"
    # and the current raw version is untouched, its older version gone
    assert _versions(cloud, RAW, KEY) == [v2]
    assert cloud.s3.get_object(Bucket=RAW, Key=KEY)["Body"].read() == v2_body
    # and the quarantine key, hidden by a delete marker, has no version left
    assert _versions(cloud, LAKE, QUARANTINE) == []
    actions = {
        r["object_url"].rsplit("/", 1)[1]: r["action"]
        for r in eraser.document("results.json")["objects"]
    }
    assert actions == {"batch-1.csv": "unchanged", f"{DIGEST}.jsonl": "purged"}
    assert eraser("verify")["matching_rows_found"] == 0


def test_a_rerun_converges_and_verifies(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    first = eraser("erase")
    after_first = cloud.current(RAW, KEY)

    again = eraser("erase")  # the job died after its writes and Step Functions retries it

    # the re-run starts from what the first run recorded of each object (its progress,
    # lethe_jobs.erase_progress): the raw object's row and the lake file that held only u1,
    # deleted with its row, count as they did
    assert again == first
    assert (again["rows_removed"], again["rewritten"], again["deleted"]) == (2, 1, 1)
    assert cloud.current(RAW, KEY) == after_first  # nothing rewritten twice
    assert eraser("verify")["objects_verified"] == 2


def test_a_manifest_that_is_not_the_approved_one_is_refused(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    before = cloud.current(RAW, KEY)

    with pytest.raises(ManifestMismatchError, match="not the report that was approved"):
        eraser("erase", sha256="0" * 64)
    assert cloud.current(RAW, KEY) == before


def test_a_subject_written_back_before_verify_is_erased_again(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    """A producer uploads u1's row again between the erase run and the verify run: the request
    covers u1 in that object, so the verify run erases it again (lethe_jobs.erase_again), checks
    it again and passes; results.json, the object's progress and verification.json say so."""
    # Given u1 erased
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    eraser("erase")
    first = eraser.document("results.json")
    erased = first["objects"][1]
    # and a producer uploading u1's row again before the verify run
    produced = cloud.s3.put_object(Bucket=RAW, Key=KEY, Body=CSV)["VersionId"]

    # When the erasure is verified
    verified = eraser("verify")

    # Then the raw object was erased again: u1's row is gone from every version
    assert (verified["objects_verified"], verified["objects_erased_again"]) == (2, 1)
    assert cloud.s3.get_object(Bucket=RAW, Key=KEY)["Body"].read() == CSV_WITHOUT_U1
    assert len(_versions(cloud, RAW, KEY)) == 1
    # and its result shows the second erasure: both runs' rows and purges, both runs' reads
    results = eraser.document("results.json")
    raw = results["objects"][1]
    assert (raw["action"], raw["rows_removed"], raw["attempts"]) == ("rewritten", 2, 2)
    assert raw["versions_purged"] == erased["versions_purged"] + 2  # erasure's and the producer's
    seen = [v["version_id"] for v in raw["versions_before"]]
    ours = erased["version_after"]["version_id"]
    assert seen == [erased["versions_before"][0]["version_id"], produced, ours]
    assert raw["deviations"][-1].startswith("erased again by the verify run (round 1): expected")
    assert results["objects"][0] == first["objects"][0]  # the lake file's: as the erase run's
    # and its progress document is that result
    progress = eraser.document(progress_name(raw["object_url"]))
    assert (progress["result"], progress["manifest_sha256"]) == (raw, eraser.sha256)
    # and verification.json records the second erasure and why
    checks = eraser.document("verification.json")["objects"]
    assert [(c["ok"], c["erased_again"]) for c in checks] == [(True, 0), (True, 1)]
    assert checks[1]["erased_again_because"] == [
        f"expected only the erased version, found {produced}, {ours}"
    ]


def test_a_producer_that_keeps_writing_still_fails_verification(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str], spark: SparkSession
) -> None:
    """The bound: a producer that writes the object again before every check (the test fault
    TEST_WRITE_BEFORE_CHECK) is erased again MAX_ERASE_AGAIN times, then verification fails and
    the request ends FAILED, as it always did (fail closed)."""
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    eraser("erase")
    url = f"s3://{RAW}/{KEY}"

    spark.sparkContext.setLocalProperty(TEST_WRITE_BEFORE_CHECK, url)
    try:
        with pytest.raises(VerificationFailedError, match="did not verify"):
            eraser("verify")
    finally:
        spark.sparkContext.setLocalProperty(TEST_WRITE_BEFORE_CHECK, None)  # type: ignore[arg-type]

    checks = eraser.document("verification.json")["objects"]
    assert [c["ok"] for c in checks] == [True, False]  # the lake file (first) is still gone
    assert checks[1]["erased_again"] == MAX_ERASE_AGAIN
    assert checks[1]["problem"].startswith("expected only the erased version, found")
    raw = eraser.document("results.json")["objects"][1]
    assert raw["attempts"] == 1 + MAX_ERASE_AGAIN
    assert b"u1," not in cloud.s3.get_object(Bucket=RAW, Key=KEY)["Body"].read()


def test_verification_accepts_a_later_erasure_of_the_same_object(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two requests touching one object (the soak): the other request's erasure rewrites the
    object after this one's and purges this one's version. Its rewrite, on record in the writes
    ledger as the other request's erase job's, is accepted; every version left still holds none
    of this request's subjects. The same metadata on a version the ledger does not know (a
    producer's forgery, or a copy) is a producer's version: not accepted."""
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    eraser("erase")
    ours = cloud.s3.get_object(Bucket=RAW, Key=KEY)
    body = ours["Body"].read()
    later = body.replace(b"u2,abc,2026-11-22,3.00,meh\n", b"")  # the other request's subject
    assert later != body
    metadata = {**ours["Metadata"], "lethe-producer": "erase", "lethe-erasure": "er-other"}
    written = cloud.s3.put_object(Bucket=RAW, Key=KEY, Body=later, Metadata=metadata)
    other = DynamoWritesLedger(cloud.catalog).writer(Writer.ERASE, "er-other")
    other.written(RAW, KEY, other.intend(RAW, KEY, 0), written["VersionId"])
    cloud.s3.delete_object(Bucket=RAW, Key=KEY, VersionId=ours["VersionId"])

    assert eraser("verify")["objects_verified"] == 2

    # the same claims, no ledger record: a producer's version, not accepted as a later
    # erasure: the verify run erases the object again (nothing of u1 in it: only the versions
    # under it go, the genuine later erasure's too)
    forged = cloud.s3.put_object(Bucket=RAW, Key=KEY, Body=later, Metadata=metadata)
    assert eraser("verify")["objects_erased_again"] == 1
    check = eraser.document("verification.json")["objects"][1]
    assert check["erased_again_because"] == [
        f"expected only the erased version, found {forged['VersionId']}, {written['VersionId']}"
    ]
    assert _versions(cloud, RAW, KEY) == [forged["VersionId"]]

    metadata["lethe-producer"] = "someone"  # a producer's version: not accepted either
    producer = cloud.s3.put_object(Bucket=RAW, Key=KEY, Body=later, Metadata=metadata)
    assert eraser("verify")["objects_erased_again"] == 1
    check = eraser.document("verification.json")["objects"][1]
    assert check["erased_again_because"] == [
        f"expected only the erased version, found {producer['VersionId']}, {forged['VersionId']}"
    ]


def test_the_job_refuses_what_the_request_record_does_not_approve(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whoever can start the erase job erases nothing the request's record does not approve:
    a hand-made manifest (with its own correct SHA-256), the approved manifest of a request
    that is not ERASING, or one without a recorded approval by someone other than the
    requester. Each is refused before anything is read from the lake (one Spark run: the
    ingest; the refusals start none)."""
    # Given u1's request approved and ERASING, its report frozen
    cloud.register(REVIEWS)
    _ingest(cloud, capsys, CSV, "1")
    eraser.freeze("u1")
    approved_url = f"s3://{REPORTS}/{report_key(REQUEST, 'manifest.json')}"
    approved = eraser.sha256
    # and a forged manifest naming u3 under the same request, with its own SHA-256
    forged_manifest = build_manifest(
        REQUEST, [h("u3")], 1, index=DynamoSubjectIndex(cloud.index),
        objects=S3ObjectStore(cloud.s3), now=datetime(2026, 11, 23, 12, tzinfo=UTC),
    )  # fmt: skip
    forged = cloud.pinned(forged_manifest).bytes()
    forged_key = report_key(REQUEST, "forged.json")
    cloud.s3.put_object(Bucket=REPORTS, Key=forged_key, Body=forged)
    before = (cloud.current(RAW, KEY), cloud.lake_keys(), sorted(cloud.entries()))

    def run(url: str, sha256: str, mode: str = "erase") -> None:
        eraser.runner(
            "--mode", mode, "--request-id", REQUEST, "--manifest", url,
            "--manifest-sha256", sha256, "--requests-table", REQUESTS,
            "--raw-bucket", RAW, "--lake-bucket", LAKE, "--reports-bucket", REPORTS,
            "--datasets-table", DATASETS, "--catalog-table", CATALOG,
            "--hash-key-secret", HASH_KEY_SECRET, "--correlation-id", f"erasure-{REQUEST}",
        )  # fmt: skip

    # When the job is handed the forged manifest and its SHA-256 (the record is ERASING)
    cloud.record_request(REQUEST, approved_url, approved)
    with pytest.raises(EraseNotAuthorisedError, match=f"is not request {REQUEST}'s report"):
        run(f"s3://{REPORTS}/{forged_key}", sha256_hex(forged))
    # ... the approved manifest with the forged one's SHA-256
    with pytest.raises(EraseNotAuthorisedError, match="not the one request"):
        run(approved_url, sha256_hex(forged))
    # ... the approved manifest of a request rejected (or cancelled), in either mode
    for status, mode in (("REJECTED", "erase"), ("REJECTED", "verify"), ("APPROVED", "erase")):
        cloud.record_request(REQUEST, approved_url, approved, status=status)
        with pytest.raises(EraseNotAuthorisedError, match=f"is {status}, not ERASING"):
            run(approved_url, approved, mode)
    # ... of a request ERASING whose approval is missing, or was given by its requester
    for approval in ({}, {"decision": "approve", "decided_by": "privacy@example.com",
                          "decided_at": "2026-11-23T12:30:00+00:00",
                          "approvers": ["privacy@example.com"]}):  # fmt: skip
        cloud.record_request(REQUEST, approved_url, approved, approval=approval)
        with pytest.raises(EraseNotAuthorisedError, match="no recorded approval"):
            run(approved_url, approved)
    # ... of a request that does not exist
    cloud.requests.delete_item(Key={"request_id": REQUEST})
    with pytest.raises(EraseNotAuthorisedError, match="no erasure request"):
        run(approved_url, approved)

    # Then nothing was touched: the raw object, the lake, the index, and no results written
    assert (cloud.current(RAW, KEY), cloud.lake_keys(), sorted(cloud.entries())) == before
    for name in ("results.json", "verification.json"):
        with pytest.raises(cloud.s3.exceptions.NoSuchKey):
            cloud.s3.get_object(Bucket=REPORTS, Key=report_key(REQUEST, name))
    assert "refused" in eraser.runner.logs
