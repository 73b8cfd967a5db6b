"""The ingest tasks' fast paths give what their row-by-row forms gave: entries added up from an
EntryBatch's columns, an object's accumulated entries built from one validated model, CSV records
rebuilt by the quarantine writer, partition paths and lake key
problems judged per distinct path, runs of sorted keys found with Arrow, and the CSV reader's
undecodable-bytes check skipped only while no undecodable byte was read."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lethe_jobs import layout
from lethe_jobs.ingest_tasks import (
    HINTS_KEPT,
    OBJECT,
    PART,
    BatchObject,
    EntryAccumulator,
    TaskSettings,
    jackson_json,
    key_problem,
    partition_paths,
    place_rows,
    record_columns,
    text_column,
)
from lethe_jobs.ingest_tasks.write import _runs
from lethe_jobs.readers import csv_reader, csv_text, read_raw
from lethe_jobs.readers.records import Slice
from lethe_jobs.validate import POSITION, REASONS
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.opening import IndexLocation, IndexStore
from lethe_shared.index.subject_index import EntryBatch, IndexEntry

SCHEMA = [("user_id", "string"), ("event_date", "string"), ("stars", "int")]


def dataset(
    schema: list[tuple[str, str]] = SCHEMA, partition_by: tuple[str, ...] = ("event_date",)
) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": "csv",
            "subject_columns": ["user_id"],
            "partition_by": list(partition_by),
            "schema": [{"name": n, "type": t} for n, t in schema],
        }
    )


def batch(hashes: list[str], ends: list[int], hints: list[int]) -> EntryBatch:
    return EntryBatch(
        object_url="s3://raw/ds/a.csv",
        dataset_id="ds",
        zone=Zone.RAW,
        format="csv",
        subject_hashes=hashes,
        ends=ends,
        row_hints=hints,
    )


def test_entries_added_from_columns_equal_those_added_from_models() -> None:
    many = list(range(2, 2 + 3 * HINTS_KEPT))  # more hints than kept
    first = batch(["a" * 64, "b" * 64], [len(many), len(many) + 2], [*many, 5, 9])
    second = batch(
        ["b" * 64, "c" * 64],
        [HINTS_KEPT + 4, HINTS_KEPT + 5],
        [*range(100, 100 + HINTS_KEPT + 4), 7],
    )
    by_models, by_columns = EntryAccumulator(), EntryAccumulator()
    for found, offset in ((first, 0), (second, 1000)):
        by_models.add_entries(list(found), offset)
        by_columns.add_batch(found, offset)
    assert by_columns.rows == by_models.rows
    assert by_columns.hints == by_models.hints
    assert by_columns.rows["b" * 64] == 2 + HINTS_KEPT + 4
    assert len(by_columns.hints["a" * 64]) == HINTS_KEPT


def test_accumulated_entries_are_the_models_validation_gives() -> None:
    found = EntryAccumulator()
    found.add_batch(
        batch(
            ["b" * 64, "a" * 64],
            [3, 3 + HINTS_KEPT + 2],
            [9, 4, 7, *range(20, 20 + HINTS_KEPT + 2)],
        )
    )
    found.add("c" * 64, 5, [1])
    ds = dataset()
    ref = ObjectRef("s3://lake/ds/event_date=x/part-1.parquet", Zone.LAKE, "parquet", "v7", "e7")
    key = b"k" * 32

    built = found.entries(ref, ds, key)

    pin = entry_pin(ds, key)
    validated = [
        IndexEntry(
            subject_hash=subject,
            object_url=ref.object_url,
            dataset_id="ds",
            zone=Zone.LAKE,
            format="parquet",
            rows=rows,
            row_hints=hints,
            version_id="v7",
            etag="e7",
            matching_fingerprint=pin.matching_fingerprint,
            key_fingerprint=pin.key_fingerprint,
        )
        for subject, rows, hints in [
            ("a" * 64, HINTS_KEPT + 2, tuple(range(20, 20 + HINTS_KEPT))),
            ("b" * 64, 3, (4, 7, 9)),
            ("c" * 64, 5, (1,)),
        ]
    ]
    assert [e.model_dump(exclude={"updated_at"}) for e in built] == [
        e.model_dump(exclude={"updated_at"}) for e in validated
    ]
    assert [e.model_fields_set for e in built] == [e.model_fields_set for e in validated]
    assert [e.to_item() | {"updated_at": ""} for e in built] == [
        e.to_item() | {"updated_at": ""} for e in validated
    ]
    assert len({e.updated_at for e in built}) == 1  # one validated entry, its time shared
    assert EntryAccumulator().entries(ref, ds, key) == []


def test_records_are_rebuilt_only_where_the_text_columns_hold_them(tmp_path: Path) -> None:
    plain = dataset()
    assert record_columns(["user_id", "Event_Date", "stars"], plain) == [
        ("user_id", text_column(0)),
        ("Event_Date", text_column(1)),
        ("stars", text_column(2)),
    ]
    assert record_columns(["stars", "user_id"], plain) == [
        ("stars", text_column(2)),
        ("user_id", text_column(0)),
    ]
    assert record_columns(["user_id", "stars", "note"], plain) is None  # a column not declared
    assert record_columns(["user_id", "_lethe_x", "stars"], plain) == [
        ("user_id", text_column(0)),
        ("stars", text_column(2)),
    ]  # a reserved column is not read, nor kept in the record
    nested = dataset([*SCHEMA, ("customer", "struct<id:string>")])
    assert record_columns(["user_id", "customer"], nested) is None  # JSON text is conformed
    parquet = parse_dataset({**json.loads(json.dumps(_doc())), "format": "parquet"})
    assert record_columns(["user_id"], parquet) is None

    # the rebuilt record is the one the reader's values give, byte for byte
    path = tmp_path / "a.csv"
    path.write_text('stars,User_Id\n"5","u ""1"", é\\n"\n', encoding="utf-8")
    records = read_raw(path, plain, tmp_path)
    names = [n for n in records.table.column_names if n != POSITION]
    values = [records.table.column(n).to_pylist() for n in names]
    pairs = record_columns(records.columns, plain)
    assert pairs is not None
    texts = {text_column(0): values[1], text_column(2): values[0]}
    rebuilt = jackson_json([n for n, _ in pairs], [texts[c][0] for _, c in pairs])
    assert rebuilt == jackson_json(names, [v[0] for v in values])
    assert json.loads(rebuilt) == {"stars": "5", "User_Id": 'u "1", é\\n'}


def _doc() -> dict[str, Any]:
    return {
        "dataset_id": "ds",
        "format": "csv",
        "subject_columns": ["user_id"],
        "schema": [{"name": n, "type": t} for n, t in SCHEMA],
    }


def settings(ds: Dataset) -> TaskSettings:
    obj = BatchObject(0, "ds", "ds/a.csv", "v", "e", 1, "s3://raw/ds/a.csv")
    return TaskSettings(
        dataset=ds,
        raw_bucket="raw",
        lake_bucket="lake",
        index=IndexLocation(IndexStore.DYNAMODB, table="index"),
        correlation_id="c",
        now="2026-01-01T00:00:00+00:00",
        objects={0: obj, 1: BatchObject(1, "ds", "ds/b.csv", "v", "e", 1, "s3://raw/ds/b.csv")},
        hash_key=b"k" * 32,
    )


def conformed(dates: list[str | None], reasons: list[list[str] | None]) -> pa.RecordBatch:
    count = len(dates)
    return pa.RecordBatch.from_pydict(
        {
            OBJECT: pa.array([i % 2 for i in range(count)], pa.int32()),
            POSITION: pa.array(range(count), pa.int64()),
            "event_date": pa.array(dates, pa.string()),
            REASONS: pa.array(reasons, pa.list_(pa.string())),
        }
    )


def test_rows_are_placed_as_row_by_row_placing_placed_them() -> None:
    ds = dataset()
    too_long = "x" * 1100
    dates = ["2026-01-01", None, "", "a/b", too_long, "2026-01-01", too_long, "2026-01-02"]
    reasons: list[list[str] | None] = [[], [], [], [], [], ["bad"], ["bad"], None]
    placed = next(place_rows(iter([conformed(dates, reasons)]), settings(ds)))
    parts, found = placed.column(PART).to_pylist(), placed.column(REASONS).to_pylist()
    expected_parts: list[str | None] = []
    expected_reasons: list[list[str] | None] = []
    for date, given in zip(dates, reasons, strict=True):
        if given:
            expected_parts.append(None)
            expected_reasons.append(given)
            continue
        path = layout.partition_path(["event_date"], [date])
        problem = key_problem("lake", layout.lake_key("ds", path, layout.object_hash("raw", "k")))
        expected_parts.append(None if problem else path)
        expected_reasons.append([problem] if problem else given)
    assert parts == expected_parts
    assert found == expected_reasons
    assert parts[1] == parts[2] == "event_date=__HIVE_DEFAULT_PARTITION__"  # null and "" alike
    assert parts[3] == "event_date=a%2Fb"
    assert found[4] is not None
    assert "bytes" in found[4][0]  # its lake key is too long
    # a batch without a problem takes the fast path and gives the same paths
    fast = next(place_rows(iter([conformed(dates[:4], reasons[:4])]), settings(ds)))
    assert fast.column(PART).to_pylist() == expected_parts[:4]
    unpartitioned = next(
        place_rows(
            iter([conformed(dates[:3], [[], ["bad"], []])]), settings(dataset(partition_by=()))
        )
    )
    assert unpartitioned.column(PART).to_pylist() == ["", None, ""]


@pytest.mark.parametrize(
    "values",
    [
        ["2026-01-01", "2026-01-01", None, "2026-01-02", 1],
        [True, False, None, None, True],
    ],
)
def test_partition_paths_render_each_value_as_layout_does(values: list[Any]) -> None:
    array = pa.array(values[:4])
    if array.type == pa.bool_():
        array = pa.array(values[:4], pa.bool_())
    rendered = next(partition_paths(iter([pa.RecordBatch.from_pydict({"p": array})]), ["p"]))
    assert rendered.column(PART).to_pylist() == [
        layout.partition_path(["p"], [v]) for v in array.to_pylist()
    ]


def test_runs_of_sorted_keys() -> None:
    table = pa.table(
        {
            "o": pa.array([0, 0, 0, 1, 1, 1, 2], pa.int32()),
            "p": pa.array([None, None, "a", "a", "b", "b", None], pa.string()),
        }
    )
    assert list(_runs(table, ["o", "p"])) == [
        ((0, None), 0, 2),
        ((0, "a"), 2, 1),
        ((1, "a"), 3, 1),
        ((1, "b"), 4, 2),
        ((2, None), 6, 1),
    ]
    assert list(_runs(table.slice(0, 1), ["o", "p"])) == [((0, None), 0, 1)]
    assert list(_runs(table.slice(0, 0), ["o"])) == []


def test_undecodable_bytes_are_found_after_valid_rows(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    rows = b"".join(b"u%d,2026-01-01,%d\n" % (i, i % 5) for i in range(20_000))
    path.write_bytes(
        b"user_id,event_date,stars\n" + rows + b"u\xff,2026-01-01,1\nu2,2026-01-02,2\n"
    )
    records = read_raw(path, dataset(), tmp_path)
    assert records.table.num_rows == 20_001
    assert [(r.position, r.reasons) for r in records.rejected] == [
        (20_002, ("column user_id: not UTF-8 text",))
    ]
    assert json.loads(records.rejected[0].record_json)["user_id"] == "u\\xff"


def _records_the_generic_loop_gives(
    data: bytes, ds: Dataset, part: Slice, batch_rows: int
) -> list[tuple[list[dict[str, Any]], list[tuple[int, tuple[str, ...], str]]]]:
    """`read_csv`'s loop before its fast path: every row through `_CsvCollector.add`."""
    before = csv_text._UNDECODED_SEEN[0]
    encoding = "utf-8-sig" if part.first_line == 1 else "utf-8"
    text = io.TextIOWrapper(
        io.BytesIO(data), encoding=encoding, errors=csv_text.COUNTING_SURROGATEESCAPE, newline=""
    )
    reader = csv_reader(text, ds.csv)
    names = list(part.header) if part.header is not None else next(reader)
    collector = csv_text._CsvCollector(names, before)
    found = []
    for line, row, _ in csv_text._csv_rows(reader, None, part.first_line - 1):
        if row:
            collector.add(line, row)
        if len(collector) >= batch_rows:
            found.append(collector.records())
            collector = csv_text._CsvCollector(names, before)
    found.append(collector.records())
    return [_shown(r) for r in found]


