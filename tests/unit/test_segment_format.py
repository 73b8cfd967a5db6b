"""The segment format (lethe_shared.index.segments.format, reader, s3_ranges) without AWS:
seq ids, partitions, the two Parquet files, sort order, row-group pruning, ranged reads."""

from __future__ import annotations

import hashlib
import io
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_shared.index.segments.format import (
    ENTRIES_SCHEMA,
    HASH_BYTES,
    OBJECTS_SCHEMA,
    PREFIX_BYTES,
    build_segment,
    build_segment_of,
    empty_wide,
    entries_key,
    from_parquet,
    new_seq,
    object_part,
    objects_key,
    partition_bounds,
    partition_of,
    seq_after,
    to_parquet,
    wide_rows,
    widen,
)
from lethe_shared.index.segments.manifest import ACTIVE, SegmentItem
from lethe_shared.index.segments.reader import SegmentReader, groups_holding, rows_of
from lethe_shared.index.segments.s3_ranges import (
    TAIL_BYTES,
    ReadCounter,
    SegmentFiles,
    SegmentGoneError,
)


def subject(i: int) -> str:
    return hashlib.sha256(f"s{i}".encode()).hexdigest()


def fields(url: str, origin: str, version: str = "v1") -> dict[str, str]:
    return {
        "object_url": url,
        "version_id": version,
        "etag": f"etag-{version}",
        "zone": "lake",
        "format": "parquet",
        "origin_seq": origin,
        "matching_fingerprint": "m",
        "key_fingerprint": "k",
        "updated_at": "2026-11-27T00:00:00+00:00",
    }


def lake(
    rng: random.Random, objects: int = 12, per_object: int = 200, pool: int = 1000
) -> pa.Table:
    hashes = [subject(i) for i in range(pool)]
    parts = []
    for i in range(objects):
        chosen = rng.sample(hashes, per_object)
        parts.append(
            wide_rows(
                chosen,
                [rng.randint(1, 9) for _ in chosen],
                fields(f"s3://l/ds/{i:03d}", f"{i % 3:020d}-00000000"),
            )
        )
    return pa.concat_tables(parts)


def as_set(wide: pa.Table) -> set[tuple[Any, ...]]:
    return set(zip(*(wide[c].to_pylist() for c in wide.column_names), strict=True))


def test_seq_ids_sort_by_time_and_have_their_format() -> None:
    seqs = [new_seq(ns) for ns in (5, 10**18, 10**19 - 1, 42)]
    for seq in seqs:
        digits, dash, tail = seq.partition("-")
        assert (len(digits), dash, len(tail)) == (20, "-", 8)
        int(tail, 16)
    assert sorted(seqs) == [seqs[0], seqs[3], seqs[1], seqs[2]]
    a, b = new_seq(), new_seq()
    assert a[:20] <= b[:20]
    assert a < seq_after(a) < new_seq(int(a[:20]) + 1)


def test_a_hash_partition_is_its_first_bits() -> None:
    h = "f3" + "0" * 62
    assert partition_of(h, 0) == 0
    assert partition_of(h, 4) == 0xF
    assert partition_of(h, 8) == 0xF3
    assert partition_of(bytes.fromhex(h), 4) == 0xF
    rng = random.Random(1)
    for _ in range(200):
        digest = rng.randbytes(32)
        bits = rng.randint(0, 16)
        p = partition_of(digest, bits)
        low, high = partition_bounds(p, bits)
        assert low <= digest <= high
    with pytest.raises(ValueError, match="partition bits"):
        partition_of(h, 17)


def test_keys_name_the_level_and_partition() -> None:
    seq = "00000000000000000001-abcdef01"
    assert entries_key("ds", 0, None, seq) == f"segments/ds/L0/{seq}.parquet"
    assert entries_key("ds", 1, 10, seq) == f"segments/ds/L1/000a/{seq}.parquet"
    assert objects_key(entries_key("ds", 0, None, seq)) == f"segments/ds/L0/{seq}.objects.parquet"


def test_a_segment_round_trips_sorted_with_its_object_table() -> None:
    wide = lake(random.Random(2))
    empty = pa.Table.from_pylist([fields("s3://l/ds/empty", "0" * 20 + "-00000000")])
    entries, objects = build_segment(wide, empty)
    assert entries.schema == ENTRIES_SCHEMA
    assert objects.schema == OBJECTS_SCHEMA
    keys = list(
        zip(entries["subject_hash"].to_pylist(), entries["object_id"].to_pylist(), strict=True)
    )
    assert keys == sorted(keys)
    ids = objects["object_id"].to_pylist()
    assert ids == list(range(len(ids)))
    order = list(
        zip(objects["object_url"].to_pylist(), objects["origin_seq"].to_pylist(), strict=True)
    )
    assert order == sorted(order)  # ids follow (url, origin): the table is sorted by URL too
    assert "s3://l/ds/empty" in objects["object_url"].to_pylist()
    back_entries = from_parquet(to_parquet(entries, 256), ENTRIES_SCHEMA)
    back_objects = from_parquet(to_parquet(objects, 4), OBJECTS_SCHEMA)
    assert as_set(widen(back_entries, back_objects)) == as_set(wide)
    assert len(rows_of(widen(back_entries, back_objects))) == wide.num_rows


