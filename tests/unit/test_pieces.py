"""Large raw objects in pieces (lethe_jobs.pieces): split points found by a scan of byte ranges
counted apart (as its Spark tasks count them) are those of one serial reading of the object, and
the pieces read back give exactly the records, coordinates and rejections of one read of the
whole object."""

from __future__ import annotations

import io
import itertools
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs import pieces
from lethe_jobs.readers import RawRecords, Slice, concat_records, iter_raw, read_raw
from lethe_shared.datasets.document import Dataset, parse_dataset


def _csv_dataset(**csv: object) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "reviews",
            "format": "csv",
            "subject_columns": ["user_id"],
            "schema": [
                {"name": "user_id", "type": "string"},
                {"name": "text", "type": "string"},
            ],
            **({"csv": csv} if csv else {}),
        }
    )


JSONL = parse_dataset(
    {
        "dataset_id": "events",
        "format": "jsonl",
        "subject_columns": ["user_id"],
        "schema": [{"name": "user_id", "type": "string"}],
    }
)


def _view(
    records: RawRecords,
) -> tuple[list[dict[str, object]], list[tuple[int, tuple[str, ...], str]]]:
    rows = records.table.to_pylist()
    rejected = [(r.position, r.reasons, r.record_json) for r in records.rejected]
    return rows, rejected


def _splits(
    data: bytes, dataset: Dataset, piece_bytes: int, min_ranges: int = 4
) -> list[pieces.Split]:
    """The split scan as the job runs it: each range counted on its own (`count_range`, as a
    scan task does), then the cuts found from the counts (`find_splits`, as the driver does)."""
    csv = dataset.format.value == "csv"
    quote = dataset.csv.quote.encode() if csv else None
    counts = [
        pieces.count_range(io.BytesIO(data[start:end]), start, quote=quote, csv_lines=csv)
        for start, end in pieces.scan_ranges(len(data), piece_bytes, min_ranges)
    ]
    return pieces.find_splits(
        counts, len(data), piece_bytes, lambda at, n: data[at : at + n], quote=quote, csv_lines=csv
    )


def _serial_splits(
    data: bytes, piece_bytes: int, quote: bytes | None, csv: bool
) -> list[pieces.Split]:
    """What the scan must find, by the plainest reading of the whole object: after the first
    LF at or beyond each multiple of `piece_bytes` with an even number of quotes before it; its
    line number one more than the line breaks before it (CSV: CRLF, CR and LF)."""
    breaks = re.compile(rb"\r\n|\r|\n" if csv else rb"\n")
    found: list[pieces.Split] = []
    for target in range(piece_bytes, len(data), piece_bytes):
        at = data.find(b"\n", target)
        while at >= 0 and quote is not None and data.count(quote, 0, at) % 2:
            at = data.find(b"\n", at + 1)
        if at < 0:
            break
        cut = pieces.Split(at + 1, len(breaks.findall(data, 0, at + 1)) + 1)
        if cut.offset < len(data) and cut not in found:
            found.append(cut)
    return found


def _read_in_pieces(
    path: Path, dataset: Dataset, tmp_path: Path, piece_bytes: int
) -> tuple[RawRecords, list[pieces.Piece]]:
    data = path.read_bytes()
    splits = _splits(data, dataset, piece_bytes)
    header = pieces.csv_header(io.BytesIO(data), dataset) if dataset.format.value == "csv" else None
    planned = pieces.text_pieces(0, len(data), splits, header)
    parts: list[RawRecords] = []
    for number, piece in enumerate(planned):
        start, end = piece.byte_range or (0, len(data))
        local = tmp_path / f"piece-{number}"
        local.write_bytes(data[start:end])
        parts.extend(iter_raw(local, dataset, tmp_path, part=piece.part, batch_rows=3))
    return concat_records(parts), planned


def _random_csv(rng: random.Random, rows: int) -> bytes:
    lines = ["\ufeffuser_id,text"]
    for n in range(rows):
        kind = rng.choice(["plain", "quoted", "multiline", "doubled", "blank", "short", "long"])
        if kind == "plain":
            lines.append(f"u{n},hello {n}")
        elif kind == "quoted":
            lines.append(f'u{n},"a, b {n}"')
        elif kind == "multiline":
            lines.append(f'u{n},"first\nsecond\r\nthird {n}"')
        elif kind == "doubled":
            lines.append(f'u{n},"he said ""hi\n"" {n}"')
        elif kind == "blank":
            lines.append("")
        elif kind == "short":
            lines.append(f"u{n}")
        else:
            lines.append(f"u{n},x,y")
    endings = [rng.choice(["\n", "\r\n", "\r"]) for _ in lines]
    return "".join(line + end for line, end in zip(lines, endings, strict=True)).encode()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("chunk", [5, 64, 4096])
def test_csv_pieces_read_exactly_as_the_whole_file(
    seed: int, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pieces, "SCAN_CHUNK_BYTES", chunk)
    path = tmp_path / "reviews.csv"
    path.write_bytes(_random_csv(random.Random(seed), 120))
    dataset = _csv_dataset()

    whole = read_raw(path, dataset, tmp_path)
    in_pieces, planned = _read_in_pieces(path, dataset, tmp_path, piece_bytes=200)

    assert len(planned) > 5  # really cut, and never inside a quoted field
    assert _view(in_pieces) == _view(whole)


