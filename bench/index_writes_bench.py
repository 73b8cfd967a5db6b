"""DynamoDB writes per ingested row on the segment subject index, counted on the real ingest job.

    python bench/index_writes_bench.py                       # the three default shapes, ~16 min
    python bench/index_writes_bench.py --shapes 200x2000     # the benchmark lake only
    python bench/index_writes_bench.py --shapes 4x500 --no-compaction --out-json /tmp/w.json

Issue 20's target: at most 0.001 DynamoDB writes per ingested row for the segment index as
deployed (`IndexStore=segments`, `open_subject_index`: 48-bit prefixes, one partition). Per shape
(objects x rows per object, optionally `pN`: Spark's default parallelism N, so that each stage
has N tasks; the first shape is the benchmark lake of bench/segment_bench.py and
bench/segment_store_bench.py: bench/generate_lake.py's defaults, Parquet, one date per object;
by default then 20 x 20,000 rows, and the benchmark lake with 12 tasks per stage, as many as
the default Glue ingest job's executor cores: 4 G.1X workers, 3 executors of 4 cores):

1. the lake generated (`generate_lake.generate`, the shape's objects and rows, the other lake
   flags as given) and uploaded to a moto server on 127.0.0.1 (`bench/moto_cloud.py`: the
   stack's tables, the index bucket and manifest table), each upload's catalog item put as the
   object events function puts it;
2. the uploads grouped into ingest job runs by the object events path's real code
   (`lethe_shared.ingestion.starter.plan_groups`, SQS batches of `--batch-size`, the template's
   IngestionBatchSize by default), and each run's real ingest job (`spark_jobs/ingest.py` as a
   subprocess, `ingest_bench.run_job`) run on the segment index (`--index-store segments`);
   every object checked INGESTED with all its rows written;
3. then one compaction of the lake: the real compaction job (`spark_jobs/compact.py`,
   `--min-level0 1 --settle-seconds 0`) folding every level-0 segment into level 1.

Counted, not estimated: a WSGI wrapper around the moto server's app (`WriteCounter`) reads every
DynamoDB write request (PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems)
that any process sends (the job's driver, its Spark workers, the bench itself), and counts its
ITEMS by table and by kind of item: on the manifest table pointer overrides (`obj#`: ingestion
writes none, a level-0 item records the objects it describes; compaction writes none either:
what the level-0 items it retires said goes to the dataset's carried-pointers file in S3, named
by one `seg#` item), segment items (`seg#`), the dataset's configuration (`datasets`, `cfg#`)
and the compaction lease; on the catalog table catalog items and writes-ledger items
(`ledger#`); condition checks of a transaction apart (they are not writes). A request DynamoDB
refused (a failed condition) is counted too, and apart: DynamoDB bills it.

Results: `--out-json` (bench/results/index_writes_latest.json) and Markdown on stdout;
bench/report.py renders the section and two rows of the Targets table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
COMPACT_SCRIPT = REPO / "spark_jobs" / "compact.py"
OUT_NAME = "index_writes_latest.json"
TARGET = 0.001  # DynamoDB writes per ingested row, at most (issue 20)
# (objects, rows per object, Spark's default parallelism or 0: local[cores]'s): the benchmark
# lake first (judged); then 10x the rows per object; then the benchmark lake with as many tasks
# per stage as the default Glue ingest job has executor cores (every ingest task writes a segment)
DEFAULT_SHAPES = ((200, 2000, 0), (20, 20_000, 0), (200, 2000, 12))
GLUE_PARALLELISM = 12
WRITE_ACTIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)
TRANSACT_OPS = {"Put": "put", "Update": "update", "Delete": "delete", "ConditionCheck": "check"}


# ---------------------------------------------------------------------- the writes, counted


MANIFEST_KINDS = (("obj#", "pointer"), ("seg#", "segment"), ("cfg#", "dataset"))
MANIFEST_KEYS = {"datasets": "dataset", "compaction-lease": "lease"}


def item_kind(role: str, key: str) -> str:
    """The kind of an item, from its table's role and its partition key's value."""
    if role == "manifest":
        if key in MANIFEST_KEYS:
            return MANIFEST_KEYS[key]
        return next((kind for prefix, kind in MANIFEST_KINDS if key.startswith(prefix)), "other")
    if role == "catalog":
        return "ledger" if key.startswith("ledger#") else "catalog"
    return role


def _key_value(attributes: Mapping[str, Any]) -> str:
    """The partition key's value of an item or key (`pk` on the manifest, `object_url` on the
    catalog; any other table: its first attribute)."""
    for name in ("pk", "object_url", *attributes):
        value = attributes.get(name)
        if isinstance(value, dict) and value:
            return str(next(iter(value.values())))
    return ""


def write_items(action: str, request: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(table, partition key value, op) of every item a DynamoDB write request names; op is
    put, update, delete or check (a transaction's ConditionCheck: not a write)."""
    if action in {"PutItem", "UpdateItem", "DeleteItem"}:
        attributes = request.get("Item") or request.get("Key") or {}
        op = {"PutItem": "put", "UpdateItem": "update", "DeleteItem": "delete"}[action]
        yield str(request.get("TableName", "")), _key_value(attributes), op
    elif action == "BatchWriteItem":
        for table, requests in request.get("RequestItems", {}).items():
            for one in requests:
                if "PutRequest" in one:
                    yield table, _key_value(one["PutRequest"].get("Item", {})), "put"
                else:
                    yield table, _key_value(one.get("DeleteRequest", {}).get("Key", {})), "delete"
    elif action == "TransactWriteItems":
        for one in request.get("TransactItems", []):
            for name, op in TRANSACT_OPS.items():
                if name in one:
                    body = one[name]
                    attributes = body.get("Item") or body.get("Key") or {}
                    yield str(body.get("TableName", "")), _key_value(attributes), op