def test_one_object_version_has_one_set_of_fields() -> None:
    one = wide_rows([subject(1)], [1], fields("s3://l/ds/a", "1", "v1"))
    other = wide_rows([subject(2)], [1], fields("s3://l/ds/a", "1", "v2"))
    with pytest.raises(ValueError, match="two sets of fields"):
        build_segment(pa.concat_tables([one, other]))


@pytest.mark.parametrize("seed", range(12))
def test_a_segment_of_parts_is_the_segment_of_their_wide_rows(seed: int) -> None:
    """`build_segment_of` (a new level-0 write's objects, each one's fields once) equals
    `build_segment` of the same objects' wide rows end to end: the same two tables, with
    prefix collisions, an object in two parts, objects without entries, any order."""
    rng = random.Random(seed)
    width = rng.choice([HASH_BYTES, PREFIX_BYTES])
    pool = [subject(i) for i in range(rng.randint(1, 400))]
    if width == PREFIX_BYTES and len(pool) > 1:  # two digests sharing a 6-byte prefix
        pool[1] = pool[0][:12] + pool[1][12:]
    parts = []
    for _ in range(rng.randint(0, 8)):
        chosen = rng.sample(pool, rng.randint(1, len(pool)))
        url = f"s3://l/ds/{rng.randrange(5):03d}-é"
        origin = f"{rng.randrange(2):020d}-00000000"
        held = fields(url, origin, f"v-{url}-{origin}")
        parts.append(object_part(chosen, [rng.randint(1, 9) for _ in chosen], held, width))
    empty = pa.Table.from_pylist(
        [fields(f"s3://l/ds/empty-{i}", "0" * 20 + "-00000000") for i in range(rng.randint(0, 2))],
        schema=pa.schema([pa.field(n, pa.string()) for n in fields("u", "o")]),
    )
    wide = pa.concat_tables([p.wide() for p in parts]) if parts else empty_wide()

    expected = build_segment(wide, empty)
    built = build_segment_of(parts, empty)

    assert built[0].equals(expected[0])
    assert built[1].equals(expected[1])
    assert built[0].schema == ENTRIES_SCHEMA
    assert built[1].schema == OBJECTS_SCHEMA


def test_a_segment_of_parts_refuses_two_sets_of_fields_for_one_version() -> None:
    one = object_part([subject(1)], [1], fields("s3://l/ds/a", "1", "v1"))
    other = object_part([subject(2)], [1], fields("s3://l/ds/a", "1", "v2"))
    with pytest.raises(ValueError, match="two sets of fields"):
        build_segment_of([one, other])


