"""The erase job (`spark_jobs/erase.py` main) fails closed: what it could not search is in
results.json, per object and version (`not_searched`), never a plain "unchanged": a JSON Lines
line that is not JSON, an object version without the subject column, rows that differ from the
index's count for the version the index described. The verify run still proves what was erased.
A clean erasure names nothing. A raw upload the report added because its ingestion FAILED (a
widened key) that the job cannot read is named `ingestion_failed`, and the rest of the request
is erased: the request ends INCOMPLETE, not FAILED for the whole run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from boto3.dynamodb.conditions import Key

from ingest import main as ingest_main
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure import scope
from lethe_shared.erasure.report import build_manifest
from lethe_shared.erasure.requests import (
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.index.subject_index import DynamoSubjectIndex
from tests.fakes import MemoryErasureRequests
from tests.spark.cloud import (
    GLUE_ARGS,
    HASH_KEY,
    RAW,
    Cloud,
    JobRunner,
    h,
    ingest_args,
)
from tests.spark.test_erase_job import CSV, CSV_WITHOUT_U1, NAMER, REQUEST, REVIEWS, Eraser

EVENTS = {
    "dataset_id": "events",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [{"name": "user_id", "type": "string"}, {"name": "n", "type": "int"}],
}
EVENTS_KEY = "events/2026/11/e.jsonl"
EVENTS_BODY = (
    b'{"user_id": "u-gone", "n": 1}\nuser_id=u-gone n=2 (not JSON)\n{"user_id": "u-stay", "n": 3}\n'
)
REVIEWS_KEY = "reviews/2026/11/batch-1.csv"


@pytest.fixture
def eraser(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Eraser:
    return Eraser(cloud, capsys)


def _ingest(cloud: Cloud, capsys: Any, key: str, body: bytes, dataset: str, seq: str) -> str:
    version = cloud.upload(key, body, dataset, sequencer=seq)
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args(dataset, key, version, f"ing-{seq}"))
    return version


def _results_by_key(eraser: Eraser) -> dict[str, dict[str, Any]]:
    return {r["object_url"].split("/", 3)[3]: r for r in eraser.document("results.json")["objects"]}


def test_a_json_lines_line_that_is_not_json_is_named_not_searched(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an ingested JSON Lines object whose line 2 is not JSON
    cloud.register(EVENTS)
    _ingest(cloud, capsys, EVENTS_KEY, EVENTS_BODY, "events", "1")

    # When u-gone is erased
    eraser.freeze("u-gone")
    eraser("erase")

    # Then its row goes, the unparsed line stays, and the raw object's result names it with
    # the version that holds it now
    body = cloud.s3.get_object(Bucket=RAW, Key=EVENTS_KEY)["Body"].read()
    assert body == EVENTS_BODY.split(b"\n", 1)[1]
    raw = _results_by_key(eraser)[EVENTS_KEY]
    assert (raw["action"], raw["rows_removed"]) == ("rewritten", 1)
    (gap,) = raw["not_searched"]
    assert (gap["reason"], gap["count"], gap["dataset_id"]) == ("unparseable_records", 1, "events")
    assert gap["version_id"] == raw["version_after"]["version_id"]
    assert "u-gone" not in gap["detail"]
    # and the verification still proves the erasure of what was found
    assert eraser("verify")["matching_rows_found"] == 0


def test_a_version_without_the_subject_column_is_incomplete_not_unchanged(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given u-gone indexed in version 1; a producer then wrote version 2 with the column renamed
    cloud.register(EVENTS)
    _ingest(cloud, capsys, EVENTS_KEY, b'{"user_id": "u-gone", "n": 1}\n', "events", "1")
    renamed = b'{"person": "u-gone", "n": 1}\n{"person": "u-stay", "n": 2}\n'
    current = cloud.s3.put_object(Bucket=RAW, Key=EVENTS_KEY, Body=renamed)["VersionId"]

    eraser.freeze("u-gone")
    eraser("erase")

    # Then the current version is kept and named, and version 1 (which held u-gone) is gone
    raw = _results_by_key(eraser)[EVENTS_KEY]
    assert (raw["action"], raw["rows_removed"], raw["versions_purged"]) == ("incomplete", 0, 1)
    reasons = [(g["reason"], g["version_id"], g["count"]) for g in raw["not_searched"]]
    assert reasons == [("missing_subject_column", current, 2)]
    assert cloud.s3.get_object(Bucket=RAW, Key=EVENTS_KEY)["Body"].read() == renamed
    assert eraser("verify")["matching_rows_found"] == 0


def test_rows_that_differ_from_the_index_count_are_named_other_objects_name_nothing(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the reviews CSV ingested, and an index that says u1 has 3 rows in the raw version
    # it describes (it has 1)
    cloud.register(REVIEWS)
    version = _ingest(cloud, capsys, REVIEWS_KEY, CSV, "reviews", "1")
    url = f"s3://{RAW}/{REVIEWS_KEY}"
    (entry,) = cloud.index.query(
        KeyConditionExpression=Key("subject_hash").eq(h("u1")) & Key("object_url").eq(url)
    )["Items"]
    assert (entry["version_id"], entry["rows"]) == (version, 1)
    cloud.index.put_item(Item={**entry, "rows": 3})

    # When u1 is erased
    eraser.freeze("u1")
    eraser("erase")

    # Then u1's row goes, and the raw object's result names the difference (counts only)
    results = _results_by_key(eraser)
    raw = results.pop(REVIEWS_KEY)
    assert raw["rows_removed"] == 1
    (gap,) = raw["not_searched"]
    assert (gap["reason"], gap["version_id"], gap["count"]) == (
        "rows_differ_from_index", version, 2,
    )  # fmt: skip
    assert gap["detail"] == (
        "the index counted 3 row(s) of 1 subject(s) in this version, erasure matched 1; "
        "1 subject(s) differ"
    )
    # and the lake file, whose count agreed, names nothing
    assert [(r["action"], r["not_searched"]) for r in results.values()] == [("deleted", [])]


# --------------------------------------------- widened raw uploads the erase job cannot read

FAILED_CSV = "reviews/2026/11/failed.csv"
MALFORMED_CSV = b"user_id,user_id,stars\nu1,u1,5\n"  # the header repeats a column
FAILED_JSONL = "events/2026/11/failed.jsonl"
MALFORMED_JSONL = b"\x1f\x8b\x08\x00not gzip at all {'user_id': 'u1'}\n"  # gzip magic, no stream


def _failed(cloud: Cloud, key: str, body: bytes, dataset: str, seq: str) -> str:
    """An upload whose ingestion FAILED: catalogued, never indexed."""
    version = cloud.upload(key, body, dataset, sequencer=seq)
    cloud.catalog.update_item(
        Key={"object_url": f"s3://{RAW}/{key}", "version_id": version},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": "FAILED"},
    )
    return version


def test_a_widened_upload_that_cannot_be_read_is_named_and_the_rest_is_erased(
    cloud: Cloud, eraser: Eraser, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the reviews CSV ingested (u1 indexed in its raw object and lake file), and two
    # uploads whose ingestion FAILED: a CSV whose older version holds u1 and whose current
    # version is malformed, and a JSON Lines file that is not the gzip stream it claims to be
    cloud.register(REVIEWS)
    cloud.register(EVENTS)
    _ingest(cloud, capsys, REVIEWS_KEY, CSV, "reviews", "1")
    older = _failed(cloud, FAILED_CSV, b"user_id,stars\nu1,3\n", "reviews", "2")
    bad_csv = _failed(cloud, FAILED_CSV, MALFORMED_CSV, "reviews", "3")
    bad_jsonl = _failed(cloud, FAILED_JSONL, MALFORMED_JSONL, "events", "4")
    # and the request for u1, whose report adds (widens to) both failed keys
    requests = MemoryErasureRequests()
    body = parse_request_body({"subject_ids": ["u1"], "reason": "t", "requested_by": "dpo@x.org"})
    subjects = hash_subjects(body, HASH_KEY, [])
    record, _ = requests.create(new_request(REQUEST, body, subjects, now=datetime.now(UTC)))
    assert record.subject_hashes == (h("u1"),)
    manifest = scope.widen(
        build_manifest(
            REQUEST, [h("u1")], 1, index=DynamoSubjectIndex(cloud.index),
            objects=S3ObjectStore(cloud.s3), now=datetime.now(UTC),
        ),
        record, catalog=DynamoObjectCatalog(cloud.catalog),
        registry=DynamoDatasetRegistry(cloud.datasets), objects=S3ObjectStore(cloud.s3),
        raw_bucket=RAW,
    )  # fmt: skip
    widened = {o.key: o.widened_from for o in manifest.objects if o.widened_from}
    assert widened == {FAILED_CSV: "FAILED", FAILED_JSONL: "FAILED"}
    eraser.store(manifest)

    # When the erase job runs, and its verify run
    eraser("erase")
    verified = eraser("verify")

    # Then the indexed raw object is erased as always
    assert cloud.s3.get_object(Bucket=RAW, Key=REVIEWS_KEY)["Body"].read() == CSV_WITHOUT_U1
    results = _results_by_key(eraser)
    assert (results[REVIEWS_KEY]["action"], results[REVIEWS_KEY]["not_searched"]) == (
        "rewritten", [],
    )  # fmt: skip
    # and each malformed upload is a gap, left as it is, its older versions deleted
    for key, version, content in (
        (FAILED_CSV, bad_csv, MALFORMED_CSV), (FAILED_JSONL, bad_jsonl, MALFORMED_JSONL)
    ):  # fmt: skip
        result = results[key]
        assert (result["action"], result["version_after"]["version_id"]) == ("incomplete", version)
        (gap,) = result["not_searched"]
        assert (gap["reason"], gap["version_id"]) == ("ingestion_failed", version)
        assert gap["detail"].startswith("the raw version could not be read: ")
        assert "u1" not in gap["detail"]  # no value read from the file
        assert cloud.s3.get_object(Bucket=RAW, Key=key)["Body"].read() == content
    (csv_gap,) = results[FAILED_CSV]["not_searched"]
    assert "a CSV header that repeats column names" in csv_gap["detail"]
    assert results[FAILED_CSV]["versions_purged"] == 1  # the older version, which held u1
    assert older not in _versions_of(cloud, FAILED_CSV)
    assert verified["matching_rows_found"] == 0
    checks = eraser.document("verification.json")["objects"]
    assert all(c["ok"] for c in checks)
    assert len(checks) == len(results)  # the unreadable ones included

    # And the request, certified, is FAILED with outcome INCOMPLETE naming both uploads
    certificate = eraser.certify_incomplete(requests)
    # in the manifest's order (by object URL)
    assert [(g["key"], g["reason"]) for g in certificate["not_searched"]] == [
        (NAMER.key(FAILED_JSONL), "ingestion_failed"), (NAMER.key(FAILED_CSV), "ingestion_failed"),
    ]  # fmt: skip


def _versions_of(cloud: Cloud, key: str) -> list[str]:
    listing = cloud.s3.list_object_versions(Bucket=RAW, Prefix=key)
    return [v["VersionId"] for v in listing.get("Versions", []) if v["Key"] == key]
