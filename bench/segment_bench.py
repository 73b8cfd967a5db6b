"""The subject index as a Parquet segment in S3: bytes per entry and a lookup's ranged reads.

    python bench/segment_bench.py                 # the index benchmark's lake: 200 x 2,000 rows
    python bench/segment_bench.py --objects 50    # a smaller lake (generate_lake's flags)

A measurement for the design in docs/INDEX_SEGMENTS.md (issue 20, item 2), no Spark and no AWS:

1. The lake of the index benchmark (bench/generate_lake.py, same defaults and seed) and its
   subject index entries, computed as the index job computes them (`index_bench.Objects`:
   objects grouped into tasks, `entry_batches` per group): one entry per distinct
   (subject, object) pair.
2. Those entries written with pyarrow as one segment sorted by subject hash (what compaction
   would leave for one hash-range partition), in several encodings of the hash: the full
   HMAC-SHA256 as 64 hex characters, as 32-byte fixed binary, and its first 8, 6 or 4 bytes as an
   unsigned integer (DELTA_BINARY_PACKED; a lookup then returns candidates that the erase job's
   own matching confirms). Every variant carries the object as an int32 id into an object
   table (the object URL, version, ETag, zone, format, dataset and the two pins once per object,
   written as a second small Parquet file and counted in the index bytes) and the entry's row
   count; one variant also carries the row hints (list<int32>, the first MAX_ROW_HINTS), as the
   DynamoDB items do.
   Row groups of several sizes (entries per row group).
3. Per variant: file bytes, bytes per entry, index bytes / data bytes (the lake's Parquet bytes
   on disk), the footer's size; and a lookup of K hashes (K = 10 subjects drawn from the lake,
   at least one entry each): the exact ranged reads (one GET of the footer, then one GET per
   row group whose min/max statistics hold a hash) and the bytes pyarrow itself reads to answer
   the same lookup through a counting file (its footer read is speculative: 64 KiB), checked
   equal to the entries computed in step 1 (false candidates of a prefix counted).
4. The same entries as one small segment per object (what one segment per ingestion task
   leaves before compaction): total bytes and their overhead against the compacted segment.

Results: bench/results/segment_latest.json and Markdown (`markdown(result)`; bench/report.py
renders it into docs/INDEX_SEGMENTS.md). What is measured is this lake only: 225,582 entries,
0.56 entries per row, rows of about 34 bytes of Parquet; docs/COST.md extrapolates bytes per
entry, and says so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import generate_lake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from index_bench import Objects, machine_facts, object_ref

from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.subject_index import MAX_ROW_HINTS

BENCH_DIR = Path(__file__).resolve().parent
OUT_NAME = "segment_latest.json"
ROW_GROUPS = (1_024, 4_096, 16_384, 65_536)
LOOKUP_K = 10
ENCODINGS = ("hex", "binary32", "prefix8", "prefix6", "prefix4")
# hex digits of the hash a prefix encoding keeps, and its Arrow type
PREFIXES = {"prefix8": (16, pa.uint64()), "prefix6": (12, pa.uint64()), "prefix4": (8, pa.uint32())}


# ------------------------------------------------------------------------------ entries


@dataclass
class Entries:
    """Every entry of the lake as columns (one per distinct (subject, object) pair), and the
    object table: object id -> the fields every entry of that object shares."""

    hashes: list[str]  # 64 lowercase hex digits
    objects: list[int]
    rows: list[int]
    hints: list[list[int]]
    object_table: pa.Table

    def __len__(self) -> int:
        return len(self.hashes)


def lake_entries(objects: Objects) -> Entries:
    hashes: list[str] = []
    ids: list[int] = []
    rows: list[int] = []
    hints: list[list[int]] = []
    fields: list[dict[str, Any]] = []
    for _, batch in objects.grouped_batches():
        object_id = len(fields)
        first = batch.entries()[0] if len(batch) else None
        fields.append(
            {
                "object_id": object_id,
                "object_url": batch.object_url,
                "version_id": first.version_id if first else "",
                "etag": first.etag if first else "",
                "zone": str(first.zone) if first else "",
                "format": first.format if first else "",
                "dataset_id": batch.dataset_id,
                "matching_fingerprint": first.matching_fingerprint if first else "",
                "key_fingerprint": first.key_fingerprint if first else "",
            }
        )
        for entry in batch.entries():
            hashes.append(entry.subject_hash)
            ids.append(object_id)
            rows.append(entry.rows)
            hints.append(list(entry.row_hints[:MAX_ROW_HINTS]))  # what an item keeps
    return Entries(hashes, ids, rows, hints, pa.Table.from_pylist(fields))


# ------------------------------------------------------------------------------ segments


def hash_column(hashes: Sequence[str], encoding: str) -> pa.Array:
    if encoding == "hex":
        return pa.array(hashes, pa.string())
    if encoding == "binary32":
        return pa.array([bytes.fromhex(h) for h in hashes], pa.binary(32))
    if encoding in PREFIXES:
        digits, kind = PREFIXES[encoding]
        return pa.array([int(h[:digits], 16) for h in hashes], kind)
    raise ValueError(f"unknown encoding {encoding}")


def lookup_key(hash_hex: str, encoding: str) -> Any:
    if encoding == "hex":
        return hash_hex
    if encoding == "binary32":
        return bytes.fromhex(hash_hex)
    return int(hash_hex[: PREFIXES[encoding][0]], 16)


def segment_table(entries: Entries, encoding: str, *, hints: bool) -> pa.Table:
    """The entries sorted by subject hash, then object id (Arrow's sort), in `encoding`."""
    columns = {
        "subject_hash": hash_column(entries.hashes, encoding),
        "object_id": pa.array(entries.objects, pa.int32()),
        "rows": pa.array(entries.rows, pa.int32()),
    }
    if hints:
        columns["row_hints"] = pa.array(entries.hints, pa.list_(pa.int32()))
    return pa.table(columns).sort_by([("subject_hash", "ascending"), ("object_id", "ascending")])


def write_segment(table: pa.Table, path: Path, row_group: int, encoding: str) -> None:
    integer_hash = encoding.startswith("prefix")
    pq.write_table(
        table,
        path,
        row_group_size=row_group,
        compression="zstd",
        use_dictionary=["object_id"],
        column_encoding={"subject_hash": "DELTA_BINARY_PACKED"} if integer_hash else None,
        write_statistics=["subject_hash"],
        store_schema=False,
    )


def write_object_table(table: pa.Table, path: Path) -> int:
    pq.write_table(table, path, compression="zstd", store_schema=False)
    return path.stat().st_size


def footer_bytes(path: Path) -> int:
    """The footer and its 8-byte trailer (length + magic): what a reader must GET first."""
    size: int = pq.ParquetFile(path).metadata.serialized_size
    return size + 8


class CountingFile(io.RawIOBase):
    """A file that counts the bytes and the reads pyarrow asks for (each read: one ranged GET)."""

    def __init__(self, path: Path) -> None:
        self._file: io.BufferedReader = path.open("rb")
        self.bytes = 0
        self.reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer: Any) -> int:
        n: int = self._file.readinto(buffer) or 0
        self.bytes += n
        self.reads += 1
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def row_group_bytes(rg: Any) -> int:
    """The bytes of a row group's column chunks (contiguous: one ranged GET)."""
    return sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))


