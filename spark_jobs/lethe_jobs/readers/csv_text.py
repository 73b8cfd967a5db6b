"""The CSV reader: records located by the physical line they start on (a header is line 1),
rows of the wrong length rejected, a truncated stream's tail salvaged. A header column is the
schema column the field-name rule finds it for (`records.declared_names`: the exact name, else
the one case variant); a header that makes a schema column's name ambiguous is unreadable."""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers.csv_fast import csv_reader, fast_options, fast_records
from lethe_jobs.readers.payload import cut_of, is_salvaging, refuse_cut
from lethe_jobs.readers.records import (
    CSV_FIELD_LIMIT,
    RESERVED_PREFIX,
    TRUNCATED_TAIL,
    UNDECODED,
    HeldBack,
    RawRecords,
    RejectedRecord,
    Slice,
    declared_names,
    escaped,
    is_blank_row,
)
from lethe_jobs.validate import POSITION
from lethe_shared.datasets.document import Dataset


def _csv_record(names: list[str], values: list[str]) -> str:
    values = [escaped(v) if UNDECODED.search(v) else v for v in values]
    record: dict[str, Any] = dict(zip(names, values, strict=False))
    if len(values) > len(names):
        record["_extra_fields"] = values[len(names) :]
    return json.dumps(record, ensure_ascii=False)


# Undecodable bytes become surrogates through this error handler, which also counts them: a
# reader that has seen none since it started knows that no row holds one, and skips looking.
_UNDECODED_SEEN = [0]
_SURROGATEESCAPE = codecs.lookup_error("surrogateescape")


def _counting_surrogateescape(error: UnicodeError) -> tuple[str | bytes, int]:
    _UNDECODED_SEEN[0] += 1
    return _SURROGATEESCAPE(error)


COUNTING_SURROGATEESCAPE = "lethe-counting-surrogateescape"
codecs.register_error(COUNTING_SURROGATEESCAPE, _counting_surrogateescape)


class _CsvCollector:
    def __init__(self, names: list[str], undecoded_before: int | None = None) -> None:
        self.names = names
        self.width = len(names)
        self.positions: list[int] = []
        self.rows: list[list[str]] = []
        self.rejected: list[RejectedRecord] = []
        # None: look for undecodable bytes in every row; n: only once the counter moved past n
        self.undecoded_before = undecoded_before

    def __len__(self) -> int:
        return len(self.positions) + len(self.rejected)

    def add(self, line: int, row: list[str]) -> None:
        if len(row) == self.width and (
            self.undecoded_before == _UNDECODED_SEEN[0]
            or not any(UNDECODED.search(value) for value in row)
        ):
            self.positions.append(line)
            self.rows.append(row)
            return
        reasons = []
        if len(row) != len(self.names):
            reasons.append(f"expected {len(self.names)} fields, found {len(row)}")
        reasons += [
            f"column {self.names[i]}: not UTF-8 text" if i < len(self.names) else
            f"field {i + 1}: not UTF-8 text"
            for i, value in enumerate(row)
            if UNDECODED.search(value)
        ]  # fmt: skip
        if reasons:
            record = _csv_record(self.names, row)
            self.rejected.append(RejectedRecord(line, tuple(reasons), record))
            return
        self.positions.append(line)
        self.rows.append(row)

    def records(self) -> RawRecords:
        kept = [i for i, name in enumerate(self.names) if not name.startswith(RESERVED_PREFIX)]
        values = list(zip(*self.rows, strict=True)) if self.rows else [() for _ in self.names]
        arrays = [pa.array(self.positions, pa.int64())]
        arrays += [pa.array(values[i], pa.string()) for i in kept]
        table = pa.table(arrays, names=[POSITION, *[self.names[i] for i in kept]])
        return RawRecords(table, "line", list(self.names), self.rejected)


