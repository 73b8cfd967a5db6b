"""The erase job's per-object core (lethe_jobs.erase_rows): the rows it finds are the index's row
hints, and the rewrite keeps every other byte, type, codec and metadata key."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import struct
import zlib
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.erase_rows import (
    EraseResult,
    ErasureVerificationError,
    RowMatches,
    SubjectMatcher,
    erase_rows,
    match_rows,
    verify_erased,
)
from lethe_jobs.erase_rows import parquet as erase_parquet
from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.indexing import StoredObject, object_entries
from lethe_jobs.objects import ObjectKind
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.subject_hashing.keys import hash_of_keys, subject_hash

KEY = b"erase-rows-unit-test-key-0123456789"  # >= 32 bytes
RAW, LAKE, QUARANTINE = ObjectKind.RAW, ObjectKind.LAKE_PARQUET, ObjectKind.QUARANTINE_ROWS
STRING_SCHEMA = [{"name": "user_id", "type": "string"}, {"name": "note", "type": "string"}]


def make_dataset(
    fmt: str,
    schema: list[dict[str, str]] | None = None,
    subjects: tuple[str, ...] = ("user_id",),
    **more: Any,
) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": fmt,
            "subject_columns": list(subjects),
            "schema": schema or STRING_SCHEMA,
            **more,
        }
    )


def hashed(dataset: Dataset, *values: Any) -> str:
    return subject_hash(KEY, dataset.subject_columns, list(values))


def matcher(dataset: Dataset, *hashes: str) -> SubjectMatcher:
    return SubjectMatcher(dataset, frozenset(hashes), KEY)


def put(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def erase(
    tmp_path: Path, kind: ObjectKind, source: Path, key: str, rows: SubjectMatcher
) -> tuple[EraseResult, Path]:
    target = tmp_path / f"erased-{source.name}"
    return erase_rows(kind, source, target, key, rows, workdir=tmp_path), target


def parquet_bytes(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def gzip_member(payload: bytes, header: bytes) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(payload) + deflate.flush()
    return header + body + struct.pack("<II", zlib.crc32(payload), len(payload))


def python_gzip(payload: bytes, filename: str = "orders.csv", mtime: int = 1_700_000_000) -> bytes:
    sink = io.BytesIO()
    with gzip.GzipFile(filename=filename, mode="wb", fileobj=sink, mtime=mtime) as stream:
        stream.write(payload)
    return sink.getvalue()


# A gzip header with every optional field: FEXTRA, FNAME, FCOMMENT (flags 0x1c), mtime, XFL 0,
# OS 3 (Unix), as `gzip` on a Unix system or another tool may write it.
FULL_GZIP_HEADER = (
    b"\x1f\x8b\x08\x1c"
    + struct.pack("<I", 1_600_000_000)
    + b"\x00\x03"
    + struct.pack("<H", 6)
    + b"LT\x02\x00ok"
    + b"export.jsonl\x00"
    + b"nightly export\x00"
)


# ------------------------------------------------------------- match_rows == index row hints

NESTED_SCHEMA = [
    {"name": "customer", "type": "struct<id:string,name:string>"},
    {"name": "n", "type": "int"},
]
COMPOSITE_SCHEMA = [
    {"name": "tenant", "type": "string"},
    {"name": "user_id", "type": "int"},
    {"name": "note", "type": "string"},
]

CSV_MIXED = (
    b"\xef\xbb\xbfuser_id,note\r\n"  # 1 header, after a byte order mark
    b'u1,"multi\nline"\r\n'  # 2-3
    b"u2,keep\n"  # 4
    b"\n"  # 5 blank
    b"u1,lone cr\r"  # 6
    b'u3,"a\r\nb\rc"\r\n'  # 7-9
    b'u1,"x\ny"\n'  # 10-11
    b"u1,bad,extra\n"  # 12 rejected: three fields
    b",empty id\n"  # 13 "" names nobody: never indexed, never matched
    b"u4,last"  # 14 no final newline
)
JSONL_NESTED = (
    b'{"customer":{"id":"c1","name":"a"},"n":1}\n'  # 1
    b'{"customer":null,"n":2}\n'  # 2 null parent
    b"\n"  # 3 blank
    b'{"n":3}\r\n'  # 4 no parent
    b'{"customer":{"id":null},"n":4}\n'  # 5 null id
    b"[1,2]\n"  # 6 not an object: rejected
    b'{"customer":{"id":0},"n":5}\n'  # 7 0 as a JSON number
    b'{"customer":{"id":""},"n":6}\n'  # 8 "": nobody's
    b'{"customer":{"id":"c1"},"n":7}'  # 9 no final newline
)
QUARANTINE_LINES = (
    b'{"reasons":["bad n"],"record":{"user_id":"u1","n":"x"}}\n'  # 1
    b'{"reasons":["bad n"],"record":{"user_id":"u2","n":"y"}}\n'  # 2
    b"\n"  # 3
    b'{"reasons":["bad n"],"record":{"user_id":null}}\n'  # 4
    b'{"reasons":["too many fields"],"record":{"user_id":"u1","_extra_fields":["z"]}}\n'  # 5
)


def _raw_parquet_table() -> pa.Table:
    return pa.table(
        {
            "user_id": pa.array([0, 1, None, 0, 2, 1], pa.int64()),
            "note": ["a", "b", "c", "d", "e", "f"],
        }
    )


CaseBuilder = Callable[[Path], tuple[ObjectKind, str, Dataset, Path]]


def case_csv(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    return RAW, "ds/in.csv", make_dataset("csv"), put(tmp_path, "in.csv", CSV_MIXED)


def case_csv_gzip(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    path = put(tmp_path, "in.csv", python_gzip(CSV_MIXED))  # gzip by magic number, not key
    return RAW, "ds/in.csv", make_dataset("csv"), path


def case_csv_composite(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    data = b"tenant,user_id,note\nacme,1,a\nacme,2,b\nbeta,1,c\nacme,01,d\n"
    dataset = make_dataset("csv", COMPOSITE_SCHEMA, ("tenant", "user_id"))
    return RAW, "ds/c.csv", dataset, put(tmp_path, "c.csv", data)


def case_jsonl(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    dataset = make_dataset("jsonl", NESTED_SCHEMA, ("customer.id",))
    return RAW, "ds/in.jsonl", dataset, put(tmp_path, "in.jsonl", JSONL_NESTED)


def case_jsonl_gzip(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    dataset = make_dataset("jsonl", NESTED_SCHEMA, ("customer.id",))
    path = put(tmp_path, "in.jsonl.gz", gzip_member(JSONL_NESTED, FULL_GZIP_HEADER))
    return RAW, "ds/in.jsonl.gz", dataset, path


def case_raw_parquet(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    data = parquet_bytes(_raw_parquet_table(), row_group_size=2)
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])
    return RAW, "ds/in.parquet", dataset, put(tmp_path, "in.parquet", data)


def case_raw_parquet_gzip(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    data = python_gzip(parquet_bytes(_raw_parquet_table(), row_group_size=4), "in.parquet")
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])
    return RAW, "ds/in.parquet.gz", dataset, put(tmp_path, "in.parquet.gz", data)


def case_lake_nested(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    customers = [{"id": "c1"}, None, {"id": None}, {"id": "c1"}, {"id": ""}, {"id": "0"}]
    table = pa.table({"customer": customers, "n": pa.array(range(6), pa.int32())})
    dataset = make_dataset("parquet", NESTED_SCHEMA, ("customer.id",), partition_by=["n"])
    path = put(tmp_path, "part-0.parquet", parquet_bytes(table, row_group_size=4))
    return LAKE, "ds/part-0.parquet", dataset, path


def case_raw_parquet_nested(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    _, _, _, path = case_lake_nested(tmp_path)
    return (
        RAW,
        "ds/nested.parquet",
        make_dataset("parquet", NESTED_SCHEMA, ("customer.id",)),
        path,
    )


def case_lake_partition(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    table = pa.table({"tenant": ["acme", "beta", "acme"], "note": ["a", "b", "c"]})
    dataset = make_dataset(
        "parquet", COMPOSITE_SCHEMA, ("tenant", "user_id"), partition_by=["user_id"]
    )
    path = put(tmp_path, "part-0.parquet", parquet_bytes(table))
    return LAKE, "ds/user_id=7/part-0.parquet", dataset, path


def case_quarantine(tmp_path: Path) -> tuple[ObjectKind, str, Dataset, Path]:
    dataset = make_dataset("csv")
    path = put(tmp_path, "q.jsonl", QUARANTINE_LINES)
    return QUARANTINE, "ds/_quarantine/abc.jsonl", dataset, path


@pytest.mark.parametrize(
    ("build", "rows", "hints"),
    [
        (case_csv, 8, {("u1",): (2, 6, 10, 12), ("u2",): (4,)}),
        (case_csv_gzip, 8, {("u1",): (2, 6, 10, 12), ("u3",): (7,), ("u4",): (14,)}),
        (case_csv_composite, 4, {("acme", 1): (2, 5), ("beta", 1): (4,), ("acme", 2): (3,)}),
        (case_jsonl, 8, {("c1",): (1, 9), (0,): (7,)}),
        (case_jsonl_gzip, 8, {("c1",): (1, 9), ("0",): (7,)}),
        (case_raw_parquet, 6, {(0,): (0, 3), (1,): (1, 5), (2,): (4,)}),
        (case_raw_parquet_gzip, 6, {(0,): (0, 3), ("1",): (1, 5)}),
        (case_raw_parquet_nested, 6, {("c1",): (0, 3), (0,): (5,)}),
        (case_lake_nested, 6, {("c1",): (0, 3), (0,): (5,)}),
        (case_lake_partition, 3, {("acme", 7): (0, 2), ("beta", "7"): (1,)}),
        (case_quarantine, 4, {("u1",): (1, 5), ("u2",): (2,)}),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_matches_are_the_index_row_hints(
    tmp_path: Path, build: CaseBuilder, rows: int, hints: dict[tuple[Any, ...], tuple[int, ...]]
) -> None:
    kind, key, dataset, path = build(tmp_path)
    stored = StoredObject("bucket", key, "v1", "etag", path)
    index = {
        e.subject_hash: e.row_hints
        for e in object_entries(kind, stored, dataset, key=KEY, workdir=tmp_path)
    }
    assert index, "the case must hold indexed rows"

    for subject, expected in hints.items():  # the coordinates written down ...
        assert index[hashed(dataset, *subject)] == expected
    for digest, row_hints in index.items():  # ... and every subject the index knows
        found = match_rows(kind, path, key, matcher(dataset, digest), workdir=tmp_path)
        assert found == RowMatches(rows, row_hints)
    everyone = match_rows(kind, path, key, matcher(dataset, *index), workdir=tmp_path)
    assert everyone.positions == tuple(sorted(h for hs in index.values() for h in hs))
    # a row whose subject is "" or whitespace only is nobody's: no hash finds it, not even
    # the hash of those texts (a manifest can hold no such hash: requests refuse them)
    blank = [hashed(dataset, *[text] * len(dataset.subject_columns)) for text in ("", " ", "\t")]
    assert set(blank).isdisjoint(index)
    assert match_rows(kind, path, key, matcher(dataset, *blank), workdir=tmp_path).positions == ()


def test_no_rows_objects_match_nothing_and_are_never_written(tmp_path: Path) -> None:
    path = put(tmp_path, "report.file.json", b'{"reason": "not utf-8"}')
    dataset = make_dataset("csv")
    rows = matcher(dataset, hashed(dataset, "u1"))

    kind = ObjectKind.NO_ROWS
    assert match_rows(kind, path, "ds/_q/x.file.json", rows, workdir=tmp_path) == RowMatches(0, ())
    result, target = erase(tmp_path, kind, path, "ds/_q/x.file.json", rows)
    assert (result.rows_before, result.written, target.exists()) == (0, False, False)


def test_matcher_refuses_short_keys_and_malformed_hashes() -> None:
    dataset = make_dataset("csv")
    with pytest.raises(ValueError, match="32 bytes"):
        SubjectMatcher(dataset, frozenset(), b"short")
    with pytest.raises(ValueError, match="64 lowercase"):
        SubjectMatcher(dataset, frozenset({"u1"}), KEY)
    assert "erase-rows" not in repr(matcher(dataset))  # the key is never shown


# ------------------------------------------------------------------------------------- CSV


def test_csv_removes_every_line_of_the_records_and_keeps_every_other_byte(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", CSV_MIXED)

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1"))
    )

    assert (result.rows_before, result.rows_removed, result.rows_after) == (8, 4, 4)
    assert result.positions == (2, 6, 10, 12)
    assert result.written
    assert target.read_bytes() == (
        b'\xef\xbb\xbfuser_id,note\r\nu2,keep\n\nu3,"a\r\nb\rc"\r\n,empty id\nu4,last'
    )


def test_csv_last_record_without_final_newline(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", b"user_id,note\r\nu1,a\r\nu2,b")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u2"))
    )

    assert result.positions == (3,)
    assert target.read_bytes() == b"user_id,note\r\nu1,a\r\n"


def test_csv_delimiter_quote_id_0_and_empty_ids_that_never_match(tmp_path: Path) -> None:
    dataset = make_dataset("csv", csv={"delimiter": ";", "quote": "'"})
    data = b"user_id;note\n0;'a;b'\n;empty\n'';quoted empty\nu1;'x\ny'\n00;zeros\n' ';space\n"
    source = put(tmp_path, "in.csv", data)
    rows = matcher(dataset, hashed(dataset, 0), hashed(dataset, ""), hashed(dataset, " "))

    result, target = erase(tmp_path, RAW, source, "ds/in.csv", rows)

    assert result.positions == (2,)  # a string "00" is not the id "0"; "", " " name nobody
    assert target.read_bytes() == (
        b"user_id;note\n;empty\n'';quoted empty\nu1;'x\ny'\n00;zeros\n' ';space\n"
    )


def test_csv_integer_subject_column_empty_is_null_and_never_matches(tmp_path: Path) -> None:
    schema = [{"name": "user_id", "type": "int"}, {"name": "note", "type": "string"}]
    dataset = make_dataset("csv", schema)
    source = put(tmp_path, "in.csv", b"user_id,note\n,null\n0,zero\n007,seven\n")
    rows = matcher(dataset, hashed(dataset, ""), hashed(dataset, 0), hashed(dataset, 7))

    result, target = erase(tmp_path, RAW, source, "ds/in.csv", rows)

    assert result.positions == (3, 4)  # typed as ingestion types them: 007 is 7
    assert target.read_bytes() == b"user_id,note\n,null\n"


def test_csv_without_header_and_wrong_field_counts(tmp_path: Path) -> None:
    dataset = make_dataset("csv", csv={"header": False})
    source = put(tmp_path, "in.csv", b"u1\nu2,b\nu1,a,extra\nu3,c\n")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1"))
    )

    assert result.positions == (1, 3)  # both rejected by the reader, both indexed
    assert target.read_bytes() == b"u2,b\nu3,c\n"


def test_csv_header_only_nothing_to_erase(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", b"user_id,note\r\n")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1"))
    )

    assert (result.rows_before, result.rows_removed, result.written) == (0, 0, False)
    assert not target.exists()


def test_subject_matching_nothing_writes_nothing(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", CSV_MIXED)

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "zz"))
    )

    assert (result.rows_before, result.rows_removed, result.rows_after) == (8, 0, 8)
    assert not result.written
    assert not target.exists()


def test_subject_matching_every_row_leaves_deletion_to_the_caller(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", b'user_id,note\nu1,a\n\nu1,"b\nc"\n')

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1"))
    )

    assert (result.rows_before, result.rows_removed, result.rows_after) == (2, 2, 0)
    assert not result.written
    assert not target.exists()


@pytest.mark.parametrize("compression", ["auto", "gzip"])
def test_gzip_csv_stays_gzip_with_its_header(tmp_path: Path, compression: str) -> None:
    dataset = make_dataset("csv", compression=compression)
    original = python_gzip(b"user_id,note\nu1,a\nu2,b\n", filename="orders.csv", mtime=1_234_567)
    source = put(tmp_path, "in", original)  # no .gz in the key: the magic number decides

    result, target = erase(tmp_path, RAW, source, "ds/in", matcher(dataset, hashed(dataset, "u1")))

    written = target.read_bytes()
    header_size = 10 + len(b"orders.csv\x00")
    assert written[:header_size] == original[:header_size]
    assert written[4:8] == struct.pack("<I", 1_234_567)
    with gzip.GzipFile(fileobj=io.BytesIO(written)) as stream:
        assert stream.read() == b"user_id,note\nu2,b\n"
        assert stream.mtime == 1_234_567
    assert result.rows_after == 1


def test_plain_file_stays_plain_with_compression_none(tmp_path: Path) -> None:
    dataset = make_dataset("csv", compression="none")
    source = put(tmp_path, "in.csv", b"user_id,note\nu1,a\nu2,b\n")

    _, target = erase(tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u2")))

    assert target.read_bytes() == b"user_id,note\nu1,a\n"


def test_bytes_that_are_not_utf8_in_a_record_are_kept_as_they_are(tmp_path: Path) -> None:
    # the ingest reader rejects only the records holding them (they are indexed, as \\xNN)
    dataset = make_dataset("csv")
    data = b"user_id,note\n\xff\xfe,a\nu1,b\nu2,caf\xe9\n"
    source = put(tmp_path, "in.csv", data)

    result, target = erase(
        tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1"))
    )

    assert result.positions == (3,)
    assert target.read_bytes() == b"user_id,note\n\xff\xfe,a\nu2,caf\xe9\n"


def test_a_header_that_is_not_utf8_is_unreadable(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv", b"user_id,n\xffte\nu1,a\n")

    with pytest.raises(UnreadableObjectError):
        erase(tmp_path, RAW, source, "ds/in.csv", matcher(dataset, hashed(dataset, "u1")))


# ------------------------------------------------------------------ truncated gzip (CSV, JSONL)


def cut_gzip(prefix: bytes, header: bytes = FULL_GZIP_HEADER) -> bytes:
    """A gzip member cut where its decompressed bytes are exactly `prefix`: the rest of the
    deflate stream and the trailer (CRC-32, size) are missing."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return header + deflate.compress(prefix) + deflate.flush(zlib.Z_SYNC_FLUSH)


