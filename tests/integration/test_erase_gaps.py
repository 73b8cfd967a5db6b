"""One object erased against moto S3 (lethe_jobs.erase_core.erase_object) when not all of it can
be searched: the result names every gap (`not_searched`) with the version that holds it, and
checks the rows it matched against the index's count for the version the index described
(`rows_differ_from_index`), a check that does not trust the matcher. None is a plain
"unchanged". A raw key the report added (widened) whose current version cannot be read is a
gap (`ingestion_failed`) that the verify pass accepts; an object the index names still fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_core import erase_object
from lethe_jobs.erase_verify import verify_object
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.not_searched import unreadable_reason
from lethe_shared.aws.s3 import KeyState, S3ObjectStore, plain_etag
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.erasure.report import ManifestObject, SubjectRows
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.integration.conftest import RAW
from tests.integration.test_erase_object import KEY, OBJECT_KEY, _settings

GONE = hash_of_id(KEY, "gone")  # the subject _settings() erases
V1 = b'{"user": "gone", "n": 1}\n{"user": "stay", "n": 2}\n'


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    return boto3.client("s3")


def _item(*subjects: SubjectRows) -> ManifestObject:
    return ManifestObject(
        object_url=f"s3://{RAW}/{OBJECT_KEY}",
        bucket=RAW,
        key=OBJECT_KEY,
        dataset_id="events",
        zone=Zone.RAW,
        format="jsonl",
        state=KeyState.CURRENT,
        expected_rows=sum(s.rows for s in subjects),
        subjects=subjects,
        versions=(),
    )


def _put(s3: Any, body: bytes) -> tuple[str, str]:
    answer = s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=body)
    return str(answer["VersionId"]), plain_etag(answer["ETag"])


def _described(version: tuple[str, str], rows: int, *, flagged: bool = False) -> SubjectRows:
    return SubjectRows(
        subject_hash=GONE, rows=rows, older_versions_only=flagged,
        version_id=version[0], etag=version[1],
    )  # fmt: skip


def test_rows_that_differ_from_the_index_for_the_version_it_described_are_named(s3: Any) -> None:
    # Given the index counted 3 rows of the subject in the current version, which holds 1
    version = _put(s3, V1)

    result = erase_object(S3ObjectStore(s3), _item(_described(version, 3)), _settings())

    # Then the row found is erased, and the result says the index and erasure disagree
    assert (result.action, result.rows_removed) == ("rewritten", 1)
    (gap,) = result.not_searched
    assert (gap.reason, gap.version_id, gap.dataset_id, gap.count) == (
        "rows_differ_from_index", version[0], "events", 2,
    )  # fmt: skip
    assert gap.detail == (
        "the index counted 3 row(s) of 1 subject(s) in this version, erasure matched 1; "
        "1 subject(s) differ"
    )


def test_an_index_count_of_rows_erasure_does_not_find_is_incomplete_never_unchanged(
    s3: Any,
) -> None:
    version = _put(s3, b'{"user": "stay", "n": 2}\n')

    result = erase_object(S3ObjectStore(s3), _item(_described(version, 1)), _settings())

    assert (result.action, result.rows_removed) == ("incomplete", 0)
    assert [g.reason for g in result.not_searched] == ["rows_differ_from_index"]
    assert result.version_after is not None
    assert result.version_after.version_id == version[0]


def test_the_index_count_is_checked_only_for_the_version_it_described(s3: Any) -> None:
    # Given entries describing an older version, or flagged (rows in older versions only)
    older = _put(s3, V1 + V1)
    current = _put(s3, V1)
    item = _item(_described(older, 2), _described(current, 5, flagged=True))

    result = erase_object(S3ObjectStore(s3), item, _settings())

    # Then nothing is compared: the current version is not the one the index counted
    assert (result.action, result.rows_removed, result.not_searched) == ("rewritten", 1, ())


def test_a_matching_index_count_is_no_gap(s3: Any) -> None:
    version = _put(s3, V1)

    result = erase_object(S3ObjectStore(s3), _item(_described(version, 1)), _settings())

    assert (result.action, result.not_searched) == ("rewritten", ())


def test_an_unparseable_line_is_named_with_the_version_that_keeps_it(s3: Any) -> None:
    version = _put(s3, V1 + b"not json at all\n")

    result = erase_object(S3ObjectStore(s3), _item(_described(version, 1)), _settings())

    assert (result.action, result.rows_removed, result.rows_after) == ("rewritten", 1, 2)
    (gap,) = result.not_searched
    assert result.version_after is not None
    assert (gap.reason, gap.count, gap.version_id) == (
        "unparseable_records", 1, result.version_after.version_id,
    )  # fmt: skip
    body = s3.get_object(Bucket=RAW, Key=OBJECT_KEY)["Body"].read()
    assert body == b'{"user": "stay", "n": 2}\nnot json at all\n'


def test_an_object_without_the_subject_column_is_incomplete_and_its_older_versions_go(
    s3: Any,
) -> None:
    # Given the index described a version with the subject; the producer then wrote one
    # without the subject column
    described = _put(s3, V1)
    _put(s3, b'{"person": "gone", "n": 1}\n')

    result = erase_object(S3ObjectStore(s3), _item(_described(described, 1)), _settings())

    # Then the current version is named (not "unchanged"), and the older version still goes
    assert (result.action, result.rows_removed, result.versions_purged) == ("incomplete", 0, 1)
    assert [(g.reason, g.count) for g in result.not_searched] == [("missing_subject_column", 1)]


def test_a_rerun_after_the_rewrite_still_names_the_difference_the_dead_run_found(
    s3: Any, lethe_tables: dict[str, Any]
) -> None:
    # Given a run that found the index's count wrong, wrote its version (recorded in the writes
    # ledger as this request's, as the job's store does) and died before its results (its
    # version no longer is the one the index described)
    version = _put(s3, V1)
    item = _item(_described(version, 3))
    ledger = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    writes = ledger.writer(Writer.ERASE, "er-test-0001")

    def dies() -> None:
        raise RuntimeError("the worker died")

    with pytest.raises(RuntimeError, match="died"):
        erase_object(S3ObjectStore(s3, writes=writes), item, _settings(), after_rewrite=dies)
    head = s3.head_object(Bucket=RAW, Key=OBJECT_KEY)
    assert head["Metadata"]["lethe-index-difference"].startswith(
        f"er-test-0001;{version[0]};2;the index counted 3 row(s)"
    )

    # When the job runs again
    result = erase_object(S3ObjectStore(s3, writes=writes), item, _settings(), ledger=ledger)

    # Then the row the dead run removed still counts (the ledger says the version is its own),
    # and so does the difference it found
    assert (result.action, result.rows_removed) == ("rewritten", 1)
    (gap,) = result.not_searched
    assert (gap.reason, gap.version_id, gap.count) == ("rows_differ_from_index", version[0], 2)
    assert gap.detail.endswith("(found by an earlier run of this erasure)")


def test_another_requests_difference_copied_with_the_metadata_is_not_this_ones(s3: Any) -> None:
    s3.put_object(
        Bucket=RAW, Key=OBJECT_KEY, Body=V1,
        Metadata={
            "lethe-producer": "erase", "lethe-erasure": "er-other", "lethe-erased-rows": "1",
            "lethe-index-difference": "er-other;v0;4;the index counted 5 row(s)",
        },
    )  # fmt: skip

    result = erase_object(S3ObjectStore(s3), _item(), _settings())

    assert (result.action, result.not_searched) == ("rewritten", ())


# ------------------------------------------------- a widened raw key whose version is unreadable

MALFORMED = b"\x1f\x8b\x08\x00 this is no gzip stream, u-gone,1"  # gzip magic, then garbage


def test_a_widened_upload_that_cannot_be_read_is_a_gap_and_its_older_versions_go(
    s3: Any,
) -> None:
    # Given a raw key the report added (its ingestion FAILED, the index never knew it): an
    # older version holding the subject, and a current one that is not what it claims to be
    older = _put(s3, V1)
    current = _put(s3, MALFORMED)
    item = _item().model_copy(update={"widened_from": "FAILED", "expected_rows": 0})

    result = erase_object(S3ObjectStore(s3), item, _settings())

    # Then the run goes on: the current version is named, kept as it is (nothing written),
    # and the older version is deleted
    assert (result.action, result.rows_removed, result.versions_purged) == ("incomplete", 0, 1)
    assert result.version_after is not None
    assert result.version_after.version_id == current[0]
    (gap,) = result.not_searched
    assert (gap.reason, gap.version_id, gap.dataset_id, gap.count) == (
        "ingestion_failed", current[0], "events", 0,
    )  # fmt: skip
    assert gap.detail.startswith("the raw version could not be read: not a valid gzip stream; ")
    assert "FAILED upload" in gap.detail
    assert f"lethe objects reingest --dataset events --key <key> --version-id {current[0]}" in (
        gap.detail
    )
    assert "u-gone" not in gap.detail
    listing = s3.list_object_versions(Bucket=RAW, Prefix=OBJECT_KEY)["Versions"]
    assert [v["VersionId"] for v in listing] == [current[0]]
    assert s3.get_object(Bucket=RAW, Key=OBJECT_KEY)["Body"].read() == MALFORMED
    assert older[0] not in {v["VersionId"] for v in listing}
    # and the verify pass accepts it, unread, for a widened key only
    widened = replace(_settings(), widened=frozenset({item.object_url}))
    check = verify_object(S3ObjectStore(s3), result, widened)
    assert (check.ok, check.matching_rows, check.rows, check.versions_left) == (True, 0, None, 1)
    with pytest.raises(UnreadableObjectError):
        verify_object(S3ObjectStore(s3), result, _settings())


def test_an_object_the_index_names_that_cannot_be_read_still_fails_the_run(s3: Any) -> None:
    _put(s3, MALFORMED)

    with pytest.raises(UnreadableObjectError, match="gzip"):
        erase_object(S3ObjectStore(s3), _item(), _settings())

    assert len(s3.list_object_versions(Bucket=RAW, Prefix=OBJECT_KEY)["Versions"]) == 1


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("unreadable raw object: not a valid gzip stream: Not a gzipped file (b'u-')",
         "not a valid gzip stream"),
        ("unreadable raw object: the header repeats column(s) alice@example.com",
         "a CSV header that repeats column names"),
        ("unreadable raw object: not valid CSV (line 7): field larger than field limit",
         "not valid CSV (line 7)"),
        ("unreadable raw object: not UTF-8 text: 'utf-8' codec can't decode byte 0xff",
         "not UTF-8 text"),
        ("something new that quotes alice@example.com", "its content could not be parsed"),
    ],
)  # fmt: skip
def test_why_a_version_cannot_be_read_is_said_without_values(message: str, said: str) -> None:
    assert unreadable_reason(UnreadableObjectError(message)) == said
    assert unreadable_reason(UnreadableFileError(message.removeprefix("unreadable raw object: ")))
    assert "alice" not in unreadable_reason(UnreadableFileError(message))
