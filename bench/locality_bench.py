"""Erasure locality at lake scale: K = 10 subjects erased with the subject index and with a full
scan, on a lake grown to 20,000 objects and on the 500-object lake, in the same run
(issue 20, item 7; docs/BENCHMARKS.md, "Erasure locality at lake scale").

    python bench/locality_bench.py                          # 20,000 objects and 500 (about 10 min)
    python bench/locality_bench.py --lake /tmp/locality     # keep the lakes there and reuse them
    python bench/locality_bench.py --objects 4000,20000     # several sizes
    python bench/locality_bench.py --help                   # every flag

Why. The erasure benchmark's lake (`bench/erasure_bench.py`: 250 raw objects and their 250
lake files) cannot show the locality targets: both sides rewrite the same objects, the
baseline's extra work is its Find over every object of the lake, so the ratio is
1 + scan / rewrite, and with 500 objects the scan is too small for 20x by construction. Here
the lake is grown, generated rather than extrapolated, to the size where the comparison means
something.

The lakes. `generate_lake.generate(..., window=4, lake_zone=True)`: raw Parquet objects of
4,000 rows (the erasure benchmark's shape; every byte of its 500-object lake is the same here),
each raw object's lake file written in the same pass, 200 subjects per raw object (new users
arrive as the lake grows, so a subject's footprint, 4 raw objects and their 4 lake files, does
not grow with the lake), Zipf skew 1. `--objects` counts both zones: 20,000 objects are 10,000
raw objects and their 10,000 lake files (80 million rows, about 2 GiB on disk).

The index: built as the index job builds it (`lethe_shared.index.arrow_entries.entry_batches`
over groups of 64 objects, lake files through `lake_object_subjects`, the erasure benchmark's
`build_index` path), every entry of the lake, kept as sorted arrays (`LakeIndex`: 32-byte
digests, object numbers, rows; about 50 bytes an entry where the erasure benchmark's dict of
dicts takes several hundred) so that 11 million entries fit in well under a GiB. A lookup is a
binary search per subject, inside Lethe's timed erasure: it stands in for the DynamoDB Query per
subject, which is not modelled (tens of milliseconds each in AWS, in parallel).

The measurement, per lake: `erasure_bench.compare` at K = 10 (subjects drawn with the lake's
skew): Lethe (the K hashes, the index's objects, each downloaded and rewritten by the erase
job's `erase_rows`) against the full scan (the subject column of every object read and matched,
then each matching object downloaded and rewritten by the same `erase_rows`); one warm-up, then
`--repeats` rounds, the order alternating; each run checked (the same objects, byte-identical
outputs, the rows removed = the index's rows). Ratios (baseline / Lethe) of bytes read (the
least a columnar reader reads, and what pyarrow read), objects opened (Lethe: the objects it
downloads; the baseline: every object it scans plus the ones it downloads) and wall and CPU
time. The load average is sampled every few seconds through the run, by phase.

Writes bench/results/locality_latest.json; bench/report.py renders its section of
docs/BENCHMARKS.md (markers `locality-bench`) and its rows of the Targets table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import erasure_bench as eb
import generate_lake
import numpy as np
from erasure_bench import MIB, Obj, Setup
from index_bench import machine_facts

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import entry_batches

BENCH_DIR = Path(__file__).resolve().parent
OUT_NAME = "locality_latest.json"
DEFAULT_OUT = BENCH_DIR / "results" / OUT_NAME
DEFAULT_OBJECTS = [20_000]
COMPARE_OBJECTS = 500  # the erasure benchmark's lake
SUBJECTS_PER_RAW_OBJECT = 200  # the erasure benchmark's 50,000 subjects over 250 raw objects
DIGEST = 32  # bytes of a subject hash (HMAC-SHA256)
TARGET_BYTES = 20.0  # issue 12, item 1: at K = 10, 20x fewer bytes read
TARGET_TIME = 10.0  # and 10x less time


# ----------------------------------------------------------------------------- the index


class LakeIndex(Mapping[str, dict[int, int]]):
    """The subject index's entries of a lake, subject hash -> {object number: rows}, as arrays
    sorted by digest: what `erasure_bench.build_index` holds as a dict of dicts, in about 50
    bytes an entry. `index[h]` is a binary search; a hash with no entry is a KeyError."""

    def __init__(self, digests: np.ndarray, objects: np.ndarray, rows: np.ndarray) -> None:
        if digests.ndim != 2 or digests.shape[1] != DIGEST or digests.dtype != np.uint8:
            raise ValueError("digests: one row of 32 bytes per entry")
        if not len(digests) == len(objects) == len(rows):
            raise ValueError("one object number and one row count per entry")
        words = np.ascontiguousarray(digests).view(">u8")  # 4 big-endian words per digest
        order = np.lexsort(tuple(words[:, i] for i in reversed(range(words.shape[1]))))
        self._digests = np.ascontiguousarray(digests[order])
        # native byte order: a search in a big-endian array swaps the whole array each call
        self._prefixes = words[order, 0].astype(np.uint64)
        self._objects = np.asarray(objects, np.int32)[order]
        self._rows = np.asarray(rows, np.int32)[order]
        different = np.any(self._digests[1:] != self._digests[:-1], axis=1)
        self._starts = np.flatnonzero(np.concatenate(([len(order) > 0], different)))

    @property
    def entries(self) -> int:
        return len(self._objects)

    @property
    def nbytes(self) -> int:
        arrays = (self._digests, self._prefixes, self._objects, self._rows, self._starts)
        return sum(a.nbytes for a in arrays)

    def __getitem__(self, subject_hash: str) -> dict[int, int]:
        try:
            wanted = bytes.fromhex(subject_hash)
        except (TypeError, ValueError):
            raise KeyError(subject_hash) from None
        if len(wanted) != DIGEST:
            raise KeyError(subject_hash)
        prefix = np.uint64(int.from_bytes(wanted[:8], "big"))
        low = int(np.searchsorted(self._prefixes, prefix, side="left"))
        high = int(np.searchsorted(self._prefixes, prefix, side="right"))
        found = {
            int(self._objects[i]): int(self._rows[i])
            for i in range(low, high)
            if self._digests[i].tobytes() == wanted
        }
        if not found:
            raise KeyError(subject_hash)
        return found

    def __iter__(self) -> Iterator[str]:
        for start in self._starts:
            yield self._digests[start].tobytes().hex()

    def __len__(self) -> int:
        return len(self._starts)


def build_index(dataset: Dataset, objects: Sequence[Obj]) -> LakeIndex:
    """Every entry of the lake, as `erasure_bench.build_index` computes them (`entry_batches`
    per group of objects, as the index job), kept as a `LakeIndex`."""
    digests: list[np.ndarray] = []
    numbers_of: list[np.ndarray] = []
    rows_of: list[np.ndarray] = []
    for start in range(0, len(objects), eb.INDEX_GROUP):
        numbers = range(start, min(start + eb.INDEX_GROUP, len(objects)))
        found = [eb._subjects_of(objects[i], dataset) for i in numbers]
        for number, batch in zip(numbers, entry_batches(found, key=eb.KEY), strict=True):
            count = len(batch.subject_hashes)
            if not count:
                continue
            raw = bytes.fromhex("".join(batch.subject_hashes))
            digests.append(np.frombuffer(raw, np.uint8).reshape(count, DIGEST))
            numbers_of.append(np.full(count, number, np.int32))
            rows_of.append(np.diff(np.asarray(batch.ends, np.int64), prepend=0).astype(np.int32))
    if not digests:
        empty = np.zeros(0, np.int32)
        return LakeIndex(np.zeros((0, DIGEST), np.uint8), empty, empty)
    return LakeIndex(np.concatenate(digests), np.concatenate(numbers_of), np.concatenate(rows_of))


# ------------------------------------------------------------------------------ the lakes


def lake_shape(objects: int, args: argparse.Namespace) -> dict[str, Any]:
    """`generate_lake.generate`'s arguments for a lake of `objects` objects (both zones)."""
    if objects < 2 or objects % 2:
        raise ValueError("a lake of an even number of objects: raw objects and their lake files")
    raw = objects // 2
    return {
        "objects": raw,
        "rows_per_object": args.rows_per_object,
        "subjects": max(1, args.subjects_per_raw_object * raw),
        "skew": args.skew,
        "seed": args.seed,
        "window": args.window,
        "lake_zone": True,
    }


