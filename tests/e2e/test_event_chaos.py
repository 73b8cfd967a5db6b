"""Event chaos on the running local cloud (issue 11, item 3): the real S3 events of a set of
uploads are delivered again, duplicated, out of order and late, through EventBridge and straight
into the object events queue; two versions of one key land within the same second. Afterwards the
catalog, the lake and the index must equal the truth, found by a full scan: every stored raw
version is catalogued, the lake holds exactly the rows of the current version of every key (no
row twice, none of an older version), and the index reconcile job (a full scan of the dataset's
objects) finds no drift.

The dataset (`chaos-reviews`, the reviews sample's document under another id) and its subjects
(`ch-*`) are this module's own."""

from __future__ import annotations

import csv
import io
import json
import random
import time
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.localcloud_support import (
    LocalCloud,
    capture_queue,
    catalog_items,
    cli,
    quiet,
    sample_dataset_as,
    wait_for,
)

DATASET = "chaos-reviews"
TERMINAL = {"INGESTED", "QUARANTINED", "SUPERSEDED", "FAILED"}
CAPTURE = "e2e-chaos-capture"
SEED = 20261124
CLI_TIMEOUT = 900.0


def _csv(rows: list[tuple[str, str, int, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["user_id", "review_date", "stars", "text"])
    writer.writerows(rows)
    return out.getvalue().encode()


def _rows(key_number: int, version: int) -> list[tuple[str, str, int, str]]:
    """The rows of one upload: three subjects, two dates, text that says which version."""
    return [
        (
            f"ch-{key_number}{n}",
            f"2026-11-{20 + n % 2}",
            1 + (n + version) % 5,
            f"k{key_number}v{version}",
        )
        for n in range(3)
    ]


UPLOADS: list[tuple[str, int]] = [  # (key, version number), in upload order
    *((f"{DATASET}/2026/11/part-{k}.csv", 1) for k in range(5)),
    (f"{DATASET}/2026/11/part-0.csv", 2),  # the same second as its version 1
    (f"{DATASET}/2026/11/part-1.csv", 2),
    (f"{DATASET}/2026/11/part-1.csv", 3),
]


def _capture_s3_events(cloud: LocalCloud) -> str:
    """A second target for the raw bucket's S3 events: copies of what the object events rule
    delivers, to deliver again."""
    url, arn = capture_queue(cloud, CAPTURE)
    pattern = {
        "source": ["aws.s3"],
        "detail": {
            "bucket": {"name": [cloud.outputs["RawBucketName"]]},
            "object": {"key": [{"prefix": f"{DATASET}/"}]},
        },
    }
    events = cloud.client("events")
    events.put_rule(Name=CAPTURE, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=CAPTURE, Targets=[{"Id": "capture", "Arn": arn}])
    return url


def _drain(cloud: LocalCloud, url: str, expected: int) -> list[dict[str, Any]]:
    sqs, found = cloud.client("sqs"), list[dict[str, Any]]()
    deadline = time.monotonic() + 60
    while len(found) < expected and time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for message in got.get("Messages", []):
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


@pytest.fixture(scope="module")
def chaos(registered: LocalCloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cloud = registered
    path = sample_dataset_as("reviews", DATASET, tmp_path_factory.mktemp("chaos"))
    assert cli(cloud, "datasets", "put", str(path), timeout=CLI_TIMEOUT).returncode == 0
    capture = _capture_s3_events(cloud)

    s3, raw = cloud.client("s3"), cloud.outputs["RawBucketName"]
    versions: dict[str, list[str]] = {}
    current: dict[str, int] = {}
    for key, version in UPLOADS:
        number = int(key.rsplit("-", 1)[1].split(".")[0])
        put = s3.put_object(Bucket=raw, Key=key, Body=_csv(_rows(number, version)))
        versions.setdefault(key, []).append(str(put["VersionId"]))
        current[key] = version
    originals = _drain(cloud, capture, expected=len(UPLOADS))
    assert len(originals) == len(UPLOADS), "every upload's S3 event was captured"

    # Deliver again: every event twice more, shuffled; one copy through EventBridge (as its
    # redelivery would), one straight into the queue (as SQS redelivery would), a third of the
    # copies late (up to 20 s: after the newer versions were ingested)
    rng = random.Random(SEED)
    copies = [(event, channel) for event in originals for channel in ("events", "sqs")]
    rng.shuffle(copies)
    sqs, events = cloud.client("sqs"), cloud.client("events")
    for event, channel in copies:
        if channel == "events":
            events.put_events(
                Entries=[
                    {
                        "Source": event["source"],
                        "DetailType": event["detail-type"],
                        "Detail": json.dumps(event["detail"]),
                        "EventBusName": "default",
                    }
                ]
            )
        else:
            delay = rng.choice([0, 0, 5, 12, 20])
            sqs.send_message(
                QueueUrl=cloud.outputs["ObjectEventsQueueUrl"],
                MessageBody=json.dumps(event),
                DelaySeconds=delay,
            )

    def settled() -> bool:
        items = [i for key in versions for i in catalog_items(cloud, key)]
        done = len(items) == len(UPLOADS) and all(i["status"] in TERMINAL for i in items)
        return done and quiet(cloud)  # the queue is empty, no ingestion runs

    wait_for(settled, timeout=900, what="the chaos to settle")
    time.sleep(5)  # a last late copy, had one been missed by the queue's counters
    wait_for(settled, timeout=300, what="the chaos to settle again")
    return {"cloud": cloud, "versions": versions, "current": current, "copies": len(copies)}


def test_every_stored_version_is_catalogued_and_each_key_ends_on_its_newest(
    chaos: dict[str, Any],
) -> None:
    cloud = chaos["cloud"]
    s3, raw = cloud.client("s3"), cloud.outputs["RawBucketName"]
    listed = s3.list_object_versions(Bucket=raw, Prefix=f"{DATASET}/")["Versions"]
    assert sorted((v["Key"], v["VersionId"]) for v in listed) == sorted(
        (key, version) for key, ids in chaos["versions"].items() for version in ids
    )
    for key, ids in chaos["versions"].items():
        items = {i["version_id"]: i for i in catalog_items(cloud, key)}
        assert sorted(items) == sorted(ids), key  # one item per version, duplicates or not
        assert items[ids[-1]]["status"] == "INGESTED", (key, items[ids[-1]])
        # an older version was ingested before its successor arrived, or superseded: never
        # failed, never left half-way
        assert all(items[v]["status"] in {"INGESTED", "SUPERSEDED"} for v in ids[:-1]), key


def _lake_rows(cloud: LocalCloud) -> list[tuple[str, str, int, str]]:
    s3, lake = cloud.client("s3"), cloud.outputs["LakeBucketName"]
    rows: list[tuple[str, str, int, str]] = []
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=lake, Prefix=f"{DATASET}/")
    for page in pages:
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith(".parquet"):
                continue
            table = pq.read_table(
                io.BytesIO(s3.get_object(Bucket=lake, Key=obj["Key"])["Body"].read())
            )
            date = obj["Key"].split("review_date=", 1)[1].split("/", 1)[0]
            for row in table.to_pylist():
                rows.append((row["user_id"], date, row["stars"], row["text"]))
    return sorted(rows)


def test_the_lake_holds_exactly_the_rows_of_each_keys_newest_version(
    chaos: dict[str, Any],
) -> None:
    expected = sorted(
        row
        for key, version in chaos["current"].items()
        for row in _rows(int(key.rsplit("-", 1)[1].split(".")[0]), version)
    )
    assert _lake_rows(chaos["cloud"]) == expected


def test_the_index_equals_a_full_scan(chaos: dict[str, Any]) -> None:
    result = cli(
        chaos["cloud"], "index", "reconcile", "--dataset", DATASET, "--json", timeout=CLI_TIMEOUT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["objects_scanned"] > 0
    assert report["entries_found"] == report["entries_expected"] > 0
    assert [report[k]["count"] for k in ("missing", "stale", "wrong_rows")] == [0, 0, 0]