def _csv_header(reader: Any, dataset: Dataset) -> list[str] | None:
    """The column names; None for an empty file. Raises UnreadableFileError."""
    if not dataset.csv.header:
        return [c.name for c in dataset.schema_]
    header = next((row for row in reader if not is_blank_row(row)), None)
    if header is None:
        if reader.line_num == 0:
            return None
        raise UnreadableFileError("missing header: the file has only blank lines")
    if any(UNDECODED.search(name) for name in header):
        raise UnreadableFileError("not UTF-8 text: the header holds bytes that are not UTF-8")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise UnreadableFileError(f"the header repeats column(s) {', '.join(duplicates)}")
    return list(header)


class RecordLines:
    """Feeds csv.reader the lines of a text stream and keeps the lines it takes since `clear`:
    after a row, the text of that row's record, as read."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self.taken: list[str] = []

    def __iter__(self) -> RecordLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken.append(line)
        return line

    def clear(self) -> str:
        text = "".join(self.taken)
        self.taken.clear()
        return text


def _csv_tail(
    names: list[str], line: int, row: list[str], text: str, reason: str
) -> RejectedRecord:
    """The record a truncated stream's cut falls in: every field but the last (which the cut
    may have shortened) as its columns, and its text under "_raw"."""
    complete = [escaped(v) if UNDECODED.search(v) else v for v in row[:-1]]
    record: dict[str, Any] = dict(zip(names, complete, strict=False))
    record["_raw"] = escaped(text)
    return RejectedRecord(line, (reason,), json.dumps(record, ensure_ascii=False))


def read_csv(
    payload: IO[bytes], dataset: Dataset, _workdir: Path, part: Slice, batch_rows: int
) -> Iterator[RawRecords]:
    encoding = "utf-8-sig" if part.first_line == 1 else "utf-8"
    # undecodable bytes become surrogates, and reject only the record that holds them
    undecoded_before = _UNDECODED_SEEN[0]
    text = io.TextIOWrapper(payload, encoding=encoding, errors=COUNTING_SURROGATEESCAPE, newline="")
    # a stream that may be cut: each record's text is kept, and the last one held back
    tap = RecordLines(text) if is_salvaging(payload) else None
    reader = csv_reader(cast(IO[str], text if tap is None else tap), dataset.csv)
    offset = part.first_line - 1  # a slice's local line n is line n + offset of the object
    try:
        names = list(part.header) if part.header is not None else _csv_header(reader, dataset)
        if names is None:
            refuse_cut(payload, "before the header")
            yield _CsvCollector([c.name for c in dataset.schema_]).records()
            return
        declared_names(names, dataset, "header")
        if tap is None:  # a stream that ends as it should: every record as it comes
            yield from _whole_records(
                payload, reader, names, dataset,
                undecoded_before=undecoded_before, offset=offset, batch_rows=batch_rows,
            )  # fmt: skip
            return
        collector = _CsvCollector(names, undecoded_before)
        last = HeldBack()
        rows = _csv_rows(reader, tap, offset)
        for line, row, _ in rows if tap is None else last.held_back(rows):
            if row:  # a blank line is no record
                collector.add(line, row)
            if len(collector) >= batch_rows:
                yield collector.records()
                collector = _CsvCollector(names, undecoded_before)
    except csv.Error as exc:
        line = reader.line_num + offset
        raise UnreadableFileError(f"not valid CSV (line {line}): {exc}") from exc
    if last.item is None:
        refuse_cut(payload, "before the first record")
    elif cut_of(payload) is None:
        if last.item[1]:
            collector.add(last.item[0], last.item[1])
    else:
        line, row, record_text = last.item
        collector.rejected.append(_csv_tail(names, line, row, record_text, TRUNCATED_TAIL))
    yield collector.records()


def _whole_records(
    payload: IO[bytes],
    reader: Any,
    names: list[str],
    dataset: Dataset,
    *,
    undecoded_before: int,
    offset: int,
    batch_rows: int,
) -> Iterator[RawRecords]:
    """The records of a stream that is not cut, after its header: by Arrow's parser where it
    may read them (`_fast_start`), else by Python's (`_plain_records`)."""
    start = _fast_start(payload, reader, names, dataset)
    if start is None:
        yield from _plain_records(reader, names, undecoded_before, offset, batch_rows)
    else:
        first = reader.line_num + 1 + offset
        yield from _fast_records(
            payload, names, dataset, start=start, first_line=first, batch_rows=batch_rows
        )


