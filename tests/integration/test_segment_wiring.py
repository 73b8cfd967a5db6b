"""The segment subject index wired into the product (moto): the one factory, the indexer
Lambda on segments, an ingest task's writes as ONE segment, erasure's index update removing
the erased hashes from every segment object (with the evidence the certificate cites, failing
closed when it cannot prove it), and `lethe index migrate` from DynamoDB, verified and run
twice."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe import cli
from lethe.commands.index_migrate import migrate, open_index
from lethe_jobs.ingest_tasks.index_writes import TaskIndexWriter
from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.certificate_index import index_erasure_of
from lethe_shared.erasure.index_segments import IndexNotErasedError
from lethe_shared.erasure.report import EraseResults, ObjectResult, VersionRef, report_key
from lethe_shared.erasure.requests import (
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.workflow import update_index
from lethe_shared.errors import ConfigurationError
from lethe_shared.index.opening import IndexLocation, IndexStore, open_subject_index
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.conftest import FakeLambdaContext, load_function_module
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryObjectStore
from tests.integration.conftest import LAKE, REGION, TABLES
from tests.integration.test_datasets_reindex_cli import MotoTarget

pytestmark = pytest.mark.integration

INDEX_BUCKET = "lethe-local-index-123456789012-us-east-1"  # events/env.json's
MANIFEST = "lethe-local-index-manifest"
KEY = b"k" * 32
SECRET = "u-SECRET-1001"
H_SECRET = hash_of_id(KEY, SECRET)
RID = "er-20261122T100000Z-0a1b2c3d"


@pytest.fixture
def segment_store(aws: None) -> tuple[Any, Any]:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=INDEX_BUCKET)
    table = boto3.resource("dynamodb", region_name=REGION).create_table(
        **manifest_table_definition(MANIFEST)
    )
    return s3, table


def segments(s3: Any) -> SegmentSubjectIndex:
    location = IndexLocation(IndexStore.SEGMENTS, bucket=INDEX_BUCKET, manifest_table=MANIFEST)
    index = open_subject_index(location, s3=s3, dynamodb=boto3.resource("dynamodb"))
    assert isinstance(index, SegmentSubjectIndex)
    return index


def stored_objects(s3: Any) -> Iterator[tuple[str, bytes]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=INDEX_BUCKET):
        for item in page.get("Contents", []):
            yield item["Key"], s3.get_object(Bucket=INDEX_BUCKET, Key=item["Key"])["Body"].read()


def entry(url: str, h: str, version: str, rows: int = 1, **more: Any) -> IndexEntry:
    return IndexEntry(
        subject_hash=h, object_url=url, dataset_id=url.split("/")[3], zone=Zone.LAKE,
        format="parquet", rows=rows, version_id=version, etag=f"e-{version}",
        matching_fingerprint="m" * 16, key_fingerprint="f" * 16, **more,
    )  # fmt: skip


REVIEWS = {
    "dataset_id": "reviews", "format": "parquet", "subject_columns": ["user_id"],
    "schema": [{"name": "user_id", "type": "string"}, {"name": "stars", "type": "int"}],
}  # fmt: skip


def subject(i: int) -> str:
    return hashlib.sha256(f"subject-{i}".encode()).hexdigest()


# ------------------------------------------------------------------------------ the factory


def test_the_factory_opens_segments_by_default_and_dynamodb_when_asked(
    segment_store: tuple[Any, Any], lethe_tables: dict[str, Any]
) -> None:
    s3, _ = segment_store
    env = {"INDEX_BUCKET": INDEX_BUCKET, "INDEX_MANIFEST_TABLE": MANIFEST,
           "INDEX_TABLE": TABLES["SubjectIndexTable"]}  # fmt: skip
    dynamodb = boto3.resource("dynamodb")
    default = open_subject_index(IndexLocation.from_env(env), s3=s3, dynamodb=dynamodb)
    chosen = open_subject_index(
        IndexLocation.from_env({**env, "LETHE_INDEX_STORE": "dynamodb"}), s3=s3, dynamodb=dynamodb
    )
    assert isinstance(default, SegmentSubjectIndex)
    assert isinstance(chosen, DynamoSubjectIndex)
    url = s3_url(LAKE, "reviews/a.parquet")
    default.replace_object(url, [entry(url, H_SECRET, "v1")])
    assert [e.object_url for e in default.lookup(H_SECRET)] == [url]
    assert chosen.lookup(H_SECRET) == []  # two stores, nothing shared
    assert [k for k, _ in stored_objects(s3)]  # the entry is in the index bucket
    with pytest.raises(ConfigurationError, match="INDEX_BUCKET"):
        IndexLocation.from_env({"INDEX_MANIFEST_TABLE": MANIFEST})
    with pytest.raises(ConfigurationError, match="not one of"):
        IndexLocation.from_env({**env, "LETHE_INDEX_STORE": "s3"})
    with pytest.raises(ConfigurationError, match="INDEX_TABLE"):
        IndexLocation.from_env({"LETHE_INDEX_STORE": "dynamodb"})


def test_the_indexer_lambda_writes_its_object_to_the_segment_store(
    segment_store: tuple[Any, Any],
    lethe_tables: dict[str, Any],
    lethe_buckets: Callable[..., None],
    handler_env: Callable[..., None],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    s3, _ = segment_store
    handler_env("IndexObjectFunction", index_store="segments")
    lethe_buckets()
    secret = "k" * 64
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=secret
    )
    dataset = {
        "dataset_id": "reviews", "format": "csv", "subject_columns": ["user_id"],
        "partition_by": ["review_date"],
        "schema": [{"name": "user_id", "type": "string"}, {"name": "review_date", "type": "date"},
                   {"name": "stars", "type": "int"}],
    }  # fmt: skip
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(dataset)}
    )
    key = "reviews/review_date=2026-11-22/part-external-0001.parquet"
    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": ["u1", "u2", "u1"], "stars": [5, 4, 3]}), sink)
    version = s3.put_object(Bucket=LAKE, Key=key, Body=sink.getvalue())["VersionId"]
    app = load_function_module("index_object")

    result = app.handler(
        {**load_event("index_object_request.json"), "version_id": version}, lambda_context
    )

    assert result["entries"] == 2
    assert lethe_tables["SubjectIndexTable"].scan()["Items"] == []  # not DynamoDB
    found = segments(s3).lookup(hash_of_id(secret.encode(), "u1"))
    assert [(e.object_url, e.rows, e.version_id) for e in found] == [
        (s3_url(LAKE, key), 2, version)
    ]


def test_a_dataset_s_declared_partition_bits_are_recorded_at_its_first_write_only(
    segment_store: tuple[Any, Any], lethe_tables: dict[str, Any]
) -> None:
    s3, manifest = segment_store
    registry = DynamoDatasetRegistry(lethe_tables["DatasetsTable"])
    registry.put(parse_dataset({**REVIEWS, "index_partition_bits": 3}))
    registry.put(parse_dataset({**REVIEWS, "dataset_id": "plain"}))
    location = IndexLocation(IndexStore.SEGMENTS, bucket=INDEX_BUCKET, manifest_table=MANIFEST)
    index = open_subject_index(
        location, s3=s3, dynamodb=boto3.resource("dynamodb"), datasets=registry
    )
    # When both datasets get their first entries (16 subjects: several partitions of 8)
    urls = {d: s3_url(LAKE, f"{d}/a.parquet") for d in ("reviews", "plain")}
    for url in urls.values():
        index.replace_object(url, [entry(url, subject(i), "v1") for i in range(16)])

    # Then the declaring dataset got 8 partitions, the other the deployment's default (one)
    def bits(dataset_id: str) -> int:
        item = manifest.get_item(Key={"pk": f"cfg#{dataset_id}", "sk": "partitions"})["Item"]
        return int(item["bits"])

    assert (bits("reviews"), bits("plain")) == (3, 0)
    # and every subject is found in each
    for i in range(16):
        assert sorted(e.object_url for e in index.lookup(subject(i))) == sorted(urls.values())
    # When the document later declares other bits, a new writer keeps the recorded ones
    registry.put(parse_dataset({**REVIEWS, "index_partition_bits": 5}))
    later = open_subject_index(
        location, s3=s3, dynamodb=boto3.resource("dynamodb"), datasets=registry
    )
    b = s3_url(LAKE, "reviews/b.parquet")
    later.replace_object(b, [entry(b, subject(1), "v1")])
    assert bits("reviews") == 3
    assert {e.object_url for e in later.lookup(subject(1))} == {*urls.values(), b}
    # A writer holding one dataset's document declares for that dataset only
    one = parse_dataset({**REVIEWS, "dataset_id": "solo", "index_partition_bits": 2})
    writer = open_subject_index(location, s3=s3, dynamodb=boto3.resource("dynamodb"), datasets=one)
    for dataset_id in ("solo", "other"):
        url = s3_url(LAKE, f"{dataset_id}/a.parquet")
        writer.replace_object(url, [entry(url, subject(0), "v1")])
    assert (bits("solo"), bits("other")) == (2, 0)


# ------------------------------------------------------------------------------ ingestion


def test_an_ingest_task_writes_one_segment_for_all_its_files(
    segment_store: tuple[Any, Any],
) -> None:
    s3, _ = segment_store
    index = segments(s3)
    writes: list[str] = []
    index.manifest.table.meta.client.meta.events.register(
        "before-call.dynamodb.*",
        lambda model, **_: writes.append(model.name)
        if model.name in {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem",
                          "TransactWriteItems"} else None,
    )  # fmt: skip
    objects = MemoryObjectStore()
    task = TaskIndexWriter(index, objects)
    rows = 0
    for i in range(5):
        key = f"reviews/review_date=2026-11-2{i}/part-{i}.parquet"
        objects.put_version(LAKE, key, "v1")
        url = s3_url(LAKE, key)
        found = [entry(url, subject(n), "v1", rows=4) for n in range(i * 50, i * 50 + 200)]
        rows += 4 * len(found)
        task.add(LAKE, key, found)
    assert list(stored_objects(s3)) == []  # nothing written before the task ends

    task.flush()

    keys = sorted(k for k, _ in stored_objects(s3))
    assert len(keys) == 2
    assert keys[0].startswith("segments/reviews/L0/")
    assert task.writes == 1
    # DynamoDB writes: the dataset's two config items (first write only), the pending item and
    # the commit; no pointer per object (the item records the objects it describes)
    assert len(writes) == 2 + 1 + 1
    assert len(writes) / rows <= 0.001  # the target, with the first write's two config items
    assert len(index.lookup(subject(100))) == 3  # in objects 0, 1 and 2


# ------------------------------------------------------------------------------ erasure


def _erasure(objects: MemoryObjectStore, results: list[ObjectResult]) -> tuple[Any, Any]:
    requests, documents = MemoryErasureRequests(), MemoryDocuments()
    body = parse_request_body({"subject_ids": [SECRET], "reason": "r", "requested_by": "p@x.io"})
    requests.create(new_request(RID, body, hash_subjects(body, KEY, [])))
    for status in ("REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(RID, ErasureStatus(status), by="test")
    erase = EraseResults(
        request_id=RID, manifest_sha256="ab" * 32, correlation_id=RID,
        finished_at=datetime(2026, 11, 22, 12, tzinfo=UTC).isoformat(), objects=tuple(results),
    )  # fmt: skip
    documents.put(report_key(RID, "results.json"), erase.model_dump_json().encode(), "json")
    return requests, documents


def _rewritten(url: str, before: str, after: str | None) -> ObjectResult:
    return ObjectResult(
        object_url=url, dataset_id=url.split("/")[3], zone=Zone.LAKE,
        action="rewritten" if after else "deleted",
        versions_before=(VersionRef(version_id=before, etag=f"e-{before}"),),
        version_after=VersionRef(version_id=after, etag=f"e-{after}") if after else None,
        rows_before=2, rows_removed=1, rows_after=1 if after else 0, versions_purged=1,
    )  # fmt: skip


def _lake_of_the_subject(s3: Any, objects: MemoryObjectStore) -> tuple[Any, list[str]]:
    """The subject in two objects of `reviews` (one erasure rewrites, one it deletes) with
    others; a dead row of the subject in `orders` (an object removed long ago) and in an older
    write of the rewritten object; compacted once so that level 1 holds it too."""
    index = segments(s3)
    kept_url = s3_url(LAKE, "reviews/part-0.parquet")
    gone_url = s3_url(LAKE, "reviews/part-1.parquet")
    old_url = s3_url(LAKE, "orders/part-0.parquet")
    others = [subject(i) for i in range(6)]
    index.replace_object(kept_url, [entry(kept_url, h, "v0") for h in [H_SECRET, *others]])
    index.replace_object(old_url, [entry(old_url, h, "v1") for h in [H_SECRET, *others[:2]]])
    index.remove_object(old_url)  # every row of it dead, still stored until compaction
    index.compact("reviews")
    index.replace_object(kept_url, [entry(kept_url, h, "v1") for h in [H_SECRET, *others]])
    index.replace_object(gone_url, [entry(gone_url, h, "v1") for h in [H_SECRET, others[0]]])
    objects.put_version(LAKE, "reviews/part-0.parquet", "v2")  # erasure's rewrite
    return index, [kept_url, gone_url]


def test_an_erasure_removes_the_hashes_from_every_segment_object_and_says_so(
    segment_store: tuple[Any, Any],
) -> None:
    s3, _ = segment_store
    objects = MemoryObjectStore()
    index, (kept_url, gone_url) = _lake_of_the_subject(s3, objects)
    # the factory's default for a new dataset: 48-bit prefixes (the hash's first 6 bytes)
    assert any(bytes.fromhex(H_SECRET)[:6] in body for _, body in stored_objects(s3))
    requests, documents = _erasure(
        objects, [_rewritten(kept_url, "v1", "v2"), _rewritten(gone_url, "v1", None)]
    )

    summary = update_index(
        RID, requests=requests, index=index, documents=documents, objects=objects
    )

    # no object of the index bucket holds the hash's 32 bytes (nor its hex), any level or state
    for key, body in stored_objects(s3):
        assert bytes.fromhex(H_SECRET) not in body, key
        assert bytes.fromhex(H_SECRET)[:6] not in body, key  # no row shares its prefix here
        assert H_SECRET.encode() not in body, key
    assert index.lookup(H_SECRET) == []
    # others untouched (named by their 48-bit prefixes, as by-object reads name them)
    assert index.subjects_of(kept_url) == {subject(i)[:12] for i in range(6)}
    # the subject's two entries, and the other subject's entry of the key erasure deleted
    assert summary["entries_removed"] == 3
    assert summary["kept"] == []
    document = json.loads(documents.get(report_key(RID, "index_update.json")) or b"{}")
    evidence = document["segments"]
    assert evidence["hashes_left_index"] is True
    assert evidence["complete"] is True
    assert evidence["segments_rewritten"] >= 3  # level 1 of reviews, its level 0, orders'
    assert evidence["old_files_checked_gone"] == 2 * (
        evidence["segments_rewritten"] + evidence["segments_dropped"]
    )
    assert {d["dataset_id"] for d in evidence["datasets"]} == {"reviews", "orders"}
    assert summary["segments"]["hashes_left_index"] is True
    cited = index_erasure_of(document)
    assert cited is not None
    assert cited.hashes_left_index
    assert "removed from the subject index" in cited.detail
    # the deleted key keeps no version: its URL left the manifest too (no override item names
    # it; level-0 items hold digests only); the kept object still has its pointer
    items = boto3.resource("dynamodb").Table(MANIFEST).scan()["Items"]
    assert gone_url not in repr(items)
    kept = index.reads.pointer("reviews", kept_url)
    assert kept is not None
    assert kept.live

    # Run again: nothing more to remove, still proven
    again = update_index(RID, requests=requests, index=index, documents=documents, objects=objects)
    assert again["entries_removed"] == 0
    assert again["segments"]["hashes_left_index"] is True


def test_an_erasure_that_cannot_prove_an_old_segment_gone_fails_closed(
    segment_store: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    s3, _ = segment_store
    objects = MemoryObjectStore()
    index, (kept_url, _) = _lake_of_the_subject(s3, objects)
    requests, documents = _erasure(objects, [_rewritten(kept_url, "v1", "v2")])
    monkeypatch.setattr(index.reader.files, "gone", lambda key: False)  # HeadObject answers 200

    with pytest.raises(IndexNotErasedError, match="not found gone"):
        update_index(RID, requests=requests, index=index, documents=documents, objects=objects)

    assert documents.get(report_key(RID, "index_update.json")) is None  # nothing to certify


# ------------------------------------------------------------------------------ migration


def test_migrate_copies_the_dynamodb_index_verifies_it_and_is_idempotent(
    segment_store: tuple[Any, Any], lethe_tables: dict[str, Any]
) -> None:
    s3, _ = segment_store
    dynamo = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    a, b, c = (s3_url(LAKE, f"reviews/part-{i}.parquet") for i in range(3))
    z = s3_url(LAKE, "orders/part-0.parquet")
    dynamo.replace_object(a, [entry(a, subject(i), "v1", rows=i + 1) for i in range(5)])
    dynamo.replace_object(a, [entry(a, subject(i), "v2") for i in range(3)])  # 3, 4 flagged
    dynamo.replace_object(b, [entry(b, subject(i), "v1") for i in range(2, 4)])
    dynamo.flag_deleted(b)  # every entry flagged: a delete marker
    dynamo.replace_object(c, [entry(c, subject(9), "null")])
    dynamo.replace_object(z, [entry(z, subject(1), "v7", row_hints=(3, 4))])
    target = segments(s3)
    stale = s3_url(LAKE, "reviews/part-9.parquet")  # in the segments only: removed by migrate
    target.replace_object(stale, [entry(stale, subject(5), "v1")])

    first = migrate(lethe_tables["SubjectIndexTable"], target)
    second = migrate(lethe_tables["SubjectIndexTable"], target)

    assert first.verified
    assert second.verified
    by_id = {d.dataset_id: d for d in first.datasets}
    assert (by_id["reviews"].dynamodb_entries, by_id["reviews"].segment_entries) == (8, 8)
    assert by_id["reviews"].objects_written == 3
    assert by_id["reviews"].objects_removed == 1
    assert [d.objects_written + d.objects_removed for d in second.datasets] == [0, 0]
    # the segments (the factory's default: 48-bit prefixes) name each subject by its prefix
    expected = {
        (e.object_url, e.subject_hash[:12], e.deleted): (e.rows, e.version_id)
        for i in range(10) for e in dynamo.lookup(subject(i))
    }  # fmt: skip
    found = {
        (e.object_url, e.subject_hash, e.deleted): (e.rows, e.version_id)
        for d in ("reviews", "orders") for e in target.entries(d)
    }  # fmt: skip
    assert found == expected
    assert sum(1 for (_, _, deleted) in found if deleted) == 4  # a's 3 and 4, b's 2 and 3


def test_migrate_reports_a_difference_it_cannot_reproduce(
    segment_store: tuple[Any, Any], lethe_tables: dict[str, Any]
) -> None:
    """Two unflagged versions of one object (a DynamoDB state no single write makes): the
    verification names the difference instead of calling the copy verified."""
    s3, _ = segment_store
    a = s3_url(LAKE, "reviews/part-0.parquet")
    table = lethe_tables["SubjectIndexTable"]
    table.put_item(Item=entry(a, subject(1), "v1").to_item())
    table.put_item(Item=entry(a, subject(2), "v2").to_item())

    report = migrate(table, segments(s3))

    assert not report.verified
    assert report.datasets[0].different == 1  # the older version's entry reads flagged


def test_the_migrate_command_prints_the_verified_copy_and_lookup_follows_the_store(
    segment_store: tuple[Any, Any],
    lethe_tables: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the index bucket and manifest exist (segment_store)
    a = s3_url(LAKE, "reviews/part-0.parquet")
    DynamoSubjectIndex(lethe_tables["SubjectIndexTable"]).replace_object(
        a, [entry(a, subject(i), "v1") for i in range(3)]
    )
    target = MotoTarget({
        "SubjectIndexTableName": lethe_tables["SubjectIndexTable"].name,
        "IndexStore": "segments", "IndexBucketName": INDEX_BUCKET,
        "IndexManifestTableName": MANIFEST,
    })  # fmt: skip
    monkeypatch.setattr("lethe.commands.index_migrate.resolve", lambda args: target)

    code = cli.main(["index", "migrate", "--json", "--state-file", "unused.json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["verified"] is True
    assert [(d["dataset_id"], d["segment_entries"]) for d in report["datasets"]] == [("reviews", 3)]
    assert subject(1) not in json.dumps(report)  # counts only
    assert [e.object_url for e in open_index(target).lookup(subject(1))] == [a]  # segments
    assert isinstance(open_index(MotoTarget({"SubjectIndexTableName": "t"})), DynamoSubjectIndex)

    # a difference exits 1
    lethe_tables["SubjectIndexTable"].put_item(Item=entry(a, subject(7), "v2").to_item())
    assert cli.main(["index", "migrate", "--state-file", "unused.json"]) == 1
    assert "DIFFERENT: 0 missing, 0 extra, 3 changed" in capsys.readouterr().out
