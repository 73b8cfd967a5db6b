"""The derived pointer of the segment index (rules.effective) against moto: ingestion writes no
pointer item, compaction carries what retired level-0 items said in one S3 file per dataset
(`segments.carried`) before it retires them, and each
race the rules docstring names ends as some order of the operations would."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.segments import store as segment_store
from lethe_shared.index.segments.described import DIGEST_BYTES, url_digest
from lethe_shared.index.segments.manifest import SegmentItem
from lethe_shared.index.subject_index import IndexEntry
from tests.integration.conftest import REGION
from tests.integration.test_segment_index import BUCKET, entries_of, make_index, subject, url

A, B, C = subject(1), subject(2), subject(3)


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def manifest(aws: None) -> Any:
    return boto3.resource("dynamodb", region_name=REGION).create_table(
        **manifest_table_definition("lethe-test-index-manifest")
    )


def items(manifest: Any, prefix: str) -> list[dict[str, Any]]:
    return [i for i in manifest.scan()["Items"] if str(i["pk"]).startswith(prefix)]


def written(target: str, hashes: list[str], version: str) -> list[IndexEntry]:
    return entries_of(target, hashes, version, random.Random(version))


def seen(index: SegmentSubjectIndex, h: str) -> list[tuple[str, str, bool]]:
    """(object URL, version, flagged) of the hash's entries."""
    return sorted((e.object_url, e.version_id, e.deleted) for e in index.lookup(h))


def carried_items(manifest: Any) -> list[dict[str, Any]]:
    return [i for i in items(manifest, "seg#") if str(i["sk"]).startswith("P#")]


def carried_table(s3: Any, item: dict[str, Any]) -> dict[bytes, str]:
    key = f"segments/{str(item['pk']).removeprefix('seg#')}/carried/"
    key += str(item["sk"]).removeprefix("P#") + ".parquet"
    data = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    table = pq.read_table(pa.BufferReader(data))
    return dict(zip(table["digest"].to_pylist(), table["origin"].to_pylist(), strict=True))


def test_ingestion_writes_no_pointer_and_compaction_carries_them_in_one_file(
    s3: Any, manifest: Any
) -> None:
    index = make_index(s3, manifest, partition_bits=1)
    urls = [url("ds", i) for i in range(3)]
    index.replace_objects([(u, written(u, [A, B], "v1")) for u in urls])
    index.replace_object(urls[0], written(urls[0], [A], "v2"))  # B's entry of it: flagged
    index.replace_object(urls[1], [])  # a version with no subject: both entries flagged
    assert items(manifest, "obj#") == []  # no pointer item
    level0 = items(manifest, "seg#")
    assert sorted(len(bytes(i["described"].value)) for i in level0) == [8, 8, 24]
    origins = {str(i["origin_seq"]) for i in level0}
    assert urls[0] not in repr(manifest.scan()["Items"])  # digests, no URL
    before = {h: seen(index, h) for h in (A, B)}
    assert before[B] == [(urls[0], "v1", True), (urls[1], "v1", True), (urls[2], "v1", False)]
    report = index.compact("ds")
    assert report.level0_retired == 3
    assert report.carried_files_written == 1  # one file, whatever the number of objects
    assert [i for i in items(manifest, "seg#") if str(i["sk"]).startswith("L0#")] == []
    assert items(manifest, "obj#") == []  # still no pointer item
    (first,) = carried_items(manifest)
    assert first["state"] == "active"
    assert int(first["entries"]) == 3
    held = carried_table(s3, first)
    assert set(held) == {url_digest(u) for u in urls}
    # per object the highest origin that described it: urls[0] and urls[1] were written twice
    assert set(held.values()) <= origins
    assert len(set(held.values())) == 3
    assert urls[0] not in repr(held)  # digests, no URL
    assert {h: seen(index, h) for h in (A, B)} == before
    index.replace_object(urls[2], written(urls[2], [B], "v3"))  # newer than the carried one
    assert seen(index, A)[-1] == (urls[2], "v1", True)
    assert seen(index, B)[-1] == (urls[2], "v3", False)
    assert index.compact("ds").carried_files_written == 1
    (second,) = carried_items(manifest)  # the first one's file and item are gone
    assert second["sk"] != first["sk"]
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="segments/ds/carried/")["KeyCount"] == 1
    assert carried_table(s3, second)[url_digest(urls[2])] > held[url_digest(urls[2])]
    assert {h: seen(index, h) for h in (A, B)} != before
    assert seen(index, B)[-1] == (urls[2], "v3", False)
    assert seen(index, A)[-1] == (urls[2], "v1", True)
    assert index.compact("ds").carried_files_written == 0  # nothing retired: nothing written


