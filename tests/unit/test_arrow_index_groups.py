"""`entry_batches` (the entries of a group of objects, each distinct subject of the group hashed
once, what the index job computes per Spark task) gives every object exactly the batch
`entry_batch` gives it alone, and so the entries and items of the per-row implementation
(`reference_entries`): randomized groups of the equality test's random tables, and edge
cases: empty objects, objects without subject values, nulls, composite subjects, one object in
a group, the same subject in several objects and text types, equal texts in one object."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from bench.reference_index import reference_entries
from lethe_shared.index.arrow_entries import (
    ObjectRef,
    entry_batch,
    entry_batches,
    object_subjects,
)
from lethe_shared.index.subject_index import EntryBatch
from lethe_shared.subject_hashing import arrow_digests
from lethe_shared.subject_hashing.keys import subject_hash
from tests.unit.test_arrow_index_equality import (
    KEY,
    REF,
    assert_items,
    dataset,
    pinned,
    random_case,
    stand_in_fingerprint,  # noqa: F401 (an autouse fixture: pins the stand-in datasets' entries)
    union_of,
)


@dataclasses.dataclass
class Case:
    table: pa.Table
    columns: list[str]
    constants: dict[str, Any] = dataclasses.field(default_factory=dict)
    coordinates: Sequence[int] | None = None

    def ref(self, number: int) -> ObjectRef:
        return dataclasses.replace(
            REF,
            object_url=f"s3://lake/ds/part-{number}.parquet",
            version_id=f"v{number}",
            constants=dict(self.constants),
        )


def columns_of(batch: EntryBatch) -> tuple[Any, ...]:
    shared = (batch.object_url, batch.dataset_id, batch.zone, batch.format, batch.version_id)
    hashes, ends, hints = batch.subject_hashes, batch.ends, batch.row_hints
    return (*shared, batch.etag, list(hashes), list(ends), list(hints))


def assert_group(cases: Sequence[Case], key: bytes = KEY) -> list[EntryBatch]:
    """The group's batches are, object by object, `entry_batch`'s and the reference's."""
    found = [
        object_subjects(c.table, dataset(*c.columns), c.ref(i), key=key, coordinates=c.coordinates)
        for i, c in enumerate(cases)
    ]
    batches = entry_batches(found, key=key)
    assert len(batches) == len(cases)
    for i, (case, batch) in enumerate(zip(cases, batches, strict=True)):
        data, ref = dataset(*case.columns), case.ref(i)
        alone = entry_batch(case.table, data, ref, key=key, coordinates=case.coordinates)
        assert columns_of(batch) == columns_of(alone)
        expected = reference_entries(case.table, data, ref, key=key, coordinates=case.coordinates)
        assert_items(batch, pinned(expected, key) if expected else expected)
    return batches


def fits(case: Case) -> bool:
    """The reference indexes the case (float or timestamp subjects make it raise)."""
    try:
        reference_entries(
            case.table, dataset(*case.columns), case.ref(0), key=KEY, coordinates=case.coordinates
        )
    except Exception:  # any failure: the case is not a group member
        return False
    return True


@pytest.mark.parametrize("seed", range(6))
def test_random_groups_give_each_object_its_own_entries(seed: int) -> None:
    rng = random.Random(seed)
    cases = [c for c in (Case(**random_case(rng)) for _ in range(120)) if fits(c)]
    entries = 0
    while cases:
        size = rng.choice([1, 2, 3, 5, 8])
        group, cases = cases[:size], cases[size:]
        entries += sum(len(b) for b in assert_group(group))
    assert entries > 0


def test_an_empty_group_has_no_batches() -> None:
    assert entry_batches([], key=KEY) == []
    assert entry_batches([], key=b"short") == []


def test_one_object_in_a_group() -> None:
    (batch,) = assert_group([Case(pa.table({"u": ["b", "a", "b", None]}), ["u"])])
    assert batch.rows == [1, 2] or batch.rows == [2, 1]
    assert batch.total_rows == 3


def test_objects_without_subjects_among_others() -> None:
    """Empty objects, a missing column, only nulls, a composite key never complete: no entry,
    and the other objects of the group keep theirs."""
    batches = assert_group(
        [
            Case(pa.table({"u": pa.array([], pa.string())}), ["u"]),
            Case(pa.table({"u": ["a", "b", "a"]}), ["u"]),
            Case(pa.table({"x": [1, 2]}), ["u"]),
            Case(pa.table({"u": pa.array([None, None], pa.string())}), ["u"]),
            Case(pa.table({"a": ["x", None], "b": [None, "y"]}), ["a", "b"]),
            Case(pa.table({"u": pa.nulls(3)}), ["u"]),
            Case(pa.table({"u": ["b", None, "c"]}), ["u"], coordinates=[5, 6, 7]),
        ]
    )
    assert [len(b) for b in batches] == [0, 2, 0, 0, 0, 0, 2]
    assert list(batches[6].row_hints) in ([5, 7], [7, 5])