def test_a_quoted_line_break_is_never_a_cut(tmp_path: Path) -> None:
    data = b'user_id,text\nu1,"a\nb\nc\nd"\nu2,x\n'
    splits = _splits(data, _csv_dataset(), piece_bytes=14)

    # Then the first cut is after u1's whole record (line 6 starts u2), not inside its quotes
    assert splits == [pieces.Split(offset=data.index(b"u2"), line=6)]


@pytest.mark.parametrize("seed", range(12))
def test_ranges_counted_apart_cut_where_one_serial_reading_cuts(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given objects with quoted line breaks, \r\n, lone \r, blank lines, ranges and chunks
    # that end anywhere (inside a \r\n, inside quotes), and cut reads of a few bytes
    rng = random.Random(seed)
    monkeypatch.setattr(pieces, "SCAN_CHUNK_BYTES", rng.choice([3, 7, 64, 4096]))
    monkeypatch.setattr(pieces, "CUT_WINDOW_BYTES", rng.choice([1, 2, 5, 64]))
    data = _random_csv(rng, rng.randrange(20, 200))
    piece_bytes = rng.choice([16, 50, 200, 999])
    for dataset, csv in ((_csv_dataset(), True), (JSONL, False)):
        quote = b'"' if csv else None
        expected = _serial_splits(data, piece_bytes, quote, csv)

        # When the scan counts ranges apart (one to eight per piece) and cuts from the counts
        found = _splits(data, dataset, piece_bytes, min_ranges=rng.randrange(1, 40))

        # Then it cuts where a serial reading of the whole object cuts, with the same lines
        assert found == expected
        if len(data) > 2 * piece_bytes and csv:
            assert found  # really cut


def test_a_target_inside_a_quoted_field_to_the_end_has_no_cut() -> None:
    data = b'user_id,text\nu1,"' + b"x\n" * 100 + b'"\n'
    assert _splits(data, _csv_dataset(), piece_bytes=20) == []
    assert _serial_splits(data, 20, b'"', True) == []


def test_scan_ranges_start_at_every_target() -> None:
    ranges = pieces.scan_ranges(1000, 300, 8)
    starts = [start for start, _ in ranges]
    assert {300, 600, 900} <= set(starts)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    # each piece's worth in two (8 ranges for 4 pieces), but nothing beyond the end
    assert len(ranges) == 7
    assert pieces.scan_ranges(1000, 300, 1) == [(0, 300), (300, 600), (600, 900), (900, 1000)]


def test_csv_with_a_backslash_escape_is_one_piece() -> None:
    dataset = _csv_dataset(escape="\\")
    assert not pieces.splittable_text(dataset, b"user_id,text\n")
    assert pieces.splittable_text(_csv_dataset(), b"user_id,text\n")
    assert not pieces.splittable_text(_csv_dataset(), b"\x1f\x8b\x08")  # gzip streams whole


@pytest.mark.parametrize("chunk", [3, 50, 4096])
def test_jsonl_pieces_read_exactly_as_the_whole_file(
    chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pieces, "SCAN_CHUNK_BYTES", chunk)
    rng = random.Random(7)
    lines = []
    for n in range(150):
        lines.append(
            rng.choice(
                [f'{{"user_id": "u{n}", "text": "a\\nb"}}', "[1, 2]", "", f'{{"user_id": {n}}}\r']
            )
        )
    path = tmp_path / "events.jsonl"
    path.write_bytes(("\ufeff" + "\n".join(lines) + "\n").encode())

    whole = read_raw(path, JSONL, tmp_path)
    in_pieces, planned = _read_in_pieces(path, JSONL, tmp_path, piece_bytes=300)

    assert len(planned) > 5
    assert _view(in_pieces) == _view(whole)
    assert in_pieces.columns == whole.columns


def test_parquet_pieces_are_row_groups_with_their_row_indexes(tmp_path: Path) -> None:
    table = pa.table({"user_id": [f"u{n % 7}" for n in range(1000)], "n": list(range(1000))})
    path = tmp_path / "clicks.parquet"
    pq.write_table(table, path, row_group_size=100, compression="none")
    metadata = pq.ParquetFile(path).metadata

    planned = pieces.parquet_pieces(0, metadata, path.stat().st_size, piece_bytes=2500)
    parts = [
        batch
        for piece in planned
        for batch in iter_raw(path, _parquet_dataset(), tmp_path, part=piece.part, batch_rows=64)
    ]

    assert 3 <= len(planned) <= 10
    first_groups = planned[0].part.row_groups
    assert first_groups is not None
    assert first_groups[0] == 0
    assert planned[-1].part.row_groups is not None
    assert planned[-1].part.row_groups[1] == 10
    assert _view(concat_records(parts)) == _view(read_raw(path, _parquet_dataset(), tmp_path))


def test_a_small_object_is_one_whole_piece(tmp_path: Path) -> None:
    assert pieces.text_pieces(3, 10, [], None) == [pieces.Piece(3, size=10)]
    assert pieces.Piece(3).whole
    assert not pieces.Piece(3, Slice(first_line=5), (40, 80)).whole


def _parquet_dataset() -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "clicks",
            "format": "parquet",
            "subject_columns": ["user_id"],
            "schema": [{"name": "user_id", "type": "string"}, {"name": "n", "type": "long"}],
        }
    )
