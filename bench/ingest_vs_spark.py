"""Ingestion at the speed of Spark: Lethe's ingest job against a plain Spark job, same files.

    python bench/ingest_vs_spark.py            # one 1 GiB CSV object; 100 objects of 10 MiB
    python bench/ingest_vs_spark.py --quick    # 128 MiB; 20 objects of 10 MiB (iterating)
    python bench/ingest_vs_spark.py --cases big --big-mib 256 --profile
    python bench/ingest_vs_spark.py --merge OUT.json BIG.json BATCH.json   # runs of one case each

Two cases, each a set of raw CSV objects written by bench/csv_objects.py (the ingestion
benchmark's dataset `bench_ingest`, deterministic for `--seed`): **big**, one object of
`--big-mib`; **batch**, `--objects` objects of `--object-mib` each. Per case, in the same run on
the same machine, the order alternating from one run to the next:

- **Lethe**: the real ingest job (`spark_jobs/ingest.py`, run as a subprocess as the local
  cloud's runner runs it, `ingest_bench.run_job`) ingests the case's objects as ONE batch from a
  moto server on 127.0.0.1 standing in for S3, DynamoDB and Secrets Manager
  (`bench/moto_cloud.py`; reset and the objects uploaded again before every run, untimed, so
  that every run is a first ingestion), with the subject index where a deployment keeps it by
  default, the segment store (`--index-store segments`: an index bucket and its manifest table;
  `--index-store dynamodb` for the DynamoDB index). Its outcome is checked against what the
  generator wrote (every object INGESTED, exactly its valid rows written and the others
  quarantined).
- **plain Spark**: `bench/plain_spark_ingest.py`, `spark.read.csv(files, schema=<the dataset's
  schema>, header=True).write.partitionBy("event_date").parquet(dir)`, reading the same files
  from local disk, in a process with the same environment and the same session settings.

Both are timed as processes (wall seconds from the start of the process to its end: Python and
JVM start-up included on both sides); rows/s = the case's records / wall s; the ratio is
Lethe's throughput / plain Spark's (>= 0.5 is the target, docs/BENCHMARKS.md). Also recorded:
every AWS call the job made, by service and action, with the moto server's time inside it (the
server runs in this process: a WSGI wrapper counts), and the number of subject index entries
(segments: the entries the object pointers name; DynamoDB: items).

`--profile`: one more Lethe run per case with the driver and every Python worker task under
cProfile (bench/ingest_profile.py): the driver's wall time by phase, the workers' time by what
runs, and the time inside the subject index writes (`replace_entries`).

Results: `--out-json` (bench/results/ingest_spark_latest.json) and Markdown on stdout;
bench/report.py renders the section and the plot from the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PLAIN_SCRIPT = BENCH_DIR / "plain_spark_ingest.py"
MIB = 1024 * 1024
TARGET = 0.5  # Lethe's throughput / plain Spark's, at least (issue 20, item 5)
CASES = ("big", "batch")
# the subject index writes: `replace_many` (a task's files, written together: one segment per
# task and dataset) and `replace_entries` where not called by it (the driver: an object with no
# entries; the DynamoDB store, under replace_many), and the driver settling removed files
INDEX_WRITE_FUNCTIONS = (
    ("lethe_shared/index/maintenance.py", "replace_many"),
    ("lethe_shared/index/maintenance.py", "replace_entries"),
    ("lethe_shared/index/maintenance.py", "settle_missing_key"),
)


# ---------------------------------------------------------------------- AWS calls, counted


class CallCounter:
    """A WSGI wrapper around the moto server's app: each request counted by service and action
    (DynamoDB's X-Amz-Target, S3's method and sub-resource), with its time in the server."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            _note_table(environ)
        started = time.perf_counter()
        try:
            return self.app(environ, start_response)
        finally:
            name = _call_name(environ)
            with self.lock:
                entry = self.calls[name]
                entry[0] += 1
                entry[1] += time.perf_counter() - started

    def take(self) -> dict[str, dict[str, float]]:
        """The calls counted since the last take (and forget them)."""
        with self.lock:
            taken = {
                k: {"calls": int(v[0]), "server_s": round(v[1], 3)}
                for k, v in sorted(self.calls.items())
            }
            self.calls.clear()
        return taken


