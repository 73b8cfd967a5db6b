"""The erasure benchmark: Lethe's indexed erasure against a full-scan baseline, the rewrite
against a bare pyarrow read-filter-write, and how erasure time scales (docs/BENCHMARKS.md).

    python bench/erasure_bench.py                 # the default run (about 5-10 min on 2 cores)
    python bench/erasure_bench.py --lake DIR      # keep the default-size lake in DIR and reuse it
    python bench/erasure_bench.py --help          # every flag

The lake: `generate_lake.generate` with activity windows (`--window`), 250 raw Parquet objects
of 4,000 rows (1 M rows, 50,000 subjects, Zipf skew 1) and the lake zone of the same rows
(`generate_lake.write_lake_zone`: one Hive-partitioned file per raw object): 500 objects and
2 M rows in all, the issue's default size. Both zones are erased.

1. Locality. For K subjects drawn with the lake's skew (heavy subjects are likely), erase them
   both ways, in the same run, on the same source objects (outputs go to fresh directories, so
   both start from the same bytes), the order alternating:
   - Lethe: each subject's hash (HMAC-SHA256, as the API computes it), its objects from the
     subject index (the index's entries for the lake, built in memory with `entry_batches` as
     the index job builds them; the DynamoDB Query per subject is a dictionary look-up here,
     not timed as a network call), then each object downloaded (a local copy stands in for the
     S3 GET) and rewritten by `lethe_jobs.erase_rows.erase_rows`, the erase job's own code;
   - baseline (the Athena-based approach: Find, then Forget): the subject column of every
     object of the dataset read (Parquet footer and that column's chunks, as Athena scans a
     columnar file) and matched against the plaintext ids; then each matching object
     downloaded and rewritten by the same `erase_rows`.
   Bytes read are file bytes actually read from the objects (a counting file object under
   pyarrow for the scan; the whole object for each download). Checked every run: the
   baseline finds exactly the objects the index names, both write byte-identical objects, and
   the rows removed are exactly the rows the index gives the subjects.
2. Rewrite efficiency. The objects the K = 10 erasure rewrites, rewritten by `erase_rows` and by
   a bare pyarrow `read_table` -> filter -> `write_table` (Snappy, one row group: what the erase
   job keeps for these files), per CPU second. A large object (`--anchor-mib`) puts the CPU
   cost per rewritten object next to Find and Forget's published cost overview.
3. Scaling. Erasure time at K = 10 against lake size (`--scale-sizes`, fractions of the default
   lake, subjects in proportion), and against K (`--ks`) at the default size.

Writes bench/results/erasure_latest.json and the plots docs/benchmarks/erasure_*.png, prints
the Markdown tables, and with `--update-docs` replaces the generated block of
docs/BENCHMARKS.md (between the `erasure-bench` markers) with them.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import hashlib
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import generate_lake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import report

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "spark_jobs"))  # lethe_jobs is not an installed package

from index_bench import machine_facts  # noqa: E402

from lethe_jobs.erase_rows import SubjectMatcher, erase_rows  # noqa: E402
from lethe_jobs.objects import ObjectKind  # noqa: E402
from lethe_shared.catalog.object_catalog import Zone  # noqa: E402
from lethe_shared.datasets.document import Dataset, parse_dataset  # noqa: E402
from lethe_shared.index.arrow_entries import (  # noqa: E402
    ObjectRef,
    ObjectSubjects,
    entry_batches,
    lake_object_subjects,
    object_subjects,
)
from lethe_shared.subject_hashing.keys import subject_hash  # noqa: E402

KEY = b"lethe-benchmark-subject-hash-key-0123456789"  # any key of >= 32 bytes
RAW_BUCKET = generate_lake.RAW_BUCKET
LAKE_BUCKET = "lethe-prod-lake-123456789012-us-east-1"
MIB = 1024 * 1024
DOCS = REPO / "docs"
PLOTS = DOCS / "benchmarks"
OUT_NAME = "erasure_latest.json"
DEFAULT_OUT = BENCH_DIR / "results" / OUT_NAME
INDEX_GROUP = 64  # objects per entry_batches call, as a Spark task of the index job holds
# Find and Forget's published cost overview (docs/COST_OVERVIEW.md of awslabs/amazon-s3-find-
# and-forget): 10 TB, 11,000 objects modified, 100 tasks x 150 min; 50 TB, 45,300 objects,
# 100 tasks x 10.5 h; tasks of 4 vCPU.
ANCHOR = {
    "10TB": {"objects": 11_000, "task_minutes": 100 * 150, "data_bytes": 10e12},
    "50TB": {"objects": 45_300, "task_minutes": 100 * 630, "data_bytes": 50e12},
}
ANCHOR_VCPU = 4


# ------------------------------------------------------------------------------- the lake


@dataclass(frozen=True)
class Obj:
    """One object of the dataset: raw or lake zone, its key in its bucket and local path."""

    zone: Zone
    key: str
    path: Path
    size: int

    @property
    def kind(self) -> ObjectKind:
        return ObjectKind.RAW if self.zone is Zone.RAW else ObjectKind.LAKE_PARQUET

    @property
    def url(self) -> str:
        bucket = RAW_BUCKET if self.zone is Zone.RAW else LAKE_BUCKET
        return f"s3://{bucket}/{self.key}"


@dataclass
class Setup:
    """A lake with its dataset, its objects (raw, then lake zone) and its subject index: subject
    hash -> {object number: rows} (a dict, or `locality_bench.LakeIndex` for large lakes)."""

    lake: generate_lake.Lake
    dataset: Dataset
    objects: list[Obj]
    index: Mapping[str, Mapping[int, int]]
    seconds: dict[str, float]

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


def lake_args(raw_objects: int, args: argparse.Namespace) -> dict[str, Any]:
    subjects = max(1, round(args.subjects * raw_objects / args.objects))
    return {
        "objects": raw_objects,
        "rows_per_object": args.rows_per_object,
        "subjects": subjects,
        "skew": args.skew,
        "seed": args.seed,
        "window": args.window,
    }


def make_lake(root: Path, shape: dict[str, Any]) -> Setup:
    """Generate (or reuse, when `root` has a lake of that shape) the lake, its lake zone and
    its index."""
    started = time.perf_counter()
    manifest = root / "lake.json"
    reuse = manifest.exists() and all(
        json.loads(manifest.read_text())["parameters"].get(k, 0) == v for k, v in shape.items()
    )
    if reuse:
        lake = generate_lake.load(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
        lake = generate_lake.generate(root, **shape)
    zone = generate_lake.write_lake_zone(lake)
    generated = time.perf_counter() - started
    objects = [
        Obj(Zone.RAW, p.relative_to(root).as_posix(), p, p.stat().st_size) for p in lake.files
    ]
    base = root / generate_lake.LAKE_ZONE_DIR
    objects += [Obj(Zone.LAKE, p.relative_to(base).as_posix(), p, p.stat().st_size) for p in zone]
    dataset = parse_dataset(lake.dataset)
    started = time.perf_counter()
    index = build_index(dataset, objects)
    seconds = {"generate_or_load": generated, "index_build": time.perf_counter() - started}
    return Setup(lake, dataset, objects, index, seconds)


def _subjects_of(obj: Obj, dataset: Dataset) -> ObjectSubjects:
    ref = ObjectRef(obj.url, obj.zone, "parquet")
    if obj.zone is Zone.LAKE:  # partition values from the Hive path, as the indexer Lambda
        return lake_object_subjects(obj.path.read_bytes(), obj.key, dataset, ref, key=KEY)
    return object_subjects(pq.read_table(obj.path), dataset, ref, key=KEY)


def build_index(dataset: Dataset, objects: Sequence[Obj]) -> dict[str, dict[int, int]]:
    """The subject index's entries for every object (`entry_batches` per group of objects, as
    the index job computes them), as subject hash -> {object number: rows}."""
    index: dict[str, dict[int, int]] = {}
    for start in range(0, len(objects), INDEX_GROUP):
        numbers = range(start, min(start + INDEX_GROUP, len(objects)))
        found = [_subjects_of(objects[i], dataset) for i in numbers]
        for number, batch in zip(numbers, entry_batches(found, key=KEY), strict=True):
            for hashed, rows in zip(batch.subject_hashes, batch.rows, strict=True):
                index.setdefault(hashed, {})[number] = rows
    return index


def draw_subjects(setup: Setup, count: int, seed: int) -> list[str]:
    """`count` distinct subject ids drawn with the lake's skew (heavy subjects are likely), in
    the order drawn: the first k of a larger draw are the draw of k."""
    model = setup.lake.model
    rng = np.random.default_rng([seed, 5])
    chosen: dict[int, None] = {}
    while len(chosen) < min(count, model.subjects):
        for number in model.draw(rng, count):
            if len(chosen) < count:
                chosen.setdefault(int(number))
    return [model.key_values(n)[0] for n in chosen]


def hash_of(subject_id: str) -> str:
    return subject_hash(KEY, ["user_id"], [subject_id])


# ------------------------------------------------------------------------- reading, counted


class CountingFile(io.RawIOBase):
    """A local file whose reads are counted: what pyarrow actually reads of it."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb", buffering=0)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer: Any) -> int:
        count = self._file.readinto(buffer) or 0
        self.read_bytes += count
        return count

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self.read_bytes += len(data)
        return data

    def close(self) -> None:
        self._file.close()
        super().close()