def make_setup(root: Path, shape: dict[str, Any]) -> Setup:
    """The lake (generated in one pass with its lake zone, or reused when `root` holds one of
    that shape), its objects (raw, then lake files) and its index."""
    started = time.perf_counter()
    manifest = root / "lake.json"
    reuse = manifest.exists() and all(
        json.loads(manifest.read_text())["parameters"].get(k, 0) == v
        for k, v in shape.items()
        if k != "lake_zone"
    )
    if reuse:
        lake = generate_lake.load(root)
        zone = generate_lake.write_lake_zone(lake)  # writes only lake files that are missing
    else:
        lake = generate_lake.generate(root, **shape)
        zone = generate_lake.lake_zone_paths(lake)
    generated = time.perf_counter() - started
    objects = [
        Obj(Zone.RAW, p.relative_to(root).as_posix(), p, p.stat().st_size) for p in lake.files
    ]
    base = root / generate_lake.LAKE_ZONE_DIR
    objects += [Obj(Zone.LAKE, p.relative_to(base).as_posix(), p, p.stat().st_size) for p in zone]
    dataset = parse_dataset(lake.dataset)
    started = time.perf_counter()
    index = build_index(dataset, objects)
    seconds = {
        "generate" if not reuse else "load": generated,
        "index_build": time.perf_counter() - started,
    }
    return Setup(lake, dataset, objects, index, seconds)


