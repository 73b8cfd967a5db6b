"""Large raw objects in pieces, so that no one process holds a large object whole.

A raw object up to `PIECE_BYTES` is one piece. A larger one is split where that is safe:

- uncompressed JSON Lines at line starts (a JSON line has no raw line break inside);
- uncompressed CSV at line starts outside quoted fields: a quote-parity scan of the bytes finds
  them (RFC 4180 quoting, where a quote inside a field is doubled, keeps the parity right; a
  dataset whose CSV escape character is not the quote character is not split);
- Parquet by row groups, grouped up to `PIECE_BYTES` of compressed data;
- gzip is not splittable: it is one piece, which the reader streams (`readers.iter_raw`).

Each piece keeps the coordinates of the whole object (`readers.Slice`): its first line number
(text) or first row index (Parquet), so quarantine coordinates and index row hints are those a
reader of the whole object would give. The split scan reads the object once, in parallel: Spark
tasks count the quotes and line breaks of its byte ranges (`scan_ranges`, `count_range`: every
multiple of the piece size starts a range), the driver adds the counts up into the quote parity
and the line number at each target (`lines_before`) and reads a few kilobytes after each target
for its cut (`cut_after`: the first line start after a \\n outside quotes). The pieces are then
read in parallel, text ones by an S3 range request of their bytes, Parquet ones through
`S3RangeFile` (only the footer and their row groups are fetched).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq

from lethe_jobs.readers import GZIP_MAGIC, WHOLE, Slice
from lethe_shared.aws.s3 import get_version
from lethe_shared.datasets.document import Compression, DataFormat, Dataset

PIECE_BYTES = 128 * 1024 * 1024
SCAN_CHUNK_BYTES = 8 * 1024 * 1024
CUT_WINDOW_BYTES = 64 * 1024  # the first read after a target, looking for its cut (`cut_after`)


@dataclass(frozen=True)
class Piece:
    """One piece of one raw object of the batch."""

    object_index: int
    part: Slice = WHOLE
    byte_range: tuple[int, int] | None = None  # text: [start, end) of the object; None: whole
    size: int = 0  # bytes, for grouping pieces into tasks

    @property
    def whole(self) -> bool:
        return self.byte_range is None and self.part.row_groups is None


@dataclass(frozen=True)
class Split:
    """A line start where a text object may be cut: its byte offset and line number."""

    offset: int
    line: int


def _breaks(chunk: bytes, csv_lines: bool) -> int:
    """Line breaks in `chunk` as the readers count them: CSV (TextIOWrapper, newline="")
    ends lines at \\n, \\r\\n and a lone \\r; JSON Lines at \\n only."""
    if not csv_lines:
        return chunk.count(b"\n")
    returns = chunk.count(b"\r")  # most files have none: then no \r\n to count either
    return chunk.count(b"\n") + returns - (chunk.count(b"\r\n") if returns else 0)


@dataclass(frozen=True)
class RangeCount:
    """What a scan task counts in one byte range of a text object (`count_range`): its quotes
    and line breaks, a \\r that ends it counted as a line break of its own (`lines_before`
    corrects that when the next range starts with the \\n of a \\r\\n)."""

    start: int
    quotes: int
    breaks: int
    first_lf: bool  # the range starts with \n
    last_cr: bool  # the range ends with \r (CSV only)


def scan_ranges(size: int, piece_bytes: int, min_ranges: int) -> list[tuple[int, int]]:
    """The byte ranges [start, end) the scan tasks of a `size`-byte object count: each piece's
    worth (`piece_bytes`) cut into as many equal parts as make `min_ranges` where the pieces
    are fewer (none past the object's end), so that every target (a multiple of `piece_bytes`)
    starts a range and the tasks keep every core busy."""
    count = -(-size // piece_bytes)
    parts = max(1, -(-min_ranges // count))
    starts = sorted(
        {k * piece_bytes + i * piece_bytes // parts for k in range(count) for i in range(parts)}
    )
    starts = [s for s in starts if s < size]
    return list(zip(starts, [*starts[1:], size], strict=True))


def count_range(
    stream: IO[bytes], start: int, *, quote: bytes | None, csv_lines: bool
) -> RangeCount:
    """The quotes and line breaks of one range of an object (`stream` yields its bytes), read
    a chunk at a time; memory is one chunk."""
    quotes = breaks = 0
    first = b""
    carry = b""  # a \r that ended the previous chunk: it may be half of a \r\n
    while chunk := stream.read(SCAN_CHUNK_BYTES):
        first = first or chunk[:1]
        data = carry + chunk
        keep = 1 if csv_lines and data.endswith(b"\r") else 0
        usable = data[: len(data) - keep]
        breaks += _breaks(usable, csv_lines)
        quotes += usable.count(quote) if quote is not None else 0
        carry = data[len(usable) :]
    return RangeCount(start, quotes, breaks + len(carry), first == b"\n", bool(carry))


def lines_before(counts: list[RangeCount]) -> list[tuple[int, int]]:
    """Per range (`counts` in object order, covering it), the parity of the quotes before its
    start and the line breaks before it (a \\r at its end counted as one: `cut_after` corrects
    a \\r\\n across its start)."""
    found = []
    quotes = lines = 0
    previous: RangeCount | None = None
    for count in counts:
        found.append((quotes % 2, lines))
        crlf = previous is not None and previous.last_cr and count.first_lf
        lines += count.breaks - (1 if crlf else 0)
        quotes += count.quotes
        previous = count
    return found


def cut_after(
    read_at: Callable[[int, int], bytes],
    target: int,
    size: int,
    parity: int,
    lines: int,
    *,
    quote: bytes | None,
    csv_lines: bool,
) -> Split | None:
    """The first line start after a \\n at or beyond `target` (> 0) that is outside quotes,
    given the parity of the quotes before `target` and the line breaks before it (a \\r just
    before it counted as one); None when there is none. Reads the object from `target` - 1
    (`read_at(offset, length)`), in windows that double from CUT_WINDOW_BYTES: usually one
    small read."""
    window = CUT_WINDOW_BYTES
    head = read_at(target - 1, window + 1)
    crlf = csv_lines and head[:2] == b"\r\n"
    data, base = head[1:], target  # data[0] is at object offset `base`
    quotes, seen = parity, lines - (1 if crlf else 0)
    while data:
        end = base + len(data) >= size
        keep = 1 if csv_lines and not end and data.endswith(b"\r") else 0
        usable = data[: len(data) - keep]
        position = counted = 0
        while (found := usable.find(b"\n", position)) >= 0:
            if quote is not None:
                quotes += usable.count(quote, counted, found)
                counted = found
            if quotes % 2 == 0:
                return Split(base + found + 1, seen + _breaks(usable[: found + 1], csv_lines) + 1)
            position = found + 1
        if quote is not None:
            quotes += usable.count(quote, counted)
        seen += _breaks(usable, csv_lines)
        if end:
            return None
        following = base + len(data)
        window = min(window * 2, SCAN_CHUNK_BYTES)
        data, base = data[len(usable) :] + read_at(following, window), base + len(usable)
    return None


def find_splits(
    counts: list[RangeCount],
    size: int,
    piece_bytes: int,
    read_at: Callable[[int, int], bytes],
    *,
    quote: bytes | None,
    csv_lines: bool,
) -> list[Split]:
    """Where a text object may be cut into pieces of about `piece_bytes`, from its ranges'
    counts (`scan_ranges`, `count_range`): after the first \\n at or beyond each multiple of
    `piece_bytes` that is outside quotes (`quote`, for CSV). A target whose cut an earlier
    target's cut passes has that same cut (the \\n of the earlier cut is at or beyond it, and
    outside quotes), and is not read again."""
    splits: list[Split] = []
    for count, (parity, lines) in zip(counts, lines_before(counts), strict=True):
        target = count.start
        if target == 0 or target % piece_bytes or (splits and splits[-1].offset > target):
            continue
        cut = cut_after(read_at, target, size, parity, lines, quote=quote, csv_lines=csv_lines)
        if cut is None:
            break
        if cut.offset < size:
            splits.append(cut)
    return splits


def csv_header(stream: IO[bytes], dataset: Dataset) -> tuple[str, ...] | None:
    """The CSV header's column names (None without a header row): what the slices after the
    first are read with."""
    if not dataset.csv.header:
        return None
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    from lethe_jobs.readers import csv_reader, is_blank_row  # noqa: PLC0415 - one configuration

    header = next((row for row in csv_reader(text, dataset.csv) if not is_blank_row(row)), None)
    text.detach()
    return tuple(header) if header else None


def splittable_text(dataset: Dataset, head: bytes) -> bool:
    """Whether an object may be cut at line starts: uncompressed text, and for CSV a quoting
    that a parity scan follows, with a one-byte quote."""
    if dataset.format is DataFormat.PARQUET:
        return False
    gzipped = head.startswith(GZIP_MAGIC) and dataset.compression is not Compression.NONE
    if gzipped or dataset.compression is Compression.GZIP:
        return False
    if dataset.format is DataFormat.JSONL:
        return True
    # a quote of one byte: a multi-byte one could straddle two ranges' or chunks' ends
    return dataset.csv.escape == dataset.csv.quote and len(dataset.csv.quote.encode()) == 1


def text_pieces(
    object_index: int, size: int, splits: list[Split], header: tuple[str, ...] | None
) -> list[Piece]:
    """The pieces of a text object of `size` bytes cut at `splits`."""
    if not splits:
        return [Piece(object_index, size=size)]
    starts = [Split(0, 1), *splits]
    ends = [s.offset for s in splits] + [size]
    return [
        Piece(
            object_index,
            Slice(first_line=start.line, header=header if start.offset else None),
            (start.offset, end),
            end - start.offset,
        )
        for start, end in zip(starts, ends, strict=True)
        if end > start.offset
    ]


def parquet_pieces(
    object_index: int, metadata: Any, size: int, piece_bytes: int = PIECE_BYTES
) -> list[Piece]:
    """Row groups grouped up to `piece_bytes` of compressed data, each group a piece."""
    groups = metadata.num_row_groups
    if groups <= 1 or size <= piece_bytes:
        return [Piece(object_index, size=size)]
    pieces: list[Piece] = []
    start = first_row = rows = 0
    compressed = 0
    for group in range(groups):
        info = metadata.row_group(group)
        weight = sum(info.column(c).total_compressed_size for c in range(info.num_columns))
        if group > start and compressed + weight > piece_bytes:
            pieces.append(
                Piece(
                    object_index,
                    Slice(row_groups=(start, group), first_row=first_row),
                    None,
                    compressed,
                )
            )
            start, first_row, compressed = group, rows, 0
        compressed += weight
        rows += info.num_rows
    pieces.append(
        Piece(
            object_index, Slice(row_groups=(start, groups), first_row=first_row), None, compressed
        )
    )
    return pieces


class S3RangeFile(io.RawIOBase):
    """A seekable read-only view of one S3 object version: each read is a range request.
    Wrap it in io.BufferedReader; Parquet reads fetch only the footer and the row groups."""

    def __init__(self, client: Any, bucket: str, key: str, version_id: str, size: int) -> None:
        self._client, self._bucket, self._key = client, bucket, key
        self._version_id = version_id
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        if self._position >= self._size:
            return 0
        end = min(self._size, self._position + len(buffer)) - 1
        body = get_version(
            self._client,
            self._bucket,
            self._key,
            self._version_id,
            byte_range=(self._position, end),
        )["Body"].read()
        buffer[: len(body)] = body
        self._position += len(body)
        return len(body)


def download_range(
    client: Any,
    bucket: str,
    key: str,
    version_id: str,
    *,
    byte_range: tuple[int, int],
    target: Path,
) -> None:
    """Stream bytes [start, end) of one object version to `target`."""
    start, end = byte_range
    response = get_version(client, bucket, key, version_id, byte_range=(start, end - 1))
    with target.open("wb") as out:
        for chunk in response["Body"].iter_chunks(1024 * 1024):
            out.write(chunk)


def open_range_file(
    client: Any, bucket: str, key: str, version_id: str, size: int, *, buffer_bytes: int = 8 << 20
) -> Any:
    """A buffered view of one object version (`S3RangeFile`): a range request per buffer."""
    return io.BufferedReader(S3RangeFile(client, bucket, key, version_id, size), buffer_bytes)


def parquet_metadata(client: Any, bucket: str, key: str, version_id: str, size: int) -> Any:
    """The footer of a Parquet object version (a few range requests)."""
    with open_range_file(client, bucket, key, version_id, size) as handle:
        return pq.ParquetFile(handle).metadata
