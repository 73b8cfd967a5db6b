"""The erase job matches raw Parquet rows with `column_subject_hashes` (texts computed once per
distinct value of a flat string or integer column): it must give exactly the hashes of the
row-by-row path (`raw_subject_rows` then `subject_hashes_of_rows`) it replaced."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.erase_rows import SubjectMatcher
from lethe_jobs.erase_rows import groups as erase_groups
from lethe_jobs.erase_rows import match as erase_match
from lethe_jobs.readers import RawRecords
from lethe_jobs.subject_rows import raw_subject_rows
from lethe_jobs.validate import POSITION
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.records import column_subject_hashes, subject_hashes_of_rows

KEY = b"column-subject-hashes-unit-test-key-0123"

TEXTS = ["u1", " u1", "u1 ", "", "0", "00", "-0", "1e3", "2026-01-02", "true", "x\u0000", "\t7\n"]
INTS = [0, 1, -1, 7, 2**40, -(2**31), 10]


def dataset(columns: list[tuple[str, str]], subjects: list[str]) -> Dataset:
    schema = [{"name": n, "type": t} for n, t in columns]
    return parse_dataset(
        {"dataset_id": "ds", "format": "parquet", "subject_columns": subjects, "schema": schema}
    )


def row_by_row(table: pa.Table, ds: Dataset) -> list[Any]:
    positions = pa.array(range(table.num_rows), pa.int64())
    located = pa.table([positions, *table.columns], names=[POSITION, *table.column_names])
    rows = raw_subject_rows(RawRecords(located, "row", list(table.column_names)), ds)
    return list(subject_hashes_of_rows(rows, ds, key=KEY).to_pylist())


def draw(rng: random.Random, pool: list[Any], count: int) -> list[Any]:
    return [None if rng.random() < 0.1 else rng.choice(pool) for _ in range(count)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("arrow_type", "pool", "declared"),
    [
        (pa.string(), TEXTS, "string"),
        (pa.string(), TEXTS, "int"),
        (pa.string(), TEXTS, "decimal(10,2)"),
        (pa.string(), TEXTS, "date"),
        (pa.string(), TEXTS, "boolean"),
        (pa.large_string(), TEXTS, "string"),
        (pa.int64(), INTS, "string"),
        (pa.int64(), INTS, "long"),
        (pa.int32(), [v for v in INTS if abs(v) < 2**31], "int"),
        (pa.int64(), INTS, "boolean"),
        (pa.float64(), [0.0, -0.0, 1.5, 1.0, float("nan")], "string"),
    ],
)
def test_equal_to_row_by_row(
    seed: int, arrow_type: pa.DataType, pool: list[Any], declared: str
) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 5, 200])
    chunks = [draw(rng, pool, count // 2), draw(rng, pool, count - count // 2)]
    column = pa.chunked_array([pa.array(c, arrow_type) for c in chunks], arrow_type)
    other = pa.chunked_array([pa.array(draw(rng, INTS, len(c)), pa.int64()) for c in chunks])
    table = to_spark_compatible(pa.table({"user_id": column, "tenant": other}))
    for subjects in (["user_id"], ["tenant", "user_id"], ["missing"]):
        ds = dataset([("user_id", declared), ("tenant", "long"), ("missing", "string")], subjects)
        assert column_subject_hashes(table, ds, key=KEY).to_pylist() == row_by_row(table, ds)


def test_nested_path_row_by_row() -> None:
    customer = pa.array(
        [{"id": "a"}, None, {"id": None}, {"id": "a"}, {"id": " b"}],
        pa.struct([("id", pa.string())]),
    )
    table = pa.table({"customer": customer})
    ds = dataset([("customer", "struct<id:string>")], ["customer.id"])
    assert column_subject_hashes(table, ds, key=KEY).to_pylist() == row_by_row(table, ds)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("zone", ["raw", "lake"])
@pytest.mark.parametrize(
    ("arrow_type", "pool", "declared"),
    [
        (pa.string(), TEXTS, "string"),
        (pa.string(), TEXTS, "int"),
        (pa.int64(), INTS, "string"),
        (pa.int32(), [v for v in INTS if abs(v) < 2**31], "long"),
    ],
)
def test_erase_matches_distinct_values_as_rows(
    seed: int, zone: str, arrow_type: pa.DataType, pool: list[Any], declared: str
) -> None:
    """The erase job hashes a row group's distinct subject values once and selects rows by
    their code: the same rows as hashing every row."""
    rng = random.Random(seed)
    column = pa.chunked_array(
        [pa.array(draw(rng, pool, n), arrow_type) for n in (rng.randint(0, 50), 60)], arrow_type
    )
    group = pa.table({"user_id": column})
    ds = dataset([("user_id", declared)], ["user_id"])
    ref = ObjectRef("k", Zone(zone), "parquet", constants={})
    every_row = (
        column_subject_hashes(to_spark_compatible(group), ds, key=KEY)
        if zone == "raw"
        else erase_groups._subject_hashes(group, ref, SubjectMatcher(ds, frozenset(), KEY))
    ).to_pylist()
    chosen = frozenset(
        rng.sample(sorted({h for h in every_row if h}), k=min(3, len(set(every_row) - {None})))
    )
    matcher = SubjectMatcher(ds, chosen, KEY)
    expected = [7 + i for i, h in enumerate(every_row) if h in chosen]
    assert erase_groups._distinct_subjects(group, ds) is not None
    assert erase_match._group_matches(group, 7, ref, matcher) == expected
    counted = Counter(h for h in every_row if h in chosen)
    assert erase_groups.group_match(group, ref, matcher).counts == counted