def _fast_start(payload: IO[bytes], reader: Any, names: list[str], dataset: Dataset) -> int | None:
    """Where the records start in `payload` (a local file), when Arrow's parser may read them
    (`csv_fast`): the header, if the reader read one, was the first physical line alone (it
    ended in LF or CRLF); else None."""
    if not fast_options(dataset.csv, names) or not payload.seekable():
        return None
    if reader.line_num == 0:  # no header line in this stream (a piece, or no header)
        return 0
    if reader.line_num != 1:
        return None
    here = payload.tell()  # where the text reader's read-ahead stopped: it goes on from there
    payload.seek(0)
    first = payload.readline(CSV_FIELD_LIMIT)
    if not first.endswith(b"\n") or b"\r" in first[:-2]:
        payload.seek(here)
        return None
    return len(first)


def _fast_records(
    payload: IO[bytes],
    names: list[str],
    dataset: Dataset,
    *,
    start: int,
    first_line: int,
    batch_rows: int,
) -> Iterator[RawRecords]:
    """The records from byte `start` (line `first_line`) on, by Arrow's parser where it gives
    what Python's does, else from the block where it may not on by Python's (`csv_fast`)."""
    payload.seek(start)
    before = _UNDECODED_SEEN[0]
    for item in fast_records(
        payload, names, dataset.csv,
        first_line=first_line, batch_rows=batch_rows,
        collector=lambda columns: _CsvCollector(columns, before),
    ):  # fmt: skip
        if isinstance(item, RawRecords):
            yield item
            continue
        position, line = item  # from here on, Python's reader
        payload.seek(position)
        undecoded_before = _UNDECODED_SEEN[0]
        text = io.TextIOWrapper(
            payload, encoding="utf-8", errors=COUNTING_SURROGATEESCAPE, newline=""
        )
        reader = csv_reader(text, dataset.csv)
        try:
            yield from _plain_records(reader, names, undecoded_before, line - 1, batch_rows)
        except csv.Error as exc:
            raise UnreadableFileError(
                f"not valid CSV (line {reader.line_num + line - 1}): {exc}"
            ) from exc
        finally:
            text.detach()  # the payload stays open for its owner


def _plain_records(
    reader: Any, names: list[str], undecoded_before: int, offset: int, batch_rows: int
) -> Iterator[RawRecords]:
    """`read_csv`'s records of a stream that is not cut, `batch_rows` at a time: what the loop
    over `_csv_rows` gives, with the common row (as many fields as the header, and no
    undecodable byte read since the reader started) kept inline instead of by a call per row;
    any other row goes through `_CsvCollector.add`."""
    collector = _CsvCollector(names, undecoded_before)
    positions, rows, rejected = collector.positions, collector.rows, collector.rejected
    width, seen = len(names), _UNDECODED_SEEN
    last_line = reader.line_num
    for row in reader:
        line = last_line + 1 + offset
        last_line = reader.line_num
        if not row:  # a blank line is no record
            continue
        if len(row) == width and seen[0] == undecoded_before:
            positions.append(line)
            rows.append(row)
        else:
            collector.add(line, row)
        if len(positions) + len(rejected) >= batch_rows:
            yield collector.records()
            collector = _CsvCollector(names, undecoded_before)
            positions, rows, rejected = collector.positions, collector.rows, collector.rejected
    yield collector.records()


def _csv_rows(
    reader: Any, tap: RecordLines | None, offset: int
) -> Iterator[tuple[int, list[str], str]]:
    """Each row with the line it starts on and (with a tap) its text."""
    if tap is not None:
        tap.clear()  # the header's
    last_line = reader.line_num
    for row in reader:
        yield last_line + 1 + offset, row, tap.clear() if tap is not None else ""
        last_line = reader.line_num
