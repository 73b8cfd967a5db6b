"""Issue 19 (item 5): erasure documents locked by their writers, against moto's S3.

What moto 5.2 enforces, and is tested here: a PUT with Object Lock headers needs a checksum
and a bucket with Object Lock; a locked version cannot be deleted (governance mode: unless the
caller sends x-amz-bypass-governance-retention); a PUT to the same key makes a new version and
the old one stays, locked. What moto does not enforce, and is pinned here so a change shows:
it lets PutObjectRetention shorten a retention (AWS refuses that in GOVERNANCE mode without
s3:BypassGovernanceRetention, which no Lethe role holds: tests/unit/test_evidence.py, and in
COMPLIANCE mode always), it checks no IAM permission at all (so the bypass header works for
anyone here), it applies no lifecycle rule, and it refuses PutObjectLockConfiguration on a
bucket that holds objects (AWS allows it on an existing versioned bucket).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.erasure.evidence import EvidenceLock, put_arguments
from lethe_shared.erasure.workflow import S3Documents

pytestmark = pytest.mark.integration

REPORTS = "lethe-local-reports-123456789012-us-east-1"
KEY = "erasure/er-20261127T100000Z-0a1b2c3d/results.json"


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=REPORTS, ObjectLockEnabledForBucket=True)
    return client


def _versions(s3: Any, key: str) -> list[dict[str, Any]]:
    return list(s3.list_object_versions(Bucket=REPORTS, Prefix=key).get("Versions", []))


def test_the_erase_jobs_rewrite_is_a_new_version_and_the_old_one_stays_locked(s3: Any) -> None:
    store, lock = S3ObjectStore(s3), EvidenceLock(days=30, mode="GOVERNANCE")
    first = store.put_bytes(
        REPORTS, KEY, b'{"run":1}', content_type="application/json",
        extra=put_arguments(KEY, lock),
    )  # fmt: skip
    store.put_bytes(  # a re-run of the erase job
        REPORTS, KEY, b'{"run":2}', content_type="application/json",
        extra=put_arguments(KEY, lock),
    )  # fmt: skip

    versions = _versions(s3, KEY)
    assert len(versions) == 2
    assert store.read_bytes(REPORTS, KEY) == b'{"run":2}'
    assert store.read_bytes(REPORTS, KEY, first.version_id) == b'{"run":1}'
    for version in versions:
        head = s3.head_object(Bucket=REPORTS, Key=KEY, VersionId=version["VersionId"])
        assert head["ObjectLockMode"] == "GOVERNANCE"
        left = head["ObjectLockRetainUntilDate"] - datetime.now(UTC)
        assert timedelta(days=29) < left <= timedelta(days=30)
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=REPORTS, Key=KEY, VersionId=first.version_id)
    answer = s3.delete_objects(  # the batch delete too
        Bucket=REPORTS, Delete={"Objects": [{"Key": KEY, "VersionId": first.version_id}]}
    )
    assert [e["Code"] for e in answer.get("Errors", [])] == ["AccessDenied"]
    assert not answer.get("Deleted")
    assert len(_versions(s3, KEY)) == 2


def test_a_compliance_mode_version_cannot_be_deleted_even_with_the_bypass_header(s3: Any) -> None:
    documents = S3Documents(s3, REPORTS, lock=EvidenceLock(days=1, mode="COMPLIANCE"))
    documents.put(KEY, b"{}", "application/json")
    version = _versions(s3, KEY)[0]["VersionId"]

    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=REPORTS, Key=KEY, VersionId=version, BypassGovernanceRetention=True)


def test_deleting_the_current_key_only_hides_it_behind_a_marker(s3: Any) -> None:
    """A plain DELETE of a locked key (no version) is allowed on AWS and in moto: it adds a
    delete marker; the locked version stays, and verify reports the document missing."""
    documents = S3Documents(s3, REPORTS, lock=EvidenceLock(days=1))
    documents.put(KEY, b"{}", "application/json")

    s3.delete_object(Bucket=REPORTS, Key=KEY)

    assert documents.get(KEY) is None
    assert len(_versions(s3, KEY)) == 1


def test_a_locked_put_needs_a_bucket_with_object_lock(s3: Any) -> None:
    s3.create_bucket(Bucket="lethe-unlocked-reports")
    documents = S3Documents(s3, "lethe-unlocked-reports", lock=EvidenceLock(days=1))
    with pytest.raises(ClientError, match="InvalidRequest"):
        documents.put(KEY, b"{}", "application/json")


def test_a_locked_put_without_a_checksum_is_refused(s3: Any) -> None:
    """Why evidence.put_arguments asks for a SHA-256 checksum (S3, and moto, refuse a PUT with
    Object Lock headers and no Content-MD5 or x-amz-sdk-checksum-algorithm)."""
    arguments = put_arguments(KEY, EvidenceLock(days=1), None)
    del arguments["ChecksumAlgorithm"]
    plain = boto3.client(
        "s3", region_name="us-east-1",
        config=boto3.session.Config(request_checksum_calculation="when_required"),
    )  # fmt: skip
    with pytest.raises(ClientError, match="Content-MD5 or x-amz-sdk-checksum-algorithm header"):
        plain.put_object(Bucket=REPORTS, Key=KEY, Body=b"{}", **arguments)


def test_moto_does_not_refuse_a_shortened_retention(s3: Any) -> None:
    """A gap of the local cloud, pinned: on AWS this PutObjectRetention is refused
    (GOVERNANCE without s3:BypassGovernanceRetention; COMPLIANCE always)."""
    documents = S3Documents(s3, REPORTS, lock=EvidenceLock(days=30))
    documents.put(KEY, b"{}", "application/json")
    version = _versions(s3, KEY)[0]["VersionId"]

    s3.put_object_retention(
        Bucket=REPORTS, Key=KEY, VersionId=version,
        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": datetime.now(UTC) + timedelta(1)},
    )  # fmt: skip

    head = s3.head_object(Bucket=REPORTS, Key=KEY, VersionId=version)
    assert head["ObjectLockRetainUntilDate"] - datetime.now(UTC) < timedelta(days=2)


def test_the_erase_job_writes_its_documents_locked_as_its_arguments_say(s3: Any) -> None:
    """The erase job's `_write` (results.json, verification.json) with the arguments the
    erasure state machine passes: each run's document a new, locked version."""
    from lethe_jobs.erase_core import _write  # noqa: PLC0415
    from lethe_jobs.erase_settings import parse_args  # noqa: PLC0415

    names = (
        "request-id", "manifest", "manifest-sha256", "requests-table", "raw-bucket",
        "lake-bucket", "datasets-table", "catalog-table", "hash-key-secret", "correlation-id",
    )  # fmt: skip
    argv = [token for name in names for token in (f"--{name}", "er-20261127T100000Z-0a1b2c3d")]
    argv += ["--reports-bucket", REPORTS, "--evidence-retention-days", "3"]
    argv += ["--evidence-lock-mode", "COMPLIANCE"]
    args, _ = parse_args(argv)
    store = S3ObjectStore(s3)

    url = _write(store, args, "verification.json", {"run": 1})
    _write(store, args, "verification.json", {"run": 2})

    key = "erasure/er-20261127T100000Z-0a1b2c3d/verification.json"
    assert url == f"s3://{REPORTS}/{key}"
    versions = _versions(s3, key)
    assert len(versions) == 2
    for version in versions:
        head = s3.head_object(Bucket=REPORTS, Key=key, VersionId=version["VersionId"])
        assert head["ObjectLockMode"] == "COMPLIANCE"
        left = head["ObjectLockRetainUntilDate"] - datetime.now(UTC)
        assert timedelta(days=2) < left <= timedelta(days=3)
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.delete_object(Bucket=REPORTS, Key=key, VersionId=version["VersionId"])