def test_a_group_of_objects_without_subjects_needs_no_key() -> None:
    cases = [
        Case(pa.table({"u": pa.array([], pa.string())}), ["u"]),
        Case(pa.table({"u": pa.array([None], pa.string())}), ["u"]),
    ]
    assert [len(b) for b in assert_group(cases, key=b"short")] == [0, 0]
    with pytest.raises(ValueError, match="at least"):
        object_subjects(pa.table({"u": ["a"]}), dataset("u"), REF, key=b"short")


def test_a_subject_in_several_objects_has_one_hash() -> None:
    """The same subject as a string, an integer and in a dictionary column in three objects,
    a composite subject in two: one hash each, as `subject_hash` gives it."""
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), ["7", "x"])
    batches = assert_group(
        [
            Case(pa.table({"u": ["7", "y"]}), ["u"]),
            Case(pa.table({"u": pa.array([7, 8, 7], pa.int64())}), ["u"]),
            Case(pa.table({"u": dictionary}), ["u"]),
            Case(pa.table({"u": pa.array(["7", "z"], pa.large_string())}), ["u"]),
            Case(pa.table({"t": ["a", "a", "b"], "u": ["7", "7", "7"]}), ["t", "u"]),
            Case(pa.table({"t": ["b"], "u": pa.array([7], pa.int32())}), ["t", "u"]),
        ]
    )
    seven = subject_hash(KEY, ["u"], ["7"])
    for batch in batches[:4]:
        assert seven in batch.subject_hashes
    pair = subject_hash(KEY, ["t", "u"], ["b", "7"])
    assert pair in batches[4].subject_hashes
    assert list(batches[5].subject_hashes) == [pair]


def test_equal_texts_in_one_object_are_one_subject_in_a_group() -> None:
    """Int 1 and string "1" in one union column: one entry, as alone."""
    batches = assert_group(
        [
            Case(pa.table({"u": union_of([1, "1", True])}), ["u"]),
            Case(pa.table({"u": ["1", "true"]}), ["u"]),
        ]
    )
    assert batches[0].rows in ([2, 1], [1, 2])
    assert set(batches[0].subject_hashes) == set(batches[1].subject_hashes)


def test_a_group_keeps_each_object_s_fields() -> None:
    cases = [Case(pa.table({"u": ["a"]}), ["u"]), Case(pa.table({"u": ["a"]}), ["u"])]
    batches = assert_group(cases)
    assert [b.object_url for b in batches] == [c.ref(i).object_url for i, c in enumerate(cases)]
    assert [b.version_id for b in batches] == ["v0", "v1"]
    assert batches[0].subject_hashes == batches[1].subject_hashes


def test_object_subjects_keep_codes_and_texts_not_the_table() -> None:
    table = pa.table({"u": ["a", "b", "a"], "payload": ["x" * 1000] * 3})
    found = object_subjects(table, dataset("u"), REF, key=KEY, coordinates=[3, 4, 5])
    assert found.rows == 3
    assert not any(isinstance(v, pa.Table) for v in vars(found).values())
    assert found.coordinates is not None
    assert found.coordinates.to_pylist() == [3, 4, 5]
    with pytest.raises(ValueError, match="one coordinate per row"):
        object_subjects(table, dataset("u"), REF, key=KEY, coordinates=[1])


@pytest.mark.parametrize("prefixes", ["tied", "none"])
def test_digests_sharing_their_first_bytes_are_ordered_whole(
    prefixes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are sorted on each digest's first 8 bytes as an integer; when two digests share
    them (here: every digest, forced) or the machine is big-endian (no prefixes), the order
    comes from the whole digests: the same entries, alone and in a group."""

    def forced(found: pa.FixedSizeBinaryArray) -> pa.Array | None:
        return pa.array([0] * len(found), pa.uint64()) if prefixes == "tied" else None

    monkeypatch.setattr(arrow_digests, "_prefixes", forced)
    rng = random.Random(7)
    strings = [f"s{i}" for i in range(40)]
    cases = [
        Case(pa.table({"u": [rng.choice(strings) for _ in range(60)]}), ["u"]) for _ in range(4)
    ]
    assert_group(cases)
    assert_group(cases[:1])
