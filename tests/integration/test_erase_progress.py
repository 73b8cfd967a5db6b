"""What the erase job records as it goes and how a later run starts from it
(lethe_jobs.erase_progress), and the verify run's bounded re-erasure of an object written after
the erase run (lethe_jobs.erase_again), against moto S3 and DynamoDB."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_again import MAX_ERASE_AGAIN, verify_or_erase_again
from lethe_jobs.erase_core import ConcurrentWritesError, erase_object
from lethe_jobs.erase_progress import EraseTask, record_progress, recorded_results
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.erasure.progress import progress_key
from lethe_shared.erasure.report import Manifest, ManifestObject, ObjectResult
from tests.integration.conftest import RAW
from tests.integration.test_erase_object import OBJECT_KEY, V1, _item, _settings

REQUEST = "er-test-0001"  # the request _settings() erases for
REPORTS = "lethe-test-reports"
SHA = "a" * 64
# a producer's upload after the erasure: the subject's row again, and a new one
PRODUCED = b'{"user": "gone", "n": 7}\n{"user": "new", "n": 8}\n'
PRODUCED_ERASED = b'{"user": "new", "n": 8}\n'


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    client = boto3.client("s3")
    client.create_bucket(Bucket=REPORTS)
    return client


@pytest.fixture
def ledger(lethe_tables: dict[str, Any]) -> DynamoWritesLedger:
    return DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])


def _store(s3: Any, ledger: DynamoWritesLedger) -> S3ObjectStore:
    """The erase job's store: every write recorded in the ledger as this request's."""
    return S3ObjectStore(s3, writes=ledger.writer(Writer.ERASE, REQUEST))


def _versions(s3: Any) -> list[str]:
    listing = s3.list_object_versions(Bucket=RAW, Prefix=OBJECT_KEY)
    found = [*listing.get("Versions", []), *listing.get("DeleteMarkers", [])]
    return [v["VersionId"] for v in found if v["Key"] == OBJECT_KEY]


def _body(s3: Any) -> bytes:
    return bytes(s3.get_object(Bucket=RAW, Key=OBJECT_KEY)["Body"].read())


def _erased(s3: Any, ledger: DynamoWritesLedger) -> tuple[ObjectResult, str]:
    """The object erased once (V1 -> V1_ERASED); the result and V1's version id."""
    original = str(s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)["VersionId"])
    result = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger)
    assert (result.action, result.rows_removed, result.versions_purged) == ("rewritten", 1, 1)
    return result, original


def test_a_key_as_the_earlier_run_left_it_is_that_result_untouched(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, _ = _erased(s3, ledger)
    versions = _versions(s3)

    again = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger, earlier=earlier)

    assert again == earlier  # the same rows, versions purged, attempts: a clean run's
    assert _versions(s3) == versions  # nothing written or purged


def test_a_key_deleted_by_the_earlier_run_stays_deleted_as_recorded(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=b'{"user": "gone", "n": 1}\n')
    earlier = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger)
    assert (earlier.action, earlier.version_after) == ("deleted", None)

    again = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger, earlier=earlier)

    assert again == earlier  # not "gone": what the earlier run did stays the object's result


def test_a_producer_write_after_the_earlier_run_is_erased_and_both_runs_count(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, original = _erased(s3, ledger)
    assert earlier.version_after is not None
    produced = str(s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=PRODUCED)["VersionId"])

    again = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger, earlier=earlier)

    assert _body(s3) == PRODUCED_ERASED
    assert len(_versions(s3)) == 1
    assert again.action == "rewritten"
    # the rows of both runs (1 + 1) and the versions both purged (V1; the earlier run's own
    # version and the producer's)
    assert (again.rows_removed, again.rows_before, again.rows_after) == (2, 3, 1)
    assert again.versions_purged == 1 + 2
    assert again.attempts == 2
    seen = [v.version_id for v in again.versions_before]
    assert seen[0] == original  # what the object held before this request touched it first
    assert set(seen) == {original, earlier.version_after.version_id, produced}


def test_a_producer_write_without_the_subject_only_loses_the_older_versions(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, _ = _erased(s3, ledger)
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=PRODUCED_ERASED)

    again = erase_object(_store(s3, ledger), _item(), _settings(), ledger=ledger, earlier=earlier)

    assert _body(s3) == PRODUCED_ERASED  # the producer's version kept as it is
    assert len(_versions(s3)) == 1
    assert (again.action, again.rows_removed, again.versions_purged) == ("rewritten", 1, 2)
    # the producer's version is what verification must now find
    assert again.version_after is not None
    assert again.version_after.version_id == _versions(s3)[0]


