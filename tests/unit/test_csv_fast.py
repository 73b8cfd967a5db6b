"""The CSV reader's fast path (`readers.csv_fast`: Arrow's parser where it gives what Python's
`csv` module gives) reads exactly what Python's reader reads: the same batches, records, line
numbers, rejected rows with their reasons and records, and the same unreadable files; on
generated text full of quotes, delimiters, line breaks, blank lines, wrong widths, byte order
marks, NUL and bytes that are not UTF-8, whole objects and pieces."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers import csv_text, iter_raw
from lethe_jobs.readers.records import Slice
from lethe_shared.datasets.document import Dataset, parse_dataset

NAMES = ["user_id", "note", "stars"]


def dataset(names: list[str] = NAMES, *, header: bool = True, **csv: str) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": "csv",
            "subject_columns": [names[0]],
            "schema": [{"name": n, "type": "string"} for n in names],
            "csv": {"header": header, **csv},
        }
    )


def read(path: Path, ds: Dataset, tmp: Path, part: Slice, batch_rows: int) -> Any:
    try:
        return [
            (r.table.to_pydict(), r.columns, r.rejected, r.coordinate)
            for r in iter_raw(path, ds, tmp, part=part, batch_rows=batch_rows)
        ]
    except UnreadableFileError as exc:
        return ("unreadable", exc.reason)


WHOLE = Slice()


def both(
    path: Path, ds: Dataset, tmp: Path, monkeypatch: Any, part: Slice = WHOLE, batch_rows: int = 3
) -> tuple[Any, Any]:
    fast = read(path, ds, tmp, part, batch_rows)
    with monkeypatch.context() as patched:
        patched.setattr(csv_text, "_fast_start", lambda *_: None)
        slow = read(path, ds, tmp, part, batch_rows)
    return fast, slow


_PIECES = [
    "a", "b", "é", "x y", " ", ",", ",", ",", '"', '""', '"q"', "\n", "\r\n", "\r", "\t",
    "\ufeff", "\x00", "ü,", '"a,b"', '"l1\nl2"',
]  # fmt: skip
_BYTES = [b"\xff", b"\xed\xa0\x80", b"\xc3"]


def _clean_line(rng: random.Random, width: int) -> str:
    fields = []
    for _ in range(width):
        kind = rng.random()
        if kind < 0.3:
            fields.append(f'"{rng.choice(["a,b", "c", "d", "e f"])}"')
        else:
            fields.append(rng.choice(["u1", "", "5", "x y", "é"]))
    return ",".join(fields)


def _text(rng: random.Random, width: int, lines: int, noise: float) -> bytes:
    out = []
    for _ in range(lines):
        if rng.random() < noise:
            raw = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 8))).encode()
            if rng.random() < 0.2:
                raw += rng.choice(_BYTES)
            out.append(raw)
        else:
            w = width if rng.random() > 0.1 else rng.choice([width - 1, width + 1, 1])
            out.append(_clean_line(rng, max(w, 1)).encode())
    ending = rng.choice([b"\n", b"\r\n", b"\n", b"\r"])
    text = ending.join(out)
    return text + ending if rng.random() < 0.7 else text


@pytest.mark.parametrize("seed", range(300))
def test_fast_reader_reads_what_python_reads(seed: int, tmp_path: Path, monkeypatch: Any) -> None:
    rng = random.Random(seed)
    noise = [0.0, 0.01, 0.05, 0.3][seed % 4]
    header = ",".join(NAMES).encode() + rng.choice([b"\n", b"\r\n", b"\r"])
    if seed % 10 == 3:
        header = b"\xef\xbb\xbf" + header
    # some longer than what the text reader reads ahead (8 KiB)
    lines = rng.randint(0, 40) if seed % 5 else rng.randint(500, 1500)
    body = _text(rng, len(NAMES), lines, noise)
    path = tmp_path / "o.csv"
    path.write_bytes(header + body)
    batch_rows = rng.choice([1, 2, 3, 7, 64])
    fast, slow = both(path, dataset(), tmp_path, monkeypatch, batch_rows=batch_rows)
    assert fast == slow
    # a piece of the object (its lines after the header, numbered as in the whole object)
    piece = tmp_path / "p.csv"
    piece.write_bytes(body)
    part = Slice(first_line=2, header=tuple(NAMES))
    fast, slow = both(piece, dataset(), tmp_path, monkeypatch, part, batch_rows)
    assert fast == slow


@pytest.mark.parametrize(
    "text",
    [
        b"user_id,note,stars\nu1,a,1\nu2,b,2\n",
        b"user_id,note,stars\nu1,a,1\n\nu2,b,2\n",  # a blank line
        b'user_id,note,stars\nu1,"a\nb",1\nu2,b,2\n',  # a value with a line break
        b"user_id,note,stars\nu1,a,1,extra\nu2,b\nu3,c,3",  # wrong widths, no final LF
        b"user_id,note,stars\nu1,\xff,1\nu2,b,2\n",  # not UTF-8
        b'user_id,note,stars\nu1,"a,""b""",1\r\nu2,b,2\r\n',
        b"\n\nuser_id,note,stars\nu1,a,1\n",  # blank lines before the header
        b"user_id,note,stars\n\xef\xbb\xbfu1,a,1\n",  # a BOM at the records' start
        b"user_id,note,stars\ru1,a,1\r",  # CR line ends
        b'user_id,"no\nte",stars\nu1,a,1\n',  # a header over two lines
        b"user_id,note,stars\n",
        b"user_id,note,stars",
        b"",
        b'user_id,note,stars\nu1,"open,1\nu2,b,2\n',  # a quote never closed
    ],
)
def test_fast_reader_on_known_shapes(text: bytes, tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "o.csv"
    path.write_bytes(text)
    for batch_rows in (1, 2, 100):
        fast, slow = both(path, dataset(), tmp_path, monkeypatch, batch_rows=batch_rows)
        assert fast == slow


def test_other_options_and_reserved_columns(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "o.csv"
    path.write_bytes(b"user_id;_lethe_x;note;stars\nu1;z;'a;b';1\nu2;y;'c''d';2\nu3;x\n")
    ds = dataset(delimiter=";", quote="'", escape="'")
    fast, slow = both(path, ds, tmp_path, monkeypatch)
    assert fast == slow
    assert fast[0][0]["note"] == ["a;b", "c'd"]
    assert fast[0][0]["_lethe_position"] == [2, 3]
    assert [r.position for r in fast[0][2]] == [4]
    path.write_bytes(b"u1,a,1\nu2,b,2\n")
    fast, slow = both(path, dataset(header=False), tmp_path, monkeypatch)
    assert fast == slow
    assert fast[0][0]["_lethe_position"] == [1, 2]


def test_a_clean_file_never_reaches_pythons_reader(tmp_path: Path, monkeypatch: Any) -> None:
    rows = [f'u{i},"n, {i} ""q""",{i % 5}' for i in range(1000)]
    rows[10] += ",surplus"  # a row of the wrong width is judged alone
    path = tmp_path / "o.csv"
    path.write_bytes(("user_id,note,stars\r\n" + "\r\n".join(rows) + "\r\n").encode())
    calls: list[Any] = []

    def plain(*args: Any) -> Any:
        calls.append(args)
        return iter(())

    monkeypatch.setattr(csv_text, "_plain_records", plain)
    batches = list(iter_raw(path, dataset(), tmp_path, batch_rows=300))
    assert not calls
    assert [b.rows_read for b in batches] == [300, 300, 300, 100]
    assert batches[0].rejected[0].position == 12
    assert batches[0].rejected[0].reasons == ("expected 3 fields, found 4",)
    assert batches[0].table.column("note")[0].as_py() == 'n, 0 "q"'
