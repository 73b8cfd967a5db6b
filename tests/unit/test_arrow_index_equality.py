"""The Arrow implementation of `entries_from_table` gives exactly what the per-row
implementation it replaced gave (`reference_entries`, kept verbatim in
bench/reference_index.py): same subject hashes, rows, row hints (all of them, in row order),
order, object fields and validated model, for every input; the same exception type where the
reference raised. The columnar path, `entry_batch`, gives the same: its `to_items()` are
`IndexEntry.to_item()` of the reference's entries (same keys in the same order, same values and
types; `updated_at` aside, one per batch), its `entries()` the reference's models. Randomized
tables (seeded) and edge cases: every subject column type, composite keys, nested struct paths,
nulls and null parents, `0` and `""` (nobody's, as null), constants, chunking, dictionaries,
and values Python holds equal across types (True == 1).
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import hmac
import itertools
import json
import pickle
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pydantic import ValidationError

from bench.reference_index import reference_entries
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.index import arrow_entries
from lethe_shared.index.arrow_entries import ObjectRef, entries_from_table, entry_batch
from lethe_shared.index.subject_index import MAX_ROW_HINTS, EntryBatch, IndexEntry
from lethe_shared.subject_hashing import arrow as subject_arrow
from lethe_shared.subject_hashing.arrow import row_subject_hashes, row_subjects
from lethe_shared.subject_hashing.canonical import composite_text, is_no_subject
from lethe_shared.subject_hashing.keys import hmac_sha256, key_fingerprint, subject_hash

pytestmark = pytest.mark.lambda_runtime

KEY = b"equality-test-key-0123456789abcdef"
OTHER_KEY = b"equality-test-key-rotated-0123456789"
REF = ObjectRef(
    object_url="s3://lake/ds/part-1.parquet",
    zone=Zone.LAKE,
    format="parquet",
    version_id="v1",
    etag='"e1"',
)


# ------------------------------------------------------------------------------ helpers


def dataset(*columns: str) -> Any:
    """entries_from_table reads `subject_columns` and `dataset_id` only; a stand-in lets a
    subject column have any Arrow type, including those a dataset document refuses."""
    return SimpleNamespace(dataset_id="ds", subject_columns=list(columns))


STAND_IN_FINGERPRINT = "5" * 32


@pytest.fixture(autouse=True)
def stand_in_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in dataset has no document to take a matching fingerprint of: every entry is
    pinned to this one (the key's fingerprint is computed as in production)."""
    monkeypatch.setattr(arrow_entries, "matching_fingerprint", lambda _: STAND_IN_FINGERPRINT)


def pinned(entries: list[IndexEntry], key: bytes) -> list[IndexEntry]:
    """The reference's entries as the pinned implementation gives them: with the stand-in's
    matching fingerprint and the key's fingerprint (the reference predates pins)."""
    pin = {"matching_fingerprint": STAND_IN_FINGERPRINT, "key_fingerprint": key_fingerprint(key)}
    return [e.model_copy(update=pin) for e in entries]


def comparable(entries: list[IndexEntry]) -> list[dict[str, Any]]:
    return [
        {**e.model_dump(exclude={"updated_at"}), "fields_set": sorted(e.model_fields_set)}
        for e in entries
    ]


def item_text(item: Mapping[str, Any]) -> str:
    """An item as compared: every key but updated_at, in its order, with each value's Python
    type (JSON alone would let 1 stand for True, a tuple for a list)."""
    kept = {k: v for k, v in item.items() if k != "updated_at"}
    types = {k: type(v).__name__ for k, v in kept.items()}
    return json.dumps([list(kept.items()), types])