# --------------------------------------------------------------------------- load average


class LoadSampler:
    """The 1-minute load average every `every` seconds on a thread, labelled by phase."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.phase = "start"
        self.samples: list[tuple[float, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.perf_counter()

    def _sample(self) -> None:
        self.samples.append(
            (round(time.perf_counter() - self._started, 1), self.phase, os.getloadavg()[0])
        )

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> LoadSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.phase = "end"
        self._sample()

    def summary(self, phase: str | None = None) -> dict[str, float] | None:
        values = [v for _, p, v in self.samples if phase is None or p == phase]
        if not values:
            return None
        return {
            "min": round(min(values), 2),
            "median": round(statistics.median(values), 2),
            "max": round(max(values), 2),
            "samples": len(values),
        }


# ------------------------------------------------------------------------------ the run


def measure(setup: Setup, k: int, repeats: int, seed: int, scratch: Path) -> dict[str, Any]:
    """`erasure_bench.compare` at K subjects, with objects opened and the lake's figures."""
    ids = eb.draw_subjects(setup, k, seed)
    row = eb.compare(setup, ids, repeats, scratch)
    lethe_opened = row["lethe"]["objects_touched"]
    scan_opened = row["scan"]["objects_scanned"] + row["scan"]["objects_touched"]
    index = setup.index
    row |= {
        "objects_opened": {"lethe": lethe_opened, "scan": scan_opened},
        "ratio_objects_opened": scan_opened / max(lethe_opened, 1),
        "lake": {
            **{k: v for k, v in setup.lake.parameters.items() if k != "lake_zone"},
            "zones": {"raw": len(setup.lake.files), "lake": len(setup.lake.files)},
            "objects": len(setup.objects),
            "rows": 2 * setup.lake.rows,
            "bytes": setup.bytes,
            "index_entries": getattr(index, "entries", sum(len(v) for v in index.values())),
            "subjects_with_rows": len(index),
            "index_memory_bytes": getattr(index, "nbytes", None),
            "seconds": setup.seconds,
        },
    }
    return row


