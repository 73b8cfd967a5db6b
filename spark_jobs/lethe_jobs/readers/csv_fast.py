"""The CSV reader's fast path: records parsed by Arrow's CSV parser (C++, no Python call per
row) wherever that gives exactly what Python's `csv` module gives (`csv_text.read_csv`), and
Python's reader for the rest.

A stream (not gzip: a local file) is taken `batch_rows` physical lines at a time, from the
first line after the header. A block is parsed by Arrow (every column as text, empty fields as
"", quotes doubled as in RFC 4180, values may hold line breaks) and kept only when:

- the block is valid UTF-8 (Arrow checks every value it keeps; a row it does not keep is
  decoded by Python), starts with no byte order mark (Arrow would drop it), holds no NUL byte
  and no line longer than `CSV_FIELD_LIMIT` (Python's reader refuses such a field);
- Arrow's records plus the rows it set aside for their number of fields are exactly as many as
  the block's lines: then every record is one physical line (no blank line, no value with a
  line break, no lone carriage return), so each record's line number is its line's;
- each row Arrow set aside, parsed alone by Python's reader, is one row of another width
  (`_CsvCollector.add` rejects it with the usual reason and record).

Otherwise the block, and the rest of the stream after it, is read by Python's reader from the
block's first byte (a record boundary: every block before it was whole records), with its
line numbers, as `csv_text` reads any stream. The records, their line numbers, the rejected
rows and the batches are the same either way: tests/unit/test_csv_fast.py compares the two
readers on generated text."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from lethe_jobs.readers.records import CSV_FIELD_LIMIT, RESERVED_PREFIX, RawRecords, RejectedRecord
from lethe_jobs.validate import POSITION
from lethe_shared.datasets.document import CsvOptions

_BOM = b"\xef\xbb\xbf"
_READ_BYTES = 4 * 1024 * 1024  # what one read of the stream takes while looking for lines


class _NotFast(Exception):
    """A block Arrow's parse cannot stand for: Python's reader reads it."""


def fast_options(options: CsvOptions, names: list[str]) -> bool:
    """Whether Arrow's parser can stand for Python's with these options and header: single-
    character delimiter and quote, no escape character other than the quote (doubled
    quotes), and a column to read (Arrow reads every column when told none)."""
    return (
        any(not name.startswith(RESERVED_PREFIX) for name in names)
        and options.escape == options.quote
        and len(options.delimiter) == 1
        and len(options.quote) == 1
        and options.delimiter != options.quote
        and options.delimiter not in "\r\n"
        and options.quote not in "\r\n"
    )


class _Lines:
    """A binary stream taken a number of physical lines (ending in LF) at a time."""

    def __init__(self, payload: IO[bytes]) -> None:
        self.payload = payload
        self.buffer = b""
        self.ended = False

    def take(self, count: int) -> tuple[bytes, Any]:
        """The next `count` lines (fewer at the end: the last may lack its LF) and the offsets
        of the LFs in them."""
        ends = np.flatnonzero(np.frombuffer(self.buffer, np.uint8) == 10)
        while len(ends) < count and not self.ended:
            more = self.payload.read(_READ_BYTES)
            if not more:
                self.ended = True
                break
            found = np.flatnonzero(np.frombuffer(more, np.uint8) == 10) + len(self.buffer)
            self.buffer += more
            ends = np.concatenate([ends, found])
        if len(ends) >= count:
            cut = int(ends[count - 1]) + 1
            block, self.buffer = self.buffer[:cut], self.buffer[cut:]
            return block, ends[:count]
        block, self.buffer = self.buffer, b""
        return block, ends


def fast_records(
    payload: IO[bytes],
    names: list[str],
    options: CsvOptions,
    *,
    first_line: int,
    batch_rows: int,
    collector: Any,
) -> Iterator[RawRecords | tuple[int, int]]:
    """The records of `payload` from its current position (line `first_line` of the object),
    `batch_rows` at a time, as `csv_text._plain_records` gives them. `collector(names)` makes
    the `_CsvCollector` that judges a row Arrow set aside. When a block is not fast (module
    docstring), yields (its first byte's offset in `payload`, its line number) last: the caller
    reads from there with Python's reader."""
    lines = _Lines(payload)
    position = payload.tell()
    line = first_line
    parse = _parser(names, options)
    while True:
        block, ends = lines.take(batch_rows)
        try:
            records = _block_records(
                block, ends, names, options, first_line=line, parse=parse, collector=collector
            )
        except _NotFast:
            yield position, line
            return
        yield records
        if records.rows_read < batch_rows:  # the stream's last block
            return
        position += len(block)
        line += batch_rows


def _parser(names: list[str], options: CsvOptions) -> Any:
    width = len(names)
    columns = [f"c{i}" for i in range(width)]
    kept = [f"c{i}" for i, name in enumerate(names) if not name.startswith(RESERVED_PREFIX)]
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()),
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
        check_utf8=False,  # the whole block was checked
        include_columns=kept,
    )

    def parse(block: bytes) -> tuple[pa.Table, list[int]]:
        set_aside: list[int] = []

        def invalid(row: Any) -> str:
            if row.number is None:
                raise _NotFast
            set_aside.append(row.number)
            return "skip"

        parse_options = pacsv.ParseOptions(
            delimiter=options.delimiter,
            quote_char=options.quote,
            double_quote=True,
            escape_char=False,
            newlines_in_values=True,
            ignore_empty_lines=True,
            invalid_row_handler=invalid,
        )
        read = pacsv.ReadOptions(column_names=columns, use_threads=False, block_size=len(block) + 1)
        try:
            table = pacsv.read_csv(
                io.BytesIO(block),
                read_options=read,
                parse_options=parse_options,
                convert_options=convert,
            )
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            raise _NotFast from exc
        return table, set_aside

    return parse