def test_each_objects_progress_is_written_locked_as_the_job_settings_say(s3: Any) -> None:
    """The erase job's per-object progress documents (lethe_jobs.erase_progress) are erasure
    documents like the others: each one a new, locked version."""
    from lethe_jobs.erase_progress import record_progress  # noqa: PLC0415
    from lethe_shared.catalog.zones import Zone  # noqa: PLC0415
    from lethe_shared.erasure.progress import progress_key  # noqa: PLC0415
    from lethe_shared.erasure.report import ObjectResult  # noqa: PLC0415

    request_id, url = "er-20261127T100000Z-0a1b2c3d", "s3://lake/reviews/user_id=u-9/a.parquet"
    result = ObjectResult(
        object_url=url, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
        versions_before=(), version_after=None, rows_before=2, rows_removed=1, rows_after=1,
        versions_purged=0,
    )  # fmt: skip
    lock = EvidenceLock(days=5, mode="GOVERNANCE")
    for _ in range(2):  # a re-run records the object again
        record_progress(
            S3ObjectStore(s3), REPORTS, request_id=request_id, manifest_sha256="a" * 64,
            result=result, lock=lock,
        )  # fmt: skip

    key = progress_key(request_id, url)
    versions = _versions(s3, key)
    assert len(versions) == 2
    for version in versions:
        head = s3.head_object(Bucket=REPORTS, Key=key, VersionId=version["VersionId"])
        assert head["ObjectLockMode"] == "GOVERNANCE"
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.delete_object(Bucket=REPORTS, Key=key, VersionId=version["VersionId"])
