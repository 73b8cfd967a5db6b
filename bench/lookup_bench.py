"""Lookups at lake scale (issue 20, item 4): K = 10 subjects looked up in the segment subject
index of a simulated lake of 100,000 objects, cold and warm, before and after compaction.

    python bench/lookup_bench.py                          # 100,000 objects, 4 datasets
    python bench/lookup_bench.py --objects 2000 --run-objects 50   # a quick run

On the local cloud's simulated AWS: moto in-process (`mock_aws`: no server, no sockets) with
the local cloud's own adaptations of moto installed by its own install function,
`lethe.localcloud.cloud.configure_moto` (what `LocalCloud.start()` runs, and so `make demo`,
the e2e tests and the soak): among them `lethe.localcloud.dynamodb_partitions`, without which
moto 5.2.5's DynamoDB Query sorts the whole table on every call (a lookup's Queries then cost
the size of the lake's manifest, not of the partition they read, as DynamoDB's do), and
`make_dynamodb_atomic` / `patch_transaction_copies`. Through the product's own code:

1. the index is opened with `lethe_shared.index.opening.open_subject_index` (the factory every
   component uses: 48-bit prefixes, one partition, no by-object files);
2. entries are generated directly, not from lake files: each object holds between
   `--min-subjects` and `--max-subjects` subjects (uniform), drawn uniformly from a population
   of `--subjects` keyed hashes (SHA-256 of a counter: the same 64 hex digits the index gets),
   each subject 1 to 3 rows; the objects are spread evenly over `--datasets` datasets;
3. written as ingestion writes: `replace_objects` of `--run-objects` objects of one dataset
   (one level-0 segment per run); the compaction job's `compact(dataset)` (settle time 0, as
   `--settle-seconds 0`) runs once every dataset has a backlog of `--backlog` level-0
   segments after the first run of the lake, and after the last; the last `--backlog` runs of
   each dataset are written after that compaction and measured as a backlog before the final
   one;
4. measured twice, with the backlog (before compaction: one level-1 segment and `--backlog`
   level-0 segments per dataset) and after the final compaction: K subjects drawn from the
   lake, each looked up with `lookup(h)` with a new index (cold: empty footer cache), the same
   K again (warm), and K other subjects on the warm index (warm, new subjects: a warm container
   serving the next request); then the same K in ONE call on a new index (`batched_call`: the
   index's `lookup_many`, the product's path: the erasure report, the index update and
   `lethe index lookup` make one call for all their subjects; for a run of older code without
   it, what it would run, `reads.lookup_across(manifest.datasets(), hashes)`: one dataset
   listing, one segment listing per dataset, shared BatchGetItems) and with
   `lookup_in(dataset, hashes)` per dataset. Per lookup: wall time, S3 GETs and bytes
   (`ReadCounter`), every S3 and DynamoDB call by operation and the time spent inside them
   (botocore events; the union of the calls' intervals, since a lookup's reads run in a thread
   pool; the rest of the wall time is the product's own), the segments the manifest made it
   consult; every answer checked against the entries written. The time target is judged on
   the product's path (`product_path`).

Wall times are moto's (in-process, no network): S3 first-byte latency and DynamoDB's round
trip are not in them; the calls per lookup are counted so that one can add them (`markdown`).
Results: bench/results/lookup_latest.json and Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import shlex
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from lethe.localcloud.cloud import configure_moto
from lethe_shared.catalog.zones import Zone
from lethe_shared.index.opening import (
    SEGMENT_HASH_BYTES,
    SEGMENT_PARTITION_BITS,
    IndexLocation,
    IndexStore,
    open_subject_index,
)
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.segments.lookup import split_consulted
from lethe_shared.index.subject_index import EntryBatch

BENCH_DIR = Path(__file__).resolve().parent
OUT_NAME = "lookup_latest.json"
BUCKET = "lethe-bench-index"
LAKE_BUCKET = "lethe-bench-lake"
MANIFEST = "lethe-bench-manifest"
TARGET_SECONDS = 2.0
TARGET_OBJECTS = 100_000
CLOUD = (
    "moto in-process (mock_aws) with the local cloud's adaptations "
    "(lethe.localcloud.cloud.configure_moto: DynamoDB queries cost their partition, "
    "atomic DynamoDB requests, journalled transactions)"
)


# ------------------------------------------------------------------ the simulated lake


@dataclass(frozen=True)
class Shape:
    objects: int
    datasets: int
    subjects: int
    min_subjects: int
    max_subjects: int
    run_objects: int
    backlog: int
    seed: int

    def dataset_ids(self) -> list[str]:
        return [f"bench-ds-{i}" for i in range(self.datasets)]

    def objects_of(self, d: int) -> int:
        return self.objects // self.datasets + (1 if d < self.objects % self.datasets else 0)


def subject_hash(i: int) -> str:
    return hashlib.sha256(f"lookup-bench-subject-{i}".encode()).hexdigest()


class Lake:
    """Per object, its subjects (population indices), drawn from the seed: every object's draw
    is its own RNG stream, so the lake is the same whatever order it is written in."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.hashes = [subject_hash(i) for i in range(shape.subjects)]

    def url(self, dataset: str, n: int) -> str:
        return f"s3://{LAKE_BUCKET}/{dataset}/date=2026-11-{1 + n % 28:02d}/part-{n:06d}.parquet"

    def draw(self, d: int, n: int) -> tuple[list[int], list[int]]:
        """(subject indices, rows each) of object n of dataset d."""
        rng = random.Random(f"{self.shape.seed}/{d}/{n}")
        count = rng.randint(self.shape.min_subjects, self.shape.max_subjects)
        chosen = sorted(set(rng.sample(range(self.shape.subjects), count)))
        return chosen, [rng.randint(1, 3) for _ in chosen]

    def batch(self, d: int, n: int) -> tuple[EntryBatch, list[int]]:
        """Object n of dataset d as the index job's EntryBatch, and its subjects."""
        dataset = self.shape.dataset_ids()[d]
        chosen, rows = self.draw(d, n)
        ends: list[int] = []
        total = 0
        for r in rows:
            total += r
            ends.append(total)
        batch = EntryBatch(
            object_url=self.url(dataset, n),
            dataset_id=dataset,
            zone=Zone.LAKE,
            format="parquet",
            version_id=f"v{n}",
            etag=hashlib.md5(f"{d}/{n}".encode(), usedforsecurity=False).hexdigest(),
            subject_hashes=[self.hashes[i] for i in chosen],
            ends=ends,
            row_hints=list(range(total)),
        )
        return batch, chosen

    def runs(self, d: int) -> list[range]:
        """The object numbers of dataset d cut into ingestion runs."""
        n, size = self.shape.objects_of(d), self.shape.run_objects
        return [range(s, min(s + size, n)) for s in range(0, n, size)]