def _shown(records: Any) -> tuple[list[dict[str, Any]], list[tuple[int, tuple[str, ...], str]]]:
    rejected = [(r.position, r.reasons, r.record_json) for r in records.rejected]
    return records.table.to_pylist(), rejected


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 65_536])
@pytest.mark.parametrize("bad_first", [False, True])
def test_csv_fast_path_gives_the_records_of_the_generic_loop(
    tmp_path: Path, batch_rows: int, bad_first: bool
) -> None:
    """Blank lines, rows of the wrong width, a quoted newline, undecodable bytes (before any
    valid row, and after some), a slice without the header: the same rows, rejections, line
    numbers and batches as every row through `_CsvCollector.add`."""
    bad = b"u\xfe,2026-01-03,3\n"
    body = (
        (bad if bad_first else b"")
        + b"u1,2026-01-01,1\n\n"
        + b'"u\n2",2026-01-01,2\n'
        + b"u3,2026-01-01\n"
        + b"u4,2026-01-01,4,extra\n"
        + b"\r\n"
        + b"u5,2026-01-02,5\n"
        + b"u6,2026-01-\xff02,6\n"
        + b"u7,2026-01-02,7\n"
        + b"u8,,\n"
    )
    ds = dataset()
    header = b"user_id,event_date,stars\n"
    for data, part in [
        (header + body, Slice()),
        (body, Slice(first_line=40, header=("user_id", "event_date", "stars"))),
    ]:
        expected = _records_the_generic_loop_gives(data, ds, part, batch_rows)
        found = [
            _shown(r) for r in csv_text.read_csv(io.BytesIO(data), ds, tmp_path, part, batch_rows)
        ]
        assert found == expected
        rejected = [p for _, batch in found for p, _, _ in batch]
        assert len(rejected) == 3 + bad_first  # u3, u4, u6 (and u\xfe)
        assert sum(len(rows) for rows, _ in found) == 5  # u1, u\n2, u5, u7, u8