def _block_records(
    block: bytes,
    ends: Any,
    names: list[str],
    options: CsvOptions,
    *,
    first_line: int,
    parse: Any,
    collector: Any,
) -> RawRecords:
    if not block:
        return collector(names).records()  # type: ignore[no-any-return]
    if not block.endswith(b"\n"):  # the last line, without its LF
        block += b"\n"
        ends = np.append(ends, len(block) - 1)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if not _may_be_fast(block, starts, ends, options):
        raise _NotFast
    table, set_aside = parse(block)
    count = len(ends)
    if table.num_rows + len(set_aside) != count:
        raise _NotFast
    rejected = collector(names)
    for number in set_aside:  # 1-based line of the block
        text = block[int(starts[number - 1]) : int(ends[number - 1]) + 1]
        rejected.add(first_line + number - 1, _other_width(text, options, len(names)))
    if len(rejected.rejected) != len(set_aside) or rejected.positions:
        raise _NotFast
    positions = np.arange(first_line, first_line + count, dtype=np.int64)
    if set_aside:
        positions = np.delete(positions, np.array(set_aside) - 1)
    kept = [name for name in names if not name.startswith(RESERVED_PREFIX)]
    arrays = [pa.array(positions, pa.int64())]
    arrays += [table.column(i).combine_chunks() for i in range(table.num_columns)]
    result = pa.table(arrays, names=[POSITION, *kept])
    rejects: list[RejectedRecord] = rejected.rejected
    return RawRecords(result, "line", list(names), rejects)


def _may_be_fast(block: bytes, starts: Any, ends: Any, options: CsvOptions) -> bool:
    """The block's own conditions (module docstring), before Arrow parses it."""
    if (
        block.startswith(_BOM)
        or b"\x00" in block
        or block.count(b"\r") != block.count(b"\r\n")  # a CR alone ends a line too
        or int((ends - starts).max()) >= CSV_FIELD_LIMIT
        or not _ends_a_record(block[int(starts[-1]) :], options)
    ):
        return False
    try:  # Arrow's check, without Python strings; a row it sets aside is then valid too
        pa.array([block], pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return False
    return True


def _other_width(line: bytes, options: CsvOptions, width: int) -> list[str]:
    """The row Python's reader reads from a line Arrow set aside; raises _NotFast unless it is
    one row of another width than the header's."""
    try:
        rows = list(_python_reader(line.decode("utf-8"), options))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _NotFast from exc
    if len(rows) != 1 or len(rows[0]) == width:
        raise _NotFast
    return rows[0]  # type: ignore[no-any-return]


def _ends_a_record(line: bytes, options: CsvOptions) -> bool:
    """Whether Python's reader ends a record at the end of the block's last line (not inside a
    quoted value that the next block would go on with): it reads that line alone."""
    try:
        reader = csv_reader(iter([line.decode("utf-8"), "more\n"]), options)  # type: ignore[arg-type]
        next(reader)
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return False
    return bool(reader.line_num == 1)


def _python_reader(text: str, options: CsvOptions) -> Any:
    return csv_reader(io.StringIO(text, newline=""), options)


def csv_reader(text: IO[str], options: CsvOptions) -> Any:
    """Python's CSV reader as the CSV reader reads (`csv_text`)."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    return csv.reader(
        text,
        delimiter=options.delimiter,
        quotechar=options.quote,
        escapechar=None if options.escape == options.quote else options.escape,
        doublequote=True,
        strict=False,
    )