@dataclass
class Truth:
    """Where each watched subject is: (dataset, object URL) pairs, gathered while writing."""

    watched: set[int]
    where: dict[int, set[tuple[str, str]]] = field(default_factory=dict)
    subjects_seen: set[int] = field(default_factory=set)

    def note(self, lake: Lake, d: int, n: int, chosen: list[int]) -> None:
        dataset = lake.shape.dataset_ids()[d]
        for i in chosen:
            if i in self.watched:
                self.where.setdefault(i, set()).add((dataset, lake.url(dataset, n)))


# ------------------------------------------------------------------ counting calls


class CallCounter:
    """Every AWS call by service and operation, and the wall time spent inside them (botocore's
    before-call and after-call events: the request, moto's handling and the response's
    parsing). Calls run concurrently (a lookup's reads run in a thread pool): the time inside
    a service's calls is the wall time during which at least one of its calls was in flight
    (the union of their intervals; for calls one after the other, the sum of their times)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}
        self._in_flight: Counter[str] = Counter()
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def hook(self, client: Any, service: str) -> None:
        def count(model: Any, context: dict[str, Any], **_: Any) -> None:
            context["lookup_bench_started"] = True
            with self._lock:
                self.calls[f"{service}.{model.name}"] += 1
                if self._in_flight[service] == 0:
                    self._since[service] = time.perf_counter()
                self._in_flight[service] += 1

        def timed(context: dict[str, Any], **_: Any) -> None:
            if not context.pop("lookup_bench_started", False):
                return
            with self._lock:
                self._in_flight[service] -= 1
                if self._in_flight[service] == 0:
                    self.seconds[service] = self.seconds.get(service, 0.0) + (
                        time.perf_counter() - self._since.pop(service)
                    )

        client.meta.events.register(f"before-call.{service}", count)
        client.meta.events.register(f"after-call.{service}", timed)
        client.meta.events.register(f"after-call-error.{service}", timed)

    def take(self) -> dict[str, int]:
        with self._lock:
            out = dict(self.calls)
            self.calls.clear()
        return out

    def take_seconds(self) -> dict[str, float]:
        with self._lock:
            out = dict(self.seconds)
            self.seconds.clear()
        return out


def dynamodb_calls(calls: Mapping[str, int]) -> int:
    return sum(v for k, v in calls.items() if k.startswith("dynamodb."))


def s3_calls(calls: Mapping[str, int]) -> int:
    return sum(v for k, v in calls.items() if k.startswith("s3."))


# ------------------------------------------------------------------ the cloud


@dataclass
class Cloud:
    s3: Any
    dynamodb: Any
    counter: CallCounter
    location: IndexLocation

    def open(self) -> SegmentSubjectIndex:
        """A new index as the product opens it: the factory's defaults, an empty footer cache."""
        index = open_subject_index(self.location, s3=self.s3, dynamodb=self.dynamodb)
        assert isinstance(index, SegmentSubjectIndex)
        return index