def gunzip_to_cut(data: bytes) -> tuple[bytes, bool]:
    """The decompressed bytes of a gzip file, and whether it is complete (trailer checked)."""
    stream = zlib.decompressobj(wbits=31)
    payload = stream.decompress(data)
    return payload, stream.eof


CUT_CSV = b"user_id,note\nu1,a\nu2,b\nu1,c\nu3,cut he"


def index_hints(tmp_path: Path, path: Path, dataset: Dataset) -> dict[str, tuple[int, ...]]:
    stored = StoredObject("bucket", "ds/in.csv.gz", "v1", "etag", path)
    return {
        e.subject_hash: e.row_hints
        for e in object_entries(RAW, stored, dataset, key=KEY, workdir=tmp_path)
    }


def test_truncated_gzip_matches_are_the_index_row_hints_tail_included(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv.gz", cut_gzip(CUT_CSV))

    index = index_hints(tmp_path, source, dataset)

    assert index == {
        hashed(dataset, "u1"): (2, 4),
        hashed(dataset, "u2"): (3,),
        hashed(dataset, "u3"): (5,),  # the tail: its id is followed by a delimiter
    }
    for digest, hints in index.items():
        found = match_rows(RAW, source, "ds/in.csv.gz", matcher(dataset, digest), workdir=tmp_path)
        assert found == RowMatches(5 - 1, hints)  # 4 records: 3 complete, 1 cut


def test_truncated_gzip_erasing_before_the_cut_keeps_the_cut_tail_as_it_was(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv.gz", cut_gzip(CUT_CSV))
    rows = matcher(dataset, hashed(dataset, "u1"))

    result, target = erase(tmp_path, RAW, source, "ds/in.csv.gz", rows)

    assert (result.positions, result.rows_before, result.rows_after) == ((2, 4), 4, 2)
    written = target.read_bytes()
    assert written[: len(FULL_GZIP_HEADER)] == FULL_GZIP_HEADER
    payload, complete = gunzip_to_cut(written)
    assert payload == b"user_id,note\nu2,b\nu3,cut he"
    assert not complete  # still cut: the tail reads as the same cut record, nothing more
    verify_erased(RAW, target, "ds/in.csv.gz", rows, expected_rows=2, workdir=tmp_path)
    assert index_hints(tmp_path, target, dataset) == {
        hashed(dataset, "u2"): (2,),
        hashed(dataset, "u3"): (3,),
    }


def test_truncated_gzip_erasing_the_subject_at_the_cut_leaves_a_whole_gzip(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv.gz", cut_gzip(CUT_CSV))
    rows = matcher(dataset, hashed(dataset, "u3"))

    result, target = erase(tmp_path, RAW, source, "ds/in.csv.gz", rows)

    assert (result.positions, result.rows_after) == ((5,), 3)
    assert gzip.decompress(target.read_bytes()) == b"user_id,note\nu1,a\nu2,b\nu1,c\n"
    verify_erased(RAW, target, "ds/in.csv.gz", rows, expected_rows=3, workdir=tmp_path)


def test_truncated_gzip_jsonl_tail_with_a_complete_id_is_erased_and_a_cut_id_is_nobodys(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("jsonl")
    lines = b'{"user_id": "u1"}\n{"user_id": "u2", "note": "x"}\n{"user_id": "u2", "note": "cu'
    source = put(tmp_path, "in.jsonl.gz", cut_gzip(lines))
    rows = matcher(dataset, hashed(dataset, "u2"))

    result, target = erase(tmp_path, RAW, source, "ds/in.jsonl.gz", rows)

    assert (result.positions, result.rows_after) == ((2, 3), 1)
    assert gzip.decompress(target.read_bytes()) == b'{"user_id": "u1"}\n'

    cut_id = put(tmp_path, "cut.jsonl.gz", cut_gzip(b'{"user_id": "u1"}\n{"user_id": "u2'))
    found = match_rows(RAW, cut_id, "ds/cut.jsonl.gz", rows, workdir=tmp_path)
    assert found == RowMatches(2, ())  # "u2 cut short is no id: the limit (RELIABILITY.md)


def test_corrupt_deflate_data_is_still_unreadable(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "in.csv.gz", FULL_GZIP_HEADER + b"not deflate data at all")

    with pytest.raises(UnreadableObjectError):
        erase(tmp_path, RAW, source, "ds/in.csv.gz", matcher(dataset, hashed(dataset, "u1")))


# ------------------------------------------------------------------------------ JSON Lines


def test_jsonl_keeps_bytes_and_skips_null_parents(tmp_path: Path) -> None:
    dataset = make_dataset("jsonl", NESTED_SCHEMA, ("customer.id",))
    source = put(tmp_path, "in.jsonl", JSONL_NESTED)
    rows = matcher(dataset, hashed(dataset, "c1"), hashed(dataset, ""))

    result, target = erase(tmp_path, RAW, source, "ds/in.jsonl", rows)

    assert result.positions == (1, 9)  # line 8's "" names nobody: never matched
    assert (result.rows_before, result.rows_after) == (8, 6)
    assert target.read_bytes() == (
        b'{"customer":null,"n":2}\n'
        b"\n"
        b'{"n":3}\r\n'
        b'{"customer":{"id":null},"n":4}\n'
        b"[1,2]\n"
        b'{"customer":{"id":0},"n":5}\n'
        b'{"customer":{"id":""},"n":6}\n'
    )


def test_jsonl_integer_zero_and_lone_carriage_return_inside_a_line(tmp_path: Path) -> None:
    schema = [{"name": "user_id", "type": "long"}, {"name": "note", "type": "string"}]
    dataset = make_dataset("jsonl", schema)
    data = (
        b'{"user_id":0,"note":"a\\rb"}\r\n'  # 1: 0 as a JSON number
        b'{"user_id":1}\r{"user_id":0}\n'  # 2: a lone \r does not end a JSON line: not an object
        b'{"user_id":"0"}\n'  # 3: "0" typed as long is 0
        b'{"user_id":1}\n'  # 4
    )
    source = put(tmp_path, "in.jsonl", data)

    result, target = erase(
        tmp_path, RAW, source, "ds/in.jsonl", matcher(dataset, hashed(dataset, 0))
    )

    assert result.positions == (1, 3)  # line 2 has no subject, for the index as here
    assert target.read_bytes() == b'{"user_id":1}\r{"user_id":0}\n{"user_id":1}\n'


def test_gzip_jsonl_keeps_every_header_field(tmp_path: Path) -> None:
    dataset = make_dataset("jsonl", NESTED_SCHEMA, ("customer.id",))
    source = put(tmp_path, "in.jsonl.gz", gzip_member(JSONL_NESTED, FULL_GZIP_HEADER))

    _, target = erase(
        tmp_path, RAW, source, "ds/in.jsonl.gz", matcher(dataset, hashed(dataset, "c1"))
    )

    written = target.read_bytes()
    assert written[: len(FULL_GZIP_HEADER)] == FULL_GZIP_HEADER
    assert gzip.decompress(written) == (
        b'{"customer":null,"n":2}\n'
        b"\n"
        b'{"n":3}\r\n'
        b'{"customer":{"id":null},"n":4}\n'
        b"[1,2]\n"
        b'{"customer":{"id":0},"n":5}\n'
        b'{"customer":{"id":""},"n":6}\n'
    )


# ------------------------------------------------------------------------------ composite


def test_composite_key_matches_the_tuple_only(tmp_path: Path) -> None:
    dataset = make_dataset("csv", COMPOSITE_SCHEMA, ("tenant", "user_id"))
    source = put(tmp_path, "c.csv", b"tenant,user_id,note\nacme,1,a\nacme,2,b\nbeta,1,c\nacme,,d\n")
    digest = hash_of_keys(KEY, dataset.subject_columns, {"tenant": "acme", "user_id": 1})

    result, target = erase(tmp_path, RAW, source, "ds/c.csv", matcher(dataset, digest))

    assert result.positions == (2,)
    assert target.read_bytes() == b"tenant,user_id,note\nacme,2,b\nbeta,1,c\nacme,,d\n"


# ------------------------------------------------------------------------------ quarantine


def test_quarantine_lines_are_removed(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    source = put(tmp_path, "q.jsonl", QUARANTINE_LINES)
    key = "ds/_quarantine/abc.jsonl"

    result, target = erase(
        tmp_path, QUARANTINE, source, key, matcher(dataset, hashed(dataset, "u1"))
    )

    assert (result.positions, result.rows_after) == ((1, 5), 2)
    assert target.read_bytes() == (
        b'{"reasons":["bad n"],"record":{"user_id":"u2","n":"y"}}\n'
        b"\n"
        b'{"reasons":["bad n"],"record":{"user_id":null}}\n'
    )


# -------------------------------------------------------------------------------- Parquet


def _columns(path: Path) -> dict[str, Any]:
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(j).path_in_schema: group.column(j) for j in range(group.num_columns)}


def describe(schema: Any) -> list[tuple[str, str, str, str, int, int]]:
    """Every leaf column of a Parquet schema: path, physical type, logical type and its unit or
    precision, definition and repetition levels (0 definition levels: required)."""
    found = []
    for c in (schema.column(i) for i in range(len(schema))):
        logical = json.loads(c.logical_type.to_json())
        detail = logical.get("timeUnit") or (
            f"{c.precision},{c.scale}" if logical["Type"] == "Decimal" else ""
        )
        found.append(
            (
                c.path,
                c.physical_type,
                logical["Type"],
                detail,
                c.max_definition_level,
                c.max_repetition_level,
            )
        )
    return found


def _rich_table() -> pa.Table:
    schema = pa.schema(
        [
            pa.field("user_id", pa.string()),
            pa.field("n", pa.int32(), nullable=False),
            pa.field("price", pa.decimal128(7, 2)),
            pa.field("day", pa.date32()),
            pa.field("at", pa.timestamp("ns")),
            pa.field("customer", pa.struct([pa.field("id", pa.string())])),
            pa.field("tags", pa.list_(pa.string())),
        ],
        metadata={"owner": "lethe-tests", "pipeline": "nightly"},
    )
    return pa.table(
        {
            "user_id": ["u0", "u1", "u1", "u1", "u2", "u1"],
            "n": [0, 1, 2, 3, 4, 5],
            "price": [Decimal("0.10"), None, Decimal("2.00"), None, Decimal("-4.44"), None],
            "day": [dt.date(2026, 1, d) for d in range(1, 7)],
            "at": pa.array([1, 2_000_000_001, 3, 4, 1_700_000_000_123_456_789, 6], pa.int64()),
            "customer": [{"id": "c0"}, None, {"id": None}, {"id": "c3"}, {"id": "c4"}, None],
            "tags": [["a"], [], None, ["b", None], ["c", "d"], ["e"]],
        },
        schema=schema,
    )


def test_parquet_keeps_codecs_types_metadata_and_row_groups(tmp_path: Path) -> None:
    codecs = {
        "user_id": "zstd",
        "n": "gzip",
        "price": "none",
        "day": "snappy",
        "at": "brotli",
        "customer.id": "lz4",
        "tags.list.element": "zstd",
    }
    data = parquet_bytes(
        _rich_table(),
        row_group_size=2,
        version="2.6",
        compression=codecs,
        use_dictionary=["user_id", "customer.id"],
    )
    source = put(tmp_path, "in.parquet", data)
    dataset = make_dataset("parquet")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u1"))
    )

    assert result.positions == (1, 2, 3, 5)
    assert (result.rows_before, result.rows_after, result.written) == (6, 2, True)
    assert result.deviations == ()
    before, after = pq.ParquetFile(source), pq.ParquetFile(target)
    assert after.schema.equals(before.schema)
    assert describe(after.schema) == describe(before.schema)
    assert describe(after.schema) == [
        ("user_id", "BYTE_ARRAY", "String", "", 1, 0),
        ("n", "INT32", "None", "", 0, 0),  # required stays required
        ("price", "FIXED_LEN_BYTE_ARRAY", "Decimal", "7,2", 1, 0),
        ("day", "INT32", "Date", "", 1, 0),
        ("at", "INT64", "Timestamp", "nanoseconds", 1, 0),
        ("customer.id", "BYTE_ARRAY", "String", "", 2, 0),
        ("tags.list.element", "BYTE_ARRAY", "String", "", 3, 1),
    ]
    assert after.metadata.metadata == before.metadata.metadata
    assert after.metadata.metadata[b"owner"] == b"lethe-tests"
    assert after.metadata.metadata[b"ARROW:schema"] == before.metadata.metadata[b"ARROW:schema"]
    assert after.metadata.format_version == before.metadata.format_version == "2.6"
    # row groups [u0 u1] [u1 u1] [u2 u1]: the middle one is emptied and dropped
    assert [after.metadata.row_group(i).num_rows for i in range(after.num_row_groups)] == [1, 1]
    for group in range(after.num_row_groups):
        chunks = after.metadata.row_group(group)
        found = {chunks.column(j).path_in_schema: chunks.column(j) for j in range(7)}
        assert {p: c.compression for p, c in found.items()} == {
            "user_id": "ZSTD",
            "n": "GZIP",
            "price": "UNCOMPRESSED",
            "day": "SNAPPY",
            "at": "BROTLI",
            "customer.id": "LZ4",
            "tags.list.element": "ZSTD",
        }
        assert {p for p, c in found.items() if c.has_dictionary_page} == {"user_id", "customer.id"}
    assert after.read().to_pylist() == [
        {
            "user_id": "u0",
            "n": 0,
            "price": Decimal("0.10"),
            "day": dt.date(2026, 1, 1),
            "at": pa.scalar(1, pa.timestamp("ns")).as_py(),
            "customer": {"id": "c0"},
            "tags": ["a"],
        },
        {
            "user_id": "u2",
            "n": 4,
            "price": Decimal("-4.44"),
            "day": dt.date(2026, 1, 5),
            "at": pa.scalar(1_700_000_000_123_456_789, pa.timestamp("ns")).as_py(),
            "customer": {"id": "c4"},
            "tags": ["c", "d"],
        },
    ]
    assert after.read().column("at").cast(pa.int64()).to_pylist() == [1, 1_700_000_000_123_456_789]


@pytest.mark.parametrize("codec", ["zstd", "gzip", "snappy", "none", "brotli", "lz4"])
def test_parquet_file_codec_is_kept(tmp_path: Path, codec: str) -> None:
    table = pa.table({"user_id": ["u1", "u2", "u3"], "note": ["a", "b", "c"]})
    source = put(tmp_path, "in.parquet", parquet_bytes(table, compression=codec))
    dataset = make_dataset("parquet")

    _, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u2"))
    )

    expected = "UNCOMPRESSED" if codec == "none" else codec.upper()
    assert {c.compression for c in _columns(target).values()} == {expected}
    assert pq.read_table(target).to_pylist() == [
        {"user_id": "u1", "note": "a"},
        {"user_id": "u3", "note": "c"},
    ]


def test_spark_like_parquet_keeps_int96_integer_decimals_and_no_arrow_schema(
    tmp_path: Path,
) -> None:
    table = pa.table(
        {
            "user_id": [1, 2, 3, 4],
            "at": pa.array(
                [
                    dt.datetime(1, 1, 1),  # outside what nanoseconds hold: must not wrap
                    dt.datetime(2026, 11, 22, 8, 30, 0, 123456),
                    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
                    None,
                ],
                pa.timestamp("us"),
            ),
            "small": pa.array(
                [Decimal("1.25"), None, Decimal("-3.50"), Decimal("0.00")], pa.decimal128(5, 2)
            ),
            "big": pa.array([Decimal("12345678.90")] * 4, pa.decimal128(12, 2)),
        }
    )
    data = parquet_bytes(
        table,
        version="1.0",
        use_deprecated_int96_timestamps=True,
        store_decimal_as_integer=True,
        store_schema=False,
        compression="snappy",
    )
    source = put(tmp_path, "in.parquet", data)
    schema = [{"name": "user_id", "type": "long"}, {"name": "at", "type": "timestamp"}]
    dataset = make_dataset("parquet", schema)

    result, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, 4))
    )

    assert result.deviations == ()
    after = pq.ParquetFile(target)
    assert [after.schema.column(i).physical_type for i in range(4)] == [
        "INT64",
        "INT96",
        "INT32",
        "INT64",
    ]
    assert after.metadata.metadata is None  # no ARROW:schema added
    assert after.metadata.format_version == "1.0"
    assert after.schema.equals(pq.ParquetFile(source).schema)
    values = pq.ParquetFile(target, coerce_int96_timestamp_unit="us").read().to_pylist()
    assert values == [
        {
            "user_id": 1,
            "at": dt.datetime(1, 1, 1),
            "small": Decimal("1.25"),
            "big": Decimal("12345678.90"),
        },
        {
            "user_id": 2,
            "at": dt.datetime(2026, 11, 22, 8, 30, 0, 123456),
            "small": None,
            "big": Decimal("12345678.90"),
        },
        {
            "user_id": 3,
            "at": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "small": Decimal("-3.50"),
            "big": Decimal("12345678.90"),
        },
    ]


