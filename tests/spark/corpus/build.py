"""The bad input corpus: the bytes of every case of corpus.json.

Small cases are committed under `files/` (written by `python -m tests.spark.corpus.build`, which
rewrites them from the functions below, byte for byte the same on every run); the large ones
(a 10 MB single line, 5,000-deep JSON) are built at test time by `generated`. corpus.json holds
each case's key, dataset and expected outcome; test_ingest_corpus.py ingests them all.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent
FILES = HERE / "files"
MANIFEST = HERE / "corpus.json"
TEN_MB = 10 * 1024 * 1024

CSV_HEADER = b"user_id,n,amount,day,note\n"
# subject ids carrying injection payloads: SQL, HTML, path traversal, templates, log forging
INJECTIONS = [
    "subj-sql'; DROP TABLE subjects; --",
    "subj-html<script>alert(1)</script>",
    "subj-path../../../etc/passwd",
    "subj-tpl{{7*7}}${7*7}#{7*7}<%= 7*7 %>",
    "subj-jndi${jndi:ldap://x/a}",
    "subj-fmt%s%n%x{0}",
    "subj-log\r\nINFO [exec] lethe.ingest: forged line",
]
LONG_SUBJECT = "subj-long-" + "x" * 100_000


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _csv_quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _parquet(table: pa.Table, **options: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def _pq_rows(count: int, prefix: str) -> pa.Table:
    return pa.table(
        {
            "user_id": [f"subj-{prefix}-{i}" for i in range(count)],
            "at": pa.array(
                [dt.datetime(2026, 11, 22, 10, i, tzinfo=dt.UTC) for i in range(count)],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([Decimal(f"{i}.5") for i in range(count)], pa.decimal128(38, 9)),
            "n": pa.array(range(count), pa.int64()),
        }
    )


def _jsonl(*lines: object) -> bytes:
    return b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )


# ------------------------------------------------------------------------------------ CSV

CSV_CASES: dict[str, bytes] = {
    "csv/empty.csv": b"",
    "csv/whitespace.csv": b"  \n\t\n   \r\n",
    "csv/blank-lines.csv": b"\n\r\n\n",
    "csv/header-only.csv": CSV_HEADER,
    "csv/header-only-no-newline.csv": CSV_HEADER.rstrip(b"\n"),
    "csv/bom.csv": b"\xef\xbb\xbf"
    + CSV_HEADER.replace(b"\n", b"\r\n")
    + b"subj-bom-1,1,1.00,2026-11-22,a\r\nsubj-bom-2,2,2.00,2026-11-22,b\r\n",
    "csv/quoted-newlines.csv": CSV_HEADER
    + b'subj-qn-1,1,,,"first\nsecond"\n'
    + b'subj-qn-2,2,,,"crlf\r\ninside, and a comma"\n'
    + b'subj-qn-3,3,,,"say ""hi""\n\nafter a blank line"\n',
    "csv/wrong-delimiter.csv": CSV_HEADER.replace(b",", b";")
    + b"subj-semi-1;1;1.00;2026-11-22;a\nsubj-semi-2;2;2.00;2026-11-22;b\n",
    "csv/invalid-utf8-row.csv": CSV_HEADER
    + b"subj-u8-1,1,,,fine\nsubj-u8-2,2,,,caf\xe9 latin-1\nsubj-u8-3,3,,,also fine\n",
    "csv/invalid-utf8-header.csv": b"user_id,n,amount,day,n\xf6te\nsubj-u8h-1,1,,,a\n",
    "csv/mixed-line-endings.csv": b"user_id,n,amount,day,note\r\n"
    + b"subj-eol-1,1,,,crlf\r\nsubj-eol-2,2,,,lf\nsubj-eol-3,3,,,cr\rsubj-eol-4,4,,,last",
    "csv/ragged-rows.csv": CSV_HEADER
    + b"subj-rag-1,1,,,ok\nsubj-rag-2,2,,,too,many\nsubj-rag-3,3\nsubj-rag-4,4,,,ok\n",
    "csv/unclosed-quote.csv": CSV_HEADER
    + b'subj-uq-1,1,,,ok\nsubj-uq-2,2,,,"never closed\nsubj-uq-3,3,,,swallowed\n',
    "csv/nul-byte.csv": CSV_HEADER + b"subj-nul-1,1,,,a\x00b\n",
    "csv/type-errors.csv": CSV_HEADER
    + b"subj-te-1,abc,,,n\nsubj-te-2,2,,2026-13-45,day\nsubj-te-3,3,x,,amount\n"
    + b"subj-te-4,4,4.00,2026-11-22,ok\n,5,,,no subject\n",
    "csv/duplicate-header.csv": b"user_id,n,n,day,note\nsubj-dup-1,1,2,,a\n",
    "csv/extra-column.csv": b"user_id,n,amount,day,note,secret\nsubj-extra-1,1,,,a,dropped\n",
    "csv/decimal-limit.csv": CSV_HEADER
    + b"subj-dec-1,1,"
    + b"9" * 36
    + b".99,,max\n"
    + b"subj-dec-2,2,-"
    + b"9" * 36
    + b".99,,min\n"
    + b"subj-dec-3,3,1"
    + b"0" * 36
    + b".00,,39 digits\n"
    + b"subj-dec-4,2147483647,,,int max\n"
    + b"subj-dec-5,2147483648,,,int overflow\n",
    "csv/decimal-scale.csv": CSV_HEADER
    + b"subj-scale-1,1,0.005,,would round up\nsubj-scale-2,2,0.004,,would round down\n"
    + b"subj-scale-3,3,1e3,,exponent\nsubj-scale-4,4,12.340,,trailing zero\n"
    + b"subj-scale-5,5,0.01,,the scale exactly\n",
    "csv/reserved-column.csv": b"user_id,n,_lethe_position,_lethe_record,note\n"
    + b"subj-rc-1,1,99,{},ok\nsubj-rc-2,x,98,{},bad n\n",
    "csv/long-subject.csv": CSV_HEADER + LONG_SUBJECT.encode() + b",1,,,long id\n",
    "csv/injection-subjects.csv": CSV_HEADER
    + b"".join(f"{_csv_quote(s)},{i},,,payload\n".encode() for i, s in enumerate(INJECTIONS)),
    "csv/gzip-without-gz.csv": _gzip(CSV_HEADER + b"subj-gz-1,1,,,zipped\n"),
    "csv/plain-with-gz.csv.gz": CSV_HEADER + b"subj-plaingz-1,1,,,not zipped\n",
    "csv/bad-gzip-stream.csv.gz": b"\x1f\x8b\x08\x00 this is not deflate data at all\n",
    "csv/truncated.csv.gz": _gzip(
        CSV_HEADER + b"".join(b"subj-trunc-%d,%d,,,row\n" % (i, i) for i in range(200))
    )[:300],
    "csv/multi-member.csv.gz": _gzip(CSV_HEADER + b"subj-mm-1,1,,,first member\n")
    + _gzip(b"subj-mm-2,2,,,second member\n"),
    "csv/with space/a file.csv": CSV_HEADER + b"subj-space-1,1,,,key with spaces\n",
    "csv/ünïcødé/数据 ☃.csv": CSV_HEADER + b"subj-unicode-1,1,,,unicode key\n",
    "csv/../csv/dotdot.csv": CSV_HEADER + b"subj-dotdot-1,1,,,dot-dot key\n",
    "csv/./a/../b.csv": CSV_HEADER + b"subj-dots-1,1,,,dot segments\n",
    "csv/100%+#?&=;[x].csv": CSV_HEADER + b"subj-special-1,1,,,URL specials in the key\n",
}

# ------------------------------------------------------------------------------ JSON Lines

JSONL_CASES: dict[str, bytes] = {
    "jsonl/empty.jsonl": b"",
    "jsonl/whitespace.jsonl": b"  \n\t\r\n\n",
    "jsonl/bom.jsonl": b"\xef\xbb\xbf" + _jsonl({"user_id": "subj-jbom-1", "n": 1}),
    "jsonl/array-line.jsonl": _jsonl(
        {"user_id": "subj-arr-1", "n": 1}, [{"user_id": "subj-arr-2"}], {"user_id": "subj-arr-3"}
    ),
    "jsonl/scalar-lines.jsonl": _jsonl(
        {"user_id": "subj-sc-1"}, 42, "subj-sc-2", None, True, 1.5, {"user_id": "subj-sc-3"}
    ),
    "jsonl/invalid-utf8-line.jsonl": _jsonl({"user_id": "subj-ju8-1"})
    + b'{"user_id": "subj-ju8-2", "note": "caf\xe9"}\n'
    + _jsonl({"user_id": "subj-ju8-3"}),
    "jsonl/mixed-line-endings.jsonl": b'{"user_id": "subj-jeol-1"}\r\n'
    + b'{"user_id": "subj-jeol-2"}\n'
    + b'{"user_id": "subj-jeol-3"}\r{"user_id": "subj-jeol-4"}\n'
    + b'{"user_id": "subj-jeol-5"}',
    "jsonl/truncated.jsonl.gz": _gzip(
        b"".join(b'{"user_id": "subj-jtr-%d", "n": %d}\n' % (i, i) for i in range(200))
    )[:300],
    "jsonl/broken-json.jsonl": b'{"user_id": "subj-bj-1"}\n'
    + b'{"user_id": "subj-bj-2", "n": \n'
    + b'{"user_id": "subj-bj-3", "n": NaN}\n'
    + b'{"user_id": "subj-bj-4",}\n'
    + b'{"user_id": "subj-bj-5"}\n',
    "jsonl/type-errors.jsonl": _jsonl(
        {"user_id": "subj-jte-1", "n": "abc"},
        {"user_id": "subj-jte-2", "n": 99999999999999999999},
        {"user_id": "subj-jte-3", "at": "not a time"},
        {"user_id": "subj-jte-4", "tags": "not an array"},
        {"user_id": 12345, "n": 4},
        {"n": 5},
        {"user_id": None},
        {"user_id": "subj-jte-8", "n": 8, "tags": ["a", "b"]},
    ),
    "jsonl/nanosecond-timestamps.jsonl": _jsonl(
        {"user_id": "subj-ns-1", "at": "2026-11-22T10:00:00.123456789Z"},
        {"user_id": "subj-ns-2", "at": "2026-11-22T10:00:00.123456Z"},
    ),
    "jsonl/decimal-limit.jsonl": b'{"user_id": "subj-jdec-1", "amount": '
    + b"9" * 38
    + b'}\n{"user_id": "subj-jdec-2", "amount": -'
    + b"9" * 38
    + b'}\n{"user_id": "subj-jdec-3", "amount": 1'
    + b"0" * 38
    + b"}\n",
    "jsonl/decimal-scale.jsonl": b'{"user_id": "subj-jds-1", "amount": 1.5}\n'
    + b'{"user_id": "subj-jds-2", "amount": 2.000}\n'
    + b'{"user_id": "subj-jds-3", "amount": 1.5e1}\n'
    + b'{"user_id": "subj-jds-4", "amount": 1e2}\n',
    "jsonl/duplicate-keys.jsonl": b'{"user_id": "subj-dk-first", "user_id": "subj-dk-last"}\n',
    "jsonl/injection-subjects.jsonl": _jsonl(
        *[{"user_id": s, "n": i} for i, s in enumerate(INJECTIONS)], {"user_id": LONG_SUBJECT}
    ),
}

# ----------------------------------------------------------------------------------- Parquet


def _corrupt_footer() -> bytes:
    data = bytearray(_parquet(_pq_rows(3, "cf")))
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    data[start : start + 16] = b"\xff" * 16  # the footer's first bytes: garbage thrift
    return bytes(data)


def _int96() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-i96-1", "subj-i96-2"],
            "at": pa.array(
                [dt.datetime(2026, 11, 22, 10, 0, 0, 123456), dt.datetime(1900, 1, 1)],
                pa.timestamp("us"),
            ),
        }
    )
    return _parquet(table, use_deprecated_int96_timestamps=True)


def _nanos() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-pns-1"],
            "at": pa.array([1_795_341_600_123_456_789], pa.timestamp("ns", tz="UTC")),
        }
    )
    return _parquet(table, version="2.6")


def _decimals() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-pdec-1", "subj-pdec-2"],
            "amount": pa.array(
                [Decimal("9" * 29 + "." + "9" * 9), Decimal("-" + "9" * 29 + "." + "9" * 9)],
                pa.decimal128(38, 9),
            ),
        }
    )
    return _parquet(table)


def _decimal_overflow() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-pdo-1", "subj-pdo-2"],
            "amount": pa.array([Decimal("12"), Decimal("9" * 38)], pa.decimal128(38, 0)),
        }
    )
    return _parquet(table)


def _decimal256() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-p256-1", "subj-p256-2"],
            "amount": pa.array([Decimal("15"), Decimal("9" * 40)], pa.decimal256(40, 0)),
        }
    )
    return _parquet(table)


def _decimal_scale() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-pds-1", "subj-pds-2", "subj-pds-3"],
            "amount": pa.array(
                [Decimal("1.5000000000"), Decimal("1.0000000001"), Decimal("-0.0000000009")],
                pa.decimal128(38, 10),
            ),
        }
    )
    return _parquet(table)


def _unexpected_schema() -> bytes:
    return _parquet(pa.table({"foo": [1, 2], "bar": ["subj-us-1", "subj-us-2"]}))


def _type_conflict() -> bytes:
    table = pa.table(
        {
            "user_id": ["subj-ptc-1", "subj-ptc-2", "subj-ptc-3"],
            "amount": ["1.25", "not a number", None],
            "n": pa.array([[1], [2], None], pa.list_(pa.int64())),
        }
    )
    return _parquet(table)


def _null_subject() -> bytes:
    return _parquet(pa.table({"user_id": ["subj-pnull-1", None, ""], "n": [1, 2, 3]}))


def _odd_column_names() -> bytes:
    names = ["user_id", "a.b", "with space", "ünï`code`", "n"]
    return _parquet(pa.table([["subj-odd-1"], ["x"], ["y"], ["z"], [7]], names=names))


def _reserved_column() -> bytes:
    return _parquet(pa.table({"user_id": ["subj-res-1"], "_lethe_position": [99], "n": [1]}))


def _duplicate_columns() -> bytes:
    return _parquet(pa.table([["subj-dupc-1"], [1], [2]], names=["user_id", "n", "n"]))


PARQUET_CASES: dict[str, Callable[[], bytes]] = {
    "parquet/odd-column-names.parquet": _odd_column_names,
    "parquet/reserved-column.parquet": _reserved_column,
    "parquet/duplicate-columns.parquet": _duplicate_columns,
    "parquet/corrupt-footer.parquet": _corrupt_footer,
    "parquet/truncated.parquet": lambda: _parquet(_pq_rows(50, "ptr"))[:200],
    "parquet/not-parquet.parquet": lambda: CSV_HEADER + b"subj-np-1,1,,,text\n",
    "parquet/empty.parquet": lambda: b"",
    "parquet/zero-rows.parquet": lambda: _parquet(_pq_rows(0, "zero")),
    "parquet/unexpected-schema.parquet": _unexpected_schema,
    "parquet/type-conflict.parquet": _type_conflict,
    "parquet/int96.parquet": _int96,
    "parquet/nanoseconds.parquet": _nanos,
    "parquet/decimal-limit.parquet": _decimals,
    "parquet/decimal-overflow.parquet": _decimal_overflow,
    "parquet/decimal256.parquet": _decimal256,
    "parquet/decimal-scale.parquet": _decimal_scale,
    "parquet/gzipped.parquet": lambda: _gzip(_parquet(_pq_rows(2, "pgz"))),
    "parquet/null-subject.parquet": _null_subject,
}


# --------------------------------------------------------------------------------- generated


def _ten_mb_csv() -> bytes:
    return CSV_HEADER + b"subj-big-1,1,,,small\nsubj-big-2,2,,," + b"y" * TEN_MB + b"\n"


def _ten_mb_jsonl() -> bytes:
    return _jsonl({"user_id": "subj-jbig-1", "note": "z" * TEN_MB}, {"user_id": "subj-jbig-2"})


def _ten_mb_no_newline() -> bytes:
    return b'{"user_id": "subj-jbig-3", "note": "' + b"w" * TEN_MB  # never closed


def _deep_json() -> bytes:
    deep = b'{"user_id": "subj-deep-2", "tags": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    objects = b'{"user_id": "subj-deep-3", "x": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}"
    return _jsonl({"user_id": "subj-deep-1"}, deep, objects, {"user_id": "subj-deep-4"})


GENERATED: dict[str, Callable[[], bytes]] = {
    "ten-mb-line.csv": _ten_mb_csv,
    "ten-mb-line.jsonl": _ten_mb_jsonl,
    "ten-mb-unterminated.jsonl": _ten_mb_no_newline,
    "deep-5000.jsonl": _deep_json,
}


def generated(name: str) -> bytes:
    return GENERATED[name]()


def committed() -> dict[str, bytes]:
    """The committed files by their path under files/ (the raw key they are uploaded as)."""
    found = {**CSV_CASES, **JSONL_CASES}
    found.update({path: build() for path, build in PARQUET_CASES.items()})
    return found


def file_name(key: str) -> str:
    """The committed file of a raw key: the key percent-encoded (but `/`), `.` and `..`
    segments too, so that every file name is portable and none escapes files/."""
    segments = [quote(s, safe="") for s in key.split("/")]
    return "/".join({"..": "%2E%2E", ".": "%2E"}.get(s, s) for s in segments)


def write_files() -> None:
    for key, data in committed().items():
        target = FILES / file_name(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


if __name__ == "__main__":
    write_files()
    sys.stdout.write(f"wrote {len(committed())} files under {FILES}\n")
