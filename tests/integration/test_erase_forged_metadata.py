"""The erase job trusts the writes ledger, never a version's metadata, to say that an erasure
wrote it (lethe_jobs.erase_ledger), against moto S3 and DynamoDB.

A producer (or a copy: `aws s3 cp` copies metadata) can put `lethe-producer: erase`,
`lethe-erasure: <request id>` and `lethe-erased-rows: <n>` on any upload. Such a version is a
producer's: verification judges it like one (a version newer than erasure's own fails), and a
re-run credits no rows from it. The same versions recorded in the ledger by the erase job are
accepted and credited, so each test shows the ledger, not the headers, decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_core import erase_object
from lethe_jobs.erase_verify import verify_object
from lethe_shared.aws.s3 import (
    ERASED_ROWS_METADATA,
    ERASURE_METADATA,
    PRODUCER_METADATA,
    S3ObjectStore,
)
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.erasure.report import ObjectResult
from lethe_shared.index.maintenance import ERASE_PRODUCER
from tests.integration.conftest import RAW
from tests.integration.test_erase_object import OBJECT_KEY, V1, V1_ERASED, _item, _settings

REQUEST = "er-test-0001"  # the request _settings() erases for
OTHER = "er-other-0002"


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    return boto3.client("s3")


@pytest.fixture
def ledger(lethe_tables: dict[str, Any]) -> DynamoWritesLedger:
    return DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])


def _claims(request_id: str, rows: int = 1) -> dict[str, str]:
    """The metadata the erase job writes on its versions, here set by anyone."""
    return {
        PRODUCER_METADATA: ERASE_PRODUCER,
        ERASURE_METADATA: request_id,
        ERASED_ROWS_METADATA: str(rows),
    }


def _record(ledger: DynamoWritesLedger, name: Writer, run_id: str, version_id: str) -> None:
    """`name`'s run `run_id` recorded writing this version (as its job's store does)."""
    writes = ledger.writer(name, run_id)
    writes.written(RAW, OBJECT_KEY, writes.intend(RAW, OBJECT_KEY, 0), version_id)


def _erased(s3: Any, ledger: DynamoWritesLedger) -> ObjectResult:
    """This request erased the object: its version recorded in the ledger, as the job does."""
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    store = S3ObjectStore(s3, writes=ledger.writer(Writer.ERASE, REQUEST))
    result = erase_object(store, _item(), _settings(), ledger=ledger)
    assert (result.action, result.rows_removed) == ("rewritten", 1)
    return result


def _later_version(s3: Any, result: ObjectResult, metadata: dict[str, str]) -> str:
    """A version written after the erasure (holding none of the subject's rows, no more rows
    than erasure left), which then purges erasure's own, as another erasure would."""
    assert result.version_after is not None
    later = s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1_ERASED, Metadata=metadata)
    s3.delete_object(Bucket=RAW, Key=OBJECT_KEY, VersionId=result.version_after.version_id)
    return str(later["VersionId"])


def test_a_later_erasure_on_record_in_the_ledger_is_accepted(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    result = _erased(s3, ledger)
    later = _later_version(s3, result, _claims(OTHER))
    _record(ledger, Writer.ERASE, OTHER, later)

    check = verify_object(S3ObjectStore(s3), result, _settings(), ledger)

    assert (check.ok, check.matching_rows, check.versions_left) == (True, 0, 1)


@pytest.mark.parametrize(
    "recorded",
    [
        pytest.param(None, id="not-in-the-ledger"),
        pytest.param((Writer.INGEST, "ingest-run-1"), id="recorded-as-the-ingest-jobs"),
        pytest.param((Writer.ERASE, REQUEST), id="recorded-as-this-requests-own"),
    ],
)
def test_a_version_claiming_another_erasure_is_not_accepted_unless_the_ledger_says_so(
    s3: Any, ledger: DynamoWritesLedger, recorded: tuple[Writer, str] | None
) -> None:
    # Given a version newer than erasure's own whose metadata says another request's erasure
    # wrote it, and a ledger that does not record it as another request's erase job's
    result = _erased(s3, ledger)
    later = _later_version(s3, result, _claims(OTHER))
    if recorded is not None:
        _record(ledger, recorded[0], recorded[1], later)

    # When the verify pass checks the object (with the ledger, and without one)
    checks = [
        verify_object(S3ObjectStore(s3), result, _settings(), ledger),
        verify_object(S3ObjectStore(s3), result, _settings(), None),
    ]

    # Then it is judged as any producer's version newer than erasure's own: the object fails
    for check in checks:
        assert not check.ok
        assert check.problem == f"expected only the erased version, found {later}"


def test_a_forged_version_beside_a_genuine_later_erasure_still_fails(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    result = _erased(s3, ledger)
    genuine = _later_version(s3, result, _claims(OTHER))
    _record(ledger, Writer.ERASE, OTHER, genuine)
    forged = s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1_ERASED, Metadata=_claims(OTHER))

    check = verify_object(S3ObjectStore(s3), result, _settings(), ledger)

    assert not check.ok
    assert check.problem.endswith(f"found {forged['VersionId']}, {genuine}")


def test_forged_metadata_of_this_request_credits_no_rows(
    s3: Any, ledger: DynamoWritesLedger
) -> None:
    # Given a producer's version claiming that this very request removed 5 rows from it (as
    # the version an earlier run of it wrote would), unknown to the ledger
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1_ERASED, Metadata=_claims(REQUEST, rows=5))

    # When the erasure reads it (nothing of the subject in it)
    result = erase_object(S3ObjectStore(s3), _item(), _settings(), ledger=ledger)

    # Then no row is credited: nothing was removed, and the older version is purged as always
    assert (result.action, result.rows_removed, result.rows_before) == ("unchanged", 0, 1)
    assert result.versions_purged == 1


@pytest.mark.parametrize(
    "run_id",
    [REQUEST, f"erasure-{REQUEST}"],
    ids=["the-request-id", "a-record-from-before-the-request-id-the-execution-name"],
)
def test_the_same_version_on_record_as_this_requests_credits_its_rows(
    s3: Any, ledger: DynamoWritesLedger, run_id: str
) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    ours = s3.put_object(
        Bucket=RAW, Key=OBJECT_KEY, Body=V1_ERASED, Metadata=_claims(REQUEST, rows=5)
    )
    _record(ledger, Writer.ERASE, run_id, str(ours["VersionId"]))

    result = erase_object(S3ObjectStore(s3), _item(), _settings(), ledger=ledger)

    assert (result.action, result.rows_removed, result.rows_before) == ("rewritten", 5, 6)
