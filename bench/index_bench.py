"""Subject index benchmark: build speed, DynamoDB items and bytes, index writes per erasure.

    python bench/index_bench.py                        # default: 200 objects x 2,000 rows
    python bench/index_bench.py --objects 1000 --rows-per-object 10000 --spark

One run measures, on a lake from bench/generate_lake.py (generated in a temporary directory,
or `--lake DIR` to keep and reuse one):

1. index build: the objects grouped as the index job groups them into Spark tasks
   (`lethe_jobs.tasks.task_groups` on `JOB_CORES` = 2 cores), every object read with pyarrow one
   at a time and its subjects kept (`object_subjects`), then the entries of the group's objects
   computed together (`entry_batches`, the entries as columns, what the index job writes),
   against a baseline in the same run: the same reads touching the subject column(s) with
   `to_pylist()` and no hashing. Also timed on the same reads: `entry_batch` per object (what
   the indexer Lambda and ingestion compute, one object at a time); `entry_batches` then
   `to_items()` (the DynamoDB items a writer sends); `entries_from_table` (the entries as
   IndexEntry models: this benchmark's "index" before the columnar path), alone and then with
   `IndexEntry.to_item()` per entry (the writer's path before); and the per-row implementation
   `entries_from_table` had before its Arrow rewrite (`reference_entries`, kept verbatim in
   bench/reference_index.py). Warm-up once, then
   `--repeats` rounds, the order rotating; median and range of wall time and of the process's
   CPU time (steadier on a shared machine). The ratio (time / baseline time) is what indexing
   costs on top of a read.
2. DynamoDB items and bytes per million rows: one item per entry (distinct (subject, object)
   pairs, checked against a count made without hashing; every entry and every item checked
   equal to the previous implementation's, every batch of a group equal to `entry_batch` of
   its object alone, and their SHA-256 digests reported), sized with
   DynamoDB's rules (dynamo_size.py), against a row-level index (one item per row, as the
   seed's row-number index), both minimal and with the same attributes as an IndexEntry.
3. index writes per erased subject, for subjects drawn with the lake's skew: what the design
   prescribes (delete the subject's own items), against re-indexing every rewritten object
   with `DynamoSubjectIndex.replace_object` (run on a counting fake table for a few subjects)
   and against a row-level index.
4. with `--spark`: the same build as a local[2] Spark job, one task per object (as the index
   job ran before `lethe_jobs.tasks`) and grouped into a few tasks; session start-up and the
   first (cold) job reported apart.

Results: JSON (`--out-json`, default bench/results/latest.json) and Markdown on stdout.
Numbers are only comparable within one run (ratios), not across machines.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import functools
import gc
import hashlib
import importlib.util
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dynamo_size
import generate_lake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic
import pyspark
from pyspark.sql import SparkSession
from reference_index import reference_entries

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import (
    ObjectRef,
    ObjectSubjects,
    entries_from_table,
    entry_batch,
    entry_batches,
    object_subjects,
)
from lethe_shared.index.subject_index import DynamoSubjectIndex, EntryBatch, IndexEntry
from lethe_shared.subject_hashing.keys import subject_hash

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
KEY = b"lethe-benchmark-subject-hash-key-0123456789"  # any key of >= 32 bytes
BUCKET = "lethe-prod-raw-123456789012-us-east-1"  # the template's naming, a 12-digit account
MIB = 1024 * 1024
GIB = 1024 * MIB
# The index job groups objects into Spark tasks with `lethe_jobs.tasks.task_groups`, at least
# one task per core (`min_tasks`): the build groups the lake's objects as a job on 2 cores does
# (local[2], the Spark section's master), and computes each group's entries together.
JOB_CORES = 2


def _job_tasks() -> Any:
    """`lethe_jobs.tasks` (spark_jobs/ is not an installed package; the module is plain Python)."""
    path = REPO / "spark_jobs" / "lethe_jobs" / "tasks.py"
    spec = importlib.util.spec_from_file_location("lethe_job_tasks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------- objects


def object_ref(lake: generate_lake.Lake, path: Path, version: int = 1) -> ObjectRef:
    """The object as the index names it, with an S3 version id and ETag of realistic length."""
    key = path.relative_to(lake.root).as_posix()
    digest = hashlib.sha256(f"{key}#{version}".encode()).digest()
    version_id = base64.b64encode(digest, altchars=b"._").decode()[:32]  # S3: 32 characters
    etag = f'"{hashlib.md5(digest).hexdigest()}"'  # the shape of an ETag
    return ObjectRef(
        f"s3://{BUCKET}/{key}", zone=Zone.RAW, format=lake.format, version_id=version_id, etag=etag
    )


@dataclass
class Objects:
    lake: generate_lake.Lake
    dataset: Dataset
    refs: list[ObjectRef]
    # The objects as the index job groups them into Spark tasks (`JOB_CORES`): the job's
    # driver computes the groups before the tasks run, so the build does not time them.
    groups: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        sizes = [path.stat().st_size for path in self.lake.files]
        self.groups = _job_tasks().task_groups(sizes, min_tasks=JOB_CORES)

    def read(self, index: int) -> pa.Table:
        return generate_lake.read_object(
            self.lake.files[index], self.lake.format, self.lake.model.composite
        )

    def index(
        self,
        index: int,
        table: pa.Table,
        ref: ObjectRef | None = None,
        indexer: Callable[..., Any] = entries_from_table,
    ) -> Any:
        coordinates = generate_lake.coordinates(self.lake.format, table.num_rows)
        return indexer(
            table, self.dataset, ref or self.refs[index], key=KEY, coordinates=coordinates
        )

    def batch(self, index: int, table: pa.Table, ref: ObjectRef | None = None) -> EntryBatch:
        """The object's entries as columns (`entry_batch`), as the index writers compute them."""
        batch: EntryBatch = self.index(index, table, ref, indexer=entry_batch)
        return batch

    def subjects(self, index: int, table: pa.Table) -> ObjectSubjects:
        """The object's subjects, to be hashed with its group's (`object_subjects`)."""
        found: ObjectSubjects = self.index(index, table, indexer=object_subjects)
        return found

    def grouped_batches(self) -> Iterator[tuple[int, EntryBatch]]:
        """What the index job does per Spark task before writing: each object of the group read
        and its subjects kept (not the table), then the group's entries as columns
        (`entry_batches`), one batch per object, with the number of rows read."""
        for group in self.groups:
            found, rows = [], 0
            for i in group:
                table = self.read(i)
                found.append(self.subjects(i, table))
                rows += table.num_rows
            batches = entry_batches(found, key=KEY)
            yield rows, batches[0]
            yield from ((0, b) for b in batches[1:])


