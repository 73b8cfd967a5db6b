"""The Spark jobs' side of the field-name rule that needs no Spark: JSON text conformed to the
declared names (lethe_jobs.readers.json_names), the readers' refusals, and a raw object's index
entries for an ambiguous row (lethe_jobs.indexing)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.indexing import raw_entries
from lethe_jobs.readers import JsonNames, read_raw
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.keys import hash_of_id

KEY = b"field-names-jobs-unit-test-key-0123456789"
SCHEMA = [
    ("customer", "struct<customerid:string,address:struct<zip:string>>"),
    ("orders", "array<struct<sku:string,qty:int>>"),
    ("attrs", "map<string,struct<v:int>>"),
    ("total", "decimal(10,2)"),
]


def dataset(
    fmt: str, schema: list[tuple[str, str]] = SCHEMA, subject: str = "customer.customerid"
) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": fmt,
            "subject_columns": [subject],
            "schema": [{"name": n, "type": t} for n, t in schema],
        }
    )


NAMES = JsonNames(dataset("jsonl"))


def conformed(record: dict[str, Any] | str) -> tuple[Any, list[str]]:
    text = record if isinstance(record, str) else json.dumps(record)
    named, reasons = NAMES.record(json.loads(text), text)
    return (None if named is None else json.loads(named)), reasons


def test_a_record_with_the_declared_names_is_left_as_it_is() -> None:
    record = {"customer": {"address": {"zip": "1"}, "customerid": "c1"}, "orders": [], "x": 1}
    assert conformed(record) == (None, [])
    assert conformed({"customer": {"name": "no id"}}) == (None, [])  # absent: null, no reason


def test_case_variants_are_renamed_at_every_depth_and_numbers_kept_as_written() -> None:
    text = (
        '{"Customer": {"CustomerId": "c1", "Address": {"ZIP": "75001"}, "extra": 1},'
        ' "orders": [{"SKU": "a", "qty": 2}, null], "attrs": {"K": {"V": 1.50}},'
        ' "TOTAL": 0.10000000000000001, "undeclared": true}'
    )

    named, reasons = NAMES.record(json.loads(text), text)

    assert reasons == []
    assert named == (
        '{"customer":{"customerid":"c1","address":{"zip":"75001"}},'
        '"orders":[{"sku":"a","qty":2},null],"attrs":{"K":{"v":1.50}},'
        '"total":0.10000000000000001}'
    )


def test_ambiguous_names_are_reasons_with_their_paths() -> None:
    record = {
        "customer": {"customerId": "c1", "CUSTOMERID": "c2"},
        "orders": [{"sku": "a"}, {"Sku": "b", "SKU": "c"}],
        "Total": 1,
        "TOTAL": 2,
    }

    assert conformed(record) == (
        None,
        [
            "column customer: field customer.customerid is ambiguous"
            " (CUSTOMERID, customerId differ only in case)",
            "column orders: field orders[].sku is ambiguous (SKU, Sku differ only in case)",
            "column total: field total is ambiguous (TOTAL, Total differ only in case)",
        ],
    )


def test_a_csv_cell_holding_a_struct_as_json() -> None:
    names = JsonNames(dataset("csv"))
    assert names.cell("customer", '{"CUSTOMERID": "c1"}') == ('{"customerid":"c1"}', [])
    assert names.cell("customer", "not json") == (None, [])
    assert names.cell("total", "1.5") == (None, [])  # no struct: nothing to conform
    assert not names.nested("total")


def put(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "object"
    path.write_bytes(data)
    return path


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_the_json_lines_reader_keeps_renamed_text_and_rejects_ambiguous_lines(
    tmp_path: Path,
) -> None:
    lines = [
        b'{"customer": {"customerid": "c1"}}',
        b'{"CUSTOMER": {"customerid": "c2"}}',
        b'{"customer": {"customerId": "c3", "CustomerID": "c4"}}',
    ]

    records = read_raw(put(tmp_path, b"\n".join(lines)), dataset("jsonl"), tmp_path)

    assert records.table.column("_lethe_position").to_pylist() == [1, 2]
    assert records.named == {2: '{"customer":{"customerid":"c2"}}'}
    (rejected,) = records.rejected
    assert (rejected.position, rejected.record_json) == (3, lines[2].decode())
    assert rejected.reasons == (
        "column customer: field customer.customerid is ambiguous"
        " (CustomerID, customerId differ only in case)",
    )


def test_files_whose_column_names_cannot_be_told_apart_are_unreadable(tmp_path: Path) -> None:
    csv = dataset("csv", [("user_id", "string")], "user_id")
    with pytest.raises(UnreadableFileError, match="columns USER_ID, User_Id, which differ only"):
        read_raw(put(tmp_path, b"USER_ID,User_Id\na,b\n"), csv, tmp_path)
    exact = read_raw(put(tmp_path, b"USER_ID,user_id\na,b\n"), csv, tmp_path)  # exact wins
    assert exact.table.column("user_id").to_pylist() == ["b"]
    both = pa.table({"id": ["a"], "Note": ["b"], "note": ["c"]})
    with pytest.raises(UnreadableFileError, match="columns that differ only in case: Note, note"):
        read_raw(put(tmp_path, parquet(both)), dataset("parquet"), tmp_path)


def test_a_raw_row_with_an_ambiguous_subject_is_indexed_under_each_reading(
    tmp_path: Path,
) -> None:
    struct = pa.struct([("customerId", pa.string()), ("CustomerID", pa.string())])
    values = [{"customerId": "c5", "CustomerID": "c6"}, {"customerId": "c7", "CustomerID": None}]
    path = put(tmp_path, parquet(pa.table({"customer": pa.array(values, struct)})))
    ref = ObjectRef("s3://raw/ds/x.parquet", Zone.RAW, "parquet")

    entries = raw_entries(path, dataset("parquet"), ref, key=KEY, workdir=tmp_path)

    assert {(e.subject_hash, e.row_hints) for e in entries} == {
        (hash_of_id(KEY, "c5"), (0,)),
        (hash_of_id(KEY, "c6"), (0,)),
        (hash_of_id(KEY, "c7"), (1,)),  # its other reading is null: nobody
    }