def assert_items(batch: EntryBatch, expected: list[IndexEntry]) -> None:
    """The batch's items are the reference entries' `to_item()`, and its models the reference's;
    one `updated_at` for the batch, its own entries' `to_item()` exactly."""
    items = batch.to_items()
    assert [item_text(i) for i in items] == [item_text(e.to_item()) for e in expected]
    assert all(type(i) is dict for i in items)
    assert {i["updated_at"] for i in items} <= {batch.updated_at}
    models = batch.entries()
    assert comparable(models) == comparable(expected)
    assert [e.to_item() for e in models] == items
    assert len(batch) == len(expected)
    assert list(batch.subject_hashes) == [e.subject_hash for e in expected]
    assert batch.rows == [e.rows for e in expected]
    assert batch.total_rows == sum(e.rows for e in expected)
    assert list(batch.row_hints) == [h for e in expected for h in e.row_hints]


def assert_same(
    table: pa.Table,
    columns: Sequence[str],
    constants: Mapping[str, Any] | None = None,
    coordinates: Sequence[int] | None = None,
    key: bytes = KEY,
) -> list[IndexEntry]:
    """The new implementation gives the reference's entries, or raises the same exception;
    the columnar path gives the reference's items and entries."""
    data = dataset(*columns)
    ref = ObjectRef(**{**REF.__dict__, "constants": dict(constants or {})})
    try:
        expected = reference_entries(table, data, ref, key=key, coordinates=coordinates)
        expected = pinned(expected, key) if expected else expected
    except Exception as exc:  # the new implementation must fail the same way
        with pytest.raises(type(exc)):
            entries_from_table(table, data, ref, key=key, coordinates=coordinates)
        with pytest.raises(type(exc)):
            entry_batch(table, data, ref, key=key, coordinates=coordinates)
        return []
    found = entries_from_table(table, data, ref, key=key, coordinates=coordinates)
    assert comparable(found) == comparable(expected)
    assert len({e.updated_at for e in found}) <= 1  # one per call
    assert_row_hashes(table, data, ref, found, coordinates, key)
    assert_items(entry_batch(table, data, ref, key=key, coordinates=coordinates), expected)
    return found


def assert_row_hashes(
    table: pa.Table,
    data: Any,
    ref: ObjectRef,
    entries: list[IndexEntry],
    coordinates: Sequence[int] | None,
    key: bytes,
) -> None:
    """row_subject_hashes gives each row the hash of the entry that lists it."""
    hashes = row_subject_hashes(table, data, ref.constants, key=key).to_pylist()
    assert len(hashes) == table.num_rows
    located = list(coordinates) if coordinates is not None else list(range(table.num_rows))
    hinted = {h: e.subject_hash for e in entries for h in e.row_hints}
    by_row = {i: hinted[c] for i, c in enumerate(located) if c in hinted}
    if coordinates is None or len(set(located)) == len(located):  # coordinates locate rows
        assert hashes == [by_row.get(i) for i in range(table.num_rows)]
    found = sorted(
        (h, c) for h, c in zip(hashes, located, strict=True) if h is not None
    )  # every row with a subject is in its entry's hints
    assert found == sorted((e.subject_hash, h) for e in entries for h in e.row_hints)


def chunked(values: list[Any], type_: pa.DataType, rng: random.Random) -> pa.ChunkedArray:
    cuts = sorted(rng.randint(0, len(values)) for _ in range(rng.randint(0, 3)))
    bounds = [0, *cuts, len(values)]
    chunks = [pa.array(values[a:b], type_) for a, b in itertools.pairwise(bounds)]
    return pa.chunked_array(chunks, type_)


# ----------------------------------------------------------------------- random tables

