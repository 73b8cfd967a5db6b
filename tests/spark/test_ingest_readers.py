"""Raw file readers (lethe_jobs.readers) on bytes built in the test."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers import RawRecords, read_raw
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets import Dataset, parse_dataset


def make_dataset(fmt: str, compression: str = "auto", **more: Any) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "t",
            "format": fmt,
            "compression": compression,
            "subject_columns": ["id"],
            "schema": [{"name": "id", "type": "string"}, {"name": "note", "type": "string"}],
            **more,
        }
    )


def read(tmp_path: Path, data: bytes, dataset: Dataset, name: str = "object") -> RawRecords:
    path = tmp_path / name
    path.write_bytes(data)
    return read_raw(path, dataset, tmp_path)


def rejected(records: RawRecords) -> list[tuple[int, tuple[str, ...], Any]]:
    return [(r.position, r.reasons, json.loads(r.record_json)) for r in records.rejected]


# --------------------------------------------------------------------------------------- CSV


def test_csv_with_byte_order_mark(tmp_path: Path) -> None:
    records = read(tmp_path, b"\xef\xbb\xbfid,note\r\nu1,hello\r\n", make_dataset("csv"))

    assert records.columns == ["id", "note"]
    assert records.table.to_pylist() == [{POSITION: 2, "id": "u1", "note": "hello"}]
    assert records.coordinate == "line"


def test_csv_quoted_newlines_and_delimiters_keep_the_starting_line(tmp_path: Path) -> None:
    data = b'id,note\nu1,"first\nsecond"\nu2,"a,b"\n\nu3,"x\r\ny\nz"\nu4,plain\n'

    records = read(tmp_path, data, make_dataset("csv"))

    assert records.table.to_pylist() == [
        {POSITION: 2, "id": "u1", "note": "first\nsecond"},
        {POSITION: 4, "id": "u2", "note": "a,b"},
        {POSITION: 6, "id": "u3", "note": "x\r\ny\nz"},
        {POSITION: 9, "id": "u4", "note": "plain"},
    ]
    assert records.rows_read == 4


def test_csv_rows_with_the_wrong_number_of_fields_are_rejected(tmp_path: Path) -> None:
    data = b"id,note\nu1,ok\nu2,too,many\nu3\n"

    records = read(tmp_path, data, make_dataset("csv"))

    assert records.table.column("id").to_pylist() == ["u1"]
    assert rejected(records) == [
        (
            3,
            ("expected 2 fields, found 3",),
            {"id": "u2", "note": "too", "_extra_fields": ["many"]},
        ),
        (4, ("expected 2 fields, found 1",), {"id": "u3"}),
    ]
    assert records.rows_read == 3


def test_csv_options_and_no_header(tmp_path: Path) -> None:
    dataset = make_dataset("csv", csv={"delimiter": ";", "header": False, "quote": "'"})

    records = read(tmp_path, b"u1;'a;b'\nu2;c\n", dataset)

    assert records.table.to_pylist() == [
        {POSITION: 1, "id": "u1", "note": "a;b"},
        {POSITION: 2, "id": "u2", "note": "c"},
    ]


def test_empty_csv_is_an_empty_file_but_blank_lines_miss_a_header(tmp_path: Path) -> None:
    assert read(tmp_path, b"", make_dataset("csv")).rows_read == 0
    with pytest.raises(UnreadableFileError, match="missing header"):
        read(tmp_path, b"\n\n", make_dataset("csv"))


def test_whitespace_lines_miss_a_header_like_blank_lines(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="missing header"):
        read(tmp_path, b"  \n\t\r\n \n", make_dataset("csv"))
    records = read(tmp_path, b"   \nid,note\nu1,a\n", make_dataset("csv"))
    assert records.table.to_pylist() == [{POSITION: 3, "id": "u1", "note": "a"}]


def test_csv_bytes_that_are_not_utf8_reject_only_their_record(tmp_path: Path) -> None:
    data = b"id,note\nu1,caf\xe9\nu2,fine\n\xff,x,y\n"

    records = read(tmp_path, data, make_dataset("csv"))

    assert records.table.to_pylist() == [{POSITION: 3, "id": "u2", "note": "fine"}]
    assert rejected(records) == [
        (2, ("column note: not UTF-8 text",), {"id": "u1", "note": "caf\\xe9"}),
        (
            4,
            ("expected 2 fields, found 3", "column id: not UTF-8 text"),
            {"id": "\\xff", "note": "x", "_extra_fields": ["y"]},
        ),
    ]


def test_csv_columns_named_like_the_jobs_own_are_not_read(tmp_path: Path) -> None:
    data = b"id,_lethe_position,note\nu1,99,a\n"

    records = read(tmp_path, data, make_dataset("csv"))

    assert records.table.to_pylist() == [{POSITION: 2, "id": "u1", "note": "a"}]
    assert records.columns == ["id", "_lethe_position", "note"]


def test_csv_header_that_is_not_utf8_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="not UTF-8 text: the header"):
        read(tmp_path, b"id,n\xf6te\nu1,a\n", make_dataset("csv"))


# -------------------------------------------------------------------------------- JSON Lines


def test_jsonl_with_crlf_blank_and_broken_lines(tmp_path: Path) -> None:
    data = b'{"id": "a"}\r\n\r\n{"id": \r\n[1, 2]\r\n{"id": "b", "extra": 1}\r\nNaN\r\n'

    records = read(tmp_path, data, make_dataset("jsonl"))

    assert records.table.to_pylist() == [
        {POSITION: 1, RECORD: '{"id": "a"}'},
        {POSITION: 5, RECORD: '{"id": "b", "extra": 1}'},
    ]
    assert records.columns == ["id", "extra"]
    assert records.json_text
    assert rejected(records) == [
        (3, ("not a JSON object: Expecting value: line 1 column 8 (char 7)",), {"_raw": '{"id": '}),
        (4, ("not a JSON object: found a JSON list",), {"_raw": "[1, 2]"}),
        (6, ("not a JSON object: NaN is not valid JSON",), {"_raw": "NaN"}),
    ]


def test_gzip_is_detected_from_the_bytes_not_the_key(tmp_path: Path) -> None:
    data = gzip.compress(b'{"id": "a", "note": "zipped"}\n')

    records = read(tmp_path, data, make_dataset("jsonl"), name="events.jsonl")

    assert records.table.column(RECORD).to_pylist() == ['{"id": "a", "note": "zipped"}']


def test_declared_gzip_that_is_not_gzip_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="not gzip"):
        read(tmp_path, b'{"id": "a"}\n', make_dataset("jsonl", compression="gzip"))


def test_truncated_gzip_is_unreadable(tmp_path: Path) -> None:
    data = gzip.compress(b'{"id": "a"}\n' * 100)[:30]
    with pytest.raises(UnreadableFileError, match="gzip"):
        read(tmp_path, data, make_dataset("jsonl"))


def test_compression_none_reads_gzip_bytes_as_they_are(tmp_path: Path) -> None:
    data = gzip.compress(b'{"id": "a"}\n')
    records = read(tmp_path, data, make_dataset("jsonl", compression="none"))
    assert records.table.num_rows == 0
    assert records.rejected
    assert all(r.reasons[0].startswith("not UTF-8 text") for r in records.rejected)


def test_jsonl_line_that_is_not_utf8_or_nested_too_deeply_is_rejected_alone(
    tmp_path: Path,
) -> None:
    deep = b'{"id": "d", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    brackets = b'{"id": "b", "s": "' + b"[" * 600 + b'", "x": [[[{}]]]}'  # in a string: fine
    data = b'{"id": "a"}\n{"id": "caf\xe9"}\n' + deep + b"\n" + brackets + b"\n"

    records = read(tmp_path, data, make_dataset("jsonl"))

    assert records.table.column(POSITION).to_pylist() == [1, 4]
    assert rejected(records) == [
        (
            2,
            ("not UTF-8 text: 'utf-8' codec can't decode byte 0xe9 in position 11: "
             "invalid continuation byte",),
            {"_raw": '{"id": "caf\\xe9"}'},
        ),
        (3, ("not a JSON object: nested deeper than 500 levels",), {"_raw": deep.decode()}),
    ]  # fmt: skip


# ----------------------------------------------------------------------------------- Parquet


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_parquet_rows_are_located_by_index_and_types_made_spark_compatible(
    tmp_path: Path,
) -> None:
    table = pa.table(
        {
            "id": pa.array(["a", "b"], pa.large_string()),
            "count": pa.array([1, 4_000_000_000], pa.uint32()),
            "seen": pa.array([dt.datetime(2026, 11, 22, 10, 0, 0, 123456)] * 2, pa.timestamp("ns")),
            "kind": pa.array(["x", "y"]).dictionary_encode(),
        }
    )

    records = read(tmp_path, parquet_bytes(table), make_dataset("parquet"))

    assert records.coordinate == "row"
    assert records.columns == ["id", "count", "seen", "kind"]
    assert records.table.schema == pa.schema(
        [
            (POSITION, pa.int64()),
            ("id", pa.string()),
            ("count", pa.int64()),
            ("seen", pa.timestamp("us", tz="UTC")),
            ("kind", pa.string()),
        ]
    )
    assert records.table.column(POSITION).to_pylist() == [0, 1]
    assert records.table.column("count").to_pylist() == [1, 4_000_000_000]


def test_gzipped_parquet_is_decompressed_first(tmp_path: Path) -> None:
    data = gzip.compress(parquet_bytes(pa.table({"id": ["a"]})))

    records = read(tmp_path, data, make_dataset("parquet"))

    assert records.table.to_pylist() == [{POSITION: 0, "id": "a"}]


def test_a_file_that_is_not_parquet_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="not a Parquet file"):
        read(tmp_path, b"id,note\nu1,x\n", make_dataset("parquet"))


def test_parquet_columns_named_like_the_jobs_own_are_not_read(tmp_path: Path) -> None:
    table = pa.table({"id": ["u1"], POSITION: [99], RECORD: ["{}"], "note": ["a"]})

    records = read(tmp_path, parquet_bytes(table), make_dataset("parquet"))

    assert records.table.to_pylist() == [{POSITION: 0, "id": "u1", "note": "a"}]
    assert records.columns == ["id", POSITION, RECORD, "note"]


def test_parquet_that_repeats_a_column_name_is_unreadable(tmp_path: Path) -> None:
    table = pa.table([["u1"], ["a"], ["b"]], names=["id", "note", "note"])
    with pytest.raises(UnreadableFileError, match=r"the file repeats column\(s\) note"):
        read(tmp_path, parquet_bytes(table), make_dataset("parquet"))