class WriteCounter:
    """A WSGI wrapper around the moto server's app: every DynamoDB write request's items
    counted by (table role, kind, action, op), and whether DynamoDB accepted the request."""

    def __init__(self, app: Any, roles: Mapping[str, str]) -> None:
        self.app = app
        self.roles = dict(roles)  # table name -> role (manifest, catalog, ...)
        self.lock = threading.Lock()
        self.items: Counter[tuple[str, str, str, str, bool]] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()  # (action, role of its first item)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        action = target.partition(".")[2] if target.startswith("DynamoDB") else ""
        if action not in WRITE_ACTIONS:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        status: list[str] = []

        def started(line: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(line)
            return start_response(line, headers, exc_info)

        answer = list(self.app(environ, started))  # the status is known once it has answered
        self.record(action, json.loads(body or b"{}"), bool(status) and status[0][:3] == "200")
        return answer

    def record(self, action: str, request: Mapping[str, Any], accepted: bool) -> None:
        found = [
            (self.roles.get(table, table), key, op)
            for table, key, op in write_items(action, request)
        ]
        with self.lock:
            for role, key, op in found:
                self.items[(role, item_kind(role, key), action, op, accepted)] += 1
            if found:
                self.calls[(action, found[0][0])] += 1

    def take(self) -> dict[str, Any]:
        """What was counted since the last take (then forgotten), as `summarize` shapes it."""
        with self.lock:
            items, calls = Counter(self.items), Counter(self.calls)
            self.items.clear()
            self.calls.clear()
        return summarize(items, calls)


def summarize(
    items: Mapping[tuple[str, str, str, str, bool], int], calls: Mapping[tuple[str, str], int]
) -> dict[str, Any]:
    """Per table role: written items (put, update, delete; accepted or not) by kind, by action
    and by op; refused items; transactional items; condition checks; requests by action."""
    roles: dict[str, dict[str, Any]] = {}
    for (role, kind, action, op, accepted), n in sorted(items.items()):
        entry = roles.setdefault(
            role,
            {"writes": 0, "by_kind": {}, "by_action": {}, "by_op": {}, "refused": 0,
             "transactional": 0, "condition_checks": 0, "requests": {}},
        )  # fmt: skip
        if op == "check":
            entry["condition_checks"] += n
            continue
        entry["writes"] += n
        entry["by_kind"][kind] = entry["by_kind"].get(kind, 0) + n
        entry["by_action"][action] = entry["by_action"].get(action, 0) + n
        entry["by_op"][op] = entry["by_op"].get(op, 0) + n
        entry["refused"] += 0 if accepted else n
        entry["transactional"] += n if action == "TransactWriteItems" else 0
    for (action, role), n in sorted(calls.items()):
        if role in roles:
            roles[role]["requests"][action] = roles[role]["requests"].get(action, 0) + n
    return roles


def writes_of(counted: Mapping[str, Any], role: str, kind: str | None = None) -> int:
    entry = counted.get(role)
    if entry is None:
        return 0
    return int(entry["writes"] if kind is None else entry["by_kind"].get(kind, 0))


def merged(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several `summarize` answers added up."""
    total: dict[str, Any] = {}
    for part in parts:
        for role, entry in part.items():
            into = total.setdefault(
                role,
                {"writes": 0, "by_kind": {}, "by_action": {}, "by_op": {}, "refused": 0,
                 "transactional": 0, "condition_checks": 0, "requests": {}},
            )  # fmt: skip
            for field in ("writes", "refused", "transactional", "condition_checks"):
                into[field] += entry[field]
            for field in ("by_kind", "by_action", "by_op", "requests"):
                for name, n in entry[field].items():
                    into[field][name] = into[field].get(name, 0) + n
    return total


@contextmanager
def counting_cloud() -> Iterator[tuple[Any, WriteCounter]]:
    """MotoCloud.start with its server's app wrapped by a WriteCounter."""
    import moto_cloud  # noqa: PLC0415

    holder: dict[str, WriteCounter] = {}
    roles = {
        moto_cloud.MANIFEST: "manifest",
        moto_cloud.CATALOG: "catalog",
        moto_cloud.DATASETS: "datasets",
        moto_cloud.INDEX: "dynamodb_index",
    }
    original = moto_cloud.ThreadedMotoServer

    class CountingServer(original):  # type: ignore[misc, valid-type]
        def start(self) -> None:
            super().start()
            server = self._server
            holder["counter"] = WriteCounter(server.app, roles)
            server.app = holder["counter"]

    moto_cloud.ThreadedMotoServer = CountingServer
    try:
        with moto_cloud.MotoCloud.start() as cloud:
            moto_cloud.ThreadedMotoServer = original
            yield cloud, holder["counter"]
    finally:
        moto_cloud.ThreadedMotoServer = original


# ---------------------------------------------------------------------- the runs


def job_runs(items: Sequence[Any], batch_size: int) -> list[Any]:
    """The ingest job runs the object events path starts for `items` (catalog items, in upload
    order) arriving in SQS batches of `batch_size`: per batch the real grouping."""
    from lethe_shared.ingestion import starter  # noqa: PLC0415

    groups = []
    for first in range(0, len(items), batch_size):
        collector = starter.IngestionCollector()
        for number, item in enumerate(items[first : first + batch_size]):
            collector.for_record(f"message-{first + number}").start(item)
        groups += collector.groups()
    return groups


def manifest_state() -> dict[str, int]:
    """The manifest's items by kind, and the segments by level and state (a scan)."""
    import boto3  # noqa: PLC0415
    import moto_cloud  # noqa: PLC0415

    table = boto3.resource("dynamodb", region_name=moto_cloud.REGION).Table(moto_cloud.MANIFEST)
    found: Counter[str] = Counter()
    kwargs: dict[str, Any] = {}
    while True:
        page = table.scan(**kwargs)
        for item in page["Items"]:
            kind = item_kind("manifest", str(item["pk"]))
            found[kind] += 1
            if kind == "segment":
                found[f"{str(item['sk'])[:2]} {item.get('state')!s}"] += 1
        if "LastEvaluatedKey" not in page:
            return dict(sorted(found.items()))
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def upload_lake(cloud: Any, lake: Any) -> list[Any]:
    """Every object of the lake uploaded, its catalog item put (`MotoCloud.upload_file`, as the
    object events function does); the catalog items, in upload order."""
    import moto_cloud  # noqa: PLC0415

    from lethe_shared.catalog.object_catalog import (  # noqa: PLC0415
        CatalogItem,
        ObjectStatus,
        Zone,
        normalize_sequencer,
    )

    dataset_id = lake.dataset["dataset_id"]
    items = []
    for path in lake.files:
        key = path.relative_to(lake.root).as_posix()
        version = cloud.upload_file(key, path, dataset_id)
        items.append(
            CatalogItem(
                bucket=moto_cloud.RAW, key=key, version_id=version, zone=Zone.RAW,
                status=ObjectStatus.RECEIVED,
                sequencer=normalize_sequencer(f"{cloud.sequencer:x}"),
                dataset_id=dataset_id,
            )
        )  # fmt: skip
    return items


def check_run(run: Any, rows_per_object: int) -> None:
    """Every object of the run INGESTED, all its rows written, none quarantined."""
    import ingest_bench  # noqa: PLC0415

    for outcome in run.summary["objects"]:
        got = (outcome["status"], outcome["rows_written"], outcome["rows_quarantined"])
        if got != ("INGESTED", rows_per_object, 0):
            raise ingest_bench.JobFailedError(
                f"{outcome['key']}: {got}, expected INGESTED, {rows_per_object} written, "
                f"0 quarantined ({outcome.get('error')})"
            )


def run_compaction(args: argparse.Namespace, cloud: Any, name: str) -> dict[str, Any]:
    """The real compaction job over every dataset with a level-0 segment, settled at once."""
    import ingest_bench  # noqa: PLC0415

    env = ingest_bench.job_environment(cloud, f"local[{args.cores}]", args.driver_memory, args.tmp)
    command = [
        sys.executable, str(COMPACT_SCRIPT), "--correlation-id", name,
        "--min-level0", "1", "--settle-seconds", "0", *cloud.index_args(),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=args.timeout, check=False, start_new_session=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the compaction job failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 1), "summary": result}


def measure_shape(
    args: argparse.Namespace, cloud: Any, counter: WriteCounter, shape: tuple[int, int, int],
    scratch: Path,
) -> dict[str, Any]:  # fmt: skip
    import generate_lake  # noqa: PLC0415
    import ingest_bench  # noqa: PLC0415

    objects, rows_per_object, parallelism = shape
    name = f"{objects}x{rows_per_object}" + (f"p{parallelism}" if parallelism else "")
    conf = [f"spark.default.parallelism={parallelism}"] if parallelism else []
    lake = generate_lake.generate(
        scratch / f"lake-{name}", objects=objects, rows_per_object=rows_per_object,
        subjects=args.subjects, skew=args.skew, seed=args.seed, fmt="parquet",
    )  # fmt: skip
    rows = lake.rows
    print(f"== {name}: {objects} objects, {rows:,} rows", flush=True)
    cloud.reset()
    cloud.register(lake.dataset)
    counter.take()
    items = upload_lake(cloud, lake)
    uploads = counter.take()
    runs = []
    for number, group in enumerate(job_runs(items, args.batch_size)):
        batch = [
            {"dataset_id": i.dataset_id, "key": i.key, "version_id": i.version_id}
            for i in group.items
        ]
        run = ingest_bench.run_job(
            cloud, batch, rows=len(batch) * rows_per_object,
            correlation_id=f"bench-writes-{name}-{number}", master=f"local[{args.cores}]",
            driver_memory=args.driver_memory, timeout=args.timeout, tmp=args.tmp, conf=conf,
        )  # fmt: skip
        check_run(run, rows_per_object)
        counted = counter.take()
        shown = run.to_json()
        runs.append(
            {
                "objects": len(batch),
                "rows": shown["rows"],
                "lake_files": shown["lake_files"],
                "wall_s": shown["wall_s"],
                "writes": counted,
            }
        )
        print(
            f"   run {number}: {len(batch)} objects, {shown['wall_s']:.0f} s, "
            f"{writes_of(counted, 'manifest')} manifest writes",
            flush=True,
        )
    after_ingest = manifest_state()
    compaction = None
    if not args.no_compaction:
        done = run_compaction(args, cloud, f"bench-writes-{name}-compact")
        compaction = {**done, "writes": counter.take(), "manifest_after": manifest_state()}
        print(
            f"   compaction: {done['wall_s']:.0f} s, "
            f"{writes_of(compaction['writes'], 'manifest')} manifest writes",
            flush=True,
        )
    ingest = merged(r["writes"] for r in runs)
    lake_files = sum(r["lake_files"] for r in runs)
    return {
        "shape": name,
        "objects": objects,
        "rows_per_object": rows_per_object,
        "parallelism": parallelism,  # 0: local[cores]'s default
        "rows": rows,
        "job_runs": len(runs),
        "lake_files": lake_files,
        "objects_indexed": objects + lake_files,  # raw objects and lake files
        "level0_segments": after_ingest.get("L0 active", 0),
        "uploads": uploads,
        "runs": runs,
        "ingest": ingest,
        "manifest_after_ingest": after_ingest,
        "compaction": compaction,
    }


def machine(load_start: float) -> dict[str, Any]:
    import ingest_bench  # noqa: PLC0415

    facts = ingest_bench.machine_facts()
    facts["load_average_1m_at_start"] = round(load_start, 2)
    return facts


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    started = dt.datetime.now(dt.UTC)
    scratch = Path(tempfile.mkdtemp(prefix="lethe-index-writes-", dir=args.tmp))
    try:
        with counting_cloud() as (cloud, counter):
            cloud.index_store = "segments"
            shapes = [measure_shape(args, cloud, counter, s, scratch) for s in args.shapes]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "benchmark": "index-writes",
        "date_utc": started.isoformat(timespec="seconds"),
        "command": shlex.join(["python", "bench/index_writes_bench.py", *args.argv]),
        "settings": {
            "batch_size": args.batch_size,
            "subjects": args.subjects,
            "skew": args.skew,
            "seed": args.seed,
            "cores": args.cores,
            "driver_memory": args.driver_memory,
            "index": "segments, as open_subject_index opens them (48-bit prefixes, 1 partition)",
        },
        "target": TARGET,
        "shapes": shapes,
        "machine": machine(load_start),
        "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
    }