def test_two_writers_of_one_object_the_higher_origin_wins_whatever_the_commit_order(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_index(s3, manifest)
    target = url("ds", 0)
    held: list[SegmentItem] = []
    commit = index.writer.commit
    monkeypatch.setattr(index.writer, "commit", held.append)
    index.replace_object(target, written(target, [A, B], "v1"))  # the older seq, held
    monkeypatch.setattr(index.writer, "commit", commit)
    index.replace_object(target, written(target, [A], "v2"))  # the newer, committed first
    assert seen(index, B) == []  # the older write is not committed yet
    index.writer.commit(held[0])
    assert seen(index, A) == [(target, "v2", False)]
    assert seen(index, B) == [(target, "v1", True)]  # the older write lost: its rows are older
    assert items(manifest, "obj#") == []


def racing(
    index: SegmentSubjectIndex, monkeypatch: pytest.MonkeyPatch, then: Callable[[], Any]
) -> list[bool]:
    """The next `object_state` read of `index` runs `then` after it read (a writer between the
    read and the override write)."""
    read = index.reads.object_state
    done: list[bool] = []

    def patched(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if not done:
            done.append(True)
            then()
        return found

    monkeypatch.setattr(index.reads, "object_state", patched)
    return done


def test_a_write_racing_a_flag_lands_after_it(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, other = make_index(s3, manifest), make_index(s3, manifest)
    target = url("ds", 0)
    index.replace_object(target, written(target, [A, B], "v1"))
    done = racing(
        index, monkeypatch, lambda: other.replace_object(target, written(target, [A], "v2"))
    )
    assert index.flag_deleted(target) == 2  # the entries it judged: v1's
    assert done
    # as "flag v1, then write v2": v2 current and unflagged, v1's other entry flagged
    assert seen(other, A) == [(target, "v2", False)]
    assert seen(other, B) == [(target, "v1", True)]
    assert other.flag_deleted(target) == 2  # v2's A, and v1's B (already flagged)
    assert seen(other, A) == [(target, "v2", True)]


def test_a_write_racing_a_removal_survives_it(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, other = make_index(s3, manifest), make_index(s3, manifest)
    target = url("ds", 0)
    index.replace_object(target, written(target, [A, B], "v1"))
    done = racing(
        index, monkeypatch, lambda: other.replace_object(target, written(target, [A], "v2"))
    )
    assert index.remove_object(target) == 2
    assert done
    # as "remove v1, then write v2": v2's entry only, v1's rows dead (not flagged)
    assert seen(other, A) == [(target, "v2", False)]
    assert seen(other, B) == []


def test_a_write_and_a_flag_racing_compaction_keep_their_effect(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, other = make_index(s3, manifest), make_index(s3, manifest)
    first, second = url("ds", 0), url("ds", 1)
    index.replace_objects([(u, written(u, [A, B], "v1")) for u in (first, second)])
    put = index.manifest.put_carried_pending
    raced: list[str] = []

    def between(item: Any) -> None:
        """When compaction starts its carried file (it has read the listing it carries): a
        newer write of `first` commits and `second` is flagged (an override item appears)."""
        if not raced:
            raced.append(item.seq)
            other.replace_object(first, written(first, [A], "v2"))
            other.flag_deleted(second)
        put(item)

    monkeypatch.setattr(index.manifest, "put_carried_pending", between)
    report = index.compact("ds")
    assert raced
    assert report.level0_retired == 1  # the new write came after the horizon: not absorbed
    assert seen(other, A) == [(first, "v2", False), (second, "v1", True)]
    assert seen(other, B) == [(first, "v1", True), (second, "v1", True)]
    monkeypatch.setattr(index.manifest, "put_carried_pending", put)
    index.compact("ds")
    assert seen(other, A) == [(first, "v2", False), (second, "v1", True)]
    assert seen(other, B) == [(first, "v1", True), (second, "v1", True)]


def test_many_objects_digests_go_to_a_file_an_erasure_and_compaction_keep_them(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_store, "MAX_INLINE", 2)
    index = make_index(s3, manifest)
    urls = [url("ds", i) for i in range(4)]
    index.replace_objects([(u, written(u, [A, B], "v1")) for u in urls])
    (item,) = items(manifest, "seg#")
    assert item.get("described_file") is True
    assert "described" not in item
    segment = index.manifest.listing("ds")[0]
    data = s3.get_object(Bucket=BUCKET, Key=segment.described_key)["Body"].read()
    assert len(data) == 4 * DIGEST_BYTES
    assert url_digest(urls[0]) in {
        data[i : i + DIGEST_BYTES] for i in range(0, len(data), DIGEST_BYTES)
    }
    index.replace_object(urls[0], written(urls[0], [A], "v2"))
    assert seen(index, B)[0] == (urls[0], "v1", True)
    done = index.erase_entries("ds", {urls[1]: index.entry_states(urls[1], [B])})
    assert segment.described_key in {k for r in done.rewritten for k in r.old_keys}
    (rewritten,) = [s for s in index.manifest.listing("ds") if s.described_file]
    assert rewritten.seq != segment.seq
    assert s3.get_object(Bucket=BUCKET, Key=rewritten.described_key)["Body"].read() == data
    after = [(urls[0], "v1", True), (urls[2], "v1", False), (urls[3], "v1", False)]
    assert seen(index, B) == after
    index.compact("ds")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    assert not any(k.endswith(".described") for k in keys)
    assert seen(index, B) == after
