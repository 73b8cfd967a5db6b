"""The rewrite of CSV, JSON Lines and quarantine files without the erased rows.

- CSV, JSON Lines and quarantine files are streamed line by line (only one record's lines are
  held) and come out byte for byte identical apart from the erased records' physical lines: the
  lines csv.reader reads for a record (quoted newlines included), split as the readers split
  them (CSV and quarantine files on \\n, \\r\\n and a lone \\r; raw JSON Lines on \\n). Header,
  byte order mark, line endings, blank lines and a missing final newline stay as they were.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, cast

from lethe_jobs.erase_rows.gzip_members import GZIP_ERRORS, member_header, payload_sink
from lethe_jobs.erase_rows.match import match_rows
from lethe_jobs.erase_rows.model import EraseResult, SubjectMatcher, rewrite_needed
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import csv_reader, cut_of, open_payload, salvaging
from lethe_shared.datasets.document import CsvOptions, DataFormat, Dataset

_BOM = "\ufeff"


def rewrite_raw_text(source: Path, target: Path, dataset: Dataset, drop: frozenset[int]) -> None:
    """A truncated gzip stream (readers.salvaging) is copied up to its cut. Its last record is
    the reader's cut tail: kept, the new member is written without its trailer, so that the
    object reads as the same records, the same tail included; dropped (the tail held an erased
    subject), the new member is complete: there is no cut left."""
    try:
        with open_payload(source, dataset.compression) as payload:
            header = member_header(source) if isinstance(payload, gzip.GzipFile) else None
            stream = salvaging(payload)
            last: list[int | None] = [None]  # the last record's line, once copied

            def complete() -> bool:  # no cut, or the record at the cut was erased
                return cut_of(stream) is None or last[0] in drop

            with payload_sink(target, header, trailer=complete) as write:
                if dataset.format is DataFormat.CSV:
                    last[0] = _copy_csv(stream, write, dataset.csv, drop)
                else:
                    last[0] = _copy_jsonl(stream, write, drop)
    except (*GZIP_ERRORS, UnicodeDecodeError, csv.Error, UnreadableFileError) as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc}") from exc


class _LineTap:
    """Feeds csv.reader the lines of a text stream and keeps every line it takes, as read
    (the byte order mark stays in the kept line; csv.reader sees the text without it, as
    the reader's utf-8-sig decoding gives it)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self._first = True
        self.taken: list[str] = []

    def __iter__(self) -> _LineTap:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken.append(line)
        if self._first:
            self._first = False
            return line.removeprefix(_BOM)
        return line


def _copy_csv(
    payload: IO[bytes], write: Callable[[bytes], object], options: CsvOptions, drop: frozenset[int]
) -> int | None:
    """Copy every record but those starting on a line in `drop`, with all their lines. Lines
    and record starts are counted as readers.csv_text.read_csv counts them. Returns the line
    the last row starts on (None: no row)."""
    # newline="": lines split on \n, \r\n and \r and kept as they are, as the reader splits;
    # bytes that are not UTF-8 (a record the reader rejected) pass through as they are
    text = io.TextIOWrapper(payload, encoding="utf-8", errors="surrogateescape", newline="")
    tap = _LineTap(text)
    reader = csv_reader(cast(IO[str], tap), options)  # csv.reader takes any line iterator
    last_line = 0
    start = None
    for row in reader:
        start, last_line = last_line + 1, int(reader.line_num)
        if not (row and start in drop):
            write("".join(tap.taken).encode("utf-8", "surrogateescape"))
        tap.taken.clear()
    write("".join(tap.taken).encode("utf-8", "surrogateescape"))
    return start


def _copy_jsonl(
    payload: IO[bytes], write: Callable[[bytes], object], drop: frozenset[int]
) -> int | None:
    """Copy every line but those in `drop`; lines end at \\n, as readers.jsonl.read_jsonl reads.
    Returns the number of the last line (None: no line)."""
    number = None
    for number, line in enumerate(payload, start=1):
        if number not in drop:
            write(line)
    return number


def rewrite_lines(source: Path, target: Path, drop: frozenset[int]) -> None:
    """A quarantine file without the lines in `drop`, counted as its indexer counts them (text
    mode: \\n, \\r\\n and a lone \\r end a line)."""
    try:
        with (
            source.open(encoding="utf-8", newline="") as lines,
            payload_sink(target, None) as write,
        ):
            for number, line in enumerate(lines, start=1):
                if number not in drop:
                    write(line.encode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnreadableObjectError(f"not UTF-8 text: {exc}") from exc


def erase_text(
    kind: ObjectKind,
    source: Path,
    target: Path,
    object_key: str,
    matcher: SubjectMatcher,
    *,
    workdir: Path,
) -> EraseResult:
    """`erase_rows` of a CSV, JSON Lines or quarantine object (see the module docstring)."""
    matches = match_rows(kind, source, object_key, matcher, workdir=workdir)
    if not rewrite_needed(matches):
        return EraseResult.of(matches, written=False)
    drop = frozenset(matches.positions)
    if kind is ObjectKind.QUARANTINE_ROWS:
        rewrite_lines(source, target, drop)
    else:
        rewrite_raw_text(source, target, matcher.dataset, drop)
    return EraseResult.of(matches, written=True)