def test_int96_nanoseconds_are_kept_when_they_fit(tmp_path: Path) -> None:
    table = pa.table(
        {"user_id": ["u1", "u2"], "at": pa.array([1_000_000_001, 5], pa.timestamp("ns"))}
    )
    source = put(tmp_path, "in.parquet", parquet_bytes(table, use_deprecated_int96_timestamps=True))
    dataset = make_dataset("parquet")

    _, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u2"))
    )

    after = pq.ParquetFile(target)
    assert after.schema.column(1).physical_type == "INT96"
    assert after.read().column("at").cast(pa.int64()).to_pylist() == [1_000_000_001]


def test_parquet_format_2_4_microseconds_and_legacy_list_names_are_kept(tmp_path: Path) -> None:
    table = pa.table(
        {
            "user_id": ["u1", "u2", "u3"],
            "at": pa.array([1_000, 2_000, 3_000], pa.timestamp("ns")),
            "tags": pa.array([["a"], ["b"], None], pa.list_(pa.string())),
        }
    )
    data = parquet_bytes(table, version="2.4", use_compliant_nested_type=False)
    source = put(tmp_path, "in.parquet", data)
    dataset = make_dataset("parquet")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u1"))
    )

    after = pq.ParquetFile(target)
    assert result.deviations == ()
    assert after.schema.equals(pq.ParquetFile(source).schema)
    assert describe(after.schema) == [
        ("user_id", "BYTE_ARRAY", "String", "", 1, 0),
        ("at", "INT64", "Timestamp", "microseconds", 1, 0),
        ("tags.list.item", "BYTE_ARRAY", "String", "", 3, 1),
    ]
    assert after.read().column("at").type == pa.timestamp("us")  # as the source reads
    assert after.read().column("at").cast(pa.int64()).to_pylist() == [2, 3]