def sizes_of(args: argparse.Namespace) -> list[int]:
    compare = [] if args.compare_objects <= 0 else [args.compare_objects]
    return sorted({*compare, *args.objects})


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    started_utc = dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    scratch.mkdir(parents=True, exist_ok=True)
    lakes_dir = Path(args.lake) if args.lake else scratch / "lakes"
    rows = []
    with LoadSampler(args.load_every) as load:
        for objects in sizes_of(args):
            load.phase = f"lake {objects}"
            phase_started = time.perf_counter()
            setup = make_setup(lakes_dir / f"lake-{objects}", lake_shape(objects, args))
            print(
                f"lake of {len(setup.objects):,} objects ({setup.bytes / MIB:,.0f} MiB): "
                + ", ".join(f"{k} {v:.1f} s" for k, v in setup.seconds.items()),
                flush=True,
            )
            load.phase = f"measure {objects}"
            measured = time.perf_counter()
            row = measure(setup, args.k, args.repeats, args.seed, scratch)
            row["seconds"] = {
                "lake_and_index": measured - phase_started,
                "measure": time.perf_counter() - measured,
            }
            row["load_average"] = {
                "lake_and_index": load.summary(f"lake {objects}"),
                "measure": load.summary(f"measure {objects}"),
            }
            rows.append(row)
            print(_md_row(row), flush=True)
            del setup  # its index: up to a GiB at 20,000 objects
            gc.collect()
            if args.lake is None:  # a temporary lake: free its disk for the next
                shutil.rmtree(lakes_dir / f"lake-{objects}", ignore_errors=True)
    facts = machine_facts()
    return {
        "benchmark": "erasure-locality",
        "date": started_utc.strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/locality_bench.py " + " ".join(sys.argv[1:]),
        "machine": facts | {"load_average_1m_at_start": load.samples[0][2]},
        "runtime_s": time.perf_counter() - started,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load_average": load.summary(),
        "load_samples": load.samples,
        "k": args.k,
        "repeats": args.repeats,
        "by_size": rows,
    }


# ----------------------------------------------------------------------- rendering


def _load(s: Mapping[str, float] | None) -> str:
    return "?" if not s else f"{s['min']:.1f}-{s['max']:.1f} (median {s['median']:.1f})"


def _md_row(r: Mapping[str, Any]) -> str:
    lethe, scan, lake = r["lethe"], r["scan"], r["lake"]
    opened = r["objects_opened"]
    return (
        f"| {lake['objects']:,} | {lake['bytes'] / MIB:,.0f} | {lake['index_entries']:,} | "
        f"{opened['lethe']:,} / {opened['scan']:,} | **{r['ratio_objects_opened']:.1f}x** | "
        f"{lethe['bytes_read'] / MIB:.2f} / {scan['least_bytes_read'] / MIB:,.2f} "
        f"({scan['bytes_read'] / MIB:,.2f}) | **{r['ratio_bytes']:.1f}x** "
        f"({r['ratio_bytes_pyarrow']:.1f}x) | "
        f"{lethe['wall_s']['median']:.2f} / {scan['wall_s']['median']:.2f} | "
        f"**{r['ratio_wall']['median']:.1f}x** ({eb._range(r['ratio_wall'], 1)}) | "
        f"{lethe['cpu_s']['median']:.2f} / {scan['cpu_s']['median']:.2f} | "
        f"**{r['ratio_cpu']['median']:.1f}x** ({eb._range(r['ratio_cpu'], 1)}) |"
    )


HEAD = eb._table(
    "objects",
    "MiB",
    "index entries",
    "objects opened (Lethe / scan)",
    "ratio",
    "MiB read (Lethe / scan: least (pyarrow))",
    "bytes ratio: least (pyarrow)",
    "wall s (Lethe / scan)",
    "wall ratio (min-max)",
    "CPU s (Lethe / scan)",
    "CPU ratio (min-max)",
    left=(),
)