def test_progress_is_read_back_for_its_report_only(s3: Any) -> None:
    item = _item()
    result = ObjectResult(
        object_url=item.object_url, dataset_id=item.dataset_id, zone=item.zone,
        action="deleted", versions_before=(), version_after=None, rows_before=1,
        rows_removed=1, rows_after=0, versions_purged=1,
    )  # fmt: skip
    other: ManifestObject = item.model_copy(update={"key": "x", "object_url": f"s3://{RAW}/x"})
    manifest = Manifest(
        request_id=REQUEST, created_at="2026-11-23T12:00:00+00:00", subject_hashes=(),
        subject_count=1, objects=(item, other),
    )  # fmt: skip
    store = S3ObjectStore(s3)

    url = record_progress(
        store, REPORTS, request_id=REQUEST, manifest_sha256=SHA, result=result, lock=None
    )

    assert url == f"s3://{REPORTS}/{progress_key(REQUEST, item.object_url)}"
    assert OBJECT_KEY not in url  # the document is named by a hash of the URL
    assert recorded_results(store, REPORTS, manifest, SHA) == {item.object_url: result}
    assert recorded_results(store, REPORTS, manifest, "b" * 64) == {}  # another report's


def test_the_verify_run_erases_again_what_a_producer_wrote_after_the_erasure(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    # Given the object erased, then a producer's upload holding the subject's row again
    earlier, _ = _erased(s3, ledger)
    produced = str(s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=PRODUCED)["VersionId"])
    recorded: list[ObjectResult] = []

    # When the verify run checks it
    rechecked = verify_or_erase_again(
        _store(s3, ledger), EraseTask(item=_item(), earlier=earlier), _settings(), ledger,
        erase_object, record=recorded.append,
    )  # fmt: skip

    # Then it was erased again once, and verifies: the producer's other row kept
    check, result = rechecked.check, rechecked.result
    assert (check.ok, check.erased_again, check.matching_rows) == (True, 1, 0)
    assert check.erased_again_because == (
        f"expected only the erased version, found {produced}, "
        f"{earlier.version_after.version_id if earlier.version_after else ''}",
    )
    assert _body(s3) == PRODUCED_ERASED
    assert (result.rows_removed, result.attempts, result.versions_purged) == (2, 2, 3)
    assert result.deviations[-1].startswith("erased again by the verify run (round 1)")
    assert recorded == [result]  # its progress replaced


def test_a_producer_that_keeps_writing_still_fails_verification(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, _ = _erased(s3, ledger)
    written: list[str] = []

    def producer(item: ManifestObject) -> None:  # writes the subject's row before every check
        written.append(s3.put_object(Bucket=RAW, Key=item.key, Body=PRODUCED)["VersionId"])

    rechecked = verify_or_erase_again(
        _store(s3, ledger), EraseTask(item=_item(), earlier=earlier), _settings(), ledger,
        erase_object, before_check=producer,
    )  # fmt: skip

    check = rechecked.check
    assert not check.ok  # fail closed: the request ends FAILED
    assert check.erased_again == MAX_ERASE_AGAIN == len(written) - 1
    assert check.problem.startswith("expected only the erased version, found")
    assert rechecked.result.attempts == 1 + MAX_ERASE_AGAIN


def test_a_failure_erasing_again_cannot_fix_is_not_erased_again(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, _ = _erased(s3, ledger)
    wrong = earlier.model_copy(update={"rows_after": 5})  # the version holds 1 row, clean
    versions = _versions(s3)

    rechecked = verify_or_erase_again(
        _store(s3, ledger), EraseTask(item=_item(), earlier=wrong), _settings(), ledger,
        erase_object,
    )  # fmt: skip

    assert (rechecked.check.ok, rechecked.check.erased_again) == (False, 0)
    assert rechecked.check.problem == "0 matching row(s), 1 rows (expected 5)"
    assert rechecked.result == wrong
    assert _versions(s3) == versions


def test_an_object_that_cannot_be_erased_again_fails_saying_why(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    earlier, _ = _erased(s3, ledger)
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=PRODUCED)

    def relentless(*args: Any, **kwargs: Any) -> ObjectResult:
        raise ConcurrentWritesError("changed 5 times while it was being erased")

    rechecked = verify_or_erase_again(
        _store(s3, ledger), EraseTask(item=_item(), earlier=earlier), _settings(), ledger,
        relentless,
    )  # fmt: skip

    assert (rechecked.check.ok, rechecked.check.erased_again) == (False, 0)
    assert rechecked.check.problem.endswith("; erasing it again failed (ConcurrentWritesError)")
    assert rechecked.result == earlier
