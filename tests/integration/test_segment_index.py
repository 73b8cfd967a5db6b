"""SegmentSubjectIndex against moto: the same meanings as DynamoSubjectIndex (a random sequence
of operations driven against both, with full digests and with 48-bit prefixes), erasure that
leaves no hash in S3 or the manifest, the shared-prefix rule, what a lookup and a by-object read
cost, compaction racing an erasure, a writer that dies before its commit."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest

from lethe_shared.catalog.zones import Zone
from lethe_shared.index.entry_removal import EntryState
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.segments.format import partition_of, wide_rows
from lethe_shared.index.segments.reader import groups_holding
from lethe_shared.index.segments.store import SegmentCommitError
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from tests.integration.conftest import REGION, TABLES, create_table_from_template

BUCKET = "lethe-test-index"


def subject(i: int) -> str:
    return hashlib.sha256(f"subject-{i}".encode()).hexdigest()


def url(dataset: str, i: int) -> str:
    return f"s3://lake/{dataset}/part-{i}.parquet"


def entries_of(
    object_url: str, hashes: list[str], version: str, rng: random.Random
) -> list[IndexEntry]:
    dataset = object_url.split("/")[3]
    return [
        IndexEntry(
            subject_hash=h,
            object_url=object_url,
            dataset_id=dataset,
            zone=Zone.LAKE,
            format="parquet",
            rows=rng.randint(1, 5),
            row_hints=(1, 2),
            version_id=version,
            etag=f"etag-{version}",
            matching_fingerprint="m" * 16,
            key_fingerprint="k" * 16,
        )
        for h in hashes
    ]


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


def make_index(s3: Any, manifest: Any, **options: Any) -> SegmentSubjectIndex:
    return SegmentSubjectIndex(s3, BUCKET, manifest, settle_seconds=0, **options)


def all_objects(s3: Any) -> Iterator[tuple[str, bytes]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            yield item["Key"], s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()


def manifest_text(manifest: Any) -> str:
    return repr(manifest.scan()["Items"]).lower()


# ------------------------------------------------------------------------------ same meanings


def norm(entry: IndexEntry) -> tuple[Any, ...]:
    return (
        entry.subject_hash,
        entry.object_url,
        entry.dataset_id,
        entry.zone,
        entry.format,
        entry.rows,
        entry.version_id,
        entry.etag,
        entry.deleted,
        entry.matching_fingerprint,
        entry.key_fingerprint,
    )


def key_of(subject_hash: str, width: int) -> str:
    """What the segment index's by-object reads call a subject: the full hash (width 32) or its
    first 12 hex digits (width 6, the shared-prefix rule)."""
    return subject_hash[: 2 * width]


def assert_same(
    dynamo: DynamoSubjectIndex,
    segments: SegmentSubjectIndex,
    hashes: list[str],
    urls: list[str],
    step: str,
    width: int = 32,
) -> None:
    for h in hashes:
        assert sorted(map(norm, dynamo.lookup(h))) == sorted(map(norm, segments.lookup(h))), step
    for u in urls:
        assert {key_of(h, width) for h in dynamo.subjects_of(u)} == segments.subjects_of(u), step
        states = [
            replace(s, subject_hash=key_of(s.subject_hash, width)) for s in dynamo.entry_states(u)
        ]
        assert states == segments.entry_states(u), step
    for dataset in ("ds", "dt"):
        expected = sorted(
            (
                replace(e, subject_hash=key_of(e.subject_hash, width))
                for e in dynamo.entries_of_dataset(dataset)
            ),
            key=lambda e: (e.object_url, e.subject_hash),
        )
        assert expected == list(segments.entries_of_dataset(dataset)), step


def apply(
    op: str,
    target: str,
    dynamo: DynamoSubjectIndex,
    segments: SegmentSubjectIndex,
    rng: random.Random,
    hashes: list[str],
    version: str,
) -> None:
    """One operation on both indexes; their answers must be equal."""
    if op == "replace":
        written = entries_of(target, rng.sample(hashes, rng.randint(0, 5)), version, rng)
        assert dynamo.replace_object(target, written) == segments.replace_object(target, written)
    elif op in {"flag", "prune", "remove"}:
        name = {"flag": "flag_deleted", "prune": "prune_flagged", "remove": "remove_object"}[op]
        assert getattr(dynamo, name)(target) == getattr(segments, name)(target)
    elif op == "subjects":
        chosen = rng.sample(hashes, 3)
        assert dynamo.remove_subjects(target, chosen) == segments.remove_subjects(target, chosen)
    elif op == "unchanged":
        states = dynamo.entry_states(target)
        expected = rng.sample(states, min(len(states), 2))
        if expected and rng.random() < 0.5:  # judged on a state that is no longer there
            first = expected[0]
            expected[0] = EntryState(first.subject_hash, first.version_id, "other", first.deleted)
        one = dynamo.remove_unchanged(target, expected)
        other = segments.remove_unchanged(target, expected)
        assert sorted(one.removed, key=str) == sorted(other.removed, key=str)
        assert sorted(one.changed, key=str) == sorted(other.changed, key=str)
    else:
        segments.compact("ds")
        segments.compact("dt")


@pytest.mark.parametrize(
    ("seed", "width", "by_object"), [(1, 32, False), (2, 32, True), (1, 6, False)]
)
def test_a_random_sequence_of_operations_means_the_same_on_both_indexes(
    s3: Any, manifest: Any, seed: int, width: int, by_object: bool
) -> None:
    """Full digests (width 32) and 48-bit prefixes (width 6): with prefixes, by-object reads
    (`subjects_of`, `entry_states()` without subjects, `entries_of_dataset`) name a subject by
    its first 12 hex digits; every other answer is the same (no two of the 10 subjects share a
    prefix). One run also writes level 1's by-object files (off by default) and reads by object
    through them."""
    rng = random.Random(seed)
    dynamo = DynamoSubjectIndex(
        create_table_from_template("SubjectIndexTable", TABLES["SubjectIndexTable"])
    )
    segments = make_index(
        s3, manifest, partition_bits=1, row_group=3, hash_bytes=width, by_object_files=by_object
    )
    hashes = [subject(i) for i in range(10)]
    assert len({h[:12] for h in hashes}) == len(hashes)
    urls = [url("ds", i) for i in range(3)] + [url("dt", 0)]
    ops = ["replace"] * 4 + ["flag", "prune", "remove", "subjects", "unchanged", "compact"]
    versions = 0
    for step in range(30):
        op, target = rng.choice(ops), rng.choice(urls)
        label = f"seed {seed} step {step}: {op} {target}"
        versions += op == "replace"
        try:
            apply(op, target, dynamo, segments, rng, hashes, f"v{versions}")
        except AssertionError as exc:
            raise AssertionError(label) from exc
        assert_same(dynamo, segments, hashes, urls, label, width)
    for u in urls:
        assert dynamo.described_versions(u) == segments.described_versions(u)
        subjects = sorted(dynamo.subjects_of(u))
        for version in {f"v{n}" for n in range(versions + 1)}:
            expected = dynamo.describes_version(
                u, subjects, version_id=version, etag=f"etag-{version}"
            )
            assert expected == segments.describes_version(
                u, subjects, version_id=version, etag=f"etag-{version}"
            )


# ------------------------------------------------------------------------------ erasure


def fill(
    index: SegmentSubjectIndex,
    rng: random.Random,
    objects: int,
    hashes: list[str],
    version: str,
    always: str = "",
) -> None:
    for i in range(objects):
        target = url("ds", i)
        chosen = rng.sample(hashes, len(hashes) // 2) + ([always] if always else [])
        index.replace_object(target, entries_of(target, chosen, version, rng))


def test_an_erasure_leaves_no_byte_of_the_hash_in_s3_or_the_manifest(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    index = make_index(s3, manifest, partition_bits=2, row_group=4, by_object_files=True)
    hashes = [subject(i) for i in range(40)]
    erased = hashes.pop(3)
    fill(index, rng, 6, hashes, "v1", erased)  # the erased subject in every object
    # compaction dies after retiring its level-0 inputs, before deleting them: retired segments
    # holding the hash stay in S3
    monkeypatch.setattr(index.compactor, "_remove", lambda segment, state: None)
    index.compact("ds")
    monkeypatch.undo()
    assert {s.state for s in index.manifest.segments("ds", 0)} == {"retired"}
    fill(index, rng, 6, hashes, "v2", erased)  # level 0 on top, older rows flagged
    fill(index, rng, 3, hashes, "v3")  # three objects no longer hold it: flagged entries
    index.flag_deleted(url("ds", 4))
    removals = {url("ds", i): index.entry_states(url("ds", i), [erased]) for i in range(6)}
    assert all(len(states) == 1 for states in removals.values())
    done = index.erase_entries("ds", removals)
    assert done.complete
    assert {r.state for r in done.rewritten} >= {"retired", "active"}
    assert sorted(u for u, _ in done.removed) == sorted(removals)
    assert not done.changed
    raw = bytes.fromhex(erased)
    assert [key for key, data in all_objects(s3) if raw in data] == []
    assert erased not in manifest_text(manifest)
    for rewrite in done.rewritten:
        for key in rewrite.old_keys:
            assert key in done.keys_checked_gone
    assert index.lookup(erased) == []
    assert all(index.lookup(h) for h in hashes[:5])  # the others stay
    index.compact("ds")
    assert [key for key, data in all_objects(s3) if raw in data] == []


def test_an_erasure_keeps_an_entry_a_writer_changed_and_says_so(s3: Any, manifest: Any) -> None:
    rng = random.Random(8)
    index = make_index(s3, manifest)
    target = url("ds", 0)
    h = subject(1)
    index.replace_object(target, entries_of(target, [h, subject(2)], "v1", rng))
    judged = index.entry_states(target, [h])
    index.replace_object(target, entries_of(target, [h], "v2", rng))  # a new version meanwhile
    done = index.erase_entries("ds", {target: judged})
    assert done.removed == ()
    assert done.changed == ((target, EntryState(h, "v2", "etag-v2", False)),)
    assert [e.version_id for e in index.lookup(h)] == ["v2"]


def test_a_pointer_is_dropped_only_when_no_segment_lists_the_object(s3: Any, manifest: Any) -> None:
    rng = random.Random(9)
    index = make_index(s3, manifest)
    a, b = url("ds", 0), url("ds", 1)
    index.replace_object(a, entries_of(a, [subject(1)], "v1", rng))
    index.replace_object(b, entries_of(b, [subject(1), subject(2)], "v1", rng))
    done = index.erase_entries(
        "ds",
        {a: index.entry_states(a), b: index.entry_states(b, [subject(1)])},
        drop_pointers=[a, b],
    )
    assert done.pointers_deleted == (a,)
    assert done.pointers_kept == (b,)
    assert a not in manifest_text(manifest)
    assert index.subjects_of(b) == {subject(2)}


# ------------------------------------------------------------------------------ reads


def test_a_lookup_of_ten_hashes_reads_a_footer_the_row_groups_holding_them_and_object_rows(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(11)
    writer = make_index(s3, manifest, partition_bits=1, row_group=512)
    hashes = [subject(i) for i in range(4000)]
    targets = [url("ds", i) for i in range(30)]
    writer.replace_objects(
        [(t, entries_of(t, rng.sample(hashes, 1000), "v1", rng)) for t in targets]
    )
    writer.compact("ds")
    index = make_index(s3, manifest, partition_bits=1, row_group=512)  # a cold footer cache
    wanted = rng.sample(hashes, 10)
    found = index.lookup_in("ds", wanted)
    assert found == writer.lookup_in("ds", wanted)
    assert all(found[h] for h in wanted)
    consulted = {
        s.key: s
        for group in index.reads.consulted("ds", {partition_of(h, 1) for h in wanted}).values()
        for s in group
    }
    assert consulted
    assert all(s.level == 1 for s in consulted.values())
    cold = dict(index.counter.by_key)
    index.counter.reset()
    index.lookup_in("ds", wanted)  # footers cached by key and ETag
    warm = dict(index.counter.by_key)
    budget = 0
    digests = sorted(bytes.fromhex(h) for h in wanted)
    for segment in consulted.values():
        entries = index.files.open(segment.key, segment.etag).metadata
        assert segment.bytes > 64 * 1024  # larger than the footer's suffix GET
        holding = groups_holding(
            entries, "subject_hash", lambda lo, hi: any(lo <= d <= hi for d in digests)
        )
        assert 0 < len(holding) <= 10 < entries.num_row_groups  # pruned to the hashes' groups
        objects = index.files.open(segment.objects_key, segment.objects_etag).metadata
        assert cold.get(segment.key, 0) <= 1 + len(holding)  # footer + row groups
        assert warm.get(segment.key, 0) <= len(holding)  # row groups only
        assert cold.get(segment.objects_key, 0) <= 1 + objects.num_row_groups
        budget += 1 + len(holding) + 1 + objects.num_row_groups
    # and the carried pointers (what the retired level-0 items said): small, read whole with
    # the footer's one GET, cached with it
    (carried,) = index.manifest.listing("ds").active_carried
    assert carried.bytes <= 64 * 1024
    assert cold[carried.key] == 1
    assert carried.key not in warm
    budget += 1
    files = {k for s in consulted.values() for k in (s.key, s.objects_key)}
    assert set(cold) <= files | {carried.key}
    assert 0 < sum(cold.values()) <= budget


def test_reading_one_objects_entries_reads_only_its_row_groups_of_the_by_object_files(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(14)
    writer = make_index(s3, manifest, partition_bits=1, row_group=256, by_object_files=True)
    hashes = [subject(i) for i in range(4000)]
    targets = [url("ds", i) for i in range(30)]
    chosen = {t: rng.sample(hashes, 1000) for t in targets}
    writer.replace_objects([(t, entries_of(t, chosen[t], "v1", rng)) for t in targets])
    writer.compact("ds")
    index = make_index(s3, manifest, partition_bits=1, row_group=256)  # a cold footer cache
    target = targets[17]
    assert index.subjects_of(target) == set(chosen[target])
    level1 = [s for s in index.manifest.listing("ds") if s.level == 1 and s.state == "active"]
    assert len(level1) == 2
    for segment in level1:
        assert index.counter.by_key.get(segment.key, 0) == 0  # the by-hash file is not read
        sidecar = index.files.open(segment.by_object_key, segment.by_object_etag).metadata
        per_partition = 1 + 1000 // 2 // 256  # the object's entries of one partition
        assert sidecar.num_row_groups > 10 * per_partition
        # footer + the row groups holding the object (its rows are contiguous), at most one more
        assert index.counter.by_key[segment.by_object_key] <= 1 + per_partition + 2
    read = sum(index.counter.by_key.get(s.by_object_key, 0) for s in level1)
    assert read < sum(s.bytes for s in level1)
    assert index.counter.bytes < sum(s.bytes for s in level1) / 4


# ------------------------------------------------------------------------------ races


def test_compaction_racing_an_erasure_never_brings_the_hash_back(s3: Any, manifest: Any) -> None:
    rng = random.Random(12)
    index = make_index(s3, manifest, partition_bits=0)
    hashes = [subject(i) for i in range(20)]
    erased = hashes[5]
    fill(index, rng, 4, hashes, "v1", erased)
    raced: list[int] = []

    def erase_in_the_window(partition: int) -> None:
        if raced:
            return
        raced.append(partition)
        removals = {url("ds", i): index.entry_states(url("ds", i), [erased]) for i in range(4)}
        assert index.erase_entries("ds", removals).rewritten

    index.compactor.before_commit = erase_in_the_window
    report = index.compact("ds")
    assert raced
    assert report.restarts >= 1
    raw = bytes.fromhex(erased)
    assert [key for key, data in all_objects(s3) if raw in data] == []
    assert index.lookup(erased) == []
    assert index.lookup(hashes[0]) == index.lookup(hashes[0])
    assert len(index.entries("ds")) > 0


def test_a_writer_that_dies_before_its_commit_is_ignored_scrubbed_and_swept(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(13)
    index = make_index(s3, manifest, pending_timeout_seconds=0)
    target = url("ds", 0)
    erased, other = subject(1), subject(2)
    index.replace_object(target, entries_of(target, [erased], "v1", rng))
    # a writer of v2 dies after its PUTs: a pending item and two files
    seq = "99999999999999999999-00000000"
    fields = {
        "object_url": target,
        "version_id": "v2",
        "etag": "etag-v2",
        "zone": "lake",
        "format": "parquet",
        "origin_seq": seq,
        "matching_fingerprint": "",
        "key_fingerprint": "",
        "updated_at": "",
    }
    dead = index.writer.write("ds", 0, None, wide_rows([erased, other], [1, 1], fields), seq=seq)
    assert [s.state for s in index.manifest.segments("ds", 0)].count("pending") == 1
    assert [e.version_id for e in index.lookup(erased)] == ["v1"]  # the pending write is ignored
    assert index.lookup(other) == []
    done = index.erase_entries("ds", {target: index.entry_states(target, [erased])})
    assert any(r.state == "pending" for r in done.rewritten)
    raw = bytes.fromhex(erased)
    assert [key for key, data in all_objects(s3) if raw in data] == []
    with pytest.raises(SegmentCommitError):  # the writer wakes up: its segment was replaced
        index.writer.commit(dead)
    report = index.compact("ds")
    assert report.pending_swept == 1
    assert [s for s in index.manifest.all_segments("ds") if s.state == "pending"] == []
    assert [key for key, _ in all_objects(s3) if seq in key] == []
    assert [key for key, data in all_objects(s3) if bytes.fromhex(other) in data] == []


# ------------------------------------------------------------------------------ prefixes


def stored_keys(s3: Any) -> list[tuple[str, bytes]]:
    """(S3 key, subject key) of every row of every entries file, decoded, and every row-group
    statistic of `subject_hash` (the footer)."""
    import io  # noqa: PLC0415

    import pyarrow.parquet as pq  # noqa: PLC0415

    found = []
    for key, data in all_objects(s3):
        if key.endswith(".objects.parquet"):
            continue
        parquet = pq.ParquetFile(io.BytesIO(data))
        if "/carried/" in key:  # object URL digests, no subject column: every value is kept
            found += [(key, d) for d in parquet.read()["digest"].to_pylist()]
            continue
        found += [
            (key, k) for k in parquet.read(columns=["subject_hash"])["subject_hash"].to_pylist()
        ]
        for i in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(i).column(0).statistics
            if stats is not None and stats.has_min_max:
                found += [(key, stats.min), (key, stats.max)]
    return found


def test_with_prefixes_a_lookup_returns_all_entries_sharing_the_prefix_erasure_keeps_a_shared_one(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(21)
    index = make_index(s3, manifest, hash_bytes=6, row_group=4)
    one, other = "aabbccddeeff" + "1" * 52, "aabbccddeeff" + "2" * 52  # one 48-bit prefix
    a, b, c = url("ds", 0), url("ds", 1), url("ds", 2)
    index.replace_object(a, entries_of(a, [one, other, subject(1)], "v1", rng))
    index.replace_object(b, entries_of(b, [one, subject(2)], "v1", rng))
    index.replace_object(c, entries_of(c, [other], "v1", rng))
    # lookups by the full hash return every entry sharing its prefix, named by the hash asked
    assert [(e.object_url, e.subject_hash) for e in index.lookup(one)] == [
        (a, one),
        (b, one),
        (c, one),  # the false candidate: the erase job's full-hash match finds nothing in c
    ]
    # by-object reads name a subject by its prefix; one row per prefix and object
    assert index.subjects_of(a) == {"aabbccddeeff", subject(1)[:12]}
    assert [s.subject_hash for s in index.entry_states(a, [one])] == [one]
    index.compact("ds")
    done = index.erase_entries(
        "ds", {a: index.entry_states(a, [one]), b: index.entry_states(b, [one])}
    )
    assert done.complete
    assert [u for u, _ in done.removed] == [b]
    assert [(u, s.subject_hash) for u, s in done.kept_shared] == [(a, one)]  # `other` is in a
    assert [e.object_url for e in index.lookup(other)] == [a, c]  # never lost
    assert index.subjects_of(b) == {subject(2)[:12]}
    # the erase job rewrites a without both subjects: the shared row is now an older
    # version's, pruned, then scrubbed; c's entry is erased: no row, no statistic, no raw byte
    # of the prefix stays in S3
    index.replace_object(a, entries_of(a, [subject(1)], "v2", rng))
    assert index.prune_flagged(a) == 1
    assert index.remove_subjects(a, [one]) == 0  # dead rows of the prefix, scrubbed
    assert [
        u for u, _ in index.erase_entries("ds", {c: index.entry_states(c, [other])}).removed
    ] == [c]
    prefix = bytes.fromhex("aabbccddeeff")
    assert [k for k, held in stored_keys(s3) if held == prefix] == []
    assert [key for key, data in all_objects(s3) if prefix in data] == []
    assert index.lookup(one) == []
    assert index.lookup(other) == []
    assert index.subjects_of(a) == {subject(1)[:12]}