def markdown(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    rows = result["by_size"]
    lines = [
        f"Run of {result['date']}, git `{m['git_commit']}`, command "
        f"`{result['command'].strip()}`, {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, numpy {m['numpy']}; load average (1 min) "
        f"{_load(result['load_average'])} over the run, sampled every few seconds; the whole "
        f"run took {result['runtime_s'] / 60:.1f} min, peak RSS "
        f"{result['peak_rss_mib']:,.0f} MiB. JSON: `bench/results/{OUT_NAME}`.",
        "",
        f"K = {result['k']} subjects drawn with each lake's skew; {result['repeats']} rounds "
        "after a warm-up, the order alternating; medians, ratios per round (baseline / Lethe). "
        "Every run checked: the same objects found, byte-identical outputs, rows removed = the "
        "index's rows.",
        "",
        *HEAD,
        *[_md_row(r) for r in rows],
        "",
        *eb._table(
            "objects",
            "raw objects x rows",
            "subjects",
            "objects rewritten",
            "rows removed",
            "lake (generate or load), s",
            "index build, s",
            "measurement, s",
            "load average: lake and index",
            "load average: measurement",
        ),
    ]
    for r in rows:
        lake, s = r["lake"], r["lake"]["seconds"]
        made = s.get("generate", s.get("load", 0.0))
        how = "generated" if "generate" in s else "loaded"
        lines.append(
            f"| {lake['objects']:,} | {lake['zones']['raw']:,} x {lake['rows_per_object']:,} | "
            f"{lake['subjects']:,} | {r['lethe']['objects_rewritten']} | "
            f"{r['checks']['rows_removed']:,} | {made:.0f} ({how}) | {s['index_build']:.0f} | "
            f"{r['seconds']['measure']:.0f} | {_load(r['load_average']['lake_and_index'])} | "
            f"{_load(r['load_average']['measure'])} |"
        )
    return "\n".join(lines) + "\n"


def targets(result: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(item, target, measured, verdict) at the largest lake measured, with the smallest lake
    of the same run beside it."""
    rows = result["by_size"]
    if not rows:
        return []
    big, small = rows[-1], rows[0]
    n = f"{big['lake']['objects']:,}"
    k = result["k"]

    def beside(text: str) -> str:
        if small is big:
            return ""
        return f" (at {small['lake']['objects']:,} objects, same run: {text})"

    cpu, wall = big["ratio_cpu"]["median"], big["ratio_wall"]["median"]
    return [
        (
            f"7 locality, K = {k}, lake of {n} objects (generated): bytes read",
            f">= {TARGET_BYTES:g}x fewer",
            f"{big['ratio_bytes']:.1f}x" + beside(f"{small['ratio_bytes']:.2f}x"),
            "met" if big["ratio_bytes"] >= TARGET_BYTES else "missed",
        ),
        (
            f"7 locality, K = {k}, lake of {n} objects (generated): time (CPU)",
            f">= {TARGET_TIME:g}x less",
            f"{cpu:.1f}x (wall {wall:.1f}x)"
            + beside(
                f"{small['ratio_cpu']['median']:.2f}x, wall {small['ratio_wall']['median']:.2f}x"
            ),
            "met" if cpu >= TARGET_TIME else "missed",
        ),
        (
            f"7 locality, K = {k}, lake of {n} objects (generated): objects opened",
            "-",
            f"{big['ratio_objects_opened']:.0f}x ({big['objects_opened']['lethe']:,} / "
            f"{big['objects_opened']['scan']:,})" + beside(f"{small['ratio_objects_opened']:.1f}x"),
            "-",
        ),
    ]


# ------------------------------------------------------------------------------ CLI


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace("_", "").split(",") if x]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--objects",
        type=_ints,
        default=DEFAULT_OBJECTS,
        help="lake sizes in objects, both zones (20000: 10,000 raw objects and their lake files)",
    )
    parser.add_argument(
        "--compare-objects",
        type=int,
        default=COMPARE_OBJECTS,
        help="the lake measured beside it in the same run (0: none)",
    )
    parser.add_argument("--rows-per-object", type=int, default=4000)
    parser.add_argument("--subjects-per-raw-object", type=int, default=SUBJECTS_PER_RAW_OBJECT)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument(
        "--window", type=int, default=4, help="consecutive raw objects a subject is active in"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--k", type=int, default=10, help="subjects per erasure")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up")
    parser.add_argument("--lake", type=Path, help="keep the generated lakes here and reuse them")
    parser.add_argument("--load-every", type=float, default=5.0, help="load sampling, seconds")
    parser.add_argument("--out-json", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lethe-locality-bench-") as scratch:
        result = run(args, Path(scratch))
    result["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(markdown(result))
    for row in targets(result):
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