def test_parquet_without_arrow_schema_and_with_encodings_and_sorting(tmp_path: Path) -> None:
    table = pa.table(
        {
            "user_id": pa.array([1, 2, 3, 4], pa.int64()),
            "x": pa.array([0.5, 1.5, 2.5, 3.5], pa.float64()),
        }
    )
    data = parquet_bytes(
        table,
        store_schema=False,
        use_dictionary=False,
        column_encoding={"user_id": "DELTA_BINARY_PACKED", "x": "BYTE_STREAM_SPLIT"},
        sorting_columns=[pq.SortingColumn(0)],
        write_statistics=["user_id"],
    )
    source = put(tmp_path, "in.parquet", data)
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])

    _, target = erase(tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, 2)))

    columns = _columns(target)
    assert "DELTA_BINARY_PACKED" in columns["user_id"].encodings
    assert "BYTE_STREAM_SPLIT" in columns["x"].encodings
    assert not any(c.has_dictionary_page for c in columns.values())
    assert (columns["user_id"].is_stats_set, columns["x"].is_stats_set) == (True, False)
    group = pq.ParquetFile(target).metadata.row_group(0)
    assert group.sorting_columns == (pq.SortingColumn(0),)
    assert pq.ParquetFile(target).metadata.metadata is None
    assert pq.read_table(target).to_pylist() == [
        {"user_id": 1, "x": 0.5},
        {"user_id": 3, "x": 2.5},
        {"user_id": 4, "x": 3.5},
    ]