def make_cloud() -> Cloud:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    dynamodb = boto3.resource("dynamodb", region_name="us-east-1")
    dynamodb.create_table(**manifest_table_definition(MANIFEST))
    counter = CallCounter()
    counter.hook(s3, "s3")
    counter.hook(dynamodb.meta.client, "dynamodb")
    location = IndexLocation(store=IndexStore.SEGMENTS, bucket=BUCKET, manifest_table=MANIFEST)
    return Cloud(s3, dynamodb, counter, location)


def bucket_bytes(s3: Any) -> tuple[int, int]:
    files, total = 0, 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            files += 1
            total += int(item["Size"])
    return files, total


# ------------------------------------------------------------------ writing


def write_runs(
    lake: Lake, truth: Truth, index: SegmentSubjectIndex, d: int, runs: list[range]
) -> int:
    entries = 0
    for run in runs:
        batches = []
        for n in run:
            batch, chosen = lake.batch(d, n)
            truth.note(lake, d, n, chosen)
            truth.subjects_seen.update(chosen)
            entries += len(batch)
            batches.append(batch)
        index.replace_objects(batches)
    return entries


def compact_all(cloud: Cloud, shape: Shape) -> dict[str, Any]:
    """The compaction job's work: `compact(dataset)` per dataset, settle time 0."""
    index = cloud.open()
    index.compactor.settle_seconds = 0.0  # the job's --settle-seconds 0: every segment is settled
    started = time.perf_counter()
    absorbed = rows_in = rows_out = retired = 0
    for dataset in shape.dataset_ids():
        report = index.compact(dataset)
        absorbed += report.level0_absorbed
        rows_in += report.rows_in
        rows_out += report.rows_out
        retired += report.level0_retired
    return {
        "seconds": time.perf_counter() - started,
        "level0_absorbed": absorbed,
        "rows_in": rows_in,
        "rows_out": rows_out,
        "level0_retired": retired,
    }


def build(cloud: Cloud, lake: Lake, truth: Truth, log: Any = print) -> dict[str, Any]:
    """Write the lake's index: every run but the last `backlog` of each dataset, compacting
    whenever every dataset has `backlog` new level-0 segments; then the last `backlog` runs of
    each dataset (the backlog the measurement sees before the final compaction)."""
    shape = lake.shape
    index = cloud.open()
    runs = {d: lake.runs(d) for d in range(shape.datasets)}
    tail = {d: runs[d][max(0, len(runs[d]) - shape.backlog) :] for d in runs}
    head = {d: runs[d][: len(runs[d]) - len(tail[d])] for d in runs}
    started = time.perf_counter()
    entries = 0
    compactions: list[dict[str, Any]] = []
    step = max(1, shape.backlog)
    rounds = max((len(h) for h in head.values()), default=0)
    for first in range(0, rounds, step):
        for d in range(shape.datasets):
            entries += write_runs(lake, truth, index, d, head[d][first : first + step])
        compactions.append(compact_all(cloud, shape))
        done = min(first + step, rounds)
        log(
            f"  {done}/{rounds} rounds of runs written and compacted, {entries:,} entries, "
            f"{time.perf_counter() - started:.0f} s"
        )
    head_s = time.perf_counter() - started
    for d in range(shape.datasets):
        entries += write_runs(lake, truth, index, d, tail[d])
    cloud.counter.take()
    return {
        "entries": entries,
        "runs": sum(len(r) for r in runs.values()),
        "backlog_runs": sum(len(t) for t in tail.values()),
        "write_and_compact_s": head_s,
        "total_s": time.perf_counter() - started,
        "compactions": len(compactions),
        "compaction_s": sum(c["seconds"] for c in compactions),
    }


# ------------------------------------------------------------------ measuring


def consulted_per_dataset(cloud: Cloud, shape: Shape) -> dict[str, dict[str, int]]:
    """Per dataset, the segments a lookup of one hash consults (level 1 and level 0), from the
    manifest (one partition: every hash the same; more: the most of any partition)."""
    index = cloud.open()
    out: dict[str, dict[str, int]] = {}
    for dataset in shape.dataset_ids():
        bits = index.manifest.partition_bits(dataset) or 0
        listed = index.manifest.listing(dataset)
        per = split_consulted(listed, range(1 << bits))
        worst = max(per.values(), key=len) if per else []
        out[dataset] = {
            "level1": sum(1 for s in worst if s.level == 1),
            "level0": sum(1 for s in worst if s.level == 0),
            # the carried-pointers file a lookup reads to derive its objects' pointers
            "carried": len(listed.active_carried),
        }
    cloud.counter.take()
    return out