def test_row_group_statistics_prune_to_the_groups_holding_a_hash() -> None:
    wide = lake(random.Random(3))
    entries, _ = build_segment(wide)
    data = to_parquet(entries, 128)
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    assert metadata.num_row_groups == -(-entries.num_rows // 128)
    table = pq.read_table(io.BytesIO(data))
    rng = random.Random(4)
    for h in rng.sample(table["subject_hash"].to_pylist(), 20):

        def holds(lo: Any, hi: Any, h: bytes = h) -> bool:
            return bool(lo <= h <= hi)

        groups = groups_holding(metadata, "subject_hash", holds)
        assert 1 <= len(groups) <= 2  # a hash's rows are adjacent: one group, or two at a seam
        holding = {
            i
            for i in range(metadata.num_row_groups)
            if h in pq.ParquetFile(io.BytesIO(data)).read_row_group(i)["subject_hash"].to_pylist()
        }
        assert holding <= set(groups)
    assert groups_holding(metadata, "subject_hash", lambda lo, hi: False) == []


class FakeS3:
    """get_object with Range (bytes=a-b, bytes=-n), put, delete, head: enough for SegmentFiles."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> dict[str, Any]:
        self.objects[Key] = Body
        return {"ETag": '"' + hashlib.md5(Body).hexdigest() + '"'}

    def get_object(self, Bucket: str, Key: str, Range: str = "") -> dict[str, Any]:
        if Key not in self.objects:
            from botocore.exceptions import ClientError  # noqa: PLC0415

            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        data = self.objects[Key]
        if not Range:
            return {"Body": io.BytesIO(data)}
        spec = Range.removeprefix("bytes=")
        if spec.startswith("-"):
            start, end = max(0, len(data) - int(spec[1:])), len(data)
        else:
            a, b = spec.split("-")
            start, end = int(a), int(b) + 1
        return {
            "Body": io.BytesIO(data[start:end]),
            "ContentRange": f"bytes {start}-{end - 1}/{len(data)}",
        }


def test_a_lookup_reads_the_footer_once_then_only_the_row_groups_holding_the_hashes() -> None:
    wide = lake(random.Random(5), objects=40, per_object=800, pool=20000)
    entries, objects = build_segment(wide)
    s3 = FakeS3()
    files = SegmentFiles(s3, "b", ReadCounter())
    data = to_parquet(entries, 512)
    assert len(data) > 2 * TAIL_BYTES
    segment = SegmentItem(
        "ds",
        1,
        0,
        "1",
        "e.parquet",
        "e.objects.parquet",
        ACTIVE,
        etag=files.put("e.parquet", data),
        objects_etag=files.put("e.objects.parquet", to_parquet(objects, 8)),
    )
    reader = SegmentReader(files)
    rng = random.Random(6)
    wanted = rng.sample(wide["subject_hash"].to_pylist(), 10)
    rows = reader.by_hashes(segment, wanted)
    expected = {r for r in as_set(wide) if r[0] in set(wanted)}
    assert {(bytes.fromhex(r.subject_hash), r.object_url) for r in rows} == {
        (r[0], r[2]) for r in expected
    }
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    holding = groups_holding(
        metadata, "subject_hash", lambda lo, hi: any(lo <= w <= hi for w in wanted)
    )
    assert len(holding) < metadata.num_row_groups
    assert files.counter.by_key["e.parquet"] <= 1 + len(holding)
    files.counter.reset()
    reader.by_hashes(segment, wanted)  # footer cached by key and ETag: no suffix GET
    assert files.counter.by_key["e.parquet"] <= len(holding)
    assert files.counter.bytes < len(data)
    url = rows[0].object_url
    by_object = reader.by_object(segment, url)
    assert {r.subject_hash for r in by_object} == {r[0].hex() for r in as_set(wide) if r[2] == url}
    s3.objects.clear()
    with pytest.raises(SegmentGoneError):
        reader.whole(segment)


def test_the_segment_index_is_a_subject_index() -> None:
    """mypy checks the assignment: SegmentSubjectIndex has every method of the Protocol."""
    from lethe_shared.index.segments import SegmentSubjectIndex  # noqa: PLC0415
    from lethe_shared.index.subject_index import SubjectIndex  # noqa: PLC0415

    index: SubjectIndex = SegmentSubjectIndex(FakeS3(), "bucket", object())
    assert index.lookup is not None


def test_a_prefix_key_is_six_bytes_and_subjects_sharing_one_in_an_object_are_one_row() -> None:
    from lethe_shared.index.segments.format import (  # noqa: PLC0415
        PREFIX_BYTES,
        by_object,
        subject_id,
        subject_key,
    )

    one, other = "aabbccddeeff" + "1" * 52, "aabbccddeeff" + "2" * 52
    assert subject_key(one, PREFIX_BYTES) == bytes.fromhex("aabbccddeeff")
    assert subject_id(one, PREFIX_BYTES) == subject_id("aabbccddeeff", PREFIX_BYTES)
    assert subject_id(one) == one  # full digests: the hash itself
    with pytest.raises(ValueError, match="64 hex digits"):
        subject_key("aabbccddeeff")  # a prefix does not name a full digest
    rows = wide_rows([one, other, subject(1)], [2, 3, 1], fields("s3://l/ds/a", "1"), PREFIX_BYTES)
    assert sorted(
        zip(
            rows["subject_hash"].to_pylist(),
            rows["rows"].to_pylist(),
            rows["subjects"].to_pylist(),
            strict=True,
        )
    ) == sorted([(bytes.fromhex("aabbccddeeff"), 5, 2), (bytes.fromhex(subject(1)[:12]), 1, 1)])
    entries, _ = build_segment(rows)
    data = to_parquet(entries, 4, PREFIX_BYTES)
    stored = pq.ParquetFile(io.BytesIO(data))
    assert stored.schema_arrow.field("subject_hash").type == pa.binary(PREFIX_BYTES)
    assert from_parquet(data, ENTRIES_SCHEMA).equals(entries)
    low, high = partition_bounds(0xA, 4, PREFIX_BYTES)
    assert low <= bytes.fromhex("aabbccddeeff") <= high
    assert by_object(entries)["object_id"].to_pylist() == sorted(entries["object_id"].to_pylist())