def test_parquet_time_utc_flag_bloom_filter_and_page_index_are_kept(tmp_path: Path) -> None:
    table = pa.table(
        {
            "user_id": ["u1", "u2", "u3"],
            "t": pa.array([1, 2, 3], pa.time64("us")),
        }
    )
    data = parquet_bytes(
        table,
        write_time_adjusted_to_utc=True,
        bloom_filter_options={"user_id": True},
        write_page_index=True,
    )
    source = put(tmp_path, "in.parquet", data)
    dataset = make_dataset("parquet")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u3"))
    )

    assert result.deviations == ()
    assert json.loads(pq.ParquetFile(target).schema.column(1).logical_type.to_json()) == {
        "Type": "Time",
        "isAdjustedToUTC": True,
        "timeUnit": "microseconds",
    }
    columns = _columns(target)
    assert columns["user_id"].bloom_filter_offset is not None
    assert columns["t"].bloom_filter_offset is None
    assert all(c.has_column_index for c in columns.values())
    assert pq.read_table(target).to_pylist() == [
        {"user_id": "u1", "t": dt.time(0, 0, 0, 1)},
        {"user_id": "u2", "t": dt.time(0, 0, 0, 2)},
    ]


def test_what_cannot_be_kept_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No file pyarrow writes is one it cannot write again (Spark's legacy two-level lists are,
    # and need Spark): force the writer's hand to see the report.
    table = pa.table({"user_id": ["u1", "u2"], "at": pa.array([1, 2], pa.timestamp("ms"))})
    source = put(tmp_path, "in.parquet", parquet_bytes(table, compression="zstd"))
    dataset = make_dataset("parquet")
    forced = {"version": "2.6", "use_deprecated_int96_timestamps": True}
    monkeypatch.setattr(erase_parquet, "_schema_options", lambda *_: forced)
    monkeypatch.setattr(erase_parquet, "_codec", lambda _: "GZIP")

    result, _ = erase(
        tmp_path, RAW, source, "ds/in.parquet", matcher(dataset, hashed(dataset, "u1"))
    )

    assert result.written
    assert result.deviations == (
        "schema: 'optional int64 field_id=-1 at (Timestamp(isAdjustedToUTC=false, "
        "timeUnit=milliseconds, is_from_converted_type=false, force_set_converted_type=false))"
        ";' is written differently",
        "column user_id: codec ZSTD became GZIP",
        "column at: codec ZSTD became GZIP",
    )


def test_gzip_wrapped_raw_parquet_is_wrapped_again(tmp_path: Path) -> None:
    table = pa.table({"user_id": ["u1", "u2"], "note": ["a", "b"]})
    original = python_gzip(parquet_bytes(table, compression="zstd"), "in.parquet", 42)
    source = put(tmp_path, "in.parquet.gz", original)
    dataset = make_dataset("parquet")

    result, target = erase(
        tmp_path, RAW, source, "ds/in.parquet.gz", matcher(dataset, hashed(dataset, "u1"))
    )

    written = target.read_bytes()
    assert written[: 10 + len(b"in.parquet\x00")] == original[: 10 + len(b"in.parquet\x00")]
    unwrapped = put(tmp_path, "unwrapped.parquet", gzip.decompress(written))
    assert pq.read_table(unwrapped).to_pylist() == [{"user_id": "u2", "note": "b"}]
    assert _columns(unwrapped)["note"].compression == "ZSTD"
    assert result.rows_after == 1


def test_lake_partition_subject_matches_every_row_of_its_file(tmp_path: Path) -> None:
    dataset = make_dataset("parquet", partition_by=["user_id"])
    table = pa.table({"note": ["a", "b", "c"]})
    source = put(tmp_path, "part-0.parquet", parquet_bytes(table))
    key = "ds/user_id=u1/part-0.parquet"

    everything, target = erase(tmp_path, LAKE, source, key, matcher(dataset, hashed(dataset, "u1")))
    nothing = match_rows(
        LAKE, source, key, matcher(dataset, hashed(dataset, "u2")), workdir=tmp_path
    )
    default = match_rows(
        LAKE,
        source,
        "ds/user_id=__HIVE_DEFAULT_PARTITION__/part-0.parquet",
        matcher(dataset, hashed(dataset, "__HIVE_DEFAULT_PARTITION__")),
        workdir=tmp_path,
    )

    assert (everything.positions, everything.rows_after, everything.written) == (
        (0, 1, 2),
        0,
        False,
    )
    assert not target.exists()
    assert nothing == RowMatches(3, ())
    assert default == RowMatches(3, ())  # a null partition value is nobody's


def test_lake_file_with_nested_subject_and_partition_in_path(tmp_path: Path) -> None:
    _, key, dataset, source = case_lake_nested(tmp_path)

    result, target = erase(tmp_path, LAKE, source, key, matcher(dataset, hashed(dataset, "c1")))

    assert result.positions == (0, 3)
    assert pq.read_table(target).to_pylist() == [
        {"customer": None, "n": 1},
        {"customer": {"id": None}, "n": 2},
        {"customer": {"id": ""}, "n": 4},
        {"customer": {"id": "0"}, "n": 5},
    ]
    assert pq.ParquetFile(target).metadata.num_row_groups == 2


def test_lake_file_that_is_not_parquet_is_unreadable(tmp_path: Path) -> None:
    dataset = make_dataset("parquet")
    source = put(tmp_path, "part-0.parquet", b"PAR1 not really")

    with pytest.raises(UnreadableObjectError):
        match_rows(LAKE, source, "ds/part-0.parquet", matcher(dataset), workdir=tmp_path)


# --------------------------------------------------------------------------------- verify


@pytest.mark.parametrize("build", [case_csv, case_jsonl_gzip, case_raw_parquet, case_quarantine])
def test_verify_after_rewrite(tmp_path: Path, build: CaseBuilder) -> None:
    kind, key, dataset, source = build(tmp_path)
    everyone = {
        e.subject_hash
        for e in object_entries(
            kind, StoredObject("b", key, "v", "e", source), dataset, key=KEY, workdir=tmp_path
        )
    }
    victim = sorted(everyone)[0]
    rows = matcher(dataset, victim)

    result, target = erase(tmp_path, kind, source, key, rows)

    assert result.written
    checked = verify_erased(
        kind, target, key, rows, expected_rows=result.rows_after, workdir=tmp_path
    )
    assert checked == RowMatches(result.rows_after, ())
    others = matcher(dataset, *(everyone - {victim}))  # every other subject keeps its rows
    kept = match_rows(kind, source, key, others, workdir=tmp_path).matched
    assert match_rows(kind, target, key, others, workdir=tmp_path).matched == kept
    with pytest.raises(ErasureVerificationError, match="still match"):
        verify_erased(kind, source, key, rows, expected_rows=result.rows_before, workdir=tmp_path)
    with pytest.raises(ErasureVerificationError, match="expected"):
        verify_erased(kind, target, key, rows, expected_rows=result.rows_before, workdir=tmp_path)
