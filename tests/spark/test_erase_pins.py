"""Pinned matching in the erase job (`spark_jobs/erase.py` main, both modes; lethe_shared.erasure.
pins): when the frozen report's pins no longer hold, because the dataset's subject column
changed, the subject hash key was rotated, or an object's index entry was computed before
entries were pinned, the object is refused: not read, rewritten or purged (its versions and rows
still there), named in results.json with why and what to do. Everything else of the request is
erased and verified; the verify run does not fail; the index keeps the refused objects'
entries (the subject stays findable); the request ends FAILED, outcome INCOMPLETE, naming them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Key

from ingest import main as ingest_main
from lethe_shared.erasure.report import Manifest
from lethe_shared.erasure.requests import (
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.subject_hashing.keys import key_fingerprint
from tests.fakes import MemoryErasureRequests
from tests.spark.cloud import (
    GLUE_ARGS,
    HASH_KEY,
    HASH_KEY_SECRET,
    LAKE,
    RAW,
    REGION,
    Cloud,
    JobRunner,
    h,
    ingest_args,
)
from tests.spark.test_erase_job import CSV, DAY1, KEY, NAMER, REQUEST, REVIEWS, Eraser

EVENTS = {
    "dataset_id": "events",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [{"name": "user_id", "type": "string"}, {"name": "n", "type": "int"}],
}
EVENTS_KEY = "events/2026/11/e.jsonl"
EVENTS_BODY = b'{"user_id": "u1", "n": 1}\n{"user_id": "u9", "n": 2}\n'
ROTATED = b"ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba9876543210ab"


@pytest.fixture
def eraser(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Eraser:
    # Given the reviews CSV (u1 in its raw object and the lake file DAY1) and an events file
    # (u1 in its raw object) ingested, each indexed with its dataset's pins
    cloud.register(REVIEWS)
    cloud.register(EVENTS)
    for dataset, key, body, seq in (
        ("reviews", KEY, CSV, "1"),
        ("events", EVENTS_KEY, EVENTS_BODY, "2"),
    ):
        version = cloud.upload(key, body, dataset, sequencer=seq)
        JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args(dataset, key, version, f"i-{seq}"))
    return Eraser(cloud, capsys)


def _snapshot(
    cloud: Cloud, *objects: tuple[str, str]
) -> dict[tuple[str, str], tuple[list[str], bytes]]:
    """Every version id and the current bytes of `objects` (default: the reviews objects)."""
    found = {}
    for bucket, key in objects or ((RAW, KEY), (LAKE, DAY1)):
        listing = cloud.s3.list_object_versions(Bucket=bucket, Prefix=key)
        versions = [v["VersionId"] for v in listing.get("Versions", []) if v["Key"] == key]
        found[(bucket, key)] = (
            versions,
            cloud.s3.get_object(Bucket=bucket, Key=key)["Body"].read(),
        )
    return found


def _results(eraser: Eraser) -> dict[str, dict[str, Any]]:
    return {r["object_url"].split("/", 3)[3]: r for r in eraser.document("results.json")["objects"]}


def _events(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The results of the events objects: its raw object and its lake file."""
    found = {k: r for k, r in results.items() if k.startswith("events/")}
    assert len(found) == 2
    return found


def _refused(result: dict[str, Any], reason: str) -> dict[str, Any]:
    assert (result["action"], result["rows_removed"], result["versions_purged"]) == (
        "refused",
        0,
        0,
    )
    assert (result["versions_before"], result["version_after"]) == ([], None)
    (gap,) = result["not_searched"]
    assert (gap["reason"], gap["version_id"]) == (reason, "")
    assert "u1" not in gap["detail"]
    assert h("u1") not in gap["detail"]
    assert "then file a new request" in gap["detail"]
    return dict(gap)


def _certify(cloud: Cloud, eraser: Eraser) -> dict[str, Any]:
    """The index update and the certificate step, as the workflow runs them after verify."""
    requests = MemoryErasureRequests()
    body = parse_request_body({"subject_ids": ["u1"], "reason": "t", "requested_by": "dpo@x.org"})
    requests.create(
        new_request(REQUEST, body, hash_subjects(body, HASH_KEY, []), now=datetime.now(UTC))
    )
    return eraser.certify_incomplete(requests)