def scan_subject_column(obj: Obj, column: str, ids: pa.Array) -> tuple[bool, int, int]:
    """The baseline's Find on one object: its footer and subject column read, the values
    matched against the plaintext ids. (matches, bytes pyarrow read, the least a reader must
    read: the footer and the column's chunks)"""
    source = CountingFile(obj.path)
    try:
        parquet = pq.ParquetFile(source)
        values = parquet.read(columns=[column]).column(0)
        found = bool(pc.any(pc.is_in(values, value_set=ids)).as_py())
    finally:
        source.close()
    return found, source.read_bytes, least_bytes(parquet.metadata, column)


def least_bytes(metadata: Any, column: str) -> int:
    """The footer (metadata, its length and the magic number) and every chunk of `column`."""
    total = metadata.serialized_size + 8
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema == column:
                total += chunk.total_compressed_size
    return int(total)


@dataclass
class Erased:
    """One erasure: the objects rewritten (object number -> output SHA-256 and rows removed),
    bytes read (scan and downloads), objects scanned."""

    objects: dict[int, tuple[str, int]]
    scan_bytes: int  # what pyarrow read (its footer read takes up to 64 KiB at once)
    scan_least_bytes: int  # the footers and the subject column's chunks
    download_bytes: int
    scanned: int

    @property
    def bytes_read(self) -> int:
        return self.scan_bytes + self.download_bytes

    @property
    def least_bytes_read(self) -> int:
        return self.scan_least_bytes + self.download_bytes

    @property
    def rows_removed(self) -> int:
        return sum(rows for _, rows in self.objects.values())


def rewrite(setup: Setup, number: int, matcher: SubjectMatcher, out: Path) -> tuple[str, int, int]:
    """What the erase job does with one object: download it (a local copy stands in for the S3
    GET: every byte of the object is read), then `erase_rows`. (output SHA-256, rows removed,
    bytes read)"""
    obj = setup.objects[number]
    work = out / f"{number:06d}"
    work.mkdir(parents=True)
    current, erased = work / "current", work / "erased"
    shutil.copyfile(obj.path, current)
    result = erase_rows(obj.kind, current, erased, obj.key, matcher, workdir=work)
    digest = hashlib.sha256(erased.read_bytes()).hexdigest() if result.written else "unchanged"
    current.unlink()
    return digest, result.rows_removed, obj.size


def erase_lethe(setup: Setup, ids: Sequence[str], out: Path) -> Erased:
    hashes = [hash_of(i) for i in ids]
    matcher = SubjectMatcher(setup.dataset, frozenset(hashes), KEY)
    numbers = sorted({n for h in hashes for n in setup.index.get(h, {})})
    done, read = {}, 0
    for number in numbers:
        digest, removed, size = rewrite(setup, number, matcher, out)
        done[number] = (digest, removed)
        read += size
    return Erased(done, 0, 0, read, 0)


