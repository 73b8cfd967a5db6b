"""One object erased against moto S3 (lethe_jobs.erase_core.erase_object) when not all of it can
be searched: the result names every gap (`not_searched`) with the version that holds it, and
checks the rows it matched against the index's count for the version the index described
(`rows_differ_from_index`), a check that does not trust the matcher. None is a plain
"unchanged"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_core import erase_object
from lethe_shared.aws.s3 import KeyState, S3ObjectStore, plain_etag
from lethe_shared.catalog.object_catalog import Zone
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
    s3: Any,
) -> None:
    # Given a run that found the index's count wrong, wrote its version and died before its
    # results (its version no longer is the one the index described)
    version = _put(s3, V1)
    item = _item(_described(version, 3))

    def dies() -> None:
        raise RuntimeError("the worker died")

    with pytest.raises(RuntimeError, match="died"):
        erase_object(S3ObjectStore(s3), item, _settings(), after_rewrite=dies)
    head = s3.head_object(Bucket=RAW, Key=OBJECT_KEY)
    assert head["Metadata"]["lethe-index-difference"].startswith(
        f"er-test-0001;{version[0]};2;the index counted 3 row(s)"
    )

    # When the job runs again
    result = erase_object(S3ObjectStore(s3), item, _settings())

    # Then the row the dead run removed still counts, and so does the difference it found
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