def test_a_subject_column_changed_after_the_report_leaves_the_dataset_untouched_and_named(
    cloud: Cloud, eraser: Eraser
) -> None:
    # Given u1's report frozen (pinned to reviews generation 1), then reviews' subject column
    # changed (a PUT: generation 2)
    eraser.freeze("u1")
    before = _snapshot(cloud)
    cloud.register({**REVIEWS, "subject_columns": ["comment"]})

    # When the erase job runs, and its verify run
    summary = eraser("erase")
    verified = eraser("verify")

    # Then the reviews objects are untouched: every version, the same bytes
    assert _snapshot(cloud) == before
    results = _results(eraser)
    for key in (KEY, DAY1):
        gap = _refused(results[key], "definition_changed")
        assert "report: generation 1" in gap["detail"]
        assert "now: generation 2" in gap["detail"]
    # and the events objects (raw and lake), whose pins hold, are erased and verified
    events = _events(results)
    assert [(r["action"], r["rows_removed"]) for r in events.values()] == [("rewritten", 1)] * 2
    erased = cloud.s3.get_object(Bucket=RAW, Key=EVENTS_KEY)["Body"].read()
    assert erased == EVENTS_BODY.split(b"\n", 1)[1]
    assert (summary["objects"], summary["rows_removed"], summary["versions_purged"]) == (4, 2, 2)
    assert verified["matching_rows_found"] == 0
    checks = eraser.document("verification.json")["objects"]
    assert [c["ok"] for c in checks] == [True] * 4

    # And the index keeps u1's entries of the refused objects (nothing else of u1)
    certificate = _certify(cloud, eraser)
    assert sorted(e[1].split("/", 3)[3] for e in cloud.lookup(h("u1"))) == sorted([DAY1, KEY])
    # and the certificate names them once, as refused, and lists only the erased object
    # (by their shown keys)
    assert [(g["key"], g["reason"]) for g in certificate["not_searched"]] == [
        (NAMER.key(DAY1), "definition_changed"), (NAMER.key(KEY), "definition_changed"),
    ]  # fmt: skip
    assert sorted(o["key"] for o in certificate["objects"]) == sorted(NAMER.key(k) for k in events)


def test_a_rotated_hash_key_refuses_every_object(cloud: Cloud, eraser: Eraser) -> None:
    # Given u1's report frozen with the key its id was hashed with; then the key was rotated
    eraser.freeze("u1")
    before = _snapshot(cloud)
    events_before = cloud.s3.get_object(Bucket=RAW, Key=EVENTS_KEY)["Body"].read()
    secrets = boto3.client("secretsmanager", region_name=REGION)
    secrets.put_secret_value(SecretId=HASH_KEY_SECRET, SecretString=ROTATED.decode())

    # When the erase job runs (with the rotated key), and its verify run
    summary = eraser("erase")
    verified = eraser("verify")

    # Then nothing is touched, and every object is named with both key fingerprints
    assert _snapshot(cloud) == before
    assert cloud.s3.get_object(Bucket=RAW, Key=EVENTS_KEY)["Body"].read() == events_before
    results = _results(eraser)
    for key in (KEY, DAY1, *_events(results)):
        gap = _refused(results[key], "hash_key_changed")
        assert key_fingerprint(HASH_KEY) in gap["detail"]
        assert key_fingerprint(ROTATED) in gap["detail"]
    assert (summary["rows_removed"], summary["versions_purged"]) == (0, 0)
    assert verified["matching_rows_found"] == 0
    assert len(cloud.lookup(h("u1"))) == 4
    certificate = _certify(cloud, eraser)
    assert len(cloud.lookup(h("u1"))) == 4  # every entry kept by the index update
    assert {g["reason"] for g in certificate["not_searched"]} == {"hash_key_changed"}


def test_an_entry_written_before_pins_refuses_its_object_only(cloud: Cloud, eraser: Eraser) -> None:
    # Given u1's entry of the raw reviews object as an entry written before entries were pinned
    url = f"s3://{RAW}/{KEY}"
    (item,) = cloud.index.query(
        KeyConditionExpression=Key("subject_hash").eq(h("u1")) & Key("object_url").eq(url)
    )["Items"]
    assert item["pin"]  # ingestion pins it (one attribute: "<matching>/<key>")
    cloud.index.put_item(Item={k: v for k, v in item.items() if k != "pin"})
    eraser.freeze("u1")
    raw_before = _snapshot(cloud, (RAW, KEY))

    # When the erase job runs, and its verify run
    eraser("erase")
    verified = eraser("verify")

    # Then that object is untouched and named index_stale; the lake file and events are erased
    assert _snapshot(cloud, (RAW, KEY)) == raw_before
    results = _results(eraser)
    gap = _refused(results[KEY], "index_stale")
    assert "1 written before entries were pinned" in gap["detail"]
    assert results[DAY1]["action"] == "deleted"
    assert [r["action"] for r in _events(results).values()] == ["rewritten"] * 2
    assert verified["matching_rows_found"] == 0
    certificate = _certify(cloud, eraser)
    assert [e[1] for e in cloud.lookup(h("u1"))] == [url]  # the refused object's entry stays
    assert [(g["key"], g["reason"]) for g in certificate["not_searched"]] == [
        (NAMER.key(KEY), "index_stale")
    ]


def test_a_report_without_pins_refuses_every_object(cloud: Cloud, eraser: Eraser) -> None:
    # Given u1's report as one made before reports were pinned
    manifest = eraser.freeze("u1")
    assert manifest["key_fingerprint"]
    before = _snapshot(cloud)
    eraser.store(
        Manifest.model_validate({**manifest, "key_fingerprint": "", "dataset_pins": []}),
        pin=False,
    )

    # When the erase job runs
    eraser("erase")

    # Then nothing is touched and every object is named report_unpinned
    assert _snapshot(cloud) == before
    results = _results(eraser)
    assert {k: r["not_searched"][0]["reason"] for k, r in results.items()} == dict.fromkeys(
        (KEY, DAY1, *_events(results)), "report_unpinned"
    )
    assert eraser("verify")["matching_rows_found"] == 0