def erase_scan(setup: Setup, ids: Sequence[str], out: Path) -> Erased:
    column = setup.dataset.subject_columns[0]
    wanted = pa.array(sorted(ids), pa.string())
    matching, scanned, least = [], 0, 0
    for number, obj in enumerate(setup.objects):
        found, count, needed = scan_subject_column(obj, column, wanted)
        scanned += count
        least += needed
        if found:
            matching.append(number)
    matcher = SubjectMatcher(setup.dataset, frozenset(hash_of(i) for i in ids), KEY)
    done, read = {}, 0
    for number in matching:
        digest, removed, size = rewrite(setup, number, matcher, out)
        done[number] = (digest, removed)
        read += size
    return Erased(done, scanned, least, read, len(setup.objects))


METHODS: dict[str, Callable[[Setup, Sequence[str], Path], Erased]] = {
    "lethe": erase_lethe,
    "scan": erase_scan,
}


# ------------------------------------------------------------------------------ statistics


def timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, every thread, result)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1]}


def check(setup: Setup, ids: Sequence[str], lethe: Erased, scan: Erased) -> dict[str, Any]:
    expected = sum(sum(setup.index.get(hash_of(i), {}).values()) for i in ids)
    checks = {
        "same_objects": sorted(lethe.objects) == sorted(scan.objects),
        "same_outputs": lethe.objects == scan.objects,
        "rows_removed_equal_index_rows": lethe.rows_removed == expected == scan.rows_removed,
    }
    if not all(checks.values()):
        raise AssertionError(f"the two erasures differ for {len(ids)} subjects: {checks}")
    return {**checks, "rows_removed": expected}


def compare(setup: Setup, ids: Sequence[str], repeats: int, scratch: Path) -> dict[str, Any]:
    """Erase `ids` both ways: one warm-up each, then `repeats` rounds, the order alternating;
    every run checked."""
    wall: dict[str, list[float]] = {m: [] for m in METHODS}
    cpu: dict[str, list[float]] = {m: [] for m in METHODS}
    last: dict[str, Erased] = {}
    for repeat in range(repeats + 1):
        order = list(METHODS) if repeat % 2 == 0 else list(reversed(METHODS))
        for method in order:
            out = scratch / f"out-{method}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            w, c, last[method] = timed(lambda m=method, o=out: METHODS[m](setup, ids, o))  # type: ignore[misc]
            shutil.rmtree(out)
            if repeat:  # the first round warms up
                wall[method].append(w)
                cpu[method].append(c)
        checked = check(setup, ids, last["lethe"], last["scan"])
    lethe, scan = last["lethe"], last["scan"]
    sides = {
        m: {
            "wall_s": summary(wall[m]),
            "cpu_s": summary(cpu[m]),
            "wall_seconds": wall[m],
            "cpu_seconds": cpu[m],
            "bytes_read": last[m].bytes_read,
            "least_bytes_read": last[m].least_bytes_read,
            "scan_bytes": last[m].scan_bytes,
            "scan_least_bytes": last[m].scan_least_bytes,
            "download_bytes": last[m].download_bytes,
            "objects_scanned": last[m].scanned,
            "objects_rewritten": sum(1 for d, _ in last[m].objects.values() if d != "unchanged"),
            "objects_touched": len(last[m].objects),
        }
        for m in METHODS
    }
    ratio_wall = [s / max(v, 1e-9) for s, v in zip(wall["scan"], wall["lethe"], strict=True)]
    ratio_cpu = [s / max(v, 1e-9) for s, v in zip(cpu["scan"], cpu["lethe"], strict=True)]
    return {
        "k": len(ids),
        **sides,
        "checks": checked,
        "ratio_bytes": scan.least_bytes_read / max(lethe.bytes_read, 1),
        "ratio_bytes_pyarrow": scan.bytes_read / max(lethe.bytes_read, 1),
        "ratio_wall": summary(ratio_wall),
        "ratio_cpu": summary(ratio_cpu),
        "objects": len(setup.objects),
        "lake_bytes": setup.bytes,
    }


# --------------------------------------------------------------------- 2. rewrite efficiency


def bare_rewrite(obj: Obj, column: str, ids: pa.Array, out: Path) -> int:
    """The practical limit: read the object, drop the subjects' rows, write it (Snappy, one row
    group, as these files are and as the erase job keeps them)."""
    table = pq.read_table(obj.path)
    kept = table.filter(pc.invert(pc.is_in(table.column(column), value_set=ids)))
    pq.write_table(kept, out, compression="snappy", row_group_size=max(kept.num_rows, 1))
    return int(table.num_rows - kept.num_rows)


def job_rewrite(obj: Obj, matcher: SubjectMatcher, out: Path, work: Path) -> int:
    """The erase job's rewrite of the same object (`erase_rows`), without the download."""
    return erase_rows(obj.kind, obj.path, out, obj.key, matcher, workdir=work).rows_removed


def efficiency(
    objects: Sequence[Obj], dataset: Dataset, ids: Sequence[str], repeats: int, scratch: Path
) -> dict[str, Any]:
    column = dataset.subject_columns[0]
    wanted = pa.array(sorted(ids), pa.string())
    matcher = SubjectMatcher(dataset, frozenset(hash_of(i) for i in ids), KEY)
    out = scratch / "efficiency.parquet"

    def job() -> int:
        return sum(job_rewrite(o, matcher, out, scratch) for o in objects)

    def bare() -> int:
        return sum(bare_rewrite(o, column, wanted, out) for o in objects)

    runs = {"erase_rows": job, "bare_pyarrow": bare}
    wall: dict[str, list[float]] = {m: [] for m in runs}
    cpu: dict[str, list[float]] = {m: [] for m in runs}
    removed: dict[str, int] = {}
    for repeat in range(repeats + 1):
        for name in list(runs) if repeat % 2 == 0 else list(reversed(runs)):
            w, c, removed[name] = timed(runs[name])
            if repeat:
                wall[name].append(w)
                cpu[name].append(c)
    if removed["erase_rows"] != removed["bare_pyarrow"]:
        raise AssertionError(f"the rewrites removed different rows: {removed}")
    size = sum(o.size for o in objects)
    sides = {
        n: {
            "wall_s": summary(wall[n]),
            "cpu_s": summary(cpu[n]),
            "mb_per_cpu_s": size / 1e6 / statistics.median(cpu[n]),
            "objects_per_cpu_s": len(objects) / statistics.median(cpu[n]),
            "mb_per_wall_s": size / 1e6 / statistics.median(wall[n]),
            "cpu_ms_per_object": 1000 * statistics.median(cpu[n]) / len(objects),
        }
        for n in runs
    }
    per_round = [b / j for b, j in zip(cpu["bare_pyarrow"], cpu["erase_rows"], strict=True)]
    per_round_wall = [b / j for b, j in zip(wall["bare_pyarrow"], wall["erase_rows"], strict=True)]
    return {
        "objects": len(objects),
        "bytes": size,
        "rows_removed": removed["erase_rows"],
        **sides,
        "ratio_cpu": summary(per_round),  # erase_rows throughput / bare throughput
        "ratio_wall": summary(per_round_wall),
        "profile": profile(job),
    }


