"""The erase job killed part-way, then run again with the same manifest (what Step Functions'
Retry does after a job run dies): the re-run converges.

Three raw CSVs are ingested (one batch); u1 is in each of them and in four of their lake files,
one of which holds only u1. The erase job runs with the fault `TEST_KILL_AFTER_REWRITES`: the
Python worker of its task (all seven objects share one task, in manifest order) SIGKILLs itself
right after its Nth conditional write of a new version, before that object's older versions are
purged; on a local session a task is not retried, so the run fails as a dying job does. Then the
same manifest is erased again and verified. Checked against a plain computation made before the
erasure (each object's rows without u1's): every object holds exactly those rows, the re-run
wrote a new version only for the objects the killed run had not rewritten (one new version per
object in all), no row of another subject is lost anywhere, and verification passes.

What the killed run recorded (lethe_jobs.erase_progress): a progress document for each object
it finished before the kill, none for the object it was erasing when it died nor for those after
it. The re-run starts from that record: its results.json is the one a single clean run gives
(each object's action, rows and versions purged), and every object's progress document ends as
its result there.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from ingest import main as ingest_main
from lethe_jobs.erase_core import TEST_KILL_AFTER_REWRITES
from lethe_shared.erasure.progress import PROGRESS_DIR, progress_key
from lethe_shared.erasure.report import report_key
from tests.spark.cloud import GLUE_ARGS, LAKE, RAW, REPORTS, Cloud, JobRunner, batch_args
from tests.spark.test_erase_job import REQUEST, REVIEWS, Eraser

HEADER = "user_id,stars,review_date,amount,comment\n"
BATCHES = {
    "reviews/2026/11/batch-a.csv": [
        "u1,5,2026-11-22,12.50,a-one",
        "u2,4,2026-11-22,3.00,a-two",
        "u3,3,2026-11-23,7.25,a-three",
    ],
    "reviews/2026/11/batch-b.csv": [
        "u2,2,2026-11-22,1.00,b-two",
        "u1,1,2026-11-23,2.00,b-one",
        "u4,4,2026-11-23,4.00,b-four",
        "u1,5,2026-11-22,9.99,b-one-again",
    ],
    "reviews/2026/11/batch-c.csv": [
        "u1,3,2026-11-24,5.00,c-one",
        "u5,5,2026-11-22,6.00,c-five",
    ],
}
ERASED = "u1"
REWRITES = 6  # the three raw objects and three lake files that keep other rows
DELETED = 1  # the lake file of 2026-11-24 held only u1


def _csv(lines: list[str]) -> bytes:
    return (HEADER + "".join(line + "\n" for line in lines)).encode()


@pytest.fixture
def no_fault(spark: SparkSession) -> Iterator[None]:
    yield
    spark.sparkContext.setLocalProperty(TEST_KILL_AFTER_REWRITES, None)  # type: ignore[arg-type]


def _rows(cloud: Cloud, bucket: str, key: str, version: str | None = None) -> list[dict[str, Any]]:
    """An object's rows as dicts (CSV in raw, Parquet in the lake), in stored order."""
    extra = {"VersionId": version} if version else {}
    body = cloud.s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()
    if bucket == RAW:
        return list(csv.DictReader(io.StringIO(body.decode())))
    return list(pq.read_table(io.BytesIO(body)).to_pylist())


def _versions(cloud: Cloud, bucket: str, key: str) -> list[str]:
    listing = cloud.s3.list_object_versions(Bucket=bucket, Prefix=key)
    found = [*listing.get("Versions", []), *listing.get("DeleteMarkers", [])]
    return [v["VersionId"] for v in found if v["Key"] == key]


def _progress(cloud: Cloud) -> dict[str, dict[str, Any]]:
    """The request's progress documents by the URL of their object, each checked to be filed
    under that URL's name and this request."""
    listing = cloud.s3.list_objects_v2(Bucket=REPORTS, Prefix=report_key(REQUEST, PROGRESS_DIR))
    found = {}
    for item in listing.get("Contents", []):
        document = json.loads(cloud.s3.get_object(Bucket=REPORTS, Key=item["Key"])["Body"].read())
        url = document["result"]["object_url"]
        assert item["Key"] == progress_key(REQUEST, url)
        assert document["request_id"] == REQUEST
        found[url] = document
    return found


def _every_object(cloud: Cloud) -> list[tuple[str, str]]:
    return [(RAW, k) for k in cloud.keys(RAW)] + [(LAKE, k) for k in cloud.keys(LAKE)]


