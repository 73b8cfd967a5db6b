"""The segment index's real writer and compaction on the index benchmark's lake: bytes per
entry, index / data, and what a lookup of K hashes reads.

    python bench/segment_store_bench.py                 # the lake of bench/segment_bench.py
    python bench/segment_store_bench.py --objects 50    # a smaller lake (generate_lake's flags)

Against moto (in-process `mock_aws`: no AWS), through `SegmentSubjectIndex` itself:
1. the lake of bench/segment_bench.py (same generator, defaults and seed) and its entries as the
   index job computes them (`index_bench.Objects.grouped_batches`);
2. written as ingestion runs of RUN_OBJECTS objects each (`replace_objects`: one level-0
   segment per run), then `compact` (one level-1 segment per partition), for each number of
   partition bits measured;
3. per configuration: the bytes of every file in the index bucket (entries and object tables)
   before and after compaction, per entry and against the lake's Parquet bytes; manifest items;
   a lookup of K = 10 subjects drawn from the lake with a cold footer cache and again warm
   (GETs and bytes counted by `ReadCounter`), checked complete against the entries.

Results: bench/results/segment_store_latest.json and Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import generate_lake
from index_bench import Objects, machine_facts, object_ref
from moto import mock_aws

from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.subject_index import EntryBatch

BENCH_DIR = Path(__file__).resolve().parent
OUT_NAME = "segment_store_latest.json"
RUN_OBJECTS = 20
LOOKUP_K = 10
# (partition bits, hash_bytes, by-object files): full digests and 48-bit prefixes, one and 16
# partitions, level-1 by-object files written or not
CONFIGS = ((0, 32, True), (4, 32, True), (0, 6, True), (4, 6, True), (0, 6, False), (4, 6, False))
BUCKET = "lethe-bench-index"


def bucket_bytes(s3: Any) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            sizes[item["Key"]] = int(item["Size"])
    return sizes


def measure(
    batches: list[EntryBatch],
    dataset_id: str,
    config: tuple[int, int, bool],
    data_bytes: int,
    seed: int,
) -> dict[str, Any]:
    bits, width, sidecars = config
    entries = sum(len(b) for b in batches)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        table = boto3.resource("dynamodb", region_name="us-east-1").create_table(
            **manifest_table_definition(f"manifest-{bits}-{width}-{sidecars}")
        )

        def make() -> SegmentSubjectIndex:
            return SegmentSubjectIndex(
                s3,
                BUCKET,
                table,
                partition_bits=bits,
                hash_bytes=width,
                by_object_files=sidecars,
                settle_seconds=0,
                dataset_of=lambda _url: dataset_id,
            )

        index = make()
        started = time.perf_counter()
        for start in range(0, len(batches), RUN_OBJECTS):
            index.replace_objects(batches[start : start + RUN_OBJECTS])
        write_s = time.perf_counter() - started
        level0 = bucket_bytes(s3)
        started = time.perf_counter()
        report = index.compact(dataset_id)
        compact_s = time.perf_counter() - started
        level1 = bucket_bytes(s3)
        items = table.scan()["Items"]
        entry_files = sum(
            v
            for k, v in level1.items()
            if not k.endswith((".objects.parquet", ".by_object.parquet"))
        )
        by_object_bytes = sum(v for k, v in level1.items() if k.endswith(".by_object.parquet"))
        rng = random.Random(seed)
        hashes = sorted({h for b in batches for h in b.subject_hashes})
        wanted = rng.sample(hashes, LOOKUP_K)
        truth = {(h, b.object_url) for b in batches for h in b.subject_hashes if h in set(wanted)}
        cold = make()
        started = time.perf_counter()
        found = cold.lookup_in(dataset_id, wanted)
        lookup_s = time.perf_counter() - started
        got = {(h, e.object_url) for h, es in found.items() for e in es}
        cold_reads = {"gets": cold.counter.gets, "bytes": cold.counter.bytes}
        cold.counter.reset()
        cold.lookup_in(dataset_id, wanted)
        warm_reads = {"gets": cold.counter.gets, "bytes": cold.counter.bytes}
        one = batches[len(batches) // 2]
        cold.counter.reset()
        subjects = cold.subjects_of(one.object_url)  # an object's entries: the by-object path
        object_reads = {
            "gets": cold.counter.gets,
            "bytes": cold.counter.bytes,
            "complete": subjects == {h[: 2 * width] for h in one.subject_hashes},
        }
    total = sum(level1.values())
    return {
        "partition_bits": bits,
        "hash_bytes": width,
        "by_object_files": sidecars,
        "by_object_file_bytes": by_object_bytes,
        "level0_segments": len(level0) // 2,
        "level0_bytes": sum(level0.values()),
        "level0_bytes_per_entry": sum(level0.values()) / entries,
        "level0_index_to_data": sum(level0.values()) / data_bytes,
        "level1_segments": sum(1 for k in level1 if k.endswith(".objects.parquet")),
        "index_bytes": total,
        "entry_file_bytes": entry_files,
        "object_table_bytes": total - entry_files - by_object_bytes,
        "bytes_per_entry": total / entries,
        "index_to_data": total / data_bytes,
        "manifest_items": len(items),
        "manifest_pointer_items": sum(1 for i in items if str(i["pk"]).startswith("obj#")),
        "compaction": {
            "rows_in": report.rows_in,
            "rows_out": report.rows_out,
            "level0_retired": report.level0_retired,
        },
        "write_s": write_s,
        "compact_s": compact_s,
        "lookup_s_moto": lookup_s,
        "lookup_entries": len(truth),
        "lookup_complete": got == truth,
        "lookup_cold": cold_reads,
        "lookup_warm": warm_reads,
        "subjects_of_one_object": object_reads,
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    started = time.perf_counter()
    lake = generate_lake.generate_from_args(scratch / "lake", args)
    dataset = parse_dataset(lake.dataset)
    objects = Objects(lake, dataset, [object_ref(lake, path) for path in lake.files])
    batches = [batch for _, batch in objects.grouped_batches()]
    data_bytes = sum(p.stat().st_size for p in lake.files)
    entries = sum(len(b) for b in batches)
    print(f"lake: {len(lake.files)} objects, {lake.rows:,} rows, {entries:,} entries")
    configs = [
        measure(batches, dataset.dataset_id, config, data_bytes, args.seed)
        for config in (args.configs or CONFIGS)
    ]
    return {
        "benchmark": "index-segment-store",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": machine_facts(),
        "lake": {
            **lake.parameters,
            "rows": lake.rows,
            "data_bytes": data_bytes,
            "entries": entries,
            "run_objects": RUN_OBJECTS,
        },
        "configurations": configs,
        "runtime_s": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lake = result["lake"]
    lines = [
        f"Lake: {lake['objects']} objects, {lake['rows']:,} rows, {lake['data_bytes']:,} bytes of "
        f"Parquet, {lake['entries']:,} entries; written as runs of {lake['run_objects']} objects "
        "(one level-0 segment each), then compacted. Lookup: K = 10 subjects, GETs and bytes "
        "counted (cold: empty footer cache; warm: cached).",
        "",
        "| partitions | hash bytes | by-object file bytes | level-0 bytes per entry "
        "| level-0 / data | level-1 segments | index bytes "
        "| object tables | bytes per entry | index / data | manifest items "
        "| lookup GETs cold / warm | lookup bytes cold / warm | complete "
        "| subjects_of GETs / bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for c in result["configurations"]:
        lines.append(
            f"| {1 << c['partition_bits']} | {c.get('hash_bytes', 32)} "
            f"| {c.get('by_object_file_bytes', 0):,} "
            f"| {c['level0_bytes_per_entry']:.2f} "
            f"| {c['level0_index_to_data'] * 100:.1f} % | {c['level1_segments']} "
            f"| {c['index_bytes']:,} | {c['object_table_bytes']:,} | {c['bytes_per_entry']:.2f} "
            f"| {c['index_to_data'] * 100:.1f} % | {c['manifest_items']} "
            f"| {c['lookup_cold']['gets']} / {c['lookup_warm']['gets']} "
            f"| {c['lookup_cold']['bytes']:,} / {c['lookup_warm']['bytes']:,} "
            f"| {'yes' if c['lookup_complete'] else 'NO'} "
            f"| {c['subjects_of_one_object']['gets']} / "
            f"{c['subjects_of_one_object']['bytes']:,} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    generate_lake.add_arguments(parser)
    parser.add_argument("--out-json", type=Path, default=BENCH_DIR / "results" / OUT_NAME)
    parser.add_argument(
        "--configs",
        type=parse_configs,
        default=None,
        help="bits:hash_bytes:by_object(0|1),... (default: the six of CONFIGS)",
    )
    return parser.parse_args(argv)


def parse_configs(text: str) -> tuple[tuple[int, int, bool], ...]:
    found = []
    for item in text.split(","):
        bits, width, by_object = item.split(":")
        found.append((int(bits), int(width), by_object == "1"))
    return tuple(found)


def main(argv: Sequence[str] | None = None) -> int:
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
    ):
        os.environ.setdefault(name, value)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lethe-segment-store-") as scratch:
        result = run(args, Path(scratch))
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"results: {args.out_json} ({result['runtime_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