def _stat_range(rg: Any) -> tuple[Any, Any]:
    stats = rg.column(0).statistics
    return stats.min, stats.max


def _comparable(value: Any, encoding: str) -> Any:
    if encoding == "hex" and isinstance(value, bytes):
        return value.decode()
    return value


def lookup(path: Path, keys: list[Any], encoding: str) -> dict[str, Any]:
    """Look `keys` up in one segment: the row groups whose statistics hold each key, the exact
    bytes of those ranged GETs, and what pyarrow reads (through a counting file) to answer."""
    metadata = pq.ParquetFile(path).metadata
    ranges = [
        tuple(_comparable(v, encoding) for v in _stat_range(metadata.row_group(i)))
        for i in range(metadata.num_row_groups)
    ]
    hit: set[int] = set()
    for key in keys:
        hit.update(i for i, (lo, hi) in enumerate(ranges) if lo <= key <= hi)
    exact = footer_bytes(path) + sum(row_group_bytes(metadata.row_group(i)) for i in hit)
    counting = CountingFile(path)
    found: list[tuple[Any, int, int]] = []
    with pq.ParquetFile(pa.PythonFile(counting, mode="r"), pre_buffer=False) as reader:
        for i in sorted(hit):
            table = reader.read_row_group(i, columns=["subject_hash", "object_id", "rows"])
            value_set = pa.array(keys, table.schema.field("subject_hash").type)
            table = table.filter(pc.is_in(table["subject_hash"], value_set=value_set))
            found += zip(*(table[c].to_pylist() for c in table.column_names), strict=True)
    return {
        "row_groups_read": len(hit),
        "exact_bytes": exact,
        "exact_gets": 1 + len(hit),
        "pyarrow_bytes": counting.bytes,
        "pyarrow_reads": counting.reads,
        "found": found,
    }