STRINGS = ["a", "b", "", "0", "1", "true", "é", "😀", 'q"uote', "back\\slash", "\n", "\u2028", " a"]
DATES = [dt.date(2026, 11, 22), dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)]
POOLS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "string": (pa.string(), STRINGS),
    "large_string": (pa.large_string(), STRINGS),
    "string_view": (pa.string_view(), STRINGS),
    "int8": (pa.int8(), [0, 1, -1, 127, -128]),
    "int16": (pa.int16(), [0, 1, 1001]),
    "int32": (pa.int32(), [0, 1, -7, 2**31 - 1]),
    "int64": (pa.int64(), [0, 1, -1, 1001, 2**63 - 1, -(2**63)]),
    "uint8": (pa.uint8(), [0, 1, 255]),
    "uint64": (pa.uint64(), [0, 1, 2**64 - 1]),
    "bool": (pa.bool_(), [True, False]),
    "date32": (pa.date32(), DATES),
    "date64": (pa.date64(), DATES),
    "decimal128": (
        pa.decimal128(10, 2),
        [Decimal("12.50"), Decimal("12.5"), Decimal("0.00"), Decimal("-1.10"), Decimal("100")],
    ),
    # more digits than the decimal context's 28: normalize() rounds, distinct values share a text
    "decimal256": (
        pa.decimal256(40, 0),
        [Decimal(10**30 + 1), Decimal(10**30 + 2), Decimal(7), Decimal(-(10**35))],
    ),
    "decimal32": (pa.decimal32(5, 2), [Decimal("1.50"), Decimal("0.00"), Decimal("-2.00")]),
    # not subject ids: both implementations fail, but only when such a value is hashed
    "float64": (pa.float64(), [1.5, 2.5]),
    "timestamp": (pa.timestamp("us"), [dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 2)]),
}


def random_values(rng: random.Random, pool: list[Any], rows: int, nulls: float) -> list[Any]:
    return [None if rng.random() < nulls else rng.choice(pool) for _ in range(rows)]


def random_column(rng: random.Random, rows: int) -> Any:
    name = rng.choice([*POOLS, "dictionary"])
    nulls = rng.choice([0.0, 0.1, 0.5])
    if name == "dictionary":
        values = random_values(rng, STRINGS[:4], rows, nulls)
        dictionary = pa.array(["b", "a", "b", "", "0", "unused"], pa.string())  # repeats
        codes = {"a": [1], "b": [0, 2], "": [3], "0": [4]}
        indices = [None if v is None else rng.choice(codes[v]) for v in values]
        array = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), dictionary)
        return pa.chunked_array([array])
    type_, pool = POOLS[name]
    return chunked(random_values(rng, pool, rows, nulls), type_, rng)


def random_case(rng: random.Random) -> dict[str, Any]:
    rows = rng.choice([0, 1, 2, 5, 20, 60])
    table: dict[str, Any] = {}
    paths: list[str] = []
    constants: dict[str, Any] = {}
    for i in range(rng.choice([1, 1, 2, 3])):
        shape = rng.choice(["top", "top", "nested", "constant", "missing"])
        name = f"c{i}"
        if shape == "top":
            table[name] = random_column(rng, rows)
            paths.append(name)
        elif shape == "nested":  # struct column `c<i>` with field `id`; null parents
            column = random_column(rng, rows)
            child = column.combine_chunks()
            parents = pa.array([rng.random() < 0.2 for _ in range(rows)], pa.bool_())
            struct = pa.StructArray.from_arrays(
                [child, pa.array(range(rows), pa.int64())], names=["id", "n"], mask=parents
            )
            table[name] = struct
            paths.append(rng.choice([f"{name}.id", f"{name}.id", f"{name}.nope", f"{name}.n"]))
        elif shape == "constant":  # a partition value not stored in the rows
            constants[name] = rng.choice(["NL", "", "0", None, 7, True, dt.date(2026, 1, 1)])
            paths.append(rng.choice([name, name, f"{name}.x"]))
        else:
            paths.append(name)
    if rng.random() < 0.2 and table:  # a constant for a column the rows hold: rows win
        constants[next(iter(table))] = "ignored"
    table.setdefault("_filler", pa.array(range(rows), pa.int64()))
    coordinates: Sequence[int] | None = None
    if rng.random() < 0.5:
        start = rng.randint(0, 5)
        coordinates = rng.choice(
            [
                list(range(start, start + rows)),
                sorted(rng.sample(range(10 * rows + 1), rows)),
                [rng.randint(0, 3) for _ in range(rows)],  # repeated coordinates
                range(start, start + rows),
            ]
        )
    return {
        "table": pa.table(table),
        "columns": paths,
        "constants": constants,
        "coordinates": coordinates,
    }