PROFILED = {
    "erase_rows": "erase_rows",
    "scan_parquet": "open: footer read, subject columns found",
    "_plan": "plan: the writer options that keep the file's layout",
    "read_row_group": "read each row group whole, once",
    "group_match": "match: distinct subject values hashed, rows selected",
    "digests": "(of which HMAC-SHA256 of the distinct values)",
    "add": "filter and write the kept rows (writer opened)",
    "finish": "close the file, check what the rewrite kept",
}


def profile(run: Callable[[], int]) -> dict[str, float]:
    """Where `erase_rows` spends its time: cumulative seconds of its parts, from three profiled
    rounds (the profiler's overhead inflates the whole; read the shares)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3):  # a few rounds: shares steadier than one round's on a loaded machine
        run()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    found: dict[str, float] = {}
    for (filename, _, name), (_, _, _, cumulative, _) in stats.items():
        if name in PROFILED and any(
            part in filename for part in ("erase_rows", "pyarrow", "subject_hashing", "<")
        ):
            found[name] = max(found.get(name, 0.0), cumulative)
    total = found.get("erase_rows", 0.0) or 1.0
    return {PROFILED[n]: round(found.get(n, 0.0) / total, 3) for n in PROFILED}


def anchor(dataset: Dataset, mib: int, seed: int, repeats: int, scratch: Path) -> dict[str, Any]:
    """One large raw object (about `mib` MiB, pyarrow's row groups), 10 subjects' rows erased by
    `erase_rows` and by the bare rewrite: CPU seconds per rewritten object of that size."""
    model = generate_lake.SubjectModel(50_000, 1.0, seed)
    rng = np.random.default_rng([seed, 9])
    comments = generate_lake._comment_pool(rng)
    rows = int(mib * MIB / 22)  # about 22 bytes per row in this schema at this size, Snappy
    table = generate_lake.object_table(
        model, index=0, rows=rows, day=generate_lake.FIRST_DATE, rng=rng, comments=comments
    )
    key = generate_lake.object_key(dataset.dataset_id, 0, 1, "parquet")
    path = scratch / "anchor" / key
    generate_lake.write_object(table, path, "parquet")
    lake_key = f"{dataset.dataset_id}/event_date={generate_lake.FIRST_DATE}/part-0.parquet"
    lake_path = scratch / "anchor" / "lake-zone" / lake_key
    generate_lake.write_object(table.drop_columns(["event_date"]), lake_path, "parquet")
    del table
    objs = {
        "raw": Obj(Zone.RAW, key, path, path.stat().st_size),
        "lake": Obj(Zone.LAKE, lake_key, lake_path, lake_path.stat().st_size),
    }
    ids = [
        model.key_values(int(n))[0]
        for n in np.random.default_rng([seed, 4]).integers(0, 50_000, 10)
    ]
    column = dataset.subject_columns[0]
    wanted = pa.array(sorted(ids), pa.string())
    matcher = SubjectMatcher(dataset, frozenset(hash_of(i) for i in ids), KEY)
    out = scratch / "anchor-out.parquet"
    runs = {
        **{
            f"erase_rows_{z}": (lambda o=o: job_rewrite(o, matcher, out, scratch))
            for z, o in objs.items()
        },
        **{
            f"bare_pyarrow_{z}": (lambda o=o: bare_rewrite(o, column, wanted, out))
            for z, o in objs.items()
        },
    }
    cpu: dict[str, list[float]] = {m: [] for m in runs}
    wall: dict[str, list[float]] = {m: [] for m in runs}
    for repeat in range(repeats + 1):
        for name in list(runs) if repeat % 2 == 0 else list(reversed(runs)):
            w, c, _ = timed(runs[name])
            if repeat:
                cpu[name].append(c)
                wall[name].append(w)
    per_gb = {
        name: statistics.median(cpu[name]) / (objs[name.rsplit("_", 1)[1]].size / 1e9)
        for name in runs
    }
    anchors = {
        name: {
            "vcpu_s_per_object": a["task_minutes"] * 60 * ANCHOR_VCPU / a["objects"],
            "object_bytes_at_most": a["data_bytes"] / a["objects"],
        }
        for name, a in ANCHOR.items()
    }
    for a in anchors.values():
        for zone in objs:
            lethe = per_gb[f"erase_rows_{zone}"] * a["object_bytes_at_most"] / 1e9
            a[f"lethe_vcpu_s_same_size_{zone}"] = lethe
            a[f"ratio_{zone}"] = a["vcpu_s_per_object"] / lethe
    return {
        "object_bytes": {z: o.size for z, o in objs.items()},
        "rows": rows,
        "row_groups": pq.ParquetFile(path).num_row_groups,
        "cpu_s": {n: summary(v) for n, v in cpu.items()},
        "wall_s": {n: summary(v) for n, v in wall.items()},
        "vcpu_s_per_object": {n: statistics.median(v) for n, v in cpu.items()},
        "vcpu_s_per_gb": per_gb,
        "anchors": anchors,
        "rounds": repeats,
    }


# ------------------------------------------------------------------------------ the run


def rewrite_efficiency(
    setup: Setup, ids: Sequence[str], repeats: int, scratch: Path
) -> dict[str, Any]:
    """Part 2 on the objects the erasure of `ids` rewrites, by zone."""
    hashes = [hash_of(i) for i in ids]
    touched = sorted({n for h in hashes for n in setup.index.get(h, {})})
    eff = {}
    for zone in (Zone.RAW, Zone.LAKE):
        chosen = [setup.objects[n] for n in touched if setup.objects[n].zone is zone]
        eff[zone.value] = efficiency(chosen, setup.dataset, ids, repeats, scratch)
        eff[zone.value]["rounds"] = repeats
        e = eff[zone.value]
        print(
            f"efficiency, {zone.value}: {e['ratio_cpu']['median']:.2f}x of bare pyarrow (CPU; "
            f"min {e['ratio_cpu']['min']:.2f}, max {e['ratio_cpu']['max']:.2f}; "
            f"{e['erase_rows']['cpu_ms_per_object']:.2f} ms against "
            f"{e['bare_pyarrow']['cpu_ms_per_object']:.2f} ms per object)",
            flush=True,
        )
    return eff


EFFICIENCY_ROUNDS = 9  # at least: a round takes about half a second


def efficiency_rounds(args: argparse.Namespace) -> int:
    """Part 2's timed rounds: a round is short, so more of them than --repeats, for a median
    that moves less with other processes' load (per-round ratios, the order alternating)."""
    return max(int(args.repeats), EFFICIENCY_ROUNDS)


def run_efficiency(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """`--efficiency-only`: part 2 alone, on the default lake, K = --scale-k."""
    load_start = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    lakes_dir = args.lake or scratch / "lakes"
    default = make_lake(Path(lakes_dir) / "default", lake_args(args.objects, args))
    ids = draw_subjects(default, args.scale_k, args.seed)
    eff = rewrite_efficiency(default, ids, efficiency_rounds(args), scratch)
    facts = machine_facts() | {"load_average_1m_at_start": load_start}
    return {
        "benchmark": "erasure-efficiency",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/erasure_bench.py " + " ".join(sys.argv[1:]),
        "machine": facts,
        "runtime_s": time.perf_counter() - started,
        "k": len(ids),
        "repeats": args.repeats,
        "efficiency": eff,
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    load_start = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    lakes_dir = args.lake or scratch / "lakes"
    default = make_lake(Path(lakes_dir) / "default", lake_args(args.objects, args))
    ids = draw_subjects(default, max(args.ks), args.seed)
    print(
        f"default lake: {len(default.objects)} objects, {default.bytes / MIB:.1f} MiB", flush=True
    )
    by_k = []
    for k in args.ks:
        by_k.append(compare(default, ids[:k], args.repeats, scratch))
        print(_md_k_row(by_k[-1]), flush=True)
    k10 = next((r for r in by_k if r["k"] == 10), by_k[len(by_k) // 2])
    uniform = None
    if not args.no_uniform:  # the same lake without activity windows: no locality to find
        flat = make_lake(Path(lakes_dir) / "uniform", lake_args(args.objects, args) | {"window": 0})
        flat_ids = draw_subjects(flat, args.scale_k, args.seed)
        uniform = compare(flat, flat_ids, max(1, args.repeats - 1), scratch)
        uniform["lake"] = {
            **flat.lake.parameters,
            "objects": len(flat.objects),
            "bytes": flat.bytes,
            "index_entries": sum(len(v) for v in flat.index.values()),
        }
        print(f"uniform lake: {_md_k_row(uniform)}", flush=True)
        del flat
        gc.collect()
    eff = rewrite_efficiency(default, ids[: k10["k"]], efficiency_rounds(args), scratch)
    big = anchor(default.dataset, args.anchor_mib, args.seed, max(2, args.repeats - 1), scratch)
    print(f"anchor: {big['vcpu_s_per_gb']}", flush=True)
    sizes = []
    for fraction in args.scale_sizes:
        raw = max(args.window, round(args.objects * fraction))
        if raw == args.objects:
            setup = default
        else:
            setup = make_lake(Path(lakes_dir) / f"x{fraction:g}", lake_args(raw, args))
        sub_ids = draw_subjects(setup, args.scale_k, args.seed)
        row = compare(setup, sub_ids, args.repeats, scratch)
        row["fraction"] = fraction
        row["lake_seconds"] = setup.seconds
        sizes.append(row)
        print(f"size x{fraction:g}: {_md_k_row(row)}", flush=True)
        if setup is not default:
            del setup
            gc.collect()
    facts = machine_facts()
    facts |= {"load_average_1m_at_start": load_start, "matplotlib": _matplotlib_version()}
    return {
        "benchmark": "erasure",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/erasure_bench.py " + " ".join(sys.argv[1:]),
        "machine": facts,
        "runtime_s": time.perf_counter() - started,
        "lake": {
            **default.lake.parameters,
            "zones": {"raw": len(default.lake.files), "lake": len(default.lake.files)},
            "objects": len(default.objects),
            "rows": 2 * default.lake.rows,
            "bytes": default.bytes,
            "index_entries": sum(len(v) for v in default.index.values()),
            "subjects_with_rows": len(default.index),
            "seconds": default.seconds,
        },
        "repeats": args.repeats,
        "by_k": by_k,
        "uniform": uniform,
        "efficiency": eff,
        "anchor": big,
        "by_size": sizes,
    }


def _matplotlib_version() -> str:
    import matplotlib  # noqa: PLC0415 (only for the plots and their version)

    return str(matplotlib.__version__)


# ------------------------------------------------------------------------------ plots


def plots(result: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib  # noqa: PLC0415 (only for the plots)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    machine = result["machine"]
    note = (
        f"{result['date']}, git {machine['git_commit']}, {machine['cores']} cores, "
        f"load {machine['load_average_1m_at_start']}-{machine['load_average_1m_at_end']}"
    )
    written = [_plot_k(plt, result, note, out), _plot_sizes(plt, result, note, out)]
    return written


COLOURS = {"lethe": "tab:blue", "scan": "tab:red"}
LABELS = {"lethe": "Lethe (index)", "scan": "full-scan baseline"}


def _plot_k(plt: Any, result: dict[str, Any], note: str, out: Path) -> Path:
    by_k = result["by_k"]
    ks = [r["k"] for r in by_k]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for m in ("lethe", "scan"):
        med = [r[m]["cpu_s"]["median"] for r in by_k]
        low = [r[m]["cpu_s"]["median"] - r[m]["cpu_s"]["min"] for r in by_k]
        high = [r[m]["cpu_s"]["max"] - r[m]["cpu_s"]["median"] for r in by_k]
        axes[0].errorbar(
            ks, med, yerr=[low, high], marker="o", color=COLOURS[m], label=LABELS[m], capsize=3
        )
        axes[1].plot(
            ks,
            [r[m]["least_bytes_read"] / MIB for r in by_k],
            marker="o",
            color=COLOURS[m],
            label=LABELS[m],
        )
    axes[0].set(
        xscale="log",
        xlabel="subjects erased (K)",
        ylabel="CPU seconds (median, min-max)",
        title="Erasure CPU time against K",
    )
    axes[1].set(
        xscale="log",
        xlabel="subjects erased (K)",
        ylabel="MiB read (scan: footers + subject column)",
        title="Bytes read against K",
    )
    touched = [r["lethe"]["objects_rewritten"] for r in by_k]
    cpu = [r["lethe"]["cpu_s"]["median"] for r in by_k]
    axes[2].plot(touched, cpu, "o", color=COLOURS["lethe"], label="Lethe, one K each")
    if len(touched) > 1:
        slope, intercept = np.polyfit(touched, cpu, 1)
        xs = np.linspace(0, max(touched), 50)
        axes[2].plot(
            xs,
            slope * xs + intercept,
            "--",
            color="grey",
            label=f"fit: {1000 * slope:.1f} ms/object + {intercept:.2f} s",
        )
    axes[2].set(
        xlabel="objects rewritten",
        ylabel="CPU seconds (median)",
        title="Lethe: time against objects touched",
    )
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Erasure against K, default lake ({result['lake']['objects']} objects) — {note}",
        fontsize=9,
    )
    fig.tight_layout()
    path = out / "erasure_k.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_sizes(plt: Any, result: dict[str, Any], note: str, out: Path) -> Path:
    sizes = result["by_size"]
    objects = [r["objects"] for r in sizes]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for m in ("lethe", "scan"):
        axes[0].plot(
            objects,
            [r[m]["cpu_s"]["median"] for r in sizes],
            marker="o",
            color=COLOURS[m],
            label=LABELS[m],
        )
        axes[1].plot(
            objects,
            [r[m]["least_bytes_read"] / MIB for r in sizes],
            marker="o",
            color=COLOURS[m],
            label=LABELS[m],
        )
    k = sizes[0]["k"] if sizes else 10
    axes[0].set(
        xlabel="objects in the lake (raw + lake zone)",
        ylabel="CPU seconds (median)",
        title=f"Erasure CPU time against lake size, K = {k}",
    )
    axes[1].set(
        xlabel="objects in the lake (raw + lake zone)",
        ylabel="MiB read (scan: footers + subject column)",
        title=f"Bytes read against lake size, K = {k}",
    )
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(note, fontsize=9)
    fig.tight_layout()
    path = out / "erasure_lake_size.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------ Markdown


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _range(s: dict[str, float], digits: int = 2) -> str:
    return f"{s['min']:.{digits}f}-{s['max']:.{digits}f}"


def _table(*names: str, left: Sequence[int] = (0,)) -> list[str]:
    """A Markdown table's header: the columns numbered in `left` left-aligned, the others right."""
    marks = ["---" if i in left else "---:" for i in range(len(names))]
    return ["| " + " | ".join(names) + " |", "|" + "|".join(marks) + "|"]


def _md_k_row(r: dict[str, Any]) -> str:
    lethe, scan = r["lethe"], r["scan"]
    return (
        f"| {r['k']} | {lethe['objects_rewritten']} / {scan['objects_rewritten']} | "
        f"{lethe['bytes_read'] / MIB:.2f} / {scan['least_bytes_read'] / MIB:.2f} "
        f"({scan['bytes_read'] / MIB:.2f}) | **{r['ratio_bytes']:.2f}x** "
        f"({r['ratio_bytes_pyarrow']:.2f}x) | "
        f"{lethe['wall_s']['median']:.2f} / {scan['wall_s']['median']:.2f} | "
        f"{r['ratio_wall']['median']:.2f}x ({_range(r['ratio_wall'])}) | "
        f"{lethe['cpu_s']['median']:.2f} / {scan['cpu_s']['median']:.2f} | "
        f"**{r['ratio_cpu']['median']:.2f}x** ({_range(r['ratio_cpu'])}) |"
    )


K_HEAD = _table(
    "K",
    "objects rewritten (Lethe / scan)",
    "MiB read (Lethe / scan: least (pyarrow))",
    "bytes ratio: least (pyarrow)",
    "wall s (Lethe / scan)",
    "wall ratio (min-max)",
    "CPU s (Lethe / scan)",
    "CPU ratio (min-max)",
    left=(),
)


def _md_uniform(result: dict[str, Any]) -> list[str]:
    u = result.get("uniform")
    if not u:
        return []
    lake = u["lake"]
    return [
        f"**The same lake without activity windows** (uniform in time: every subject may appear "
        f"in every raw object; {lake['objects']} objects, {lake['bytes'] / MIB:.1f} MiB, "
        f"{_n(lake['index_entries'])} index entries; K = {u['k']}, subjects drawn the same way; "
        f"{len(u['lethe']['cpu_seconds'])} round(s) after a warm-up)",
        "",
        *K_HEAD,
        _md_k_row(u),
        "",
    ]


def targets(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(item, target, measured, verdict) for the erasure benchmark's targets."""
    rows = []
    k10 = next((r for r in result["by_k"] if r["k"] == 10), None)
    if k10 is not None:
        # the lake of this benchmark (a few hundred objects) cannot show a 20x locality: the
        # K subjects' rows touch a share of its objects that no index lowers further (issue 20,
        # item 7); the targets are judged on the generated 20,000-object lake
        # (bench/locality_bench.py, rows "7 locality"), these rows are its small-lake context
        objects = result["lake"]["objects"]
        rows += [
            (
                f"1 locality, K = 10, windowed lake of {objects} objects: bytes read "
                "(context: judged at 20,000 objects, item 7)",
                "- (>= 20x at 20,000 objects)",
                f"{k10['ratio_bytes']:.2f}x",
                "-",
            ),
            (
                f"1 locality, K = 10, windowed lake of {objects} objects: time (CPU) "
                "(context: judged at 20,000 objects, item 7)",
                "- (>= 10x at 20,000 objects)",
                f"{k10['ratio_cpu']['median']:.2f}x (wall {k10['ratio_wall']['median']:.2f}x)",
                "-",
            ),
        ]
    u = result.get("uniform")
    if u:
        rows.append(
            (
                "1 locality, K = 10, uniform lake (context)",
                "-",
                f"bytes {u['ratio_bytes']:.2f}x, CPU {u['ratio_cpu']['median']:.2f}x",
                "-",
            )
        )
    for zone, e in result["efficiency"].items():
        ratio = e["ratio_cpu"]["median"]
        rows.append(
            (
                f"2 rewrite efficiency, {zone} objects: `erase_rows` / bare pyarrow (CPU)",
                ">= 0.7x",
                f"{ratio:.2f}x",
                "met" if ratio >= 0.7 else "missed",
            )
        )
    for name, x in result["anchor"]["anchors"].items():
        rows.append(
            (
                f"2 vCPU-s per modified object vs Find and Forget ({name})",
                "fewer",
                f"{x['ratio_raw']:.1f}x fewer (raw), {x['ratio_lake']:.1f}x (lake)",
                "met" if min(x["ratio_raw"], x["ratio_lake"]) > 1 else "missed",
            )
        )
    sizes = result["by_size"]
    if len(sizes) >= 2:
        lethe = [r["lethe"]["cpu_s"]["median"] for r in sizes]
        scan = [r["scan"]["cpu_s"]["median"] for r in sizes]
        growth = sizes[-1]["objects"] / sizes[0]["objects"]
        rows.append(
            (
                f"6 scaling: K = 10 erasure as the lake grows {growth:.1f}x",
                "flat",
                f"Lethe CPU {min(lethe):.2f}-{max(lethe):.2f} s; scan "
                f"{scan[0]:.2f} -> {scan[-1]:.2f} s",
                "met" if max(lethe) <= 2 * min(lethe) else "missed",
            )
        )
    return rows


def markdown(result: dict[str, Any]) -> str:
    m, lake = result["machine"], result["lake"]
    lines = [
        f"Run on {result['date']}, git `{m['git_commit']}`, command `{result['command'].strip()}`, "
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}, pyarrow {m['pyarrow']}, "
        f"numpy {m['numpy']}, matplotlib {m['matplotlib']}; load average "
        f"{m['load_average_1m_at_start']} at the start, {m['load_average_1m_at_end']} at the end; "
        f"the whole run took {result['runtime_s'] / 60:.1f} min. "
        "JSON: `bench/results/erasure_latest.json`.",
        "",
        f"Lake: {lake['zones']['raw']} raw Parquet objects of "
        f"{_n(lake['rows_per_object'])} rows and "
        f"their {lake['zones']['lake']} lake-zone files: {lake['objects']} objects, "
        f"{_n(lake['rows'])} rows, {lake['bytes'] / MIB:.1f} MiB; {_n(lake['subjects'])} subjects "
        f"(Zipf {lake['skew']}), each active in {lake.get('window', 0)} consecutive raw objects; "
        f"{_n(lake['index_entries'])} index entries. "
        f"{result['repeats']} rounds after a warm-up, the "
        "order alternating; medians, ratios per round (baseline / Lethe).",
        "",
        "**1. Locality: Lethe against the full-scan baseline** (subjects drawn with the lake's "
        "skew; every run checked: the same objects found, byte-identical outputs, rows removed = "
        "the index's rows)",
        "",
        *K_HEAD,
        *[_md_k_row(r) for r in result["by_k"]],
        "",
        *_md_uniform(result),
    ]
    rounds = [e.get("rounds", result["repeats"]) for e in result["efficiency"].values()]
    rounds = rounds[0] if rounds else result["repeats"]
    lines += [
        "**2. Rewrite efficiency** (the objects the K = 10 erasure rewrites, by zone; one "
        f"process, per CPU second, {rounds} rounds after a warm-up, the order alternating; "
        "`erase_rows` / bare is the ratio of throughputs, median of the rounds' ratios)",
        "",
        *_table(
            "zone",
            "objects",
            "MiB",
            "rewrite",
            "CPU ms per object",
            "MB/s per CPU second",
            "objects/s per CPU second",
            "MB/s (wall)",
            "erase_rows / bare, CPU (min-max)",
            "wall",
            left=(0, 3),
        ),
    ]
    for zone, e in result["efficiency"].items():
        for name, label in (
            ("erase_rows", "`erase_rows` (the erase job)"),
            ("bare_pyarrow", "bare pyarrow read, filter, write"),
        ):
            x = e[name]
            ratio = (
                f"**{e['ratio_cpu']['median']:.2f}x** ({_range(e['ratio_cpu'])}) | "
                f"{e['ratio_wall']['median']:.2f}x"
                if name == "erase_rows"
                else " | "
            )
            lines.append(
                f"| {zone} | {e['objects']} | {e['bytes'] / MIB:.1f} | {label} | "
                f"{x['cpu_ms_per_object']:.1f} | {x['mb_per_cpu_s']:.1f} | "
                f"{x['objects_per_cpu_s']:.1f} | {x['mb_per_wall_s']:.1f} | {ratio} |"
            )
    lines.append("")
    for zone, e in result["efficiency"].items():
        lines.append(
            f"Where `erase_rows` spends its CPU on the {zone} objects "
            "(cProfile, share of its cumulative time): "
            + "; ".join(
                f"{k} {100 * v:.0f} %" for k, v in e["profile"].items() if k != "erase_rows"
            )
            + "."
        )
        lines.append("")
    a = result["anchor"]
    per_gb = a["vcpu_s_per_gb"]
    lines += [
        f"**Against Find and Forget's cost overview**: one object of {_n(a['rows'])} rows "
        f"({a['row_groups']} row groups; raw {a['object_bytes']['raw'] / MIB:.1f} MiB, "
        f"its lake-zone file {a['object_bytes']['lake'] / MIB:.1f} MiB), 10 subjects' rows "
        f"erased. vCPU-s per GB (CPU, median of {a['rounds']} round(s) after a warm-up): "
        "`erase_rows` raw "
        f"{per_gb['erase_rows_raw']:.1f}, "
        f"lake {per_gb['erase_rows_lake']:.1f}; bare rewrite raw {per_gb['bare_pyarrow_raw']:.1f}, "
        f"lake {per_gb['bare_pyarrow_lake']:.1f}.",
        "",
        *_table(
            "Find and Forget scenario",
            "vCPU-s per modified object (4-vCPU tasks)",
            "object size, at most",
            "Lethe vCPU-s, that size, raw",
            "ratio",
            "Lethe vCPU-s, that size, lake",
            "ratio",
        ),
        *[
            f"| {name} | {x['vcpu_s_per_object']:.0f} | {x['object_bytes_at_most'] / 1e9:.2f} GB | "
            f"{x['lethe_vcpu_s_same_size_raw']:.1f} | **{x['ratio_raw']:.1f}x** | "
            f"{x['lethe_vcpu_s_same_size_lake']:.1f} | **{x['ratio_lake']:.1f}x** |"
            for name, x in a["anchors"].items()
        ],
        "",
        f"**3. Scaling with lake size** (K = {result['by_size'][0]['k']}, subjects in "
        "proportion to the objects, the same window)",
        "",
        *_table(
            "lake",
            "objects",
            "MiB",
            "objects rewritten (Lethe / scan)",
            "MiB read (Lethe / scan, least)",
            "CPU s Lethe (min-max)",
            "CPU s scan (min-max)",
            "CPU ratio",
        ),
        *[
            f"| x{r['fraction']:g} | {r['objects']} | {r['lake_bytes'] / MIB:.1f} | "
            f"{r['lethe']['objects_rewritten']} / {r['scan']['objects_rewritten']} | "
            f"{r['lethe']['bytes_read'] / MIB:.2f} / {r['scan']['least_bytes_read'] / MIB:.2f} | "
            f"{r['lethe']['cpu_s']['median']:.2f} ({_range(r['lethe']['cpu_s'])}) | "
            f"{r['scan']['cpu_s']['median']:.2f} ({_range(r['scan']['cpu_s'])}) | "
            f"{r['ratio_cpu']['median']:.2f}x |"
            for r in result["by_size"]
        ],
        "",
        "![Erasure against K](benchmarks/erasure_k.png)",
        "",
        "![Erasure against lake size](benchmarks/erasure_lake_size.png)",
    ]
    return "\n".join(lines) + "\n"


def update_docs(text: str, doc: Path) -> bool:
    """Replace the erasure block of `doc` (bench/report.py regenerates every block)."""
    body = doc.read_text(encoding="utf-8")
    try:
        doc.write_text(report.replace_section(body, "erasure-bench", OUT_NAME, text), "utf-8")
    except report.MarkerError as exc:
        print(f"{doc}: {exc}: not updated", file=sys.stderr)
        return False
    return True


# ------------------------------------------------------------------------------ CLI


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--objects", type=int, default=250, help="raw objects (the lake zone doubles them)"
    )
    parser.add_argument("--rows-per-object", type=int, default=4000)
    parser.add_argument("--subjects", type=int, default=50_000, help="subjects at --objects")
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument(
        "--window", type=int, default=4, help="consecutive raw objects a subject is active in"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ks", type=_ints, default=[1, 3, 10, 30, 100], help="subjects per erasure"
    )
    parser.add_argument(
        "--scale-sizes",
        type=_floats,
        default=[0.25, 0.5, 1.0, 2.0],
        help="lake sizes for the scaling curve, fractions of --objects",
    )
    parser.add_argument("--scale-k", type=int, default=10)
    parser.add_argument(
        "--no-uniform",
        action="store_true",
        help="skip the K = --scale-k erasure on the same lake without activity windows",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up")
    parser.add_argument("--anchor-mib", type=int, default=32, help="size of the large object")
    parser.add_argument("--lake", type=Path, help="keep the generated lakes here and reuse them")
    parser.add_argument("--out-json", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--plots", type=Path, default=PLOTS, help="directory of the PNG plots")
    parser.add_argument(
        "--update-docs",
        action="store_true",
        help="replace the generated block of docs/BENCHMARKS.md",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also a 4x lake in the scaling curve and a 256 MiB large object",
    )
    parser.add_argument("--from-json", type=Path, help="render this results file; run nothing")
    parser.add_argument(
        "--efficiency-only",
        action="store_true",
        help="part 2 alone (the rewrite efficiency at K = --scale-k, with its profile) on the "
        "default lake; writes --out-json (default bench/results/erasure_efficiency.json), no "
        "plots, no docs",
    )
    args = parser.parse_args(argv)
    if args.efficiency_only and args.out_json == DEFAULT_OUT:
        args.out_json = BENCH_DIR / "results" / "erasure_efficiency.json"
    if args.full:
        args.scale_sizes = sorted({*args.scale_sizes, 4.0})
        args.anchor_mib = max(args.anchor_mib, 256)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.efficiency_only:
        with tempfile.TemporaryDirectory(prefix="lethe-erasure-bench-") as scratch:
            result = run_efficiency(args, Path(scratch))
        result["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(result, indent=2, default=str) + "\n", "utf-8")
        for zone, e in result["efficiency"].items():
            print(f"profile, {zone}: {json.dumps(e['profile'])}")
        return 0
    if args.from_json:  # render a run again (plots, tables, the docs block), without measuring
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
        args.out_json = args.from_json
    else:
        with tempfile.TemporaryDirectory(prefix="lethe-erasure-bench-") as scratch:
            result = run(args, Path(scratch))
    written = plots(result, args.plots) if args.plots else []
    result["plots"] = [str(p.relative_to(REPO) if p.is_relative_to(REPO) else p) for p in written]
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    text = markdown(result)
    print(text)
    if args.update_docs:
        update_docs(text, DOCS / "BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