def read_and_touch(objects: Objects) -> int:
    """Baseline: read every object and materialise its subject column(s) as Python values."""
    rows = 0
    for i in range(len(objects.refs)):
        table = objects.read(i)
        for column in objects.dataset.subject_columns:
            table.column(column).to_pylist()
        rows += table.num_rows
    return rows


def read_and_index(objects: Objects) -> int:
    """What the index job does before writing: the objects of each task read, then the entries
    of the task's objects as columns (`Objects.grouped_batches`)."""
    return sum(rows for rows, _ in objects.grouped_batches())


def read_and_index_each(objects: Objects) -> int:
    """What the indexer Lambda and ingestion do per object: read it, then its entries as
    columns (`entry_batch`), one object at a time."""
    rows = 0
    for i in range(len(objects.refs)):
        table = objects.read(i)
        objects.batch(i, table)
        rows += table.num_rows
    return rows


def read_and_items(objects: Objects) -> int:
    """The index job's path up to the DynamoDB items the writer sends (`EntryBatch.to_items`)."""
    rows = 0
    for read, batch in objects.grouped_batches():
        batch.to_items()
        rows += read
    return rows


def read_and_models(objects: Objects) -> int:
    """The entries as IndexEntry models (`entries_from_table`): what "index" timed before the
    columnar path."""
    rows = 0
    for i in range(len(objects.refs)):
        table = objects.read(i)
        objects.index(i, table)
        rows += table.num_rows
    return rows


def read_and_model_items(objects: Objects) -> int:
    """The writer's path before the columnar one: models, then `IndexEntry.to_item()` each."""
    rows = 0
    for i in range(len(objects.refs)):
        table = objects.read(i)
        for entry in objects.index(i, table):
            entry.to_item()
        rows += table.num_rows
    return rows


def read_and_reference(objects: Objects) -> int:
    """The same with the implementation before the Arrow rewrite."""
    rows = 0
    for i in range(len(objects.refs)):
        table = objects.read(i)
        objects.index(i, table, indexer=reference_entries)
        rows += table.num_rows
    return rows


# ------------------------------------------------------------------------------ statistics