@pytest.mark.parametrize("seed", range(8))
def test_random_tables_give_the_reference_entries(seed: int) -> None:
    rng = random.Random(seed)
    produced = 0
    for _ in range(100):
        case = random_case(rng)
        produced += len(assert_same(**case))
    assert produced > 0  # the cases are not all empty


# --------------------------------------------------------------------------- edge cases


def union_of(values: list[Any]) -> pa.Array:
    """A sparse union column of booleans, integers and strings (Python values of mixed types:
    True == 1 and hash(True) == hash(1) in Python, but they are different subjects)."""
    kinds = [None if v is None else {bool: 0, int: 1, str: 2}[type(v)] for v in values]
    children = [
        pa.array([v if type(v) is t else None for v in values], a)
        for t, a in ((bool, pa.bool_()), (int, pa.int64()), (str, pa.string()))
    ]
    type_ids = pa.array([0 if k is None else k for k in kinds], pa.int8())
    return pa.UnionArray.from_sparse(type_ids, children)


def struct_of(rows: list[dict[str, Any] | None]) -> pa.Array:
    return pa.array(rows, pa.struct([("id", pa.string()), ("tier", pa.int32())]))


EDGE_CASES: dict[str, dict[str, Any]] = {
    "0 is a subject, null and empty string are not": {
        "table": pa.table({"u": ["0", "", None, "0", ""]}),
        "columns": ["u"],
    },
    "integer 0 and string 0 hash alike": {
        "table": pa.table({"u": pa.array([0, None, 0], pa.int64())}),
        "columns": ["u"],
    },
    "True == 1 in a union column": {
        "table": pa.table({"u": union_of([True, 1, "1", 1, True, False, 0, None, "true"])}),
        "columns": ["u"],
    },
    "True and 1 in a composite key": {
        "table": pa.table(
            {
                "flag": pa.array([True, True, False, None], pa.bool_()),
                "n": pa.array([1, 1, 0, 1], pa.int64()),
            }
        ),
        "columns": ["flag", "n"],
    },
    "nested path, null parent and null child": {
        "table": pa.table(
            {"customer": struct_of([{"id": "c1", "tier": 1}, None, {"id": None, "tier": 2}])}
        ),
        "columns": ["customer.id"],
    },
    "nested integer leaf": {
        "table": pa.table({"customer": struct_of([{"id": "x", "tier": 0}, None])}),
        "columns": ["customer.tier"],
    },
    "a path through a non-struct column is null": {
        "table": pa.table({"u": ["a", "b"]}),
        "columns": ["u.id"],
    },
    "composite key with a nested part and a constant": {
        "table": pa.table(
            {"customer": struct_of([{"id": "c1", "tier": 1}, {"id": "c2", "tier": 1}])}
        ),
        "columns": ["country", "customer.id"],
        "constants": {"country": "NL"},
    },
    "a null constant makes every row nobody's": {
        "table": pa.table({"u": ["a", "b"]}),
        "columns": ["u", "country"],
        "constants": {"country": None},
    },
    "dates, decimals and booleans": {
        "table": pa.table(
            {
                "d": pa.array([dt.date(2026, 11, 22), None, dt.date(2026, 11, 22)], pa.date32()),
                "m": pa.array(
                    [Decimal("12.50"), Decimal("12.50"), Decimal("0.00")], pa.decimal128(6, 2)
                ),
                "b": pa.array([True, False, True], pa.bool_()),
            }
        ),
        "columns": ["d", "m", "b"],
    },
    "a dictionary with repeated and unused values": {
        "table": pa.table(
            {
                "u": pa.DictionaryArray.from_arrays(
                    pa.array([0, 2, 1, None, 0], pa.int32()), pa.array(["a", "b", "a", "zz"])
                )
            }
        ),
        "columns": ["u"],
    },
    "a float column with nothing to hash": {
        "table": pa.table({"f": [1.5, 2.5], "u": pa.array([None, None], pa.string())}),
        "columns": ["f", "u"],
    },
    "the null type": {"table": pa.table({"u": pa.nulls(3)}), "columns": ["u"]},
    "no rows, a constant subject": {
        "table": pa.table({"x": pa.array([], pa.int64())}),
        "columns": ["country"],
        "constants": {"country": 1.5},  # not a valid id, but nothing is hashed
    },
    "more than 64 rows of one subject": {
        "table": pa.table({"u": ["a", "b"] * 100}),
        "columns": ["u"],
        "coordinates": list(range(2, 202)),
    },
    "63, 64, 65 rows of a subject (hints_complete)": {
        "table": pa.table({"u": ["a"] * 63 + ["b"] * 64 + ["c"] * 65 + ["a", "c"]}),
        "columns": ["u"],
    },
    "thousands of subjects in one object": {
        "table": pa.table({"u": [f"user-{i % 4100:05d}" for i in range(9000)]}),
        "columns": ["u"],
    },
}


