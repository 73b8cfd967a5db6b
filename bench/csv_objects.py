"""Raw CSV objects for the ingestion benchmark: streamed to disk, of any size, deterministic.

    python bench/csv_objects.py --out DIR --objects 40 --rows-per-object 25000

Why not `generate_lake.generate`: it builds each object in memory and writes one date per object
with every row valid; ingestion needs objects of up to a few GiB written a chunk at a time, rows
over a few dates (partitions) inside one object, a decimal column, and rows the job must reject.
The subjects are generate_lake's (`SubjectModel`: S subjects with a Zipf-like skew), so the
index entries are shaped like the index benchmark's.

The dataset (`bench_ingest`): `user_id` string (the subject), `event_date` date (the partition
column; each row's date is drawn from `days` consecutive dates), `event_id` long, `event_ts`
timestamp, `amount` decimal(12,2), `stars` int, `active` boolean, `comment` string (always
quoted; some hold a comma or a doubled quote). Rows the job must reject, by row number i of
the object (0-based), so that their count is exact:

- i % 331 == 7: `stars` is "x" (not an int: rejected by validation), about 0.30 %;
- i % 1009 == 13: `event_date` is 2026-02-30 (no such date: rejected by validation), 0.10 %;
- i % 2003 == 17: one field too many (rejected by the reader), 0.05 %.

Lines are built with Arrow compute functions, a chunk of rows at a time, and written straight
from the Arrow string buffer: a gigabyte takes a few seconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import generate_lake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DATASET_ID = "bench_ingest"
FIRST_DATE = dt.date(2026, 1, 1)
COLUMNS = ("user_id", "event_date", "event_id", "event_ts", "amount", "stars", "active", "comment")
HEADER = ",".join(COLUMNS) + "\n"
CHUNK_ROWS = 200_000
BAD_STARS = (331, 7)  # (modulus, remainder) of the row numbers with an invalid value
BAD_DATE = (1009, 13)
EXTRA_FIELD = (2003, 17)
_WORDS = [
    *("great", "fast", "slow", "broken", "lovely", "late", "refund", "again", "never", "always"),
    *("price", "delivery", "support", "quality", "size", "colour", "battery", "screen", "box"),
    *("driver", "app", "order", "return", "thanks", "ok,", 'the ""best""'),
]
_POOL = 1000


def dataset_document() -> dict[str, Any]:
    types = {
        "user_id": "string",
        "event_date": "date",
        "event_id": "long",
        "event_ts": "timestamp",
        "amount": "decimal(12,2)",
        "stars": "int",
        "active": "boolean",
        "comment": "string",
    }
    return {
        "dataset_id": DATASET_ID,
        "format": "csv",
        "compression": "none",
        "subject_columns": ["user_id"],
        "partition_by": ["event_date"],
        "schema": [{"name": c, "type": types[c]} for c in COLUMNS],
        "description": "Synthetic raw CSV for the ingestion benchmark (bench/csv_objects.py).",
    }


@dataclass(frozen=True)
class CsvObject:
    path: Path
    key: str  # the raw key it is uploaded under
    rows: int  # data records (lines after the header)
    valid: int  # records the job must write to the lake
    rejected: int  # records the job must quarantine
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def _hits(rule: tuple[int, int], numbers: Any) -> Any:
    return numbers % rule[0] == rule[1]


def expected_counts(rows: int) -> tuple[int, int]:
    """(valid, rejected) records of an object of `rows` records."""
    numbers = np.arange(rows)
    bad = _hits(BAD_STARS, numbers) | _hits(BAD_DATE, numbers) | _hits(EXTRA_FIELD, numbers)
    rejected = int(bad.sum())
    return rows - rejected, rejected


def _comment_pool(rng: np.random.Generator, max_words: int) -> pa.Array:
    words = np.array(_WORDS)
    lengths = rng.integers(0, max_words + 1, _POOL)
    texts = [" ".join(words[rng.integers(0, len(words), n)]) for n in lengths]
    return pa.array([f'"{t}"' for t in texts])  # quoted: some hold a comma or a quote


def _text(values: Any) -> Any:
    return pa.array(values, pa.int64()).cast(pa.string())


def _chunk_lines(
    model: generate_lake.SubjectModel,
    rng: np.random.Generator,
    *,
    first: int,
    rows: int,
    index: int,
    days: int,
    comments: pa.Array,
) -> pa.Array:
    """Lines (each ending in \\n) of rows first .. first + rows - 1 of object `index`."""
    numbers = np.arange(first, first + rows)
    user = model.columns_of(model.draw(rng, rows))["user_id"]
    day = rng.integers(0, days, rows)
    dates = pa.array([(FIRST_DATE + dt.timedelta(days=d)).isoformat() for d in range(days)])
    midnight = np.datetime64(FIRST_DATE.isoformat(), "us") + day.astype("timedelta64[D]")
    micros = rng.integers(0, 86_400 * 1_000_000, rows).astype("timedelta64[us]")
    stamps = pc.strftime(pa.array(midnight + micros, pa.timestamp("us")), "%Y-%m-%d %H:%M:%S")
    cents = np.round(rng.gamma(2.0, 2000.0, rows)).astype(np.int64)
    amount = pc.binary_join_element_wise(
        _text(cents // 100), pc.utf8_lpad(_text(cents % 100), 2, "0"), "."
    )
    stars = pc.if_else(pa.array(_hits(BAD_STARS, numbers)), "x", _text(rng.integers(1, 6, rows)))
    active = pc.if_else(pa.array(rng.random(rows) < 0.8), "true", "false")
    fields = [
        user,
        pc.if_else(pa.array(_hits(BAD_DATE, numbers)), "2026-02-30", dates.take(pa.array(day))),
        _text(index * 10_000_000_000 + numbers),
        stamps,
        amount,
        stars,
        active,
        comments.take(pa.array(rng.integers(0, len(comments), rows))),
    ]
    line = pc.binary_join_element_wise(*fields, ",")
    extra = pc.binary_join_element_wise(line, "surplus", ",")
    line = pc.if_else(pa.array(_hits(EXTRA_FIELD, numbers)), extra, line)
    return pc.binary_join_element_wise(line, "", "\n")


def _write_array(out: Any, lines: pa.Array) -> int:
    """Write the characters of a string array without nulls (its data buffer, no copy)."""
    array = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)
    start, end = int(offsets[array.offset]), int(offsets[array.offset + len(array)])
    out.write(memoryview(array.buffers()[2])[start:end])
    return end - start


def write_object(
    path: Path,
    *,
    index: int,
    rows: int,
    model: generate_lake.SubjectModel,
    seed: int,
    days: int = 3,
    comment_words: int = 15,
    key: str | None = None,
) -> CsvObject:
    """Write object `index` of `rows` records to `path`, a chunk at a time. Deterministic for
    (seed, index, rows, days, comment_words)."""
    rng = np.random.default_rng([seed, index])
    comments = _comment_pool(np.random.default_rng([seed, 99]), comment_words)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        written = out.write(HEADER.encode())
        for first in range(0, rows, CHUNK_ROWS):
            lines = _chunk_lines(
                model,
                rng,
                first=first,
                rows=min(CHUNK_ROWS, rows - first),
                index=index,
                days=days,
                comments=comments,
            )
            written += _write_array(out, lines)
    valid, rejected = expected_counts(rows)
    raw_key = key or f"{DATASET_ID}/{FIRST_DATE:%Y/%m/%d}/upload-{index:05d}.csv"
    return CsvObject(path, raw_key, rows, valid, rejected, written)


def rows_for_bytes(target: int, *, comment_words: int, seed: int = 1) -> int:
    """About how many records make an object of `target` bytes (from a sample)."""
    sample = 20_000
    model = generate_lake.SubjectModel(100_000, 1.0, seed)
    rng = np.random.default_rng([seed, 0])
    comments = _comment_pool(np.random.default_rng([seed, 99]), comment_words)
    lines = _chunk_lines(model, rng, first=0, rows=sample, index=0, days=3, comments=comments)
    per_row = pc.sum(pc.binary_length(lines)).as_py() / sample
    return max(1, round((target - len(HEADER)) / per_row))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--objects", type=int, default=40)
    parser.add_argument("--rows-per-object", type=int, default=25_000)
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--comment-words", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    model = generate_lake.SubjectModel(args.subjects, args.skew, args.seed)
    written = [
        write_object(
            args.out / f"upload-{i:05d}.csv",
            index=i,
            rows=args.rows_per_object,
            model=model,
            seed=args.seed,
            days=args.days,
            comment_words=args.comment_words,
        )
        for i in range(args.objects)
    ]
    (args.out / f"{DATASET_ID}.dataset.json").write_text(
        json.dumps(dataset_document(), indent=2) + "\n", encoding="utf-8"
    )
    total = sum(o.bytes for o in written)
    print(f"wrote {len(written)} objects, {sum(o.rows for o in written):,} rows, {total:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
