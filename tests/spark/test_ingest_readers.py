"""Raw file readers (lethe_jobs.readers) on bytes built in the test."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers import TRUNCATED_TAIL, RawRecords, complete_members, read_raw
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets.document import Dataset, parse_dataset


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


def cut_gzip(prefix: bytes) -> bytes:
    """A gzip stream cut where its decompressed bytes are exactly `prefix`: the rest of the
    deflate stream and the trailer (CRC-32, size) are missing."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(prefix) + deflate.flush(zlib.Z_SYNC_FLUSH)
    return gzip.compress(b"", mtime=0)[:10] + body


def test_truncated_gzip_jsonl_reads_the_lines_before_the_cut_and_rejects_the_tail(
    tmp_path: Path,
) -> None:
    data = cut_gzip(b'{"id": "a"}\n\n{"id": "b"}\n{"id": "c", "note": "cut he')

    records = read(tmp_path, data, make_dataset("jsonl"))

    assert records.table.column(POSITION).to_pylist() == [1, 3]
    assert records.table.column(RECORD).to_pylist() == ['{"id": "a"}', '{"id": "b"}']
    [(line, reasons, record)] = rejected(records)
    assert line == 4
    assert reasons == (TRUNCATED_TAIL,)
    assert record == {"id": "c", "_raw": '{"id": "c", "note": "cut he'}  # only what is whole
    assert records.rows_read == 3


def test_truncated_gzip_jsonl_a_cut_subject_id_is_nobodys(tmp_path: Path) -> None:
    records = read(
        tmp_path, cut_gzip(b'{"id": "a"}\n{"note": 1, "id": "subj-12'), make_dataset("jsonl")
    )

    [(line, _, record)] = rejected(records)
    assert (line, record) == (2, {"note": 1, "_raw": '{"note": 1, "id": "subj-12'})


@pytest.mark.parametrize(
    ("tail", "members"),
    [
        ('{"id": "c", "n": 12', {"id": "c"}),  # 12 may be the start of 123
        ('{"id": "c", "n": 12}', {"id": "c", "n": 12}),  # whole, but the line end is cut
        ('{"id": "c", "t": [1, {"x": "y"}], "n": tr', {"id": "c", "t": [1, {"x": "y"}]}),
        ('{"id" "c", "n": 1,', {}),  # not JSON before the cut
        ("[1, 2", {}),
        ("", {}),
    ],
)
def test_the_complete_members_of_a_cut_line(tail: str, members: dict[str, Any]) -> None:
    assert complete_members(tail) == members


def test_truncated_gzip_csv_keeps_the_fields_before_the_cut(tmp_path: Path) -> None:
    data = cut_gzip(b'id,note\nu1,a\nu2,"two\nlines"\nu3,"open quote\nstill in it')

    records = read(tmp_path, data, make_dataset("csv"))

    assert records.table.to_pylist() == [
        {POSITION: 2, "id": "u1", "note": "a"},
        {POSITION: 3, "id": "u2", "note": "two\nlines"},
    ]
    [(line, reasons, record)] = rejected(records)
    assert (line, reasons) == (5, (TRUNCATED_TAIL,))
    assert record == {"id": "u3", "_raw": 'u3,"open quote\nstill in it'}


def test_truncated_gzip_csv_whose_last_line_looks_whole_still_rejects_it(tmp_path: Path) -> None:
    # the missing trailer cannot tell whether "u2,b" was the whole last field
    records = read(tmp_path, cut_gzip(b"id,note\nu1,a\nu2,b\n"), make_dataset("csv"))

    assert records.table.column("id").to_pylist() == ["u1"]
    assert rejected(records) == [(3, (TRUNCATED_TAIL,), {"id": "u2", "_raw": "u2,b\n"})]


@pytest.mark.parametrize(
    ("fmt", "prefix"), [("jsonl", b""), ("csv", b""), ("csv", b"id,no"), ("csv", b"id,note\n")]
)
def test_gzip_cut_before_its_first_record_is_unreadable(
    tmp_path: Path, fmt: str, prefix: bytes
) -> None:
    with pytest.raises(UnreadableFileError, match="truncated gzip stream"):
        read(tmp_path, cut_gzip(prefix), make_dataset(fmt))


def test_gzip_whose_deflate_data_is_corrupt_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="not a valid gzip stream"):
        read(tmp_path, b"\x1f\x8b\x08\x00 not deflate data\n", make_dataset("jsonl"))


def test_truncated_gzip_parquet_is_unreadable(tmp_path: Path) -> None:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": ["a", "b"]}), sink)
    data = gzip.compress(sink.getvalue())[:-20]
    with pytest.raises(UnreadableFileError, match="gzip"):
        read(tmp_path, data, make_dataset("parquet"))


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