@pytest.mark.parametrize("case", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_edge_cases_give_the_reference_entries(case: dict[str, Any]) -> None:
    assert_same(**case)


ARROW_TEXTS = pa.table(
    {
        "i": pa.array([-(2**63), 0, 2**63 - 1, None, 0, 1001], pa.int64()),
        "u": pa.array([2**64 - 1, 7, 7, 7, 0, None], pa.uint64()),
        "i8": pa.array([-128, 127, 0, -1, None, 1], pa.int8()),
        "b": pa.array([True, None, False, True, True, False], pa.bool_()),
        "d": pa.array(
            [dt.date(1, 1, 1), dt.date(9999, 12, 31), None, dt.date(2026, 11, 22), None, None],
            pa.date32(),
        ),
        "s": pa.array(["", "0", "é😀", None, "\u2028", 'q"'], pa.string()),
        "ls": pa.array(["", "0", "é😀", None, "\u2028", 'q"'], pa.large_string()),
        "sv": pa.array(["", "0", "é😀", None, "\u2028", 'q"'], pa.string_view()),
    }
)


@pytest.mark.parametrize("column", ARROW_TEXTS.column_names)
def test_texts_arrow_computes_are_the_canonical_texts(column: str) -> None:
    """Integers, booleans and strings are hashed from Arrow's texts of their values (dates go
    through Python): the same hashes as the reference's texts, alone and in a composite key."""
    entries = assert_same(ARROW_TEXTS, [column])
    assert entries
    assert_same(ARROW_TEXTS, ["s", column])


def test_values_of_one_text_merge_into_one_entry() -> None:
    """Int 1 and string "1" in one union column are one subject, as the reference found."""
    entries = assert_same(pa.table({"u": union_of([1, "1", True])}), ["u"])
    rows = {e.subject_hash: e.row_hints for e in entries}
    assert rows == {subject_hash(KEY, ["u"], ["1"]): (0, 1), subject_hash(KEY, ["u"], [True]): (2,)}


ERRORS: dict[str, dict[str, Any]] = {
    "a timestamp column": {
        "table": pa.table({"t": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us"))}),
        "columns": ["t"],
    },
    "a float column": {"table": pa.table({"f": [1.5]}), "columns": ["f"]},
    "a struct as the subject": {  # the reference failed on hashing a dict, no better message
        "table": pa.table({"customer": struct_of([{"id": "c1", "tier": 1}])}),
        "columns": ["customer"],
        "other_message": True,
    },
    "binary values": {"table": pa.table({"b": [b"x"]}), "columns": ["b"]},
    "a short key": {"table": pa.table({"u": ["a"]}), "columns": ["u"], "key": b"short"},
    "a short key and a bad value": {
        "table": pa.table({"f": [1.5]}),
        "columns": ["f"],
        "key": b"short",
    },
    "a short key and a bad composite value": {
        "table": pa.table({"u": ["a"], "f": [1.5]}),
        "columns": ["u", "f"],
        "key": b"short",
    },
    "a bad value in the second column": {
        "table": pa.table({"u": ["a", "b"], "f": [None, 1.5]}),
        "columns": ["u", "f"],
    },
    "strings that are not UTF-8": {
        "table": pa.table(
            {
                "u": pa.Array.from_buffers(
                    pa.string(),
                    3,
                    [
                        None,
                        pa.array([0, 1, 2, 3], pa.int32()).buffers()[1],
                        pa.py_buffer(b"a\xffb"),
                    ],
                )
            }
        ),
        "columns": ["u"],
        "other_message": True,  # the same error, about a position in another array
    },
    "a date32 beyond Python's dates": {
        "table": pa.table({"d": pa.array([0, -1_000_000], pa.date32())}),
        "columns": ["d"],
    },
    "wrong number of coordinates": {
        "table": pa.table({"u": ["a"]}),
        "columns": ["u"],
        "coordinates": [],
    },
}


@pytest.mark.parametrize("case", ERRORS.values(), ids=ERRORS.keys())
def test_failures_are_the_reference_failures(case: dict[str, Any]) -> None:
    data = dataset(*case["columns"])
    key = case.get("key", KEY)
    coordinates = case.get("coordinates")
    with pytest.raises(Exception) as expected:  # noqa: PT011 (any type: compared below)
        reference_entries(case["table"], data, REF, key=key, coordinates=coordinates)
    with pytest.raises(type(expected.value)) as found:
        entries_from_table(case["table"], data, REF, key=key, coordinates=coordinates)
    if not case.get("other_message"):
        assert str(found.value) == str(expected.value)


def test_a_short_key_is_refused_only_when_something_is_hashed() -> None:
    table = pa.table({"u": pa.array([None, None], pa.string())})
    assert assert_same(table, ["u"], key=b"short") == []
    table = pa.table({"a": ["x", None], "b": [None, 1.5]})  # each column has values, no row both
    assert assert_same(table, ["a", "b"], key=b"short") == []


# ------------------------------------------------------------ the models and the parts


def test_built_entries_equal_validated_models() -> None:
    table = pa.table({"u": [f"s{i % 37}" for i in range(500)]})
    entries = entries_from_table(table, dataset("u"), REF, key=KEY)
    assert len(entries) == 37
    for entry in entries:
        validated = IndexEntry(**entry.model_dump(exclude={"updated_at"}))
        validated = validated.model_copy(update={"updated_at": entry.updated_at})
        assert type(entry) is IndexEntry
        assert entry == validated
        assert entry.model_dump() == validated.model_dump()
        assert entry.to_item() == validated.to_item()
        assert hash(entry) == hash(validated)
        assert entry.model_fields_set == entries[0].model_fields_set
        assert pickle.loads(pickle.dumps(entry)) == entry
        assert IndexEntry.model_validate(entry.model_dump()) == entry
        assert entry.model_copy(update={"rows": 1}).rows == 1
        assert entry.model_copy(update={"updated_at": "x"}).model_fields_set == {
            *entries[0].model_fields_set,
            "updated_at",
        }
        with pytest.raises(ValidationError):
            entry.rows = 2  # type: ignore[misc]  # frozen, as a validated entry
    # the built entries share one fields set, which pydantic copies before changing it
    copied = entries[2].model_copy(update={"rows": 9})
    assert copied.model_fields_set == entries[0].model_fields_set | {"rows"}
    assert entries[1].model_fields_set == entries[0].model_fields_set


@pytest.mark.parametrize("length", [32, 63, 64, 65, 200])
def test_hmac_is_the_hmac_module_s(length: int) -> None:
    key = bytes(range(256))[:length] if length <= 256 else b"k" * length
    messages = [b"", b"a", "é😀".encode(), b"x" * 1000]
    expected = [hmac.new(key, m, hashlib.sha256).digest() for m in messages]
    assert hmac_sha256(key)(messages) == expected


def test_composite_texts_are_composite_text() -> None:
    values = ['q"', "\\", "\u2028", "é\n", "\x00", "😀", "", "0", "a/b"]
    columns = [subject_arrow._coded(pa.array(values)), subject_arrow._coded(pa.array(values[::-1]))]
    codes, members = subject_arrow._combined(columns)
    texts = subject_arrow._texts(["t\u00e9", 'c"'], columns, members)
    # a pair with a value that names nobody ("" and "\u2028", whitespace) is nobody's
    pairs = [
        (a, b)
        for a, b in zip(values, values[::-1], strict=True)
        if not is_no_subject(a) and not is_no_subject(b)
    ]
    assert texts == [composite_text(["t\u00e9", 'c"'], [a, b]) for a, b in pairs]
    assert codes.to_pylist() == [0, 1, None, 2, 3, 4, None, 5, 6]


def test_row_subjects_sorted_hashes_and_null_rows() -> None:
    table = pa.table({"u": ["b", None, "a", "b"]})
    subjects = row_subjects(table, dataset("u"), {}, key=KEY)
    assert subjects.hashes == sorted(subject_hash(KEY, ["u"], [v]) for v in ("a", "b"))
    ids = subjects.ids.to_pylist()
    assert ids[1] is None
    assert subjects.hashes[ids[0]] == subject_hash(KEY, ["u"], ["b"]) == subjects.hashes[ids[3]]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_state_is_restored(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        entries_from_table(pa.table({"u": ["a", "b", "c"]}), dataset("u"), REF, key=KEY)
        assert gc.isenabled() is enabled
        entry_batch(pa.table({"u": ["a", "b", "c"]}), dataset("u"), REF, key=KEY).to_items()
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_batch_validates_the_shared_fields_once_at_construction() -> None:
    """The boundary: an invalid object field fails when the batch is built, entries or not."""
    bad = ObjectRef(**{**REF.__dict__, "zone": "nowhere"})
    with pytest.raises(ValidationError):
        entry_batch(pa.table({"u": ["a"]}), dataset("u"), bad, key=KEY)
    with pytest.raises(ValidationError):
        entry_batch(pa.table({"u": pa.array([], pa.string())}), dataset("u"), bad, key=KEY)
    ok = ObjectRef(**{**REF.__dict__, "zone": "raw"})  # validated as IndexEntry does: the enum
    batch = entry_batch(pa.table({"u": ["a"]}), dataset("u"), ok, key=KEY)
    assert batch.zone is Zone.RAW
    assert batch.to_items()[0]["zone"] == "raw"
    assert type(batch.to_items()[0]["zone"]) is str


def test_a_batch_is_a_sequence_of_its_entries() -> None:
    table = pa.table({"u": ["b", "a", "b", None, "c"]})
    batch = entry_batch(table, dataset("u"), REF, key=KEY, coordinates=[10, 11, 12, 13, 14])
    entries = entries_from_table(
        table, dataset("u"), REF, key=KEY, coordinates=[10, 11, 12, 13, 14]
    )
    assert len(batch) == 3
    assert comparable(list(batch)) == comparable(entries)
    assert comparable([batch[0], batch[-1]]) == comparable([entries[0], entries[-1]])
    assert comparable(batch[1:]) == comparable(entries[1:])
    assert batch[0] is batch.entries()[0]  # built once
    assert batch.entries() is not batch.entries()  # a new list each time
    assert sorted(batch.subject_hashes) == list(batch.subject_hashes)
    assert (batch.object_url, batch.dataset_id, batch.format) == (REF.object_url, "ds", "parquet")
    assert (batch.version_id, batch.etag, batch.total_rows) == ("v1", '"e1"', 4)
    assert {e.updated_at for e in batch} == {i["updated_at"] for i in batch.to_items()}
    assert {e.updated_at for e in batch} == {batch.updated_at}
    assert "3 entries, 4 rows" in repr(batch)
    empty = entry_batch(pa.table({"u": pa.array([None], pa.string())}), dataset("u"), REF, key=KEY)
    assert (len(empty), empty.to_items(), empty.entries(), empty.total_rows) == (0, [], [], 0)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"subject_hashes": ["a" * 64], "ends": [], "row_hints": []}, "one end per"),
        ({"subject_hashes": ["a" * 64], "ends": [2], "row_hints": [0]}, "ends must"),
        ({"subject_hashes": ["a" * 64], "ends": [0], "row_hints": []}, "ends must"),
        ({"subject_hashes": [], "ends": [], "row_hints": [1]}, "ends must"),
    ],
)
def test_a_batch_refuses_columns_that_do_not_fit(columns: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EntryBatch(
            object_url=REF.object_url, dataset_id="ds", zone=Zone.LAKE, format="parquet", **columns
        )


def test_items_keep_max_row_hints() -> None:
    rows = MAX_ROW_HINTS + 1
    table = pa.table({"u": ["a"] * MAX_ROW_HINTS + ["b"] * rows})
    items = entry_batch(table, dataset("u"), REF, key=KEY).to_items()
    by_rows = {i["rows"]: i for i in items}
    assert by_rows[MAX_ROW_HINTS]["hints_complete"] is True
    assert by_rows[MAX_ROW_HINTS]["row_hints"] == list(range(MAX_ROW_HINTS))
    assert by_rows[rows]["hints_complete"] is False
    assert by_rows[rows]["row_hints"] == list(range(MAX_ROW_HINTS, 2 * MAX_ROW_HINTS))


@pytest.mark.parametrize("name", [*POOLS, "union", "struct"])
def test_a_column_s_codes_give_back_its_values(name: str) -> None:
    """Arrow's dictionary encoding, or Python's for the types Arrow cannot hash (decimal32,
    unions, structs): each row's code names its value; distinct (type, value) pairs only."""
    if name == "union":
        array = union_of([True, 1, "1", None, 1, True])
    elif name == "struct":
        array = struct_of([{"id": "a", "tier": 1}, None, {"id": "a", "tier": 1}])
    else:
        type_, pool = POOLS[name]
        array = pa.array([*pool, None, *pool[::-1]], type_)
    column = subject_arrow._coded(array)
    codes = column.codes.to_pylist()
    named = [None if is_no_subject(v) else v for v in array.to_pylist()]  # "" names nobody
    assert [None if c is None else column.values[c] for c in codes] == named
    assert set(codes) - {None} == set(range(len(column.values)))  # every code is used
    typed = [(type(v), v) for v in column.values if not isinstance(v, dict)]
    assert len(set(typed)) == len(typed)


def test_entries_are_pinned_to_the_definition_and_the_key_they_were_computed_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.undo()  # a real document: its real matching fingerprint
    document = {
        "dataset_id": "ds", "format": "parquet", "subject_columns": ["u"],
        "schema": [{"name": "u", "type": "string"}],
    }  # fmt: skip
    real = parse_dataset(document)
    retyped = parse_dataset({**document, "schema": [{"name": "u", "type": "bigint"}]})
    table = pa.table({"u": ["a", "b", None]})

    batch = entry_batch(table, real, REF, key=KEY)
    items = batch.to_items()

    expected = (matching_fingerprint(real), key_fingerprint(KEY))
    assert {(e.matching_fingerprint, e.key_fingerprint) for e in batch} == {expected}
    assert {i["pin"] for i in items} == {f"{expected[0]}/{expected[1]}"}  # one attribute
    assert {IndexEntry.from_item(i).key_fingerprint for i in items} == {expected[1]}
    # another definition of the rows, another key: other pins
    assert matching_fingerprint(retyped) != expected[0]
    other = entry_batch(pa.table({"u": [1]}), retyped, REF, key=OTHER_KEY)
    assert (other[0].matching_fingerprint, other[0].key_fingerprint) == (
        matching_fingerprint(retyped),
        key_fingerprint(OTHER_KEY),
    )
    assert other[0].key_fingerprint != expected[1]


@pytest.mark.parametrize("pin", [("", ""), ("5" * 32, "6" * 16)])
def test_an_entry_s_pin_survives_its_item(pin: tuple[str, str]) -> None:
    entry = IndexEntry(
        subject_hash="a" * 64, object_url=REF.object_url, dataset_id="ds", zone=Zone.LAKE,
        format="parquet", rows=1, matching_fingerprint=pin[0], key_fingerprint=pin[1],
    )  # fmt: skip
    item = entry.to_item()

    assert IndexEntry.from_item(item) == entry
    assert "matching_fingerprint" not in item
    assert item.get("pin") == (f"{pin[0]}/{pin[1]}" if pin[0] else None)
