"""48-bit prefixes through the product (issue 20): the factory's default for a new dataset, an
existing full-digest dataset kept as it is, lookups, the erasure's index update with a row two
subjects of one object version share (`kept_shared`), the evidence and the certificate's
`index_erasure`, and the callers that compare by-object answers (reindexing, reconcile,
migrate) on a prefix dataset. moto in-process."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.erasure.certificate_index import index_erasure_of
from lethe_shared.erasure.index_update import not_searched
from lethe_shared.erasure.report import ObjectResult, VersionRef, report_key
from lethe_shared.erasure.workflow import update_index
from lethe_shared.index.opening import IndexLocation, IndexStore, open_subject_index
from lethe_shared.index.segments import SegmentSubjectIndex
from lethe_shared.index.subject_ids import ids_of, key_width, subject_id
from tests.fakes import MemoryObjectStore
from tests.integration.conftest import LAKE
from tests.integration.test_segment_wiring import (
    H_SECRET,
    INDEX_BUCKET,
    MANIFEST,
    RID,
    _erasure,
    entry,
    segment_store,  # noqa: F401 - the fixture
    stored_objects,
    subject,
)

pytestmark = pytest.mark.integration

PREFIX = bytes.fromhex(H_SECRET)[:6]
# another subject whose keyed hash shares the secret's 48-bit prefix (a collision, made here)
H_TWIN = H_SECRET[:12] + ("0" * 52 if H_SECRET[12:] != "0" * 52 else "1" * 52)


def opened(s3: Any) -> SegmentSubjectIndex:
    location = IndexLocation(IndexStore.SEGMENTS, bucket=INDEX_BUCKET, manifest_table=MANIFEST)
    index = open_subject_index(location, s3=s3, dynamodb=boto3.resource("dynamodb"))
    assert isinstance(index, SegmentSubjectIndex)
    return index


def holders(s3: Any, needle: bytes) -> set[str]:
    """The object URLs named by the object tables of the segments whose entries hold `needle`."""
    import io  # noqa: PLC0415

    import pyarrow.parquet as pq  # noqa: PLC0415

    found: set[str] = set()
    bodies = dict(stored_objects(s3))
    for key, body in bodies.items():
        if key.endswith(".objects.parquet") or needle not in body:
            continue
        objects = pq.read_table(io.BytesIO(bodies[key[: -len(".parquet")] + ".objects.parquet"]))
        found |= set(objects.column("object_url").to_pylist())
    return found


def _result(url: str, before: str, after: str, removed: int) -> ObjectResult:
    return ObjectResult(
        object_url=url, dataset_id=url.split("/")[3], zone=Zone.LAKE,
        action="rewritten" if removed else "unchanged",
        versions_before=(VersionRef(version_id=before, etag=f"e-{before}"),),
        version_after=VersionRef(version_id=after, etag=f"e-{after}"),
        rows_before=3, rows_removed=removed, rows_after=3 - removed,
        versions_purged=1 if removed else 0,
    )  # fmt: skip


def test_a_new_dataset_gets_prefixes_an_existing_full_digest_dataset_keeps_its_width(
    segment_store: tuple[Any, Any],  # noqa: F811
) -> None:
    s3, _ = segment_store
    old = SegmentSubjectIndex(s3, INDEX_BUCKET, boto3.resource("dynamodb").Table(MANIFEST))
    full_url = s3_url(LAKE, "orders/a.parquet")
    old.replace_object(full_url, [entry(full_url, H_SECRET, "v1")])  # written before: 32 bytes
    index = opened(s3)
    url = s3_url(LAKE, "reviews/a.parquet")
    index.replace_object(url, [entry(url, H_SECRET, "v1"), entry(url, subject(1), "v1")])
    index.replace_object(full_url, [entry(full_url, H_SECRET, "v2")])  # through the factory

    assert key_width(index, "reviews") == 6
    assert key_width(index, "orders") == 32  # keeps the width it was first written with
    assert index.manifest.partition_bits("reviews") == 0
    assert sorted(e.object_url for e in index.lookup(H_SECRET)) == [full_url, url]
    assert index.subjects_of(url) == {H_SECRET[:12], subject(1)[:12]}
    assert index.subjects_of(full_url) == {H_SECRET}
    assert ids_of(index, "reviews")(H_SECRET) == subject_id(H_SECRET, 6) == H_SECRET[:12]
    assert ids_of(index, "orders")(H_SECRET) == H_SECRET
    reviews = [b for k, b in stored_objects(s3) if k.startswith("segments/reviews/")]
    assert any(PREFIX in b for b in reviews)
    assert not any(bytes.fromhex(H_SECRET) in b for b in reviews)  # never the full digest


def test_an_erasure_keeps_a_shared_prefix_row_says_so_and_completes_once_reindexed(
    segment_store: tuple[Any, Any],  # noqa: F811
) -> None:
    s3, _ = segment_store
    index = opened(s3)
    shared_url = s3_url(LAKE, "reviews/part-0.parquet")  # the secret and its twin, one version
    alone_url = s3_url(LAKE, "reviews/part-1.parquet")  # the secret alone
    twin_url = s3_url(LAKE, "reviews/part-2.parquet")  # the twin alone (a false candidate)
    index.replace_object(
        shared_url,
        [entry(shared_url, h, "v1", rows=2) for h in (H_SECRET, H_TWIN, subject(1))],
    )
    index.replace_object(alone_url, [entry(alone_url, h, "v1") for h in (H_SECRET, subject(2))])
    index.replace_object(twin_url, [entry(twin_url, h, "v1") for h in (H_TWIN, subject(3))])
    # a lookup of the secret returns every entry sharing its prefix (the twin's too)
    assert {e.object_url for e in index.lookup(H_SECRET)} == {shared_url, alone_url, twin_url}
    objects = MemoryObjectStore()
    objects.put_version(LAKE, "reviews/part-0.parquet", "v2")
    objects.put_version(LAKE, "reviews/part-1.parquet", "v2")
    requests, documents = _erasure(
        objects,
        [
            _result(shared_url, "v1", "v2", removed=2),
            _result(alone_url, "v1", "v2", removed=1),
            _result(twin_url, "v1", "v1", removed=0),  # scanned: none of the secret's rows
        ],
    )

    summary = update_index(
        RID, requests=requests, index=index, documents=documents, objects=objects
    )

    # the secret's own row is gone; the twin stays findable in both of its objects
    assert {e.object_url for e in index.lookup(H_TWIN)} == {shared_url, twin_url}
    assert subject(2)[:12] in index.subjects_of(alone_url)
    assert H_SECRET[:12] not in index.subjects_of(alone_url)
    assert holders(s3, PREFIX) == {shared_url, twin_url}  # only rows the twin also owns
    document = json.loads(documents.get(report_key(RID, "index_update.json")) or b"{}")
    evidence = document["segments"]
    assert evidence["hashes_left_index"] is False  # the prefix's bytes are still in S3
    assert (evidence["prefix_rows_kept"], evidence["prefix_rows_shared"]) == (2, 1)
    assert evidence["prefix_rows_verified_clean"] == 1
    rows = [r for d in evidence["datasets"] for r in d["prefix_rows"]]
    assert sorted((r["object_url"], r["version_id"], r["why"]) for r in rows) == [
        (shared_url, "v1", "shared"),
        (twin_url, "v1", "verified_clean"),
    ]
    # the shared row still counts the secret's rows: kept, named, never COMPLETED
    assert [(k["object_url"], k["reason"], k["rows"]) for k in document["kept"]] == [
        (shared_url, "shared_prefix", 4)  # the row's rows: the secret's 2 and the twin's 2
    ]
    assert summary["kept_reasons"]["shared_prefix"] == 1
    gaps = not_searched(document)
    assert [g.object_url for g in gaps] == [shared_url]
    assert "48-bit prefix" in gaps[0].detail
    assert "another subject" in gaps[0].detail
    cited = index_erasure_of(document)
    assert cited is not None
    assert not cited.hashes_left_index
    assert (cited.prefix_rows_kept, cited.prefix_rows_shared) == (2, 1)
    assert "shares it" in cited.detail
    assert "verified on the full keyed hash" in cited.detail
    assert "prefix_rows_kept" in cited.model_dump(mode="json")

    # The object is indexed again at the version the erasure left (the twin and subject 1):
    index.replace_object(shared_url, [entry(shared_url, h, "v2") for h in (H_TWIN, subject(1))])
    again = update_index(RID, requests=requests, index=index, documents=documents, objects=objects)

    assert again["kept"] == []  # nothing of the secret left: the request may complete
    assert again["segments"]["hashes_left_index"] is False  # still literally: the twin's rows
    assert {e.object_url for e in index.lookup(H_TWIN)} == {shared_url, twin_url}
    assert [e.version_id for e in index.lookup(H_TWIN) if e.object_url == shared_url] == ["v2"]
    document = json.loads(documents.get(report_key(RID, "index_update.json")) or b"{}")
    assert not_searched(document) == ()
    assert document["segments"]["prefix_rows_shared"] == 0
    # the old shared row (v1, dead now) was scrubbed: the prefix is only in the twin's rows
    assert holders(s3, PREFIX) == {shared_url, twin_url}
    index.compact("reviews")
    assert holders(s3, PREFIX) == {shared_url, twin_url}


def test_full_digest_certificates_are_unchanged_by_the_prefix_fields() -> None:
    document = {"segments": {"hashes_left_index": True, "segments_rewritten": 2,
                             "segments_dropped": 0, "old_files_checked_gone": 4}}  # fmt: skip
    cited = index_erasure_of(document)
    assert cited is not None
    assert cited.hashes_left_index
    assert set(cited.model_dump(mode="json")) == {
        "store", "segments_rewritten", "segments_dropped", "old_files_checked_gone",
        "hashes_left_index", "detail",
    }  # fmt: skip


def test_migrate_verifies_a_dynamodb_index_copied_as_prefixes(
    segment_store: tuple[Any, Any],  # noqa: F811
    lethe_tables: dict[str, Any],
) -> None:
    from lethe.commands.index_migrate import migrate  # noqa: PLC0415
    from lethe_shared.index.subject_index import DynamoSubjectIndex  # noqa: PLC0415

    s3, _ = segment_store
    source = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    url = s3_url(LAKE, "reviews/a.parquet")
    source.replace_object(url, [entry(url, subject(i), "v1", rows=i + 1) for i in range(4)])
    target = opened(s3)

    first = migrate(lethe_tables["SubjectIndexTable"], target)
    second = migrate(lethe_tables["SubjectIndexTable"], target)

    assert [d.verified for d in first.datasets] == [True]
    assert [d.objects_written for d in second.datasets] == [0]  # idempotent on prefixes
    assert key_width(target, "reviews") == 6


# ------------------------------------------------------------------------------ reindex, reconcile

REVIEWS = {
    "dataset_id": "reviews", "format": "parquet", "subject_columns": ["user_id"],
    "schema": [{"name": "user_id", "type": "string"}, {"name": "stars", "type": "int"}],
}  # fmt: skip
HASH_KEY = b"h" * 32


def _put_reviews(s3: Any, key: str, users: list[str]) -> str:
    import io  # noqa: PLC0415

    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": users, "stars": list(range(len(users)))}), sink)
    return str(s3.put_object(Bucket=LAKE, Key=key, Body=sink.getvalue())["VersionId"])


def test_reindexing_and_reconcile_compare_a_prefix_dataset_by_its_prefixes(
    segment_store: tuple[Any, Any],  # noqa: F811
    lethe_buckets: Any,
) -> None:
    from lethe_jobs.reconcile_core import ExpectSettings, _expected_of  # noqa: PLC0415
    from lethe_jobs.reindexing import IndexSettings, ObjectLocation, _Aws, index_group  # noqa: PLC0415
    from lethe_shared.aws.s3 import S3ObjectStore  # noqa: PLC0415
    from lethe_shared.catalog.object_catalog import Buckets  # noqa: PLC0415
    from lethe_shared.datasets.document import parse_dataset  # noqa: PLC0415
    from lethe_shared.subject_hashing.keys import hash_of_id  # noqa: PLC0415

    s3, _ = segment_store
    lethe_buckets()
    dataset = parse_dataset(dict(REVIEWS))
    location = IndexLocation(IndexStore.SEGMENTS, bucket=INDEX_BUCKET, manifest_table=MANIFEST)
    ctx = IndexSettings(dataset, Buckets(raw="unused-raw", lake=LAKE), location, "rx", HASH_KEY)
    aws = _Aws(S3ObjectStore(s3), opened(s3))
    key = "reviews/part-0.parquet"
    where = [ObjectLocation(bucket=LAKE, key=key)]
    _put_reviews(s3, key, ["u1", "u2", "u2", "u3"])

    (first,) = index_group(aws, where, ctx)
    (again,) = index_group(aws, where, ctx)
    _put_reviews(s3, key, ["u1", "u3"])  # u2 left the object
    (changed,) = index_group(aws, where, ctx)

    assert (first.status, first.entries_written, first.entries_deleted) == ("indexed", 3, 0)
    assert again.status == "skipped"  # describes_version on the prefixes it read
    # the stale set: u2 only (before: every prefix, compared with full hashes)
    assert (changed.status, changed.entries_written, changed.entries_deleted) == (
        "indexed", 2, 1,
    )  # fmt: skip
    url = s3_url(LAKE, key)
    index = aws.index
    ids = {u: hash_of_id(HASH_KEY, u)[:12] for u in ("u1", "u2", "u3")}
    assert index.subjects_of(url) == set(ids.values())  # u2 flagged: its older version holds it
    assert {s.subject_hash for s in index.entry_states(url) if s.deleted} == {ids["u2"]}

    # reconcile: what the object should have, named as entries_of_dataset names it
    expect = ExpectSettings(dataset, ctx.buckets, "rc", HASH_KEY, key_width(index, "reviews"))
    head = s3.head_object(Bucket=LAKE, Key=key)
    expected = _expected_of(
        S3ObjectStore(s3), ObjectLocation(bucket=LAKE, key=key, version_id=head["VersionId"]),
        expect,
    )  # fmt: skip
    found = {(e.object_url, e.subject_hash, e.rows) for e in index.entries_of_dataset("reviews")
             if not e.deleted}  # fmt: skip
    assert expect.hash_bytes == 6
    assert set(expected) == found  # no drift on a prefix dataset