def _call_name(environ: dict[str, Any]) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:  # DynamoDB_20120810.BatchWriteItem, secretsmanager.GetSecretValue
        service, _, action = target.partition(".")
        service = "dynamodb" if service.startswith("DynamoDB") else service.lower()
        table = environ.get("lethe.table", "")
        return f"{service}:{action}{' ' + table if table else ''}"
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = (
        auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
    )
    service = scope[3] if len(scope) > 3 else "?"
    if environ.get("PATH_INFO", "").startswith("/moto-api"):
        return "moto-api"
    method = environ.get("REQUEST_METHOD", "?")
    query = environ.get("QUERY_STRING", "")
    sub = next(
        (s for s in ("uploads", "uploadId", "versions", "versioning", "list-type") if s in query),
        "",
    )
    ranged = " (range)" if environ.get("HTTP_RANGE") else ""
    bucket = _bucket(environ) if service == "s3" else ""
    return f"{service}:{method}{' ?' + sub if sub else ''}{ranged}{' ' + bucket if bucket else ''}"


def _bucket(environ: dict[str, Any]) -> str:
    """The bucket an S3 request names: path style (`/<bucket>/<key>`, what boto3 sends to an
    IP endpoint), else the host's first label."""
    path = environ.get("PATH_INFO", "").lstrip("/")
    if path:
        return path.split("/", 1)[0]
    host = environ.get("HTTP_HOST", "").split(":", 1)[0]
    return host.split(".", 1)[0] if host.count(".") > 3 else ""


def _note_table(environ: dict[str, Any]) -> None:
    """Put the table (and index) a DynamoDB request names into `environ["lethe.table"]`; the
    body is read and handed on unchanged."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return
    tables = [request["TableName"]] if "TableName" in request else []
    tables += sorted(request.get("RequestItems", {}))  # BatchWriteItem, BatchGetItem
    tables += sorted(  # TransactWriteItems: each action names its table
        {
            str(action[kind]["TableName"])
            for action in request.get("TransactItems", [])
            for kind in action
            if isinstance(action[kind], dict) and "TableName" in action[kind]
        }
    )
    name = ",".join(tables)
    if request.get("IndexName"):
        name += f"/{request['IndexName']}"
    environ["lethe.table"] = name


def counting_cloud(index_store: str) -> tuple[Any, CallCounter]:
    """MotoCloud.start with its server's app wrapped by a CallCounter."""
    import moto_cloud  # noqa: PLC0415

    holder: dict[str, CallCounter] = {}

    class CountingServer(moto_cloud.ThreadedMotoServer):  # type: ignore[misc, name-defined]
        def start(self) -> None:
            super().start()
            server = self._server
            holder["counter"] = CallCounter(server.app)
            server.app = holder["counter"]

    moto_cloud.ThreadedMotoServer = CountingServer
    context = moto_cloud.MotoCloud.start(index_store)
    cloud = context.__enter__()
    return (context, cloud), holder["counter"]


# ---------------------------------------------------------------------- the objects


def make_case(args: argparse.Namespace, case: str, out: Path) -> list[Any]:
    """The case's CSV objects (deterministic for the seed): `big` one object of --big-mib,
    `batch` --objects objects of --object-mib. In `out`, with `objects.json` naming them and
    the settings they were made with: a later run with the same settings (`--data DIR`) reads
    them from there instead of writing them again."""
    import csv_objects  # noqa: PLC0415
    import generate_lake  # noqa: PLC0415

    words = args.comment_words
    if case == "big":
        sizes, first = [args.big_mib], 1000
    else:
        sizes, first = [args.object_mib] * args.objects, 0
    made_with = {
        "sizes_mib": sizes, "first": first, "subjects": args.subjects, "skew": args.skew,
        "seed": args.seed, "days": args.days, "comment_words": words,
    }  # fmt: skip
    listing = out / "objects.json"
    if listing.is_file():
        kept = json.loads(listing.read_text(encoding="utf-8"))
        if kept.get("made_with") == made_with:
            return [
                csv_objects.CsvObject(**{**o, "path": Path(o["path"])}) for o in kept["objects"]
            ]
    model = generate_lake.SubjectModel(args.subjects, args.skew, args.seed)
    objects = []
    out.mkdir(parents=True, exist_ok=True)
    for number, mib in enumerate(sizes):
        rows = csv_objects.rows_for_bytes(int(mib * MIB), comment_words=words, seed=args.seed)
        objects.append(
            csv_objects.write_object(
                out / f"{case}-{number:05d}.csv",
                index=first + number,
                rows=rows,
                model=model,
                seed=args.seed,
                days=args.days,
                comment_words=words,
            )
        )
    document = {"made_with": made_with, "objects": [o.to_json() for o in objects]}
    listing.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return objects