# ------------------------------------------------------------------------------ measurement


def measure(entries: Entries, data_bytes: int, scratch: Path, seed: int) -> dict[str, Any]:
    object_table_bytes = write_object_table(entries.object_table, scratch / "objects.parquet")
    rng = random.Random(seed)
    subjects = rng.sample(sorted(set(entries.hashes)), LOOKUP_K)
    truth = sorted(
        (h, o, r)
        for h, o, r in zip(entries.hashes, entries.objects, entries.rows, strict=True)
        if h in set(subjects)
    )
    variants = []
    plans = [(e, False) for e in ENCODINGS] + [("binary32", True)]
    for encoding, hints in plans:
        table = segment_table(entries, encoding, hints=hints)
        for row_group in ROW_GROUPS:
            path = scratch / f"segment-{encoding}-{int(hints)}-{row_group}.parquet"
            write_segment(table, path, row_group, encoding)
            size = path.stat().st_size
            keys = [lookup_key(h, encoding) for h in subjects]
            looked = lookup(path, keys, encoding)
            decoded = sorted(looked.pop("found"))
            expected = sorted((lookup_key(h, encoding), o, r) for h, o, r in truth)
            true_found = sum(1 for x in decoded if x in set(expected))
            variants.append(
                {
                    "encoding": encoding,
                    "row_hints": hints,
                    "row_group_entries": row_group,
                    "row_groups": pq.ParquetFile(path).metadata.num_row_groups,
                    "segment_bytes": size,
                    "object_table_bytes": object_table_bytes,
                    "index_bytes": size + object_table_bytes,
                    "bytes_per_entry": (size + object_table_bytes) / len(entries),
                    "index_to_data": (size + object_table_bytes) / data_bytes,
                    "footer_bytes": footer_bytes(path),
                    "lookup": {
                        **looked,
                        "entries_expected": len(expected),
                        "entries_found": true_found,
                        "false_candidates": len(decoded) - true_found,
                        "complete": true_found == len(expected),
                    },
                }
            )
            path.unlink()
    return {
        "write_cpu_s_per_entry": write_cpu(entries) / len(entries),
        "variants": variants,
        "lookup_subjects": LOOKUP_K,
        "lookup_entries": len(truth),
        "uncompacted": per_object_segments(entries, data_bytes, scratch),
    }