def timed(run: Callable[[], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, rows). CPU time counts every thread of the
    process (Arrow's readers use a pool) and is much less sensitive than wall time to other
    processes competing for the cores."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    rows = run()
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "spread_pct": 100 * (ordered[-1] - ordered[0]) / statistics.median(ordered),
    }


def percentiles(values: Sequence[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(array.mean()),
        "p50": float(np.percentile(array, 50)),
        "p99": float(np.percentile(array, 99)),
        "max": float(array.max()),
    }


# ------------------------------------------------------------------------- 1. index build


def _side(wall: list[float], cpu: list[float], rows: int) -> dict[str, Any]:
    stats, cpu_stats = summary(wall), summary(cpu)
    return {
        "seconds": wall,
        **{f"{k}_s": v for k, v in stats.items() if k != "spread_pct"},
        "spread_pct": stats["spread_pct"],
        "rows_per_s_median": rows / stats["median"],
        "cpu_seconds": cpu,
        **{f"cpu_{k}_s": v for k, v in cpu_stats.items() if k != "spread_pct"},
        "cpu_rows_per_s_median": rows / cpu_stats["median"],
    }


SIDES = ("base", "index", "each", "items", "models", "model_items", "reference")
RUNS: dict[str, Callable[[Objects], int]] = {
    "base": read_and_touch,
    "index": read_and_index,
    "each": read_and_index_each,
    "items": read_and_items,
    "models": read_and_models,
    "model_items": read_and_model_items,
    "reference": read_and_reference,
}
# JSON keys of each side (those of the first three sides as before the columnar path)
SIDE_KEYS = {
    "base": "baseline_read_touch",
    "index": "index",
    "each": "index_per_object",
    "items": "index_items",
    "models": "index_models",
    "model_items": "index_models_to_item",
    "reference": "reference",
}


def measure_build(objects: Objects, repeats: int) -> dict[str, Any]:
    for run in RUNS.values():  # warm-up: page cache, imports, allocator
        run(objects)
    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    rows = 0
    for repeat in range(repeats):  # rotate the order so that drift hits every side
        shift = repeat % len(SIDES)
        order = SIDES[shift:] + SIDES[:shift]
        for side in order if repeat % 2 == 0 else reversed(order):
            elapsed, used, rows = timed(functools.partial(RUNS[side], objects))
            wall[side].append(elapsed)
            cpu[side].append(used)

    def ratios(times: dict[str, list[float]], side: str) -> dict[str, float]:
        return summary([i / b for i, b in zip(times[side], times["base"], strict=True)])

    sides = {side: _side(wall[side], cpu[side], rows) for side in SIDES}
    base = sides["base"]
    result: dict[str, Any] = {
        "rows": rows,
        "repeats": repeats,
        "task_group_objects": [len(group) for group in objects.groups],
        "job_cores": JOB_CORES,
    }
    for side in SIDES:
        key = SIDE_KEYS[side]
        result[key] = sides[side]
        if side == "base":
            continue
        result[f"time_ratio_{key}_to_baseline"] = ratios(wall, side)
        result[f"cpu_ratio_{key}_to_baseline"] = ratios(cpu, side)
        result[f"{key}_cost_us_per_row"] = 1e6 * (sides[side]["median_s"] - base["median_s"]) / rows
        result[f"{key}_cpu_cost_us_per_row"] = (
            1e6 * (sides[side]["cpu_median_s"] - base["cpu_median_s"]) / rows
        )
    return result


# ----------------------------------------------------------------- 2. items and bytes


def _all(conditions: Sequence[Any]) -> Any:
    """The row-wise AND of boolean Arrow arrays."""
    return functools.reduce(pc.and_, conditions)


@dataclass
class Built:
    """The index of the whole lake, kept for the analyses (one untimed build)."""

    per_object: list[list[IndexEntry]]
    by_subject: dict[str, list[tuple[int, IndexEntry]]]
    distinct_pairs: int  # counted from the raw values, without hashing
    rows: int
    entries_equal_to_reference: bool  # every entry as the implementation before gave it
    grouped_equal_to_per_object: bool  # every batch of a group as entry_batch's of its object
    writer_items_equal_to_reference: bool  # every item as IndexEntry.to_item of those
    items_sha256: str  # of every entry but updated_at, in the lake's order
    writer_items_sha256: str  # of every item as the writer sends it but updated_at, in order


def _comparable(entry: IndexEntry) -> dict[str, Any]:
    """An entry as compared: all fields but updated_at, every row hint, the fields set."""
    fields = entry.model_dump(exclude={"updated_at"})
    return {**fields, "row_hints": list(entry.row_hints), "set": sorted(entry.model_fields_set)}


def _item_text(item: dict[str, Any]) -> str:
    """An item as compared: every key but updated_at in its order, each value with its type."""
    kept = [(k, v, type(v).__name__) for k, v in item.items() if k != "updated_at"]
    return json.dumps(kept)


def _columns(batch: EntryBatch) -> tuple[Any, ...]:
    fields = (batch.object_url, batch.version_id, batch.etag, batch.zone, batch.format)
    return (*fields, list(batch.subject_hashes), list(batch.ends), list(batch.row_hints))


def build_index(objects: Objects) -> Built:
    per_object: list[list[IndexEntry]] = []
    by_subject: dict[str, list[tuple[int, IndexEntry]]] = defaultdict(list)
    distinct = rows = 0
    equal = items_equal = True
    digest, items_digest = hashlib.sha256(), hashlib.sha256()
    columns = objects.dataset.subject_columns
    grouped_equal = True
    for i, (_, batch) in enumerate(objects.grouped_batches()):  # the index job's batches
        table = objects.read(i)
        alone = objects.batch(i, table)  # the indexer Lambda's
        grouped_equal = grouped_equal and _columns(batch) == _columns(alone)
        entries = batch.entries()
        found = [_comparable(e) for e in entries]
        reference = objects.index(i, table, indexer=reference_entries)
        equal = equal and found == [_comparable(e) for e in reference]
        items = [_item_text(item) for item in batch.to_items()]
        items_equal = items_equal and items == [_item_text(e.to_item()) for e in reference]
        for entry_fields in found:
            digest.update(json.dumps(entry_fields, sort_keys=True, default=str).encode())
        for item in items:
            items_digest.update(item.encode())
        per_object.append(entries)
        for entry in entries:
            by_subject[entry.subject_hash].append((i, entry))
        present = table.filter(_all([pc.is_valid(table.column(c)) for c in columns]))
        distinct += present.group_by(columns).aggregate([]).num_rows
        rows += table.num_rows
    return Built(
        per_object,
        dict(by_subject),
        distinct,
        rows,
        equal,
        grouped_equal,
        items_equal,
        digest.hexdigest(),
        items_digest.hexdigest(),
    )


def _row_item_cost(
    entry: IndexEntry, rows: Sequence[int], minimal: bool
) -> tuple[int, int, int, int]:
    """Sum of (bytes, WRU table, WRU all, stored bytes) of one row-level item per row.

    Minimal: the seed's row-number index in DynamoDB terms, {subject_hash, object_url:
    "<url>#<row>"} (the sort key must be unique per row). Same attributes: an IndexEntry's
    attributes, with `row` instead of rows/row_hints/hints_complete.
    """
    template: dict[str, Any] = {
        "subject_hash": entry.subject_hash,
        "object_url": f"{entry.object_url}#",
    }
    if not minimal:
        template |= {
            "dataset_id": entry.dataset_id,
            "zone": entry.zone,
            "format": entry.format,
            "row": 0,
            "version_id": entry.version_id,
            "etag": entry.etag,
            "updated_at": entry.updated_at,
        }
    base = dynamo_size.item_size(template) - (0 if minimal else dynamo_size.number_size(0))
    size = wru = stored = 0
    for row in rows:
        item_bytes = base + len(str(row)) + (0 if minimal else dynamo_size.number_size(row))
        size += item_bytes
        wru += dynamo_size.write_units(item_bytes)
        stored += item_bytes + dynamo_size.ITEM_OVERHEAD_BYTES
    return size, wru, wru, stored


def measure_items(built: Built) -> dict[str, Any]:
    lethe = np.zeros(4, dtype=np.int64)
    minimal = np.zeros(4, dtype=np.int64)
    same = np.zeros(4, dtype=np.int64)
    items = truncated = 0
    sizes: list[int] = []
    for entries in built.per_object:
        for entry in entries:
            costs = dynamo_size.SUBJECT_INDEX.costs(entry.to_item())
            lethe += costs
            sizes.append(costs[0])
            items += 1
            truncated += len(entry.row_hints) > 64
            minimal += _row_item_cost(entry, entry.row_hints, minimal=True)
            same += _row_item_cost(entry, entry.row_hints, minimal=False)
    per_million = 1e6 / built.rows

    def scaled(totals: Any, count: int) -> dict[str, float]:
        return {
            "items": count * per_million,
            "item_bytes": float(totals[0]) * per_million,
            "wru_table_only": float(totals[1]) * per_million,
            "stored_bytes_table_only": (float(totals[0]) + count * dynamo_size.ITEM_OVERHEAD_BYTES)
            * per_million,
            "wru_with_gsis": float(totals[2]) * per_million,
            "stored_bytes_with_gsis": float(totals[3]) * per_million,
            "mean_item_bytes": float(totals[0]) / count,
        }

    row_items = built.rows  # every row has a subject here (the generator writes no nulls)
    result: dict[str, Any] = {
        "rows": built.rows,
        "items": items,
        "distinct_subject_object_pairs": built.distinct_pairs,
        "items_equal_distinct_pairs": items == built.distinct_pairs,
        "items_equal_reference": built.entries_equal_to_reference
        and built.writer_items_equal_to_reference,
        "entries_equal_reference": built.entries_equal_to_reference,
        "grouped_equal_per_object": built.grouped_equal_to_per_object,
        "writer_items_equal_reference": built.writer_items_equal_to_reference,
        "items_sha256": built.items_sha256,
        "writer_items_sha256": built.writer_items_sha256,
        "rows_per_item": built.rows / items,
        "entries_with_truncated_hints": truncated,
        "item_bytes": {"p50": float(np.percentile(sizes, 50)), "max": max(sizes)},
        "per_million_rows": {
            "lethe": scaled(lethe, items),
            "row_level_minimal": scaled(minimal, row_items),
            "row_level_same_attributes": scaled(same, row_items),
        },
    }
    pm = result["per_million_rows"]
    result["ratios_lethe_to_row_level"] = {
        name: {
            "items": pm["lethe"]["items"] / pm[name]["items"],
            "item_bytes": pm["lethe"]["item_bytes"] / pm[name]["item_bytes"],
            "wru_table_only": pm["lethe"]["wru_table_only"] / pm[name]["wru_table_only"],
            "stored_bytes_table_only": pm["lethe"]["stored_bytes_table_only"]
            / pm[name]["stored_bytes_table_only"],
        }
        for name in ("row_level_minimal", "row_level_same_attributes")
    }
    return result


# -------------------------------------------------------------- 3. writes per erasure


def sample_subjects(lake: generate_lake.Lake, count: int, seed: int) -> list[int]:
    """`count` distinct subject numbers drawn with the lake's skew (heavy ones are likely)."""
    rng = np.random.default_rng([seed, 3])
    count = min(count, lake.model.subjects)
    chosen: dict[int, None] = {}
    while len(chosen) < count:
        for number in lake.model.draw(rng, count):
            if len(chosen) < count:
                chosen.setdefault(int(number))
    return list(chosen)


def _stale_after_removal(entries: list[IndexEntry], erased: IndexEntry) -> tuple[int, int]:
    """(other entries whose row hints shift, other rows whose row numbers shift) when the
    erased subject's rows leave the object: every row after its first row moves up."""
    first = min(erased.row_hints)
    entries_shifted = rows_shifted = 0
    for entry in entries:
        if entry.subject_hash == erased.subject_hash:
            continue
        later = sum(1 for h in entry.row_hints if h > first)
        entries_shifted += later > 0
        rows_shifted += later
    return entries_shifted, rows_shifted


def measure_erasure_writes(
    objects: Objects, built: Built, subjects: list[int], verify: int
) -> dict[str, Any]:
    model = objects.lake.model
    per_subject = []
    for number in subjects:
        digest = subject_hash(KEY, model.columns, model.key_values(number))
        own = built.by_subject.get(digest, [])
        co_resident = sum(len(built.per_object[i]) - 1 for i, _ in own)
        stale_entries = stale_rows = 0
        for i, entry in own:
            e, r = _stale_after_removal(built.per_object[i], entry)
            stale_entries += e
            stale_rows += r
        per_subject.append(
            {
                "subject_share_of_rows": model.share(number),
                "own_entries": len(own),
                "own_rows": sum(e.rows for _, e in own),
                "co_resident_entries": co_resident,
                "writes_prescribed": len(own),  # delete (subject, object) for each own entry
                "writes_replace_object": co_resident + len(own),
                "writes_row_level": sum(e.rows for _, e in own),
                "co_resident_entries_with_shifted_hints": stale_entries,
                "row_level_rows_renumbered": stale_rows,
            }
        )
    checks = [verify_replace_object(objects, built, number) for number in subjects[:verify]]

    def stats(name: str) -> dict[str, float]:
        return percentiles([s[name] for s in per_subject])

    terciles = _by_co_residents(per_subject)
    return {
        "subjects_sampled": len(per_subject),
        "subjects_absent_from_lake": sum(1 for s in per_subject if s["own_entries"] == 0),
        "writes_prescribed": stats("writes_prescribed"),
        "writes_replace_object": stats("writes_replace_object"),
        "writes_row_level": stats("writes_row_level"),
        "own_entries": stats("own_entries"),
        "co_resident_entries": stats("co_resident_entries"),
        "co_resident_entries_with_shifted_hints": stats("co_resident_entries_with_shifted_hints"),
        "by_co_resident_tercile": terciles,
        "replace_object_checks": checks,
        "per_subject": per_subject,
    }


def _by_co_residents(per_subject: list[dict[str, Any]]) -> list[dict[str, float]]:
    present = sorted(
        (s for s in per_subject if s["own_entries"]), key=lambda s: s["co_resident_entries"]
    )
    groups = [g for g in np.array_split(np.arange(len(present)), 3) if len(g)]
    rows = []
    for group in groups:
        chosen = [present[i] for i in group]
        own = sum(s["own_entries"] for s in chosen)
        rows.append(
            {
                "subjects": len(chosen),
                "co_resident_entries_min": min(s["co_resident_entries"] for s in chosen),
                "co_resident_entries_max": max(s["co_resident_entries"] for s in chosen),
                "own_entries_mean": own / len(chosen),
                "writes_prescribed_per_own_entry": sum(s["writes_prescribed"] for s in chosen)
                / own,
                "writes_replace_object_per_own_entry": sum(
                    s["writes_replace_object"] for s in chosen
                )
                / own,
            }
        )
    return rows


class _CountingTable:
    """Just enough of a boto3 Table for DynamoSubjectIndex.replace_object, counting writes
    (puts, deletes, and updates: replace_object flags the subjects an object no longer holds)."""

    def __init__(self, items: Iterable[dict[str, Any]]) -> None:
        self.items = {(i["subject_hash"], i["object_url"]): i for i in items}
        self.puts = self.deletes = self.updates = 0

    def query(self, **kwargs: Any) -> dict[str, Any]:
        url = kwargs["ExpressionAttributeValues"][":u"]
        keys = [{"subject_hash": s, "object_url": u} for s, u in self.items if u == url]
        return {"Items": keys}

    def batch_writer(self) -> _CountingTable:
        return self

    def __enter__(self) -> _CountingTable:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def put_item(self, Item: dict[str, Any]) -> None:  # boto3's argument names
        self.puts += 1
        self.items[(Item["subject_hash"], Item["object_url"])] = Item

    def delete_item(self, Key: dict[str, Any]) -> None:
        self.deletes += 1
        del self.items[(Key["subject_hash"], Key["object_url"])]

    def update_item(
        self, Key: dict[str, Any], ExpressionAttributeValues: dict[str, Any], **_: Any
    ) -> None:
        self.updates += 1
        self.items[(Key["subject_hash"], Key["object_url"])]["deleted"] = ExpressionAttributeValues[
            ":d"
        ]


def verify_replace_object(
    objects: Objects, built: Built, number: int, max_objects: int = 20
) -> dict[str, Any]:
    """Erase one subject from (up to `max_objects` of) its objects for real in memory: filter
    its rows out, index the new object version, and let the real DynamoSubjectIndex
    .replace_object update a counting table. Compares the counted writes with the formula."""
    model = objects.lake.model
    values = model.key_values(number)
    digest = subject_hash(KEY, model.columns, values)
    own = built.by_subject.get(digest, [])[:max_objects]
    puts = deletes = updates = expected = changed_besides_version = analytic_shifted = 0
    remove_writes = 0
    for i, erased in own:
        old = built.per_object[i]
        table = objects.read(i)
        mine = _all(
            [pc.equal(table.column(c), v) for c, v in zip(model.columns, values, strict=True)]
        )
        remaining = table.filter(pc.invert(mine))
        # The new version of the object: its rows renumbered (Parquet row indexes; CSV and JSON
        # Lines line numbers, the erased lines being gone), a new version id and ETag, same URL.
        new_ref = object_ref(objects.lake, objects.lake.files[i], version=2)
        new = objects.batch(i, remaining, new_ref)  # written from its columns
        fake = _CountingTable(e.to_item() for e in old)
        DynamoSubjectIndex(fake).replace_object(new_ref.object_url, new)
        # What the erasure workflow does instead (erasure_workflow: remove_subjects with the
        # request's hashes), on a fresh counting table with the same entries
        removing = _CountingTable(e.to_item() for e in old)
        DynamoSubjectIndex(removing).remove_subjects(erased.object_url, [digest])
        remove_writes += removing.puts + removing.deletes + removing.updates
        puts += fake.puts
        deletes += fake.deletes
        updates += fake.updates
        expected += len(old)
        analytic_shifted += _stale_after_removal(old, erased)[0]
        before = {e.subject_hash: (e.rows, e.row_hints) for e in old}
        changed_besides_version += sum(
            1 for e in new if before.get(e.subject_hash) != (e.rows, e.row_hints)
        )
    return {
        "objects": len(own),
        "puts": puts,
        "deletes": deletes,
        "flags": updates,
        "writes": puts + deletes + updates,
        "formula_writes": expected,
        "remove_subjects_writes": remove_writes,  # the subject's own entries: one per object
        "entries_changed_besides_version_etag": changed_besides_version,
        "entries_with_shifted_hints_by_formula": analytic_shifted,
    }


# ------------------------------------------------------------------------------ 4. Spark


def _spark_task(task: tuple[str, str, bool, dict[str, Any], dict[str, Any]]) -> tuple[int, int]:
    """One object: read it with pyarrow, index it. Runs in a Spark Python worker."""
    path, fmt, composite, document, ref = task
    table = generate_lake.read_object(path, fmt, composite)
    batch = entry_batch(
        table,
        parse_dataset(document),
        ObjectRef(**ref),
        key=KEY,
        coordinates=generate_lake.coordinates(fmt, table.num_rows),
    )
    return table.num_rows, len(batch)


def _spark_tasks(tasks: Iterable[Any]) -> list[tuple[int, int]]:
    """A group of objects in one Spark task (mapPartitions)."""
    rows = entries = 0
    for task in tasks:
        r, e = _spark_task(task)
        rows += r
        entries += e
    return [(rows, entries)]


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def measure_spark(
    objects: Objects, repeats: int, single_process_s: float, grouped_tasks: int
) -> dict[str, Any]:
    """The build as a local[2] Spark job: one task per object (as the index job ran before),
    then the objects grouped into `grouped_tasks` tasks. Start-up and the first job are reported
    apart."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(BENCH_DIR), str(REPO / "layers" / "shared")]  # workers import these modules
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*paths, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    start = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lethe-index-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup_s = time.perf_counter() - start
    lake = objects.lake
    tasks = [
        (str(path), lake.format, lake.model.composite, lake.dataset, _ref_fields(ref))
        for path, ref in zip(lake.files, objects.refs, strict=True)
    ]
    context = spark.sparkContext

    def per_object() -> tuple[float, tuple[int, int]]:
        began = time.perf_counter()
        totals = context.parallelize(tasks, len(tasks)).map(_spark_task).reduce(_add)
        return time.perf_counter() - began, totals

    def grouped() -> tuple[float, tuple[int, int]]:
        began = time.perf_counter()
        rdd = context.parallelize(tasks, min(grouped_tasks, len(tasks)))
        totals = rdd.mapPartitions(_spark_tasks).reduce(_add)
        return time.perf_counter() - began, totals

    def variant(job: Callable[[], tuple[float, tuple[int, int]]], count: int) -> dict[str, Any]:
        seconds = [job()[0] for _ in range(repeats)]
        stats = summary(seconds)
        return {
            "tasks": count,
            "seconds": seconds,
            **{f"{k}_s": v for k, v in stats.items() if k != "spread_pct"},
            "spread_pct": stats["spread_pct"],
            "rows_per_s_median": rows / stats["median"],
            "speedup_vs_single_process": single_process_s / stats["median"],
        }

    try:
        first_s, (rows, entries) = per_object()
        warm = {
            "one_task_per_object": variant(per_object, len(tasks)),
            "grouped": variant(grouped, min(grouped_tasks, len(tasks))),
        }
    finally:
        spark.stop()
    cold_s = startup_s + first_s
    return {
        "master": "local[2]",
        "rows": rows,
        "entries": entries,
        "session_startup_s": startup_s,
        "first_job_s": first_s,
        "cold_total_s": cold_s,
        "cold_rows_per_s": rows / cold_s,
        "speedup_vs_single_process_cold": single_process_s / cold_s,
        "warm": warm,
    }


def _ref_fields(ref: ObjectRef) -> dict[str, Any]:
    return {
        "object_url": ref.object_url,
        "zone": ref.zone,
        "format": ref.format,
        "version_id": ref.version_id,
        "etag": ref.etag,
    }


# ------------------------------------------------------------------------ report


def machine_facts() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if "model name" in line),
        platform.processor(),
    )
    memory = next((line.split()[1] for line in _lines("/proc/meminfo") if "MemTotal" in line), "0")
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(int(memory) / MIB, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
        "pydantic": pydantic.VERSION,
        "git_commit": _git_commit(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return done.stdout.strip() + ("+dirty" if dirty else "")


def costs(items: dict[str, Any], wru_price: float, storage_price: float) -> dict[str, Any]:
    """USD per million lake rows: writing the index once, and storing it for a month."""
    return {
        name: {
            "write_usd_table_only": n["wru_table_only"] * wru_price / 1e6,
            "write_usd_with_gsis": n["wru_with_gsis"] * wru_price / 1e6,
            "storage_usd_per_month_table_only": n["stored_bytes_table_only"] / GIB * storage_price,
            "storage_usd_per_month_with_gsis": n["stored_bytes_with_gsis"] / GIB * storage_price,
        }
        for name, n in items["per_million_rows"].items()
    }


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


NAMES = {
    "lethe": "Lethe: one item per (subject, object)",
    "row_level_minimal": "row-level, minimal {subject_hash, url#row}",
    "row_level_same_attributes": "row-level, same attributes as an IndexEntry",
}


def markdown(result: dict[str, Any]) -> str:
    lake, machine = result["lake"], result["machine"]
    lines = [
        f"Lake: {lake['objects']} {lake['format']} objects x {lake['rows_per_object']:,} rows "
        f"= {lake['rows']:,} rows, {lake['subjects']:,} subjects, skew {lake['skew']}, "
        f"{'composite (tenant, user_id)' if lake['composite'] else 'user_id'}, "
        f"{lake['bytes_on_disk'] / MIB:.1f} MiB; {machine['cores']} cores, "
        f"Python {machine['python']}, pyarrow {machine['pyarrow']}; load average "
        f"{machine['load_average_1m_at_start']} at start, {machine['load_average_1m_at_end']} "
        f"at end; peak RSS {result['peak_rss_mib']:.0f} MiB.",
        "",
        *_md_build(result["build"]),
        *(_md_spark(result["spark"]) if result.get("spark") else []),
        "",
        *_md_items(result),
        "",
        *_md_writes(result["erasure_writes"]),
    ]
    return "\n".join(lines)


BUILD_ROWS = (
    ("base", "baseline: read + subject column to_pylist"),
    ("index", "**index: read + entry_batches per task** (entries as columns, as the index job)"),
    ("each", "per object: read + entry_batch (as the indexer Lambda and ingestion)"),
    ("items", "index, then items: read + entry_batches per task + to_items"),
    ("models", "entries as models: read + entries_from_table"),
    ("model_items", "models, then items: read + entries_from_table + to_item each"),
    ("reference", "before: read + the per-row implementation"),
)


def _md_build(build: dict[str, Any]) -> list[str]:
    lines = [
        f"**1. Index build** ({build['repeats']} repeats after a warm-up, the seven runs in a "
        "rotating order; median [min-max]; wall time, and CPU time of the process; the index "
        f"job's grouping on {build['job_cores']} cores: tasks of "
        f"{', '.join(str(n) for n in build['task_group_objects'])} objects)",
        "",
        "| measurement | wall s | min-max | rows/s | CPU s | min-max | rows per CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side, label in BUILD_ROWS:
        s = build[SIDE_KEYS[side]]
        lines.append(
            f"| {label} | {s['median_s']:.3f} | {s['min_s']:.3f}-{s['max_s']:.3f} | "
            f"{_n(s['rows_per_s_median'])} | {s['cpu_median_s']:.3f} | "
            f"{s['cpu_min_s']:.3f}-{s['cpu_max_s']:.3f} | {_n(s['cpu_rows_per_s_median'])} |"
        )
    lines += [
        "",
        "| ratio to the baseline | wall | min-max | CPU | min-max | cost per row on top "
        "of the read (CPU) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side, label in BUILD_ROWS[1:]:
        key = SIDE_KEYS[side]
        r = build[f"time_ratio_{key}_to_baseline"]
        c = build[f"cpu_ratio_{key}_to_baseline"]
        bold = "**" if side == "index" else ""
        lines.append(
            f"| {label.replace('**', '')} | {bold}{r['median']:.2f}x{bold} | "
            f"{r['min']:.2f}-{r['max']:.2f}x | {bold}{c['median']:.2f}x{bold} | "
            f"{c['min']:.2f}-{c['max']:.2f}x | {build[f'{key}_cpu_cost_us_per_row']:.2f} us |"
        )
    return lines


def _md_spark(spark: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"Spark {spark['master']}: session start-up {spark['session_startup_s']:.1f} s, first "
        f"job (one task per object) {spark['first_job_s']:.2f} s; cold total "
        f"{spark['cold_total_s']:.2f} s = {_n(spark['cold_rows_per_s'])} rows/s, "
        f"{spark['speedup_vs_single_process_cold']:.2f}x the single-process index run (wall).",
        "",
        "| Spark job (warm session) | tasks | median s | min-max s | rows/s | "
        "speed vs single process (wall) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, w in spark["warm"].items():
        lines.append(
            f"| {name.replace('_', ' ')} | {w['tasks']} | {w['median_s']:.2f} | "
            f"{w['min_s']:.2f}-{w['max_s']:.2f} | {_n(w['rows_per_s_median'])} | "
            f"{w['speedup_vs_single_process']:.2f}x |"
        )
    return lines


def _md_items(result: dict[str, Any]) -> list[str]:
    items, price, money = result["dynamodb"], result["prices"], result["cost_per_million_rows"]
    pm = items["per_million_rows"]
    lines = [
        "**2. DynamoDB items and bytes per million rows** (item sizes by DynamoDB's rules)",
        "",
        "| index | items | item bytes | WRU | stored bytes | WRU with GSIs "
        "| stored bytes with GSIs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in NAMES.items():
        n = pm[key]
        gsis = "- | -"
        if key == "lethe":
            gsis = f"{_n(n['wru_with_gsis'])} | {_n(n['stored_bytes_with_gsis'])}"
        lines.append(
            f"| {label} | {_n(n['items'])} | {_n(n['item_bytes'])} | {_n(n['wru_table_only'])} "
            f"| {_n(n['stored_bytes_table_only'])} | {gsis} |"
        )
    lines += [
        "",
        f"Items = distinct (subject, object) pairs: {items['items']:,} items, "
        f"{items['distinct_subject_object_pairs']:,} pairs counted without hashing "
        f"({'equal' if items['items_equal_distinct_pairs'] else 'DIFFERENT'}); every entry "
        f"{'equal to' if items['entries_equal_reference'] else 'DIFFERENT from'} the "
        f"implementation before's (SHA-256 of the entries {items['items_sha256'][:16]}...), "
        f"every batch of a group "
        f"{'equal to' if items['grouped_equal_per_object'] else 'DIFFERENT from'} "
        "`entry_batch` of its object alone, "
        f"every item the writer sends "
        f"{'equal to' if items['writer_items_equal_reference'] else 'DIFFERENT from'} "
        f"`IndexEntry.to_item()` of those (SHA-256 {items['writer_items_sha256'][:16]}...); "
        f"{items['rows_per_item']:.2f} rows per item; "
        f"mean item {pm['lethe']['mean_item_bytes']:.0f} B, "
        f"max {items['item_bytes']['max']} B; {items['entries_with_truncated_hints']:,} entries "
        "hold more than 64 rows (hints truncated).",
        "",
        "| Lethe / row-level | items | item bytes | WRU (table) | stored bytes (table) |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ("row_level_minimal", "row_level_same_attributes"):
        q = items["ratios_lethe_to_row_level"][key]
        lines.append(
            f"| vs {NAMES[key]} | {q['items']:.3f} | {q['item_bytes']:.3f} | "
            f"{q['wru_table_only']:.3f} | {q['stored_bytes_table_only']:.3f} |"
        )
    lines += [
        "",
        f"Cost per million lake rows at {price['wru_usd_per_million']} USD per million WRU and "
        f"{price['storage_usd_per_gb_month']} USD per GB-month (assumed, as of writing):",
        "",
        "| index | write once (USD) | store (USD per month) |",
        "|---|---:|---:|",
    ]
    for key, label in NAMES.items():
        c = money[key]
        lines.append(
            f"| {label} | {c['write_usd_table_only']:.4f} | "
            f"{c['storage_usd_per_month_table_only']:.4f} |"
        )
        if key == "lethe":
            lines.append(
                f"| {label}, with its two GSIs | {c['write_usd_with_gsis']:.4f} | "
                f"{c['storage_usd_per_month_with_gsis']:.4f} |"
            )
    return lines


def _md_writes(writes: dict[str, Any]) -> list[str]:
    lines = [
        f"**3. Index writes per erased subject** ({writes['subjects_sampled']} subjects drawn "
        f"with the skew; {writes['subjects_absent_from_lake']} hold no row)",
        "",
        "| writes per erased subject | mean | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    rows_of = {
        "writes_prescribed": "Lethe: delete the subject's own items",
        "writes_replace_object": "re-index each rewritten object (replace_object)",
        "writes_row_level": "row-level index: one delete per row",
        "co_resident_entries": "(other subjects' entries in those objects)",
    }
    for key, label in rows_of.items():
        s = writes[key]
        lines.append(
            f"| {label} | {s['mean']:.1f} | {s['p50']:.1f} | {s['p99']:.1f} | {s['max']:.0f} |"
        )
    lines += [
        "",
        "| subjects by other entries sharing their objects | subjects | other entries "
        "| own entries (mean) | Lethe writes / own entry | replace_object writes / own entry |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for i, t in enumerate(writes["by_co_resident_tercile"], 1):
        lines.append(
            f"| tercile {i} | {t['subjects']} | {t['co_resident_entries_min']:,}-"
            f"{t['co_resident_entries_max']:,} | {t['own_entries_mean']:.1f} | "
            f"{t['writes_prescribed_per_own_entry']:.2f} | "
            f"{t['writes_replace_object_per_own_entry']:.1f} |"
        )
    checks = writes["replace_object_checks"]
    if checks:
        counted = sum(c["writes"] for c in checks)
        formula = sum(c["formula_writes"] for c in checks)
        changed = sum(c["entries_changed_besides_version_etag"] for c in checks)
        shifted = sum(c["entries_with_shifted_hints_by_formula"] for c in checks)
        lines += [
            "",
            f"replace_object run for real on a counting table for {len(checks)} subjects "
            f"({sum(c['objects'] for c in checks)} objects): {counted:,} writes counted, "
            f"{formula:,} by the formula; {changed:,} of the re-put entries changed rows or "
            f"row hints ({shifted:,} by the formula), the others only version id, ETag and "
            "updated_at.",
        ]
        if all("remove_subjects_writes" in c for c in checks):
            removed = sum(c["remove_subjects_writes"] for c in checks)
            lines.append(
                f"The erasure workflow's `remove_subjects` run for real on the same entries: "
                f"{removed:,} writes for {sum(c['objects'] for c in checks)} own entries."
            )
    return lines


# -------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Subject index benchmark (see bench/README.md and docs/BENCHMARKS.md)."
    )
    generate_lake.add_arguments(parser)
    parser.add_argument(
        "--lake",
        type=Path,
        help="lake directory: reused when it holds a lake.json (shape flags are then ignored), "
        "generated there otherwise; default: a temporary directory, deleted afterwards",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (after a warm-up)")
    parser.add_argument("--sample", type=int, default=100, help="subjects to erase (section 3)")
    parser.add_argument(
        "--verify", type=int, default=5, help="subjects to run replace_object for for real"
    )
    parser.add_argument("--spark", action="store_true", help="also run the build on local[2]")
    parser.add_argument("--spark-repeats", type=int, default=3, help="warm Spark jobs per variant")
    parser.add_argument(
        "--spark-grouped-tasks", type=int, default=4, help="tasks of the grouped Spark variant"
    )
    parser.add_argument(
        "--wru-price", type=float, default=0.625, help="USD per million write request units"
    )
    parser.add_argument(
        "--storage-price", type=float, default=0.25, help="USD per GB-month of table storage"
    )
    parser.add_argument("--out-json", type=Path, default=BENCH_DIR / "results" / "latest.json")
    return parser.parse_args(argv)


def open_lake(args: argparse.Namespace, scratch: Path) -> tuple[generate_lake.Lake, float]:
    started = time.perf_counter()
    if args.lake and (args.lake / "lake.json").exists():
        return generate_lake.load(args.lake), 0.0
    lake = generate_lake.generate_from_args(args.lake or scratch, args)
    return lake, time.perf_counter() - started


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    load_at_start = round(os.getloadavg()[0], 2)  # other processes compete for the cores
    lake, generated_s = open_lake(args, scratch)
    print(f"lake: {len(lake.files)} objects, {lake.rows:,} rows under {lake.root}", flush=True)
    dataset = parse_dataset(lake.dataset)
    objects = Objects(lake, dataset, [object_ref(lake, path) for path in lake.files])
    print("1. index build ...", flush=True)
    build = measure_build(objects, args.repeats)
    print("2. items and bytes ...", flush=True)
    built = build_index(objects)
    items = measure_items(built)
    print("3. writes per erased subject ...", flush=True)
    subjects = sample_subjects(lake, args.sample, lake.model.seed)
    writes = measure_erasure_writes(objects, built, subjects, args.verify)
    spark = None
    if args.spark:
        print("4. Spark local[2] ...", flush=True)
        spark = measure_spark(
            objects, args.spark_repeats, build["index"]["median_s"], args.spark_grouped_tasks
        )
    result: dict[str, Any] = {
        "benchmark": "subject-index",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": {**machine_facts(), "load_average_1m_at_start": load_at_start},
        "lake": {
            **lake.parameters,
            "rows": lake.rows,
            "bytes_on_disk": sum(p.stat().st_size for p in lake.files),
            "generated_s": generated_s,
        },
        "build": build,
        "dynamodb": items,
        "erasure_writes": writes,
        "spark": spark,
        "prices": {
            "wru_usd_per_million": args.wru_price,
            "storage_usd_per_gb_month": args.storage_price,
            "note": "on-demand, Standard table class, us-east-1, as of writing; GB = 2^30 bytes",
        },
    }
    result["cost_per_million_rows"] = costs(items, args.wru_price, args.storage_price)
    if spark:
        result["machine"]["pyspark"] = pyspark.__version__
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lethe-bench-") as scratch:
        result = run(args, Path(scratch))
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print()
    print(markdown(result))
    print()
    print(f"results: {args.out_json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
