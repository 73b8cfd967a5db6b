"""The erase job (`spark_jobs/erase.py` main) fails closed: what it could not search is in
results.json, per object and version (`not_searched`), never a plain "unchanged": a JSON Lines
line that is not JSON, an object version without the subject column, rows that differ from the
index's count for the version the index described. The verify run still proves what was erased.
A clean erasure names nothing."""

from __future__ import annotations

from typing import Any

import pytest
from boto3.dynamodb.conditions import Key

from ingest import main as ingest_main
from tests.spark.cloud import GLUE_ARGS, RAW, Cloud, JobRunner, h, ingest_args
from tests.spark.test_erase_job import CSV, REVIEWS, Eraser

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