@pytest.mark.parametrize("kill_after", [1, 3, REWRITES])
def test_a_job_killed_after_some_rewrites_converges_when_run_again(
    cloud: Cloud,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
    no_fault: None,
    kill_after: int,
) -> None:
    # Given three raw CSVs ingested in one batch, and a frozen manifest for u1
    cloud.register(REVIEWS)
    batch = [("reviews", key, cloud.upload(key, _csv(lines), "reviews", sequencer=str(n)))
             for n, (key, lines) in enumerate(BATCHES.items(), start=1)]  # fmt: skip
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*batch_args(batch, "ing-faults"))
    eraser = Eraser(cloud, capsys)
    manifest = eraser.freeze(ERASED)
    targets = [(o["bucket"], o["key"]) for o in manifest["objects"]]
    assert len(targets) == REWRITES + DELETED
    # and the plain computation of what every object must hold afterwards
    before = {obj: _rows(cloud, *obj) for obj in _every_object(cloud)}
    expected = {obj: [r for r in rows if r["user_id"] != ERASED] for obj, rows in before.items()}
    versions_before = {obj: set(_versions(cloud, *obj)) for obj in targets}
    assert sum(r["user_id"] == ERASED for rows in before.values() for r in rows) == 8  # 4 + 4

    # When the erase job's worker is SIGKILLed right after its Nth rewrite
    spark.sparkContext.setLocalProperty(TEST_KILL_AFTER_REWRITES, str(kill_after))
    with pytest.raises(Py4JJavaError, match="Python worker exited unexpectedly"):
        eraser("erase")
    spark.sparkContext.setLocalProperty(TEST_KILL_AFTER_REWRITES, None)  # type: ignore[arg-type]

    # Then it died part-way: exactly N objects got a new version, no results were written
    after_kill = {obj: set(_versions(cloud, *obj)) for obj in targets}
    written_by_kill = {obj: after_kill[obj] - versions_before[obj] for obj in targets}
    assert sum(len(new) for new in written_by_kill.values()) == kill_after
    assert all(len(new) <= 1 for new in written_by_kill.values())
    results_key = report_key(REQUEST, "results.json")
    assert "Contents" not in cloud.s3.list_objects_v2(Bucket=REPORTS, Prefix=results_key)
    # and it recorded each object it finished (in manifest order, one task), and only those:
    # not the one it was erasing when it died (its new version written, the older not purged)
    urls = [f"s3://{bucket}/{key}" for bucket, key in targets]
    dying = max(n for n, obj in enumerate(targets) if written_by_kill[obj])
    recorded = _progress(cloud)
    assert set(recorded) == set(urls[:dying])
    for url, document in recorded.items():
        obj = targets[urls.index(url)]
        assert document["manifest_sha256"] == eraser.sha256
        assert (document["result"]["action"], document["result"]["rows_removed"]) == (
            "deleted" if not expected[obj] else "rewritten",
            sum(r["user_id"] == ERASED for r in before[obj]),
        )

    # When the same manifest is erased again, then verified
    summary = eraser("erase")
    verified = eraser("verify")

    # Then every object holds exactly its rows without u1, in one version; the lake file that
    # held only u1 is gone with every version; objects outside the manifest are untouched
    for obj, rows in expected.items():
        if not rows:
            assert _versions(cloud, *obj) == [], obj
            continue
        assert _rows(cloud, *obj) == rows, obj
    for obj in set(before) - set(targets):
        assert len(_versions(cloud, *obj)) == 1, obj
    assert [len(_versions(cloud, *obj)) for obj in targets].count(1) == REWRITES
    # and each rewritten object got one new version in all: the killed run's where it wrote one
    # (the re-run found it clean, purged the older ones and credited the killed run's rows), the
    # re-run's otherwise
    results = {r["object_url"]: r for r in eraser.document("results.json")["objects"]}
    rerun_writes = 0
    for bucket, key in targets:
        result = results[f"s3://{bucket}/{key}"]
        final = set(_versions(cloud, bucket, key))
        # what a single clean run gives: the rows it held, removed and left, and each version
        # it had before purged (the killed run's purge counted where it did it)
        held = sum(r["user_id"] == ERASED for r in before[(bucket, key)])
        clean = (len(before[(bucket, key)]), held, len(expected[(bucket, key)]))
        assert (result["rows_before"], result["rows_removed"], result["rows_after"]) == clean
        assert result["versions_purged"] == len(versions_before[(bucket, key)]), key
        if not expected[(bucket, key)]:  # deleted by the killed run or by the re-run
            # "deleted" either way: the re-run takes the killed run's record of it
            assert (final, result["action"]) == (set(), "deleted")
            continue
        assert len(final) == 1
        assert not final & versions_before[(bucket, key)]
        # the rows of u1 the object held count as this request's removal either way: the
        # killed run's record, or its version's lethe-erased-rows (the object it died on)
        assert (result["action"], result["rows_removed"]) == ("rewritten", held), key
        if written_by_kill[(bucket, key)]:
            assert final == written_by_kill[(bucket, key)]
        else:
            rerun_writes += 1
    assert rerun_writes == REWRITES - kill_after
    # and no row of another subject was lost anywhere
    others_before = sorted(
        (r["user_id"], r["comment"])
        for rows in before.values()
        for r in rows
        if r["user_id"] != ERASED
    )
    others_after = sorted(
        (r["user_id"], r["comment"]) for obj in _every_object(cloud) for r in _rows(cloud, *obj)
    )
    assert others_after == others_before
    # and the totals are a clean run's: 8 rows of u1, the one version each object had
    assert summary == {
        "results": f"s3://{REPORTS}/{results_key}", "objects": REWRITES + DELETED,
        "rewritten": REWRITES, "deleted": DELETED, "rows_removed": 8,
        "versions_purged": sum(len(v) for v in versions_before.values()),
    }  # fmt: skip
    # and every object's progress document is now its result in results.json
    recorded = _progress(cloud)
    assert {url: d["result"] for url, d in recorded.items()} == results
    assert {d["manifest_sha256"] for d in recorded.values()} == {eraser.sha256}
    # and the verify run found every object as a clean run leaves it, erasing nothing again
    assert verified == {
        "verification": f"s3://{REPORTS}/{report_key(REQUEST, 'verification.json')}",
        "objects_verified": REWRITES + DELETED, "matching_rows_found": 0,
    }  # fmt: skip
    checks = {c["object_url"]: c for c in eraser.document("verification.json")["objects"]}
    for bucket, key in targets:
        check = checks[f"s3://{bucket}/{key}"]
        left = expected[(bucket, key)]
        assert (check["ok"], check["erased_again"], check["rows"]) == (
            True, 0, len(left) if left else None,
        )  # fmt: skip
