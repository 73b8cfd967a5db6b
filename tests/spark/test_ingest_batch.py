"""The ingest job on batches and on large objects (`spark_jobs/ingest.py` main, moto server).

- A batch of many object versions runs as one job run and gives each version its own outcome:
  a bad file never fails its neighbours, and of two versions of one key the older one is
  SUPERSEDED whatever their order in the batch.
- A large object is read in pieces (line-aligned byte ranges of text, row groups of Parquet) by
  several tasks, and the lake files, the quarantine and the index entries are exactly those a
  plain read of the whole object gives.
- On the segment store (the deployed default), a batch gets the entries the DynamoDB index
  gets: every raw object, lake file and quarantine file, with the same rows per subject.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest import main
from lethe_shared.index.opening import IndexLocation, IndexStore, open_subject_index
from lethe_shared.index.segments import manifest_table_definition
from tests.spark.cloud import GLUE_ARGS, LAKE, RAW, Cloud, JobRunner, batch_args, h

FIXTURES = Path(__file__).parent / "fixtures"
REVIEWS = json.loads((FIXTURES / "reviews.dataset.json").read_text())
REVIEWS_CSV = (FIXTURES / "reviews-batch-1.csv").read_bytes()  # u1, u3 valid; u2 rejected
HEADER = b"user_id,stars,review_date,amount,comment\n"
EVENTS = {
    "dataset_id": "events",
    "format": "jsonl",
    "subject_columns": ["customer.id"],
    "schema": [
        {"name": "customer", "type": "struct<id:string,tier:int>"},
        {"name": "at", "type": "timestamp"},
    ],
}
METRICS = {
    "dataset_id": "metrics",
    "format": "parquet",
    "subject_columns": ["device"],
    "partition_by": ["site"],
    "schema": [
        {"name": "device", "type": "long"},
        {"name": "site", "type": "string"},
        {"name": "value", "type": "double"},
    ],
}
PIECES = re.compile(r"lethe\.ingest: object (\S+): (\d+) piece\(s\)")


class Runner:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._runner = JobRunner(main, GLUE_ARGS, capsys)
        self.runs = 0

    @property
    def logs(self) -> str:
        return self._runner.logs

    def __call__(self, objects: list[tuple[str, str, str]], *extra: str) -> Any:
        self.runs += 1
        return self._runner(*batch_args(objects, f"exec-batch-{self.runs}"), *extra)


@pytest.fixture
def run(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Runner:
    return Runner(capsys)


def _outcome(summary: Any, key: str, version: str) -> dict[str, Any]:
    (found,) = [o for o in summary["objects"] if (o["key"], o["version_id"]) == (key, version)]
    return dict(found)


def test_a_batch_gives_each_object_version_its_own_outcome_in_one_run(
    cloud: Cloud, run: Runner
) -> None:
    # Given two registered datasets and, in the raw bucket:
    cloud.register(REVIEWS)
    cloud.register(EVENTS)
    good = cloud.upload("reviews/good.csv", REVIEWS_CSV, "reviews")
    only_bad = cloud.upload("reviews/bad.csv", HEADER + b"u9,abc,2026-11-22,1.00,x\n", "reviews")
    broken = cloud.upload("reviews/broken.csv.gz", b"\x1f\x8b\x08 not gzip at all", "reviews")
    old = cloud.upload("reviews/twice.csv", HEADER + b"u7,1,2026-11-22,1.00,old\n", "reviews", "10")
    new = cloud.upload("reviews/twice.csv", HEADER + b"u8,2,2026-11-22,2.00,new\n", "reviews", "20")
    event = b'{"customer": {"id": "c1", "tier": 2}, "at": "2026-11-23T10:00:00Z"}\n'
    events = cloud.upload("events/e.jsonl", event, "events")
    orphan = cloud.upload("unknown/x.csv", HEADER, "unknown")
    stray = cloud.upload("events/stray.csv", REVIEWS_CSV, "reviews")  # not under reviews/
    batch = [
        ("reviews", "reviews/good.csv", good),
        ("reviews", "reviews/twice.csv", new),  # the newer version first
        ("unknown", "unknown/x.csv", orphan),
        ("reviews", "reviews/bad.csv", only_bad),
        ("reviews", "reviews/broken.csv.gz", broken),
        ("events", "events/e.jsonl", events),
        ("reviews", "reviews/twice.csv", old),
        ("reviews", "reviews/ghost.csv", "null"),
        ("reviews", "reviews/good.csv", good),  # a duplicate counts once
        ("reviews", "events/stray.csv", stray),
    ]

    # When one job run ingests the batch
    summary = run(batch)

    # Then every object version has its outcome, in the batch's order
    statuses = [(o["key"], o["status"]) for o in summary["objects"]]
    assert statuses == [
        ("reviews/good.csv", "INGESTED"),
        ("reviews/twice.csv", "INGESTED"),
        ("unknown/x.csv", "FAILED"),
        ("reviews/bad.csv", "QUARANTINED"),
        ("reviews/broken.csv.gz", "QUARANTINED"),
        ("events/e.jsonl", "INGESTED"),
        ("reviews/twice.csv", "SUPERSEDED"),
        ("reviews/ghost.csv", "FAILED"),
        ("events/stray.csv", "FAILED"),
    ]
    assert summary["counts"] == {"FAILED": 3, "INGESTED": 3, "QUARANTINED": 2, "SUPERSEDED": 1}
    assert _outcome(summary, "reviews/good.csv", good)["rows_written"] == 2
    assert _outcome(summary, "reviews/good.csv", good)["rows_quarantined"] == 1
    assert _outcome(summary, "unknown/x.csv", orphan)["error"] == (
        "dataset 'unknown' is not registered"
    )
    # a dataset's raw objects live under its prefix: the subject index keeps them by it
    assert _outcome(summary, "events/stray.csv", stray)["error"] == (
        "the object's key is not under the prefix reviews/ of dataset 'reviews': a dataset's raw"
        " objects live under s3://<raw bucket>/reviews/"
    )
    broken_outcome = _outcome(summary, "reviews/broken.csv.gz", broken)
    assert broken_outcome["quarantine_object"].endswith(".file.json")
    assert broken_outcome["rows_read"] == 0
    # and the catalog says the same of each version
    for key, version, status in [
        ("reviews/good.csv", good, "INGESTED"),
        ("reviews/twice.csv", new, "INGESTED"),
        ("reviews/twice.csv", old, "SUPERSEDED"),
        ("unknown/x.csv", orphan, "FAILED"),
        ("events/stray.csv", stray, "FAILED"),
        ("reviews/bad.csv", only_bad, "QUARANTINED"),
        ("events/e.jsonl", events, "INGESTED"),
    ]:
        assert cloud.catalog_item(key, version)["status"] == status, key
    # and the lake holds the newer version's row of the twice-uploaded key, not the older one's
    twice = _outcome(summary, "reviews/twice.csv", new)["lake_objects"]
    assert len(twice) == 1
    lake_key = twice[0].removeprefix(f"s3://{LAKE}/")
    assert cloud.lake_parquet(lake_key).column("user_id").to_pylist() == ["u8"]
    assert [e[1] for e in cloud.lookup(h("u8"))] == sorted(
        [f"s3://{RAW}/reviews/twice.csv", twice[0]]
    )
    assert cloud.lookup(h("u7")) == []  # the superseded version was not read
    # and the other dataset's row landed in its own dataset, indexed
    (event_file,) = _outcome(summary, "events/e.jsonl", events)["lake_objects"]
    assert event_file.startswith(f"s3://{LAKE}/events/part-")
    assert sorted(e[1] for e in cloud.lookup(h("c1"))) == sorted(
        [f"s3://{RAW}/events/e.jsonl", event_file]
    )
    assert run.runs == 1


def _reviews_csv(rows: int) -> tuple[bytes, int]:
    """A CSV of `rows` records over three days; every 13th comment holds a quoted line break
    and a doubled quote, every 17th row a blank line after it, every 97th row a bad `stars`.
    Returns the bytes and how many rows are valid."""
    lines = [HEADER.decode()]
    valid = 0
    for i in range(rows):
        stars = "x" if i % 97 == 5 else str(i % 5 + 1)
        valid += stars != "x"
        comment = f'"line one ""{i}""\nline two"' if i % 13 == 0 else f"comment {i}"
        lines.append(f"u{i % 50},{stars},2026-11-{20 + i % 3},{i % 100}.25,{comment}\n")
        if i % 17 == 0:
            lines.append("\n")
    return "".join(lines).encode(), valid


def _events_jsonl(rows: int) -> tuple[bytes, int]:
    """JSON Lines of `rows` lines: every 89th is no JSON, every 61st has a tier that is no int.
    Returns the bytes and how many lines are valid."""
    out = []
    valid = 0
    for i in range(rows):
        if i % 89 == 3:
            out.append("not json at all\n")
            continue
        tier = "high" if i % 61 == 7 else i % 3
        valid += tier != "high"
        record = {"customer": {"id": f"c{i % 40}", "tier": tier}, "at": "2026-11-23T10:00:00Z"}
        out.append(json.dumps(record) + "\n")
    return "".join(out).encode(), valid


def _snapshot(cloud: Cloud, summary: Any) -> dict[str, Any]:
    """What a run left: lake files' rows, quarantine records (without when they were written)
    and index entries (without the versions and ETags S3 gave the files)."""
    (outcome,) = summary["objects"]
    tables = {
        url: cloud.lake_parquet(url.removeprefix(f"s3://{LAKE}/")).to_pylist()
        for url in outcome["lake_objects"]
    }
    quarantine = []
    if outcome["quarantine_object"]:
        body = cloud.lake_object(outcome["quarantine_object"].removeprefix(f"s3://{LAKE}/"))
        for line in body.decode().splitlines():
            record = json.loads(line)
            del record["rejected_at"], record["correlation_id"]
            quarantine.append(record)
    entries = {(e[0], e[1], e[2], e[3], e[4], e[5], e[8]) for e in cloud.entries()}
    counts = {k: outcome[k] for k in ("status", "rows_read", "rows_written", "rows_quarantined")}
    return {"counts": counts, "tables": tables, "quarantine": quarantine, "entries": entries}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_large_text_object_read_in_pieces_gives_what_a_plain_read_gives(
    cloud: Cloud, run: Runner, fmt: str
) -> None:
    # Given a text object of a few hundred kilobytes, with quoted line breaks (CSV), blank
    # lines, and rows that are rejected
    if fmt == "csv":
        cloud.register(REVIEWS)
        body, valid = _reviews_csv(4000)
        dataset, key = "reviews", "reviews/large.csv"
    else:
        cloud.register(EVENTS)
        body, valid = _events_jsonl(4000)
        dataset, key = "events", "events/large.jsonl"
    version = cloud.upload(key, body, dataset)

    # When it is ingested in pieces of 16 KiB, each read 100 records at a time
    split = run([(dataset, key, version)], "--piece-bytes", "16384", "--batch-rows", "100")
    pieces = {m.group(1): int(m.group(2)) for m in PIECES.finditer(run.logs)}
    in_pieces = _snapshot(cloud, split)

    # Then it was cut into many pieces
    assert pieces[f"s3://{RAW}/{key}"] >= len(body) // 16384
    # and the rows it wrote are the valid rows of the object
    assert in_pieces["counts"]["rows_written"] == valid
    assert sum(len(rows) for rows in in_pieces["tables"].values()) == valid
    assert in_pieces["counts"]["rows_quarantined"] == in_pieces["counts"]["rows_read"] - valid
    # and a plain read of the whole object writes exactly the same files, quarantine and entries
    cloud.clear_index()
    whole = run([(dataset, key, version)])
    assert PIECES.search(run.logs) is None
    assert _snapshot(cloud, whole) == in_pieces


def test_a_parquet_object_read_by_row_groups_gives_what_a_plain_read_gives(
    cloud: Cloud, run: Runner
) -> None:
    cloud.register(METRICS)
    rng = random.Random(7)
    rows = 6000
    table = pa.table(
        {
            "device": pa.array([rng.randrange(300) for _ in range(rows)], pa.int64()),
            "site": pa.array([f"s{rng.randrange(3)}" for _ in range(rows)]),
            "value": pa.array([rng.random() if i % 101 else None for i in range(rows)]),
            "extra": pa.array([str(i) for i in range(rows)]),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=500)
    version = cloud.upload("metrics/large.parquet", sink.getvalue(), "metrics")

    split = run([("metrics", "metrics/large.parquet", version)], "--piece-bytes", "4096")
    in_pieces = _snapshot(cloud, split)
    assert in_pieces["counts"]["rows_written"] == rows
    written = sorted(r["device"] for t in in_pieces["tables"].values() for r in t)
    assert written == sorted(table.column("device").to_pylist())

    cloud.clear_index()
    whole = run([("metrics", "metrics/large.parquet", version)])
    assert _snapshot(cloud, whole) == in_pieces


def test_a_large_gzip_object_is_one_piece_streamed_in_batches(cloud: Cloud, run: Runner) -> None:
    cloud.register(REVIEWS)
    body, valid = _reviews_csv(3000)
    version = cloud.upload("reviews/large.csv.gz", gzip.compress(body), "reviews")

    summary = run(
        [("reviews", "reviews/large.csv.gz", version)],
        "--piece-bytes",
        "4096",
        "--batch-rows",
        "64",
    )

    (outcome,) = summary["objects"]
    assert (outcome["status"], outcome["rows_written"]) == ("INGESTED", valid)
    pieces = {m.group(1): int(m.group(2)) for m in PIECES.finditer(run.logs)}
    assert pieces == {f"s3://{RAW}/reviews/large.csv.gz": 1}


def test_on_the_segment_index_a_batch_gets_the_entries_the_dynamodb_index_gets(
    cloud: Cloud, run: Runner
) -> None:
    # Given a batch of two datasets' objects, with valid and rejected rows, and the segment
    # store's bucket and manifest table
    cloud.register(REVIEWS)
    cloud.register(EVENTS)
    good = cloud.upload("reviews/good.csv", REVIEWS_CSV, "reviews")
    body, _ = _reviews_csv(300)
    many = cloud.upload("reviews/many.csv", body, "reviews")
    events_body, _ = _events_jsonl(200)
    events = cloud.upload("events/e.jsonl", events_body, "events")
    batch = [
        ("reviews", "reviews/good.csv", good),
        ("reviews", "reviews/many.csv", many),
        ("events", "events/e.jsonl", events),
    ]
    bucket, manifest = "lethe-test-index", "lethe-test-index-manifest"
    cloud.s3.create_bucket(Bucket=bucket)
    boto3.resource("dynamodb").create_table(**manifest_table_definition(manifest))

    # When the batch is ingested onto the DynamoDB index, then onto the segment store
    on_dynamodb = run(batch)
    on_segments = run(
        batch, "--index-store", "segments", "--index-bucket", bucket, "--manifest-table", manifest
    )

    # Then the outcomes are the same, and each subject's entries name the same objects with the
    # same rows (the second run rewrote the lake files: versions differ; segments keep no hints)
    def outcome(summary: Any) -> list[tuple[Any, ...]]:
        keys = ("key", "status", "rows_read", "rows_written", "rows_quarantined")
        return [tuple(o[k] for k in keys) for o in summary["objects"]]

    assert outcome(on_segments) == outcome(on_dynamodb)
    assert on_segments["counts"] == {"INGESTED": 3}
    index = open_subject_index(
        IndexLocation(IndexStore.SEGMENTS, bucket=bucket, manifest_table=manifest),
        s3=boto3.client("s3"),
        dynamodb=boto3.resource("dynamodb"),
    )
    subjects = ["u1", "u2", "u3", *[f"u{i}" for i in range(50)], *[f"c{i}" for i in range(40)]]
    urls: set[str] = set()
    for subject in subjects:
        dynamodb = sorted((e[1], e[2], e[3], e[4]) for e in cloud.lookup(h(subject)))
        found = index.lookup(h(subject))
        segments = sorted((e.object_url, e.zone, e.format, e.rows) for e in found)
        assert segments == dynamodb, subject
        urls |= {e[0] for e in segments}
    # and those are the raw objects, their lake files and their quarantine files
    written = {
        url
        for o in on_segments["objects"]
        for url in [*o["lake_objects"], o["quarantine_object"]]
        if url
    }
    assert urls == written | {f"s3://{RAW}/{key}" for _, key, _ in batch}