def write_cpu(entries: Entries, repeats: int = 3) -> float:
    """CPU seconds (median of `repeats`) to sort the entries and write them as one segment
    (full hash, 16,384 entries per row group): what ingestion and compaction pay per entry."""
    seconds = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeats):
            started = time.process_time()
            table = segment_table(entries, "binary32", hints=False)
            write_segment(table, Path(scratch) / "timed.parquet", 16_384, "binary32")
            seconds.append(time.process_time() - started)
    return sorted(seconds)[len(seconds) // 2]


def per_object_segments(entries: Entries, data_bytes: int, scratch: Path) -> dict[str, Any]:
    """One small segment per object (the binary32 encoding, one row group each)."""
    total = 0
    by_object: dict[int, list[int]] = {}
    for i, object_id in enumerate(entries.objects):
        by_object.setdefault(object_id, []).append(i)
    objects = sorted(by_object)
    for object_id in objects:
        picked = by_object[object_id]
        part = Entries(
            [entries.hashes[i] for i in picked],
            [object_id] * len(picked),
            [entries.rows[i] for i in picked],
            [entries.hints[i] for i in picked],
            entries.object_table,
        )
        path = scratch / f"small-{object_id}.parquet"
        write_segment(segment_table(part, "binary32", hints=False), path, 1 << 20, "binary32")
        total += path.stat().st_size
        path.unlink()
    return {
        "segments": len(objects),
        "bytes": total,
        "bytes_per_entry": total / len(entries),
        "index_to_data": total / data_bytes,
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = round(os.getloadavg()[0], 2)
    lake = generate_lake.generate_from_args(scratch / "lake", args)
    dataset = parse_dataset(lake.dataset)
    objects = Objects(lake, dataset, [object_ref(lake, path) for path in lake.files])
    entries = lake_entries(objects)
    data_bytes = sum(p.stat().st_size for p in lake.files)
    print(f"lake: {len(lake.files)} objects, {lake.rows:,} rows, {len(entries):,} entries")
    measured = measure(entries, data_bytes, scratch, args.seed)
    return {
        "benchmark": "index-segments",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": {**machine_facts(), "load_average_1m_at_start": load_at_start},
        "lake": {
            **lake.parameters,
            "rows": lake.rows,
            "data_bytes": data_bytes,
            "entries": len(entries),
            "distinct_subject_hashes": len(set(entries.hashes)),
            "entries_per_row": len(entries) / lake.rows,
            "data_bytes_per_row": data_bytes / lake.rows,
        },
        **measured,
        "runtime_s": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------------ report


NAMES = {
    "hex": "full hash, 64 hex characters",
    "binary32": "full hash, 32-byte fixed binary",
    "prefix8": "first 8 bytes as uint64 (delta-encoded)",
    "prefix6": "first 6 bytes as uint64 (delta-encoded)",
    "prefix4": "first 4 bytes as uint32 (delta-encoded)",
}


def markdown(result: dict[str, Any]) -> str:
    lake = result["lake"]
    lines = [
        f"Lake: {lake['objects']} objects x {lake['rows_per_object']:,} rows "
        f"({lake['rows']:,} rows, {lake['data_bytes'] / 1e6:.1f} MB of Parquet, "
        f"{lake['data_bytes_per_row']:.1f} bytes per row), {lake['entries']:,} index entries "
        f"({lake['entries_per_row']:.3f} per row) of {lake['distinct_subject_hashes']:,} distinct "
        "subject hashes. Segment: every entry, sorted by subject hash, "
        "zstd, the object id dictionary-encoded; the object table "
        f"({result['variants'][0]['object_table_bytes']:,} bytes) counted in the index bytes. "
        f"Lookup: K = {result['lookup_subjects']} subjects ({result['lookup_entries']} entries), "
        "one GET of the footer and one per row group whose min/max hold a hash.",
        "",
        "| hash column | row hints | entries per row group | index bytes | bytes per entry "
        "| index / data | footer bytes | row groups read | lookup GETs | lookup bytes (exact) "
        "| pyarrow read bytes | false candidates | complete |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in result["variants"]:
        look = v["lookup"]
        lines.append(
            f"| {NAMES[v['encoding']]} | {'yes' if v['row_hints'] else 'no'} "
            f"| {v['row_group_entries']:,} | {v['index_bytes']:,} | {v['bytes_per_entry']:.2f} "
            f"| {v['index_to_data'] * 100:.1f} % | {v['footer_bytes']:,} "
            f"| {look['row_groups_read']} | {look['exact_gets']} | {look['exact_bytes']:,} "
            f"| {look['pyarrow_bytes']:,} | {look['false_candidates']} "
            f"| {'yes' if look['complete'] else 'NO'} |"
        )
    small = result["uncompacted"]
    lines += [
        "",
        f"Before compaction (one segment per object, full hash as 32-byte binary): "
        f"{small['segments']} segments, {small['bytes']:,} bytes, "
        f"{small['bytes_per_entry']:.2f} bytes per entry, "
        f"{small['index_to_data'] * 100:.1f} % of the data.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    generate_lake.add_arguments(parser)
    parser.add_argument("--out-json", type=Path, default=BENCH_DIR / "results" / OUT_NAME)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lethe-segments-") as scratch:
        result = run(args, Path(scratch))
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"results: {args.out_json} ({result['runtime_s']:.0f} s, load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