# ---------------------------------------------------------------------- the two jobs


def run_lethe(
    args: argparse.Namespace, cloud: Any, counter: CallCounter, objects: list[Any], name: str,
    *, profile_dir: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    import ingest_bench  # noqa: PLC0415

    batch = ingest_bench.upload(cloud, objects)  # untimed: a fresh moto state, objects uploaded
    counter.take()
    rows = sum(o.rows for o in objects)
    run = ingest_bench.run_job(
        cloud,
        batch,
        rows=rows,
        correlation_id=name,
        master=f"local[{args.cores}]",
        driver_memory=args.driver_memory,
        timeout=args.timeout,
        tmp=args.tmp,
        profile_dir=profile_dir,
    )
    calls = counter.take()
    ingest_bench.check_outcome(run, objects)
    result = run.to_json()
    result["aws_calls"] = calls
    result["rows_per_s"] = rows / run.wall_s
    return result


def run_plain(
    args: argparse.Namespace, cloud: Any, objects: list[Any], scratch: Path,
    *, conf: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    import csv_objects  # noqa: PLC0415
    import ingest_bench  # noqa: PLC0415
    from proc_tree import TreeSampler, wait_sampled  # noqa: PLC0415

    document = scratch / "dataset.json"
    document.write_text(json.dumps(csv_objects.dataset_document()), encoding="utf-8")
    out = scratch / "plain-out"
    shutil.rmtree(out, ignore_errors=True)
    env = ingest_bench.job_environment(
        cloud, f"local[{args.cores}]", args.driver_memory, args.tmp, conf
    )
    command = [
        sys.executable, str(PLAIN_SCRIPT), "--dataset", str(document), "--out", str(out),
        *[str(o.path) for o in objects],
    ]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    sampler = TreeSampler(process.pid).start()
    try:
        stdout, stderr = process.communicate(timeout=args.timeout)
        wait_sampled(process, sampler, args.timeout)
    finally:
        sampler.stop()
        ingest_bench._end_group(process)
    wall = time.perf_counter() - started
    shutil.rmtree(out, ignore_errors=True)
    if process.returncode != 0:
        raise RuntimeError(f"the plain Spark job failed ({process.returncode}): {stderr[-3000:]}")
    inside = json.loads(stdout.strip().splitlines()[-1])
    rows = sum(o.rows for o in objects)
    tree = sampler.report()
    return {
        "wall_s": round(wall, 3),
        "session_s": round(inside["session_s"], 3),
        "job_s": round(inside["job_s"], 3),
        "rows_written": inside["rows_written"],
        "rows_per_s": rows / wall,
        "processes": tree,
    }


# ---------------------------------------------------------------------- profile


def _cumulative(stats: dict[Any, Any], wanted: Sequence[tuple[str, str]]) -> float:
    """The cumulative time of the `wanted` functions, each call counted once: the time of a
    wanted function called by another wanted function is left out (it is in its caller's)."""

    def is_wanted(function: tuple[str, int, str]) -> bool:
        path = function[0].replace("\\", "/")
        return any(path.endswith(suffix) and function[2] == name for suffix, name in wanted)

    total = 0.0
    for function, (_, _, _, cumulative, callers) in stats.items():
        if not is_wanted(function):
            continue
        inner = sum(figures[3] for caller, figures in callers.items() if is_wanted(caller))
        total += cumulative - inner
    return total


def profile_lethe(
    args: argparse.Namespace, cloud: Any, counter: CallCounter, objects: list[Any], case: str
) -> dict[str, Any]:
    """One more Lethe run under the profilers (cProfile on the driver and the Python workers,
    Spark's event log, Java Flight Recorder on the JVM), and one more plain Spark run with Java
    Flight Recorder: where Lethe's time goes, and how its JVM's work differs from plain
    Spark's."""
    import ingest_bench  # noqa: PLC0415
    import ingest_profile  # noqa: PLC0415

    target = Path(tempfile.mkdtemp(prefix="lethe-vs-spark-profile-", dir=args.tmp))
    try:
        run = run_lethe(
            args, cloud, counter, objects, f"bench-vs-spark-{case}-profile", profile_dir=target
        )
        plain_jfr = target / "plain.jfr"
        plain = run_plain(args, cloud, objects, target, conf=[ingest_bench.jfr_conf(plain_jfr)])
        workers = sorted(target.glob("worker-*.prof"))
        readable = []
        for path in workers:
            try:
                pstats.Stats(str(path))
                readable.append(str(path))
            except (EOFError, ValueError, TypeError, OSError):
                continue
        index_s = 0.0
        if readable:
            index_s = _cumulative(pstats.Stats(*readable).stats, INDEX_WRITE_FUNCTIONS)  # type: ignore[attr-defined]
        driver_stats = pstats.Stats(str(target / "driver.prof")).stats  # type: ignore[attr-defined]
        driver_index_s = _cumulative(driver_stats, INDEX_WRITE_FUNCTIONS)
        return {
            "run": run,
            "driver": ingest_profile.driver_phases(target / "driver.prof"),
            "workers": ingest_profile.worker_profile(workers),
            "stages": ingest_profile.spark_stages(target / "events"),
            "jvm": ingest_profile.jvm_profile(target / "jvm.jfr"),
            "plain_run": {k: plain[k] for k in ("wall_s", "session_s", "job_s", "processes")},
            "plain_jvm": ingest_profile.jvm_profile(plain_jfr),
            "index_writes_s": {
                "workers_summed": round(index_s, 3),
                "driver": round(driver_index_s, 3),
            },
        }
    finally:
        if args.keep_profile is not None:
            shutil.copytree(target, args.keep_profile / case, dirs_exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)


# ---------------------------------------------------------------------- the run


def _is_index_call(name: str) -> bool:
    """A call on the subject index: on the segment store, a call on its manifest table or its
    bucket; on the DynamoDB store, BatchWriteItem (only the index uses it in this job) or any
    call that names the index table (runs from before the table was recorded name only
    BatchWriteItem)."""
    import moto_cloud  # noqa: PLC0415

    words = name.replace(",", " ").replace("/", " ").split()
    return (
        name.startswith("dynamodb:BatchWriteItem")
        or moto_cloud.INDEX in words
        or moto_cloud.MANIFEST in words
        or (name.startswith("s3:") and moto_cloud.INDEX_BUCKET in words)
    )


def _index_write_share(run: dict[str, Any]) -> dict[str, float]:
    """The subject index writes of a run (every call on the index table: the entries written,
    the by_object queries that find an object's earlier entries, flags and removals): calls,
    the moto server's time inside them (summed), and an estimate of the wall time they cost
    the job: that server time, at most the run's wall time (the emulator is one Python
    process, so concurrent calls are served one at a time)."""
    calls = [v for k, v in run.get("aws_calls", {}).items() if _is_index_call(k)]
    server = float(sum(v["server_s"] for v in calls))
    return {
        "calls": int(sum(v["calls"] for v in calls)),
        "server_s": round(server, 3),
        "wall_s_estimate": round(min(server, run["wall_s"]), 3),
    }


def measure_case(
    args: argparse.Namespace, cloud: Any, counter: CallCounter, case: str, scratch: Path,
    *, order_start: int,
) -> dict[str, Any]:  # fmt: skip
    folder = (args.data or scratch) / case
    started = time.perf_counter()
    objects = make_case(args, case, folder)
    generated = time.perf_counter() - started
    rows = sum(o.rows for o in objects)
    print(
        f"== case {case}: {len(objects)} object(s), {rows:,} rows, "
        f"{sum(o.bytes for o in objects) / MIB:,.0f} MiB (generated in {generated:.0f} s)",
        flush=True,
    )
    lethe: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    orders = []
    for round_ in range(args.repeats):
        plain_first = (order_start + round_) % 2 == 0
        orders.append("plain, lethe" if plain_first else "lethe, plain")
        for which in ("plain", "lethe") if plain_first else ("lethe", "plain"):
            if which == "plain":
                plain.append(run_plain(args, cloud, objects, scratch))
                print(f"   plain Spark: {plain[-1]['wall_s']:.1f} s", flush=True)
            else:
                name = f"bench-vs-spark-{case}-{round_}"
                lethe.append(run_lethe(args, cloud, counter, objects, name))
                if round_ == 0:
                    lethe[-1]["index_items"] = cloud.index_items()
                print(f"   Lethe: {lethe[-1]['wall_s']:.1f} s", flush=True)
    profiled = case in args.profile.split(",")
    profile = profile_lethe(args, cloud, counter, objects, case) if profiled else None
    ratios = [a["rows_per_s"] / b["rows_per_s"] for a, b in zip(lethe, plain, strict=True)]
    result = {
        "case": case,
        "objects": len(objects),
        "rows": rows,
        "valid_rows": sum(o.valid for o in objects),
        "rejected_rows": sum(o.rejected for o in objects),
        "bytes": sum(o.bytes for o in objects),
        "generated_s": round(generated, 1),
        "orders": orders,
        "lethe": lethe,
        "plain": plain,
        "ratios": ratios,
        "ratio_median": _median(ratios),
        # Lethe's wall time without its index writes (estimate): the ratio without them
        "ratios_without_index_writes": [
            (rows / max(a["wall_s"] - _index_write_share(a)["wall_s_estimate"], 1e-9))
            / b["rows_per_s"]
            for a, b in zip(lethe, plain, strict=True)
        ],
        "index_writes": [_index_write_share(run) for run in lethe],
        "profile": profile,
    }
    if args.data is None:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def machine(args: argparse.Namespace, load_start: float) -> dict[str, Any]:
    import ingest_bench  # noqa: PLC0415

    facts = ingest_bench.machine_facts()
    facts["load_average_1m_at_start"] = round(load_start, 2)
    return facts


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    started = dt.datetime.now(dt.UTC)
    scratch = Path(tempfile.mkdtemp(prefix="lethe-vs-spark-", dir=args.tmp))
    (context, cloud), counter = counting_cloud(args.index_store)
    try:
        cases = [
            measure_case(args, cloud, counter, case, scratch, order_start=number)
            for number, case in enumerate(args.cases)
        ]
    finally:
        context.__exit__(None, None, None)
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "benchmark": "ingest_vs_spark",
        "date_utc": started.isoformat(timespec="seconds"),
        "command": "python bench/ingest_vs_spark.py " + " ".join(args.argv),
        "settings": {
            "big_mib": args.big_mib,
            "objects": args.objects,
            "object_mib": args.object_mib,
            "repeats": args.repeats,
            "cores": args.cores,
            "driver_memory": args.driver_memory,
            "subjects": args.subjects,
            "skew": args.skew,
            "days": args.days,
            "seed": args.seed,
            "index_store": args.index_store,
        },
        "target": TARGET,
        "cases": cases,
        "machine": machine(args, load_start),
        "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
    }


# ---------------------------------------------------------------------- report


CASE_TITLES = {"big": "one large object", "batch": "a batch of objects"}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return (
        ordered[len(ordered) // 2]
        if len(ordered) % 2
        else sum(ordered[len(ordered) // 2 - 1 : len(ordered) // 2 + 1]) / 2
    )


def case_label(case: dict[str, Any]) -> str:
    mib = case["bytes"] / MIB
    if case["case"] == "big":
        return f"1 object of {mib:,.0f} MiB"
    return f"{case['objects']} objects of {mib / case['objects']:,.0f} MiB"


def verdict(ratio: float, target: float = TARGET) -> str:
    return "met" if ratio >= target else "missed"


def _wall(case: dict[str, Any], side: str) -> float:
    return _median([r["wall_s"] for r in case[side]])


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    target = result["target"]
    lines = [
        f"**Lethe's ingest job against plain Spark** (`local[{s['cores']}]`, driver memory "
        f"{s['driver_memory']}, {s['subjects']:,} subjects, {s['repeats']} round(s) per case, "
        f"the order alternating; median of the rounds; target: Lethe / plain >= {target}x)",
        "",
        "| case | rows | plain Spark s | plain rows/s | Lethe s | Lethe rows/s "
        "| **Lethe / plain** | verdict | without the index calls (estimate) "
        "| CPU s: plain, Lethe (+ moto) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for case in result["cases"]:
        plain, lethe, rows = _wall(case, "plain"), _wall(case, "lethe"), case["rows"]
        ratio = case["ratio_median"]
        without = _median(case["ratios_without_index_writes"])
        cpu_plain = _median([r["processes"].get("cpu_s_total", 0.0) for r in case["plain"]])
        cpu_lethe = _median([r["processes"].get("cpu_s_total", 0.0) for r in case["lethe"]])
        cpu_moto = _median([r["moto_cpu_s"] for r in case["lethe"]])
        lines.append(
            f"| {case_label(case)} | {rows:,} | {plain:.1f} | {rows / plain:,.0f} "
            f"| {lethe:.1f} | {rows / lethe:,.0f} | **{ratio:.2f}x** "
            f"| {verdict(ratio, target)} | {without:.2f}x "
            f"| {cpu_plain:.0f}, {cpu_lethe:.0f} (+ {cpu_moto:.0f}) |"
        )
    lines += [
        "",
        "| case (first Lethe run) | lake files | index entries | AWS calls | subject index calls "
        "| moto's time in them | share of Lethe's wall time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in result["cases"]:
        first = case["lethe"][0]
        writes = _index_write_share(first)
        calls = first.get("aws_calls", {})
        total = sum(v["calls"] for k, v in calls.items() if k != "moto-api")
        lines.append(
            f"| {case_label(case)} | {first['lake_files']:,} | {first.get('index_items') or 0:,} "
            f"| {total:,} | {writes['calls']:,} | {writes['server_s']:.1f} s "
            f"| {100 * writes['wall_s_estimate'] / first['wall_s']:.0f} % |"
        )
    for case in result["cases"]:
        calls = case["lethe"][0].get("aws_calls", {})
        shown = ", ".join(
            f"`{k}` {v['calls']:,} ({v['server_s']:.1f} s)"
            for k, v in sorted(calls.items(), key=lambda kv: -kv[1]["server_s"])
            if k != "moto-api"
        )
        lines += ["", f"AWS calls of the first Lethe run, {case_label(case)}: {shown}."]
    for case in result["cases"]:
        if case.get("profile"):
            lines += ["", *_profile_lines(case)]
    return "\n".join(lines) + "\n"


def _profile_lines(case: dict[str, Any]) -> list[str]:
    import ingest_profile  # noqa: PLC0415

    profile = case["profile"]
    run = profile["run"]
    cpu = {
        f"job: {role}": float(figures.get("cpu_s", 0.0))
        for role, figures in run["processes"].items()
        if isinstance(figures, dict) and "cpu_s" in figures
    }
    cpu["moto server (stands in for S3 and DynamoDB)"] = run["moto_cpu_s"]
    shaped = {**profile, "cpu_s": cpu}
    index = profile["index_writes_s"]
    return [
        f"Profile of Lethe, {case_label(case)}:",
        "",
        *ingest_profile.markdown(shaped, _wall(case, "lethe")),
        "",
        f"Time inside the subject index writes (`replace_many`, `replace_entries`, "
        f"`settle_missing_key`), summed over the worker tasks: {index['workers_summed']:.1f} s; "
        f"on the driver: {index['driver']:.1f} s.",
    ]


def targets(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for case in result["cases"]:
        plain, lethe, ratio = _wall(case, "plain"), _wall(case, "lethe"), case["ratio_median"]
        without = _median(case["ratios_without_index_writes"])
        rows.append(
            (
                f"5 ingestion throughput / plain Spark, {case_label(case)}",
                f">= {result['target']}x",
                f"{ratio:.2f}x (Lethe {case['rows'] / lethe:,.0f} rows/s, plain Spark "
                f"{case['rows'] / plain:,.0f} rows/s; without the index calls {without:.2f}x)",
                verdict(ratio, result["target"]),
            )
        )
    return rows


def plot(result: dict[str, Any], out: Path) -> Path:
    """Per case, the wall seconds of plain Spark and Lethe side by side (matplotlib, Agg)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    cases = result["cases"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [case_label(c) for c in cases]
    plain = [_wall(c, "plain") for c in cases]
    lethe = [_wall(c, "lethe") for c in cases]
    index = [_index_write_share(c["lethe"][0])["wall_s_estimate"] for c in cases]
    y = range(len(cases))
    ax.barh([i + 0.2 for i in y], plain, height=0.38, color="#999999", label="plain Spark")
    ax.barh([i - 0.2 for i in y], lethe, height=0.38, color="#4477aa", label="Lethe ingest job")
    ax.barh(
        [i - 0.2 for i in y], index, height=0.38, color="#cc6677",
        label="of which: subject index calls (moto; estimate)",
    )  # fmt: skip
    for i, case in enumerate(cases):
        ax.text(lethe[i], i - 0.2, f"  {case['ratio_median']:.2f}x", va="center", fontsize=8)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.set_xlabel("wall seconds (lower is faster)")
    ax.axvline(0, color="black", linewidth=0.5)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(
        "Ingestion: Lethe's job against plain Spark (ratio: Lethe / plain throughput)", fontsize=9
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return out


# ---------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB; 20 objects of 10 MiB")
    parser.add_argument("--cases", default="big,batch", help="big, batch or both")
    parser.add_argument("--big-mib", type=float, default=1024)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--object-mib", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=1, help="rounds per case")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="big,batch",
        default="",
        help="one more Lethe run of these cases (default both), profiled",
    )
    parser.add_argument(
        "--keep-profile",
        type=Path,
        default=None,
        help="copy the profiled run's files (cProfile, event log, JFR) to DIR/<case>",
    )
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--comment-words", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--index-store",
        default="segments",
        choices=("segments", "dynamodb"),
        help="where the job keeps the subject index (default: the deployed default, segments)",
    )
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--tmp", type=Path, default=None)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="keep the generated CSV objects here and reuse them when made with the same settings",
    )
    parser.add_argument(
        "--out-json", type=Path, default=BENCH_DIR / "results" / "ingest_spark_latest.json"
    )
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.quick:
        args.big_mib, args.objects = min(args.big_mib, 128), min(args.objects, 20)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    return args


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """Several runs' results as one (each case from the run that measured it, in the order
    given): at the issue's sizes each case runs in a process of its own (the moto server keeps
    every object in the benchmark's process). `runs` keeps what each run was: its command, its
    start, its load average at the start and at the end, its duration."""
    results = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    first, last = results[0], results[-1]
    machine = {
        **first["machine"],
        "load_average_1m_at_end": last["machine"].get("load_average_1m_at_end"),
    }
    return {
        **first,
        "command": " ; ".join(r["command"] for r in results),
        "cases": [case for r in results for case in r["cases"]],
        "machine": machine,
        "duration_s": round(sum(r.get("duration_s", 0.0) for r in results), 1),
        "runs": [
            {
                "command": r["command"],
                "date_utc": r["date_utc"],
                "cases": [c["case"] for c in r["cases"]],
                "load_average_1m_at_start": r["machine"].get("load_average_1m_at_start"),
                "load_average_1m_at_end": r["machine"].get("load_average_1m_at_end"),
                "duration_s": r.get("duration_s"),
            }
            for r in results
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--merge"]:  # --merge OUT IN [IN ...]
        out, *inputs = (Path(a) for a in arguments[1:])
        merged = merge(inputs)
        out.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
        print(markdown(merged))
        return 0
    args = parse_args(argv)
    sys.path.insert(0, str(BENCH_DIR))
    result = run(args)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