# ---------------------------------------------------------------------- report


def label(shape: Mapping[str, Any]) -> str:
    """`200 x 2,000 rows`, and `, 12 tasks per stage` when the parallelism was set."""
    text = f"{shape['objects']} x {shape['rows_per_object']:,} rows"
    return text + (f", {shape['parallelism']} tasks per stage" if shape.get("parallelism") else "")


def per_row(shape: Mapping[str, Any], writes: int) -> float:
    return writes / int(shape["rows"])


def compaction_writes(shape: Mapping[str, Any]) -> int | None:
    compaction = shape.get("compaction")
    return None if compaction is None else writes_of(compaction["writes"], "manifest")


def verdict(value: float, target: float = TARGET) -> str:
    return "met" if value <= target else "missed"


def _kinds(counted: Mapping[str, Any], role: str) -> str:
    kinds = counted.get(role, {}).get("by_kind", {})
    return ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())) or "none"


def markdown(result: Mapping[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"**DynamoDB writes per ingested row, segment index as deployed** (the real ingest job, "
        f"`local[{s['cores']}]`, on a moto server; job runs as the object events path groups "
        f"SQS batches of {s['batch_size']} uploads; items counted from every write request; "
        f"target <= {result['target']} manifest writes per ingested row)",
        "",
        "| lake | rows | job runs | objects indexed (raw + lake files) | level-0 segments "
        "| manifest writes: pointers / segment items / dataset config | **per ingested row** "
        "| verdict | compaction (one, whole lake): writes, per row |",
        "|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for shape in result["shapes"]:
        ingest = shape["ingest"]
        total = writes_of(ingest, "manifest")
        compacted = compaction_writes(shape)
        lines.append(
            f"| {label(shape)} | {shape['rows']:,} "
            f"| {shape['job_runs']} | {shape['objects_indexed']:,} "
            f"({shape['objects']} + {shape['lake_files']}) | {shape['level0_segments']} "
            f"| {total:,}: {writes_of(ingest, 'manifest', 'pointer'):,} / "
            f"{writes_of(ingest, 'manifest', 'segment'):,} / "
            f"{writes_of(ingest, 'manifest', 'dataset'):,} "
            f"| **{per_row(shape, total):.6f}** | {verdict(per_row(shape, total))} "
            + (
                "| not run |"
                if compacted is None
                else f"| {compacted:,}, {per_row(shape, compacted):.6f} |"
            )
        )
    lines += [
        "",
        "| lake | catalog items (job) | writes-ledger items (job) | catalog items at upload "
        "| DynamoDB index table | refused (failed conditions) | transactional items "
        "| write requests on the manifest |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for shape in result["shapes"]:
        ingest, rows = shape["ingest"], shape["rows"]
        catalog = writes_of(ingest, "catalog", "catalog")
        ledger = writes_of(ingest, "catalog", "ledger")
        uploads = writes_of(shape["uploads"], "catalog")
        manifest = ingest.get("manifest", {})
        requests = ", ".join(f"{a} {n:,}" for a, n in sorted(manifest.get("requests", {}).items()))
        lines.append(
            f"| {label(shape)} "
            f"| {catalog:,} ({catalog / rows:.5f} per row) "
            f"| {ledger:,} ({ledger / rows:.5f} per row) | {uploads:,} "
            f"| {writes_of(ingest, 'dynamodb_index'):,} | {manifest.get('refused', 0):,} "
            f"| {manifest.get('transactional', 0):,} | {requests or 'none'} |"
        )
    for shape in result["shapes"]:
        compaction = shape.get("compaction")
        if compaction is not None:
            lines += [
                "",
                f"Compaction of the {label(shape)} lake "
                f"({compaction['wall_s']:.0f} s): manifest writes by kind: "
                f"{_kinds(compaction['writes'], 'manifest')}; manifest afterwards: "
                + ", ".join(f"{k} {n:,}" for k, n in compaction["manifest_after"].items())
                + ".",
            ]
    return "\n".join(lines) + "\n"


def targets(result: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """The benchmark lake's writes per ingested row (the first shape) judged; the other shapes
    and compaction as context."""
    first, *others = result["shapes"]
    total = writes_of(first["ingest"], "manifest")
    value = per_row(first, total)
    pointers = writes_of(first["ingest"], "manifest", "pointer")
    segments = writes_of(first["ingest"], "manifest", "segment")
    compacted = compaction_writes(first)
    measured = (
        f"{value:.6f} ({total:,} writes for {first['rows']:,} rows: {segments:,} segment "
        f"items, {pointers:,} pointer items; {first['objects_indexed']:,} objects indexed, "
        f"{first['rows_per_object']:,} rows each)"
    )
    if compacted is not None:
        measured += f"; one compaction of the lake: {per_row(first, compacted):.6f} more"
    rows = [
        (
            f"2 segment index: DynamoDB writes per ingested row, the benchmark lake "
            f"({first['objects']} x {first['rows_per_object']:,} rows, real ingest job)",
            f"<= {result['target']}",
            measured,
            verdict(value, result["target"]),
        )
    ]
    if compacted is not None:
        # every ingested row is compacted once: the writes its first compaction makes for it
        # (level-1 and carried-pointer items, level-0 retirements) belong to it as much as
        # ingestion's do
        life = per_row(first, total + compacted)
        rows.append(
            (
                "2 segment index: DynamoDB writes per ingested row including its first "
                f"compaction, the benchmark lake ({first['objects']} x "
                f"{first['rows_per_object']:,} rows)",
                f"<= {result['target']}",
                f"{life:.6f} ({total + compacted:,} writes: ingestion {total:,}, compaction "
                f"{compacted:,}: {_kinds(first['compaction']['writes'], 'manifest')})",
                verdict(life, result["target"]),
            )
        )
    for shape in others:
        writes = writes_of(shape["ingest"], "manifest")
        rows.append(
            (
                f"2 segment index: DynamoDB writes per ingested row, {label(shape)} (context)",
                "-",
                f"{per_row(shape, writes):.6f} ({writes:,} writes)",
                "-",
            )
        )
    return rows


# ---------------------------------------------------------------------- main


def _shape(text: str) -> tuple[int, int, int]:
    """`200x2000` or `200x2000p12` -> (200, 2000, 0) or (200, 2000, 12)."""
    size, _, parallelism = text.lower().partition("p")
    objects, _, rows = size.partition("x")
    return int(objects), int(rows), int(parallelism or 0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        type=lambda t: [_shape(s) for s in t.split(",") if s],
        default=list(DEFAULT_SHAPES),
        help="objectsxrows[pN], comma separated (default 200x2000,20x20000,200x2000p12)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="uploads per SQS batch (IngestionBatchSize)"
    )
    parser.add_argument("--no-compaction", action="store_true")
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--tmp", type=Path, default=None)
    parser.add_argument("--out-json", type=Path, default=BENCH_DIR / "results" / OUT_NAME)
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.batch_size is None:
        from lethe.localcloud.template import load_template  # noqa: PLC0415

        args.batch_size = int(load_template()["Parameters"]["IngestionBatchSize"]["Default"])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, str(BENCH_DIR))
    args = parse_args(argv)
    result = run(args)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"results: {args.out_json} ({result['duration_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