def expected(truth: Truth, lake: Lake, i: int) -> set[tuple[str, str]]:
    return truth.where.get(i, set())


def one_lookup(
    cloud: Cloud, index: SegmentSubjectIndex, lake: Lake, truth: Truth, i: int
) -> dict[str, Any]:
    h = lake.hashes[i]
    index.counter.reset()
    cloud.counter.take()
    cloud.counter.take_seconds()
    started = time.perf_counter()
    found = index.lookup(h)
    seconds = time.perf_counter() - started
    calls = cloud.counter.take()
    inside = cloud.counter.take_seconds()
    got = {(e.dataset_id, e.object_url) for e in found if not e.deleted}
    return {
        "seconds": seconds,
        "entries": len(found),
        "complete": got == expected(truth, lake, i),
        "s3_gets": index.counter.gets,
        "s3_bytes": index.counter.bytes,
        "s3_keys": len(index.counter.by_key),
        "s3_calls": s3_calls(calls),
        "dynamodb_calls": dynamodb_calls(calls),
        "seconds_in_s3_calls": inside.get("s3", 0.0),
        "seconds_in_dynamodb_calls": inside.get("dynamodb", 0.0),
        "calls": calls,
    }


def summary(lookups: list[dict[str, Any]]) -> dict[str, Any]:
    times = sorted(x["seconds"] for x in lookups)
    calls: Counter[str] = Counter()
    for x in lookups:
        calls.update(x["calls"])
    return {
        "k": len(lookups),
        "seconds_total": sum(times),
        "seconds_median": times[len(times) // 2] if times else 0.0,
        "seconds_max": times[-1] if times else 0.0,
        "s3_gets": sum(x["s3_gets"] for x in lookups),
        "s3_bytes": sum(x["s3_bytes"] for x in lookups),
        "s3_gets_max_per_lookup": max((x["s3_gets"] for x in lookups), default=0),
        "s3_keys_max_per_lookup": max((x["s3_keys"] for x in lookups), default=0),
        "dynamodb_calls": sum(x["dynamodb_calls"] for x in lookups),
        "seconds_in_s3_calls": sum(x["seconds_in_s3_calls"] for x in lookups),
        "seconds_in_dynamodb_calls": sum(x["seconds_in_dynamodb_calls"] for x in lookups),
        "entries": sum(x["entries"] for x in lookups),
        "complete": all(x["complete"] for x in lookups),
        "calls": dict(sorted(calls.items())),
        "per_lookup": [{k: v for k, v in x.items() if k != "calls"} for x in lookups],
    }


def batched_call(index: SegmentSubjectIndex) -> str:
    """The name of the index's one call for many subjects over every dataset."""
    return "lookup_many" if callable(getattr(index, "lookup_many", None)) else "lookup_across"


def lookup_many(index: SegmentSubjectIndex, hashes: list[str]) -> list[tuple[str, str, str]]:
    """(hash, dataset, object URL) of every live entry of `hashes` in every dataset, in ONE
    call: the index's `lookup_many` (hash -> entries) when it has one, else `lookup_across`
    over the listed datasets (what `lookup(h)` runs for one hash, given them all)."""
    found: list[tuple[str, str, str]] = []
    many = getattr(index, "lookup_many", None)
    if callable(many):
        for h, entries in many(hashes).items():
            found += [(h, e.dataset_id, e.object_url) for e in entries if not e.deleted]
        return found
    per_dataset = index.reads.lookup_across(index.manifest.datasets(), hashes)
    for dataset, by_hash in per_dataset.items():
        for h, entries in by_hash.items():
            found += [(h, dataset, e.object_url) for e in entries if not e.deleted]
    return found


def batched(
    cloud: Cloud,
    index: SegmentSubjectIndex,
    lake: Lake,
    truth: Truth,
    chosen: list[int],
    *,
    per_dataset: bool,
) -> dict[str, Any]:
    """The same K in one batched call over every dataset (`lookup_many`), or with
    `lookup_in(dataset, hashes)`, one call per dataset (`per_dataset`)."""
    index.counter.reset()
    cloud.counter.take()
    cloud.counter.take_seconds()
    hashes = [lake.hashes[i] for i in chosen]
    started = time.perf_counter()
    got: set[tuple[str, str, str]] = set()
    if per_dataset:
        for dataset in lake.shape.dataset_ids():
            for h, entries in index.lookup_in(dataset, hashes).items():
                got |= {(h, dataset, e.object_url) for e in entries if not e.deleted}
    else:
        got = set(lookup_many(index, hashes))
    seconds = time.perf_counter() - started
    calls = cloud.counter.take()
    inside = cloud.counter.take_seconds()
    want = {(lake.hashes[i], d, u) for i in chosen for d, u in expected(truth, lake, i)}
    return {
        "call": "lookup_in" if per_dataset else batched_call(index),
        "seconds": seconds,
        "s3_gets": index.counter.gets,
        "s3_bytes": index.counter.bytes,
        "s3_keys": len(index.counter.by_key),
        "dynamodb_calls": dynamodb_calls(calls),
        "seconds_in_s3_calls": inside.get("s3", 0.0),
        "seconds_in_dynamodb_calls": inside.get("dynamodb", 0.0),
        "complete": got == want,
        "calls": dict(sorted(calls.items())),
    }


def measure(
    cloud: Cloud, lake: Lake, truth: Truth, first: list[int], second: list[int]
) -> dict[str, Any]:
    consulted = consulted_per_dataset(cloud, lake.shape)
    each = [one_lookup(cloud, cloud.open(), lake, truth, i) for i in first]
    index = cloud.open()
    cold = [one_lookup(cloud, index, lake, truth, i) for i in first]
    warm = [one_lookup(cloud, index, lake, truth, i) for i in first]
    warm_new = [one_lookup(cloud, index, lake, truth, i) for i in second]
    per_lookup = sum(c["level1"] + c["level0"] for c in consulted.values())
    return {
        "segments_consulted_per_lookup": per_lookup,
        "carried_files_per_lookup": sum(c.get("carried", 0) for c in consulted.values()),
        "segments_consulted_by_dataset": consulted,
        "cold_each": summary(each),
        "cold": summary(cold),
        "warm": summary(warm),
        "warm_new_subjects": summary(warm_new),
        "batched_all_cold": batched(cloud, cloud.open(), lake, truth, first, per_dataset=False),
        "batched_all_cold_one_thread": batched(
            cloud, one_thread(cloud.open()), lake, truth, first, per_dataset=False
        ),
        "batched_cold": batched(cloud, cloud.open(), lake, truth, first, per_dataset=True),
    }


def one_thread(index: SegmentSubjectIndex) -> SegmentSubjectIndex:
    """The index with its lookup's reads one after the other (no thread pool): what the
    concurrent reads gain."""
    index.reads.threads = 1
    return index


def pick(truth: Truth, rng: random.Random, k: int, taken: set[int]) -> list[int]:
    """K watched subjects that the lake holds, not in `taken`."""
    pool = sorted(i for i in truth.where if i not in taken)
    return rng.sample(pool, min(k, len(pool)))


# ------------------------------------------------------------------ the run


def machine_facts() -> dict[str, Any]:
    from report import machine_facts as facts  # noqa: PLC0415 - bench/ on sys.path

    found: dict[str, Any] = facts()
    return found


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    started = time.perf_counter()
    load_start = os.getloadavg()
    shape = Shape(
        objects=args.objects,
        datasets=args.datasets,
        subjects=args.subjects,
        min_subjects=args.min_subjects,
        max_subjects=args.max_subjects,
        run_objects=args.run_objects,
        backlog=args.backlog,
        seed=args.seed,
    )
    lake = Lake(shape)
    rng = random.Random(args.seed)
    watched = set(rng.sample(range(shape.subjects), min(shape.subjects, 20 * args.k)))
    truth = Truth(watched)
    undo = configure_moto()  # the local cloud's moto: see the module docstring
    try:
        measured = _run_on_moto(args, lake, rng, truth, log=log)
    finally:
        undo()
    load_end = os.getloadavg()
    return {
        "benchmark": "index-lookup",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": machine_facts()
        | {"load_average_start": list(load_start), "load_average_end": list(load_end)},
        "cloud": CLOUD,
        "factory": {
            "opened_with": "lethe_shared.index.opening.open_subject_index",
            "hash_bytes": SEGMENT_HASH_BYTES,
            "partition_bits": SEGMENT_PARTITION_BITS,
        },
        "k": args.k,
        **measured,
        "runtime_s": time.perf_counter() - started,
    }


def _run_on_moto(
    args: argparse.Namespace, lake: Lake, rng: random.Random, truth: Truth, *, log: Any
) -> dict[str, Any]:
    shape = lake.shape
    with mock_aws():
        cloud = make_cloud()
        log(f"writing {shape.objects:,} objects in {shape.datasets} datasets")
        built = build(cloud, lake, truth, log)
        first = pick(truth, rng, args.k, set())
        second = pick(truth, rng, args.k, set(first))
        files, index_bytes = bucket_bytes(cloud.s3)
        log("measuring with the backlog")
        before = measure(cloud, lake, truth, first, second)
        before |= {"index_files": files, "index_bytes": index_bytes}
        final = compact_all(cloud, shape)
        cloud.counter.take()
        files, index_bytes = bucket_bytes(cloud.s3)
        log("measuring after compaction")
        after = measure(cloud, lake, truth, first, second)
        after |= {"index_files": files, "index_bytes": index_bytes}
        pointers = sum(len(cloud.open().reads.all_pointers(d)) for d in shape.dataset_ids())
        overrides = sum(
            1 for d in shape.dataset_ids() for _ in cloud.open().manifest.all_overrides(d)
        )
    return {
        "lake": {
            "objects": shape.objects,
            "datasets": shape.datasets,
            "subject_population": shape.subjects,
            "subjects_in_lake": len(truth.subjects_seen),
            "subjects_per_object": [shape.min_subjects, shape.max_subjects],
            "entries": built["entries"],
            "run_objects": shape.run_objects,
            "backlog": shape.backlog,
            "seed": shape.seed,
            "pointers": pointers,  # objects with a pointer (derived or overridden)
            "override_items": overrides,  # of which override items (flag, prune, remove only)
        },
        "build": built,
        "final_compaction": final,
        "before_compaction": before,
        "after_compaction": after,
    }


# ------------------------------------------------------------------ reporting


def _outside(m: Mapping[str, Any], seconds: float) -> float:
    """The wall time not spent inside AWS calls: the product's own (and the bench's hooks)."""
    inside = float(m.get("seconds_in_dynamodb_calls", 0.0)) + float(
        m.get("seconds_in_s3_calls", 0.0)
    )
    return seconds - inside


def _row(label: str, m: Mapping[str, Any], phase: Mapping[str, Any]) -> str:
    per = m["per_lookup"]
    keys = max((x["s3_keys"] for x in per), default=0)
    return (
        f"| {label} | {m['k']} | {m['seconds_total']:.3f} | {m['seconds_max']:.3f} "
        f"| {m.get('seconds_in_dynamodb_calls', 0.0):.3f} "
        f"| {m.get('seconds_in_s3_calls', 0.0):.3f} "
        f"| {_outside(m, m['seconds_total']):.3f} | {m['dynamodb_calls']} "
        f"| {m['s3_gets']} | {m['s3_bytes']:,} | {m['s3_gets_max_per_lookup']} "
        f"| {keys} | {phase['segments_consulted_per_lookup']} "
        f"| {m['entries']} | {'yes' if m['complete'] else 'NO'} |"
    )


def _batched_row(label: str, b: Mapping[str, Any], k: int, phase: Mapping[str, Any]) -> str:
    inside = "seconds_in_dynamodb_calls" in b
    return (
        f"| {label} | {k} | {b['seconds']:.3f} | - "
        + (
            f"| {b['seconds_in_dynamodb_calls']:.3f} | {b['seconds_in_s3_calls']:.3f} "
            f"| {_outside(b, b['seconds']):.3f} "
            if inside
            else "| - | - | - "
        )
        + f"| {b['dynamodb_calls']} | {b['s3_gets']} | {b['s3_bytes']:,} | - "
        f"| {b.get('s3_keys', '-')} | {phase['segments_consulted_per_lookup']} | - "
        f"| {'yes' if b['complete'] else 'NO'} |"
    )


def markdown(result: Mapping[str, Any]) -> str:
    lake = result["lake"]
    built = result["build"]
    machine = result.get("machine", {})
    ls, le = machine.get("load_average_start"), machine.get("load_average_end")
    load = f"load average {ls[0]:.2f} at the start, {le[0]:.2f} at the end" if ls and le else ""
    lines = [
        f"Run of {result['date_utc']}, git `{machine.get('git_commit', '?')}`, "
        f"command `{result['command']}`, {load}, {result['runtime_s']:.0f} s in all. "
        f"JSON: `bench/results/{OUT_NAME}`.",
        "",
        f"Simulated lake: **{lake['objects']:,} objects** in {lake['datasets']} datasets, "
        f"{lake['entries']:,} index entries ({lake['subjects_per_object'][0]}-"
        f"{lake['subjects_per_object'][1]} subjects per object, "
        f"{lake['subjects_in_lake']:,} distinct subjects), generated directly (no lake files) "
        f"and written through `replace_objects` as {built['runs']:,} ingestion runs of "
        f"{lake['run_objects']} objects, compacted {built['compactions']} times on the way; "
        f"index opened with `open_subject_index` ({result['factory']['hash_bytes']}-byte keys, "
        f"{1 << result['factory']['partition_bits']} partition per dataset); "
        f"{result['cloud']}. Wall times are moto's, without the network's latency; "
        '"outside AWS calls" is the wall time minus the time inside S3 and DynamoDB calls: '
        "the product's own work (decoding, merging) and the bench's call hooks.",
        "",
        "| phase | K | seconds, K lookups | slowest lookup s | s in DynamoDB calls "
        "| s in S3 calls | s outside AWS calls | DynamoDB calls | S3 GETs | S3 bytes "
        "| GETs, most in one lookup | files, most in one lookup | segments consulted per lookup "
        "| entries | complete |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for phase_name, phase_key in (
        (f"backlog ({lake['backlog']} level-0 per dataset)", "before_compaction"),
        ("compacted", "after_compaction"),
    ):
        phase = result[phase_key]
        for label, key in (
            ("each on a new index", "cold_each"),
            ("cold start", "cold"),
            ("warm, same K", "warm"),
            ("warm, K other subjects", "warm_new_subjects"),
        ):
            lines.append(_row(f"{phase_name}, `lookup`, {label}", phase[key], phase))
        every = phase.get("batched_all_cold")
        if every is not None:
            label = f"{phase_name}, `{every['call']}` (all K in one call), cold"
            lines.append(_batched_row(label, every, result["k"], phase))
        alone = phase.get("batched_all_cold_one_thread")
        if alone is not None:
            label = (
                f"{phase_name}, `{alone['call']}` (all K in one call), reads in one thread, cold"
            )
            lines.append(_batched_row(label, alone, result["k"], phase))
        label = f"{phase_name}, `lookup_in` per dataset, cold"
        lines.append(_batched_row(label, phase["batched_cold"], result["k"], phase))
    after = result["after_compaction"]
    lines += [
        "",
        f"Index after the final compaction: {after['index_files']:,} files, "
        f"{after['index_bytes']:,} bytes; "
        + (
            f"manifest pointers: {lake['pointers']:,}. "  # a run with a pointer item per object
            if "override_items" not in lake
            else f"objects with a pointer: {lake['pointers']:,} (override items: "
            f"{lake['override_items']:,}). "
        )
        + f"Build: {built['total_s']:.0f} s (of which compaction {built['compaction_s']:.0f} s); "
        f"final compaction {result['final_compaction']['seconds']:.1f} s.",
        "",
        "DynamoDB calls per cold `lookup` after compaction: "
        + ", ".join(
            f"{k.split('.', 1)[1]} {v / after['cold']['k']:.1f}"
            for k, v in after["cold"]["calls"].items()
            if k.startswith("dynamodb.")
        )
        + "; S3: "
        + ", ".join(
            f"{k.split('.', 1)[1]} {v / after['cold']['k']:.1f}"
            for k, v in after["cold"]["calls"].items()
            if k.startswith("s3.")
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def _split(m: Mapping[str, Any]) -> str:
    """Where K lookups' wall time went: inside DynamoDB calls, S3 calls, outside them."""
    seconds = m["seconds_total"] if "seconds_total" in m else m["seconds"]
    return (
        f"{m.get('seconds_in_dynamodb_calls', 0.0):.2f} s in DynamoDB calls, "
        f"{m.get('seconds_in_s3_calls', 0.0):.2f} s in S3 calls, "
        f"{_outside(m, seconds):.2f} s outside them"
    )


def product_path(result: Mapping[str, Any]) -> str:
    """How the product looks K subjects up in this run's code: `lookup_many` (the erasure
    report, the index update and `lethe index lookup` make one call for all their subjects)
    when the index had it, else `lookup` once per subject (what they did before it)."""
    every = result["after_compaction"].get("batched_all_cold")
    return "lookup_many" if every is not None and every["call"] == "lookup_many" else "lookup"


def _judged_seconds(phase: Mapping[str, Any], path: str) -> float:
    if path == "lookup_many":
        return float(phase["batched_all_cold"]["seconds"])
    return float(phase["cold"]["seconds_total"])


def targets(result: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(item, target, measured, verdict): K subjects looked up as the product's callers look
    them up (`product_path`: ONE `lookup_many` call for all K when the index has it, else
    `lookup` once per subject) from a cold start at the lake size run, compacted and with the
    backlog, judged on the slower of the two; the other way beside it; the S3 reads per lookup
    against the segments it consults."""
    lake = result["lake"]
    k = result["k"]
    n = f"{lake['objects']:,}"
    after, before = result["after_compaction"], result["before_compaction"]
    path = product_path(result)
    worst = max(_judged_seconds(after, path), _judged_seconds(before, path))
    complete = all(
        p[x]["complete"]
        for p in (after, before)
        for x in ("cold_each", "cold", "warm", "warm_new_subjects", "batched_cold")
    ) and all(
        p[x]["complete"]
        for p in (after, before)
        for x in ("batched_all_cold", "batched_all_cold_one_thread")
        if x in p
    )
    size_ok = lake["objects"] >= TARGET_OBJECTS
    met = worst <= TARGET_SECONDS and complete and size_ok
    phases = (
        ("compacted", _judged_seconds(after, path)),
        ("with the backlog", _judged_seconds(before, path)),
    )
    over = [f"by {t - TARGET_SECONDS:.2f} s {name}" for name, t in phases if t > TARGET_SECONDS]
    under = [name for name, t in phases if t <= TARGET_SECONDS]
    verdict = "met" if met else f"missed {', '.join(over)}".strip()
    if over and under:
        verdict += f" (met {under[0]})"
    if not size_ok:
        verdict += " (smaller lake)"
    loop = (
        f"`lookup` x {k} from a cold start: {after['cold']['seconds_total']:.2f} s "
        f"compacted ({_split(after['cold'])}), {before['cold']['seconds_total']:.2f} s "
        f"with a backlog of {lake['backlog']} level-0 per dataset ({_split(before['cold'])})"
        f"; warm {after['warm_new_subjects']['seconds_total']:.2f} s"
    )
    consulted = after["segments_consulted_per_lookup"]
    gets = after["cold_each"]["s3_gets_max_per_lookup"]
    files = after["cold_each"]["s3_keys_max_per_lookup"]
    # each consulted segment's two files, and each dataset's carried-pointers file
    carried, carried_before = (p.get("carried_files_per_lookup", 0) for p in (after, before))
    bounded = files <= 2 * consulted + carried
    if "batched_all_cold" in after:
        a, b = after["batched_all_cold"], before["batched_all_cold"]
        if path == "lookup_many":
            measured = (
                f"`lookup_many` of all {k} in one call (the erasure report's) from a cold "
                f"start: {a['seconds']:.2f} s compacted ({_split(a)}), {b['seconds']:.2f} s "
                f"with a backlog of {lake['backlog']} level-0 per dataset ({_split(b)}); "
                f"one at a time, " + loop
            )
        else:
            measured = (
                loop + f"; all {k} in one `{a['call']}` call: {a['seconds']:.2f} s compacted, "
                f"{b['seconds']:.2f} s with the backlog"
            )
        reads = (
            f"; the one call for all {k}: {a['s3_gets']} GETs of {a['s3_keys']} files "
            f"({b['s3_gets']} GETs of {b['s3_keys']} files with the backlog)"
        )
        bounded = bounded and a["s3_keys"] <= 2 * consulted + carried
        bounded = bounded and b["s3_keys"] <= (
            2 * before["segments_consulted_per_lookup"] + carried_before
        )
    else:
        measured, reads = loop, ""
    return [
        (
            f"4 lookup K = {k} at {n} objects (simulated: moto with the local cloud's "
            "adaptations): time",
            f"<= {TARGET_SECONDS:g} s at {TARGET_OBJECTS:,} objects",
            measured + ("" if complete else "; INCOMPLETE answers"),
            verdict,
        ),
        (
            f"4 lookup at {n} objects: S3 reads per lookup after compaction",
            "bounded by the segments consulted",
            f"at most {gets} GETs of {files} files per cold lookup, {consulted} segments "
            f"consulted ({lake['datasets']} datasets x 1 level-1) and {carried} carried-pointer "
            "files; "
            f"{before['cold_each']['s3_gets_max_per_lookup']} GETs with "
            f"{before['segments_consulted_per_lookup']} segments before compaction" + reads,
            "met" if bounded else "missed",
        ),
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, default=TARGET_OBJECTS)
    parser.add_argument("--datasets", type=int, default=4)
    parser.add_argument("--subjects", type=int, default=2_000_000, help="subject population")
    parser.add_argument("--min-subjects", type=int, default=50, help="subjects per object, least")
    parser.add_argument("--max-subjects", type=int, default=200, help="subjects per object, most")
    parser.add_argument("--run-objects", type=int, default=500, help="objects per ingestion run")
    parser.add_argument(
        "--backlog", type=int, default=8, help="level-0 segments per dataset before compaction"
    )
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--out-json", type=Path, default=BENCH_DIR / "results" / OUT_NAME)
    args = parser.parse_args(argv)
    if args.min_subjects < 1 or args.max_subjects < args.min_subjects:
        parser.error("need 1 <= --min-subjects <= --max-subjects")
    if args.max_subjects > args.subjects:
        parser.error("--max-subjects exceeds --subjects")
    if args.objects < args.datasets or args.run_objects < 1 or args.backlog < 1:
        parser.error("need --objects >= --datasets, --run-objects >= 1, --backlog >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
    ):
        os.environ.setdefault(name, value)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    args = parse_args(argv)
    result = run(args)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"results: {args.out_json} ({result['runtime_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
