"""bench/index_writes_bench.py counts DynamoDB write ITEMS from the requests themselves: every
request shape (single-item writes, BatchWriteItem, TransactWriteItems with a ConditionCheck that
is no write) is read item by item and classified by table and partition key; a request DynamoDB
refused is counted apart; the segment index's own requests (`replace_objects` on moto
in-process, the wire bodies botocore sends) are classified as pointers, segment items and the
dataset's configuration; the result renders into Markdown and Targets rows, judged against
0.001 writes per ingested row."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import index_writes_bench as bench  # noqa: E402

from lethe_shared.catalog.object_catalog import Zone as IndexZone  # noqa: E402
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition  # noqa: E402
from lethe_shared.index.subject_index import IndexEntry  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "bench_results"
ROLES = {"manifest-t": "manifest", "catalog-t": "catalog"}


def s(value: str) -> dict[str, str]:
    return {"S": value}


def test_every_request_shape_is_read_item_by_item() -> None:
    put = {"TableName": "manifest-t", "Item": {"pk": s("obj#ds"), "sk": s("s3://b/ds/a")}}
    assert list(bench.write_items("PutItem", put)) == [("manifest-t", "obj#ds", "put")]
    update = {"TableName": "catalog-t", "Key": {"object_url": s("ledger#ab"), "version_id": s("v")}}
    assert list(bench.write_items("UpdateItem", update)) == [("catalog-t", "ledger#ab", "update")]
    batch = {
        "RequestItems": {
            "catalog-t": [
                {"PutRequest": {"Item": {"object_url": s("s3://b/k"), "version_id": s("1")}}},
                {"DeleteRequest": {"Key": {"object_url": s("ledger#cd"), "version_id": s("i")}}},
            ]
        }
    }
    assert list(bench.write_items("BatchWriteItem", batch)) == [
        ("catalog-t", "s3://b/k", "put"),
        ("catalog-t", "ledger#cd", "delete"),
    ]
    transaction = {
        "TransactItems": [
            {"Update": {"TableName": "manifest-t", "Key": {"pk": s("seg#ds"), "sk": s("L0#1")}}},
            {"ConditionCheck": {"TableName": "manifest-t", "Key": {"pk": s("seg#ds")}}},
            {"Delete": {"TableName": "manifest-t", "Key": {"pk": s("seg#ds"), "sk": s("L0#0")}}},
        ]
    }
    assert [op for _, _, op in bench.write_items("TransactWriteItems", transaction)] == [
        "update",
        "check",
        "delete",
    ]


@pytest.mark.parametrize(
    ("role", "key", "kind"),
    [
        ("manifest", "obj#reviews", "pointer"),
        ("manifest", "seg#reviews", "segment"),
        ("manifest", "datasets", "dataset"),
        ("manifest", "cfg#reviews", "dataset"),
        ("manifest", "compaction-lease", "lease"),
        ("manifest", "something-else", "other"),
        ("catalog", "ledger#0f", "ledger"),
        ("catalog", "s3://raw/reviews/a.csv", "catalog"),
        ("datasets", "reviews", "datasets"),
    ],
)
def test_item_kinds(role: str, key: str, kind: str) -> None:
    assert bench.item_kind(role, key) == kind


def _environ(action: str, body: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(body).encode()
    return {
        "HTTP_X_AMZ_TARGET": f"DynamoDB_20120810.{action}",
        "CONTENT_LENGTH": str(len(data)),
        "wsgi.input": io.BytesIO(data),
    }


def test_the_counter_counts_items_refusals_and_transactions_and_forgets_on_take() -> None:
    answers = iter(["200 OK", "400 Bad Request", "200 OK"])
    seen: list[bytes] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["wsgi.input"].read())  # the body is handed on unchanged
        start_response(next(answers), [])
        return [b"{}"]

    counter = bench.WriteCounter(app, ROLES)
    pointer = {"TableName": "manifest-t", "Key": {"pk": s("obj#ds"), "sk": s("s3://b/ds/a")}}
    transaction = {
        "TransactItems": [
            {"Update": {"TableName": "manifest-t", "Key": {"pk": s("seg#ds"), "sk": s("L0#1")}}},
            {"ConditionCheck": {"TableName": "manifest-t", "Key": {"pk": s("seg#ds")}}},
        ]
    }
    for action, body in (
        ("UpdateItem", pointer),
        ("UpdateItem", pointer),  # refused: a failed condition, billed all the same
        ("TransactWriteItems", transaction),
    ):
        assert counter(_environ(action, body), lambda *a: None) == [b"{}"]
    assert json.loads(seen[0]) == pointer
    counted = counter.take()
    manifest = counted["manifest"]
    assert manifest["writes"] == 3
    assert manifest["by_kind"] == {"pointer": 2, "segment": 1}
    assert manifest["refused"] == 1
    assert manifest["transactional"] == 1
    assert manifest["condition_checks"] == 1
    assert manifest["requests"] == {"TransactWriteItems": 1, "UpdateItem": 2}
    assert bench.writes_of(counted, "manifest", "pointer") == 2
    assert bench.writes_of(counted, "catalog") == 0
    assert counter.take() == {}
    both = bench.merged([counted, counted])
    assert both["manifest"]["writes"] == 6
    assert both["manifest"]["by_kind"]["pointer"] == 4


def test_reads_pass_through_uncounted() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"{}"]

    counter = bench.WriteCounter(app, ROLES)
    read = _environ("GetItem", {"TableName": "manifest-t", "Key": {"pk": s("obj#ds")}})
    assert counter(read, lambda *a: None) == [b"{}"]
    assert counter.take() == {}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def _entry(url: str, n: int) -> IndexEntry:
    return IndexEntry(
        subject_hash=f"{n:064x}",
        object_url=url,
        dataset_id="reviews",
        zone=IndexZone.LAKE,
        format="parquet",
        rows=2,
        row_hints=(0,),
        version_id="v1",
        etag="e1",
    )


@pytest.mark.usefixtures("aws_env")
def test_the_segment_index_writes_are_classified_from_their_wire_bodies() -> None:
    """`replace_objects` of 5 objects: the pending item and its commit (2 segment items, the
    commit transactional), the dataset's 2 configuration items, and no pointer item: the
    level-0 item records the objects it describes. A flag then writes one override."""
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="index-b")
        table = boto3.resource("dynamodb").create_table(**manifest_table_definition("manifest-t"))
        index = SegmentSubjectIndex(s3, "index-b", table, partition_bits=0, hash_bytes=6)
        counter = bench.WriteCounter(lambda *_: [], ROLES)

        def created(request: Any, operation_name: str, **_: Any) -> None:
            if operation_name in bench.WRITE_ACTIONS:
                counter.record(operation_name, json.loads(request.body), True)

        table.meta.client.meta.events.register("request-created.dynamodb", created)
        urls = [f"s3://lake/reviews/d=1/part-{i}.parquet" for i in range(5)]
        index.replace_objects(
            [(u, [_entry(u, i * 10 + j) for j in range(3)]) for i, u in enumerate(urls)]
        )
        counted = counter.take()
        assert index.flag_deleted(urls[0]) == 1  # its 3 hashes share one 48-bit prefix
        flagged = counter.take()
    assert counted["manifest"]["by_kind"] == {"dataset": 2, "segment": 2}
    assert counted["manifest"]["transactional"] == 1
    assert counted["manifest"]["writes"] == 4
    assert flagged["manifest"]["by_kind"] == {"pointer": 1}


def test_markdown_and_targets_from_a_real_run() -> None:
    result = json.loads((FIXTURES / bench.OUT_NAME).read_text(encoding="utf-8"))
    text = bench.markdown(result)
    assert "**DynamoDB writes per ingested row, segment index as deployed**" in text
    first = result["shapes"][0]
    rows = bench.targets(result)
    item, target, measured, verdict = rows[0]
    assert target == "<= 0.001"
    value = bench.writes_of(first["ingest"], "manifest") / first["rows"]
    assert measured.startswith(f"{value:.6f}")
    assert verdict == ("met" if value <= 0.001 else "missed")
    assert f"{first['objects']} x {first['rows_per_object']:,} rows" in item
    compacted = bench.compaction_writes(first)
    if compacted is None:
        assert all(r[3] == "-" for r in rows[1:])  # other shapes: context
        return
    # the first compaction's writes are judged with ingestion's
    item, target, measured, verdict = rows[1]
    assert "including its first compaction" in item
    life = (bench.writes_of(first["ingest"], "manifest") + compacted) / first["rows"]
    assert measured.startswith(f"{life:.6f}")
    assert verdict == ("met" if life <= 0.001 else "missed")
    assert all(r[3] == "-" for r in rows[2:])  # other shapes: context


def test_a_shape_is_judged_against_the_target() -> None:
    shape = {"rows": 400_000}
    assert bench.verdict(bench.per_row(shape, 400)) == "met"
    assert bench.verdict(bench.per_row(shape, 401)) == "missed"
    assert os.path.basename(bench.COMPACT_SCRIPT) == "compact.py"
