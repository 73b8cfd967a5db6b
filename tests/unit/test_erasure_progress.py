"""Per-object progress of an erase run (lethe_shared.erasure.progress): a result written as each
object is done is read back only for the report it was done under and the object it is filed
under, and its name never holds the object's URL."""

from __future__ import annotations

import pytest

from lethe_shared.catalog.zones import Zone
from lethe_shared.erasure.progress import ObjectProgress, done_so_far, progress_key
from lethe_shared.erasure.report import Manifest, ManifestObject, ObjectResult

pytestmark = pytest.mark.lambda_runtime

URLS = ("s3://lake/reviews/user_id=u-777/a.parquet", "s3://lake/reviews/user_id=u-888/b.parquet")


def manifest() -> Manifest:
    objects = tuple(
        ManifestObject(
            object_url=url, bucket="lake", key=url.split("/", 3)[3], dataset_id="reviews",
            zone=Zone.LAKE, format="parquet", state="current", expected_rows=1, subjects=(),
            versions=(),
        )
        for url in URLS
    )  # fmt: skip
    return Manifest(
        request_id="er-1", created_at="2026-11-27T00:00:00+00:00", subject_hashes=("h",),
        subject_count=1, objects=objects,
    )  # fmt: skip


def result(url: str) -> ObjectResult:
    return ObjectResult(
        object_url=url, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
        versions_before=(), version_after=None, rows_before=2, rows_removed=1, rows_after=1,
        versions_purged=0,
    )  # fmt: skip


def progress(url: str, *, sha: str = "sha-approved", filed_as: str | None = None) -> bytes:
    recorded = ObjectProgress(
        request_id="er-1", manifest_sha256=sha, recorded_at="2026-11-27T00:00:01+00:00",
        result=result(filed_as or url),
    )  # fmt: skip
    return recorded.model_dump_json().encode()


def test_progress_names_hold_no_part_of_the_url() -> None:
    key = progress_key("er-1", URLS[0])
    assert key.startswith("erasure/er-1/progress/")
    assert key.endswith(".json")
    assert "u-777" not in key
    assert "reviews" not in key
    assert progress_key("er-1", URLS[0]) != progress_key("er-1", URLS[1])


def test_only_results_of_this_report_and_this_object_count() -> None:
    docs = {
        progress_key("er-1", URLS[0]): progress(URLS[0]),
        # a result of another report (an earlier, different manifest) is not this run's
        progress_key("er-1", URLS[1]): progress(URLS[1], sha="sha-other"),
    }
    done = done_so_far(manifest(), "sha-approved", docs.get)
    assert [r.object_url for r in done] == [URLS[0]]

    docs[progress_key("er-1", URLS[1])] = progress(URLS[1], filed_as=URLS[0])
    assert [r.object_url for r in done_so_far(manifest(), "sha-approved", docs.get)] == [URLS[0]]

    docs[progress_key("er-1", URLS[1])] = b"{not json"
    assert [r.object_url for r in done_so_far(manifest(), "sha-approved", docs.get)] == [URLS[0]]

    docs[progress_key("er-1", URLS[1])] = progress(URLS[1])
    assert [r.object_url for r in done_so_far(manifest(), "sha-approved", docs.get)] == list(URLS)
