"""Ingestion benchmark: the ingest job's throughput, job runs per 1,000 uploads, driver memory.

    python bench/ingest_bench.py             # the default run (make bench), about 5 minutes
    python bench/ingest_bench.py --full      # the size before: 40-50 minutes on 2 cores
    python bench/ingest_bench.py --quick     # a smoke run of a few minutes

One run measures, on raw CSV objects written by bench/csv_objects.py (in a temporary directory,
deleted at the end):

1. Throughput per core. The real ingest job (`spark_jobs/ingest.py`, run as a subprocess the way
   the local cloud's runner runs it: LETHE_SPARK_MASTER=local[2], PYTHONPATH, AWS endpoint)
   ingests N objects uploaded to a moto server as ONE batch (`--objects-json`); rows/s per core
   = rows / (wall s x cores). Baseline in the same run: each file read with
   `pyarrow.csv.read_csv` and written with `pyarrow.parquet.write_table` to local disk,
   single-threaded; rows/s per core = rows / wall s. Ratio = baseline per core / job per core:
   how many times slower per core the whole job is (it also validates, writes quarantine,
   writes the subject index over HTTP and uploads to S3). Warm-up (one job run of one
   object, one baseline pass), then `--repeats` rounds, the order of the two alternating;
   before every job run the moto state is reset and the objects uploaded again (untimed), so
   every run is a first ingestion. Also: a few objects ingested one job run each.
2. Job runs per 1,000 uploads: the object events path's real grouping code
   (`lethe_shared.ingestion.starter`: `IngestionCollector`, `plan_groups`,
   `StepFunctionsBatchStarter`
   on counting stand-ins for Step Functions and S3) on 1,000 simulated catalog items, in SQS
   batches of IngestionBatchSize records (template.yaml's default, and other sizes), against
   one run per upload before batching.
3. Driver memory as a file grows: the job with `--driver-memory` (512m) on single CSV objects
   of growing size, up to three times that; Spark's `local-cluster[2,1,2048]` master (two
   executors of one core, `--executor-memory` 1536m, each a JVM of its own, as on a cluster), so
   that the driver is measured apart from the executors; peak RSS (VmHWM, sampled from /proc)
   of the driver's Python process, of its JVM, of the largest executor JVM and of the largest
   Python worker. Only with `--full` or `--memory-sizes` (it takes half an hour).
4. Where the time goes: one more run of section 1's batch with the driver and every Python
   worker task under cProfile (bench/ingest_profile.py, bench/profiled_daemon.py): the job's
   wall time by phase, CPU by process (and the moto server's), the workers' time by what runs.

Results: JSON (`--out-json`, default bench/results/ingest_latest.json) and Markdown on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import csv_objects
import generate_lake
import ingest_profile
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pyspark
from moto_cloud import MotoCloud
from proc_tree import TreeSampler, wait_sampled

from lethe.localcloud.template import load_template
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone
from lethe_shared.ingestion import starter as ingestion

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
INGEST_SCRIPT = REPO / "spark_jobs" / "ingest.py"
JOB_PYTHONPATH = os.pathsep.join(str(REPO / p) for p in ("spark_jobs", "layers/shared"))
MIB = 1024 * 1024
PIECE_BYTES = 128 * MIB  # lethe_jobs.pieces.PIECE_BYTES: larger text objects are split
_SESSION_UP = "lethe.ingest: batch of "  # the job's first line once its SparkSession is up
_STDERR_TAIL = 60
FAILED_LOGS = BENCH_DIR / "results" / "ingest_failed"  # the stderr of each failed job run


# ------------------------------------------------------------------------------ job runs


@dataclass
class JobRun:
    """One run of the ingest job as a subprocess."""

    objects: int
    rows: int
    wall_s: float
    session_s: float  # from the start to the job's first log line (SparkSession up)
    moto_cpu_s: float  # CPU of this process meanwhile: the moto server's threads
    tree: dict[str, Any]  # proc_tree report: peak RSS and CPU per role
    summary: dict[str, Any]
    index_items: int | None = None

    def to_json(self) -> dict[str, Any]:
        counts = self.summary["counts"]
        objects = self.summary["objects"]
        return {
            "objects": self.objects,
            "rows": self.rows,
            "wall_s": round(self.wall_s, 3),
            "session_s": round(self.session_s, 3),
            "after_session_s": round(self.wall_s - self.session_s, 3),
            "moto_cpu_s": round(self.moto_cpu_s, 2),
            "counts": counts,
            "rows_read": sum(o["rows_read"] for o in objects),
            "rows_written": sum(o["rows_written"] for o in objects),
            "rows_quarantined": sum(o["rows_quarantined"] for o in objects),
            "lake_files": sum(len(o["lake_objects"]) for o in objects),
            "index_items": self.index_items,
            "processes": self.tree,
        }


class JobFailedError(RuntimeError):
    """A job run that did not end with its summary; `run` holds what was measured until then
    (its summary is empty) and `reason` the error the job's stderr names first."""

    def __init__(self, message: str, run: JobRun | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.run = run
        self.reason = reason


_EXECUTOR_ERROR = re.compile(r"ERROR Executor: Exception in task \S+ in stage (\S+)")


def failure_reason(log: Path) -> str:
    """The first error a failed job's stderr names: an executor's exception (with its stage),
    else the last exception line of a Python traceback."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines):
        found = _EXECUTOR_ERROR.search(line)
        if found and number + 1 < len(lines):
            return f"{lines[number + 1].strip()} (a task of Spark stage {found.group(1)})"
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return errors[-1] if errors else (lines[-1] if lines else "no output")


def job_environment(
    cloud: MotoCloud,
    master: str,
    driver_memory: str | None,
    tmp: Path | None = None,
    conf: Sequence[str] = (),
) -> dict[str, str]:
    """What the local cloud's runner gives a job (lethe.localcloud.spark_runner): the AWS
    endpoint and test credentials, the venv's Python for driver and workers, the job's import
    path, LETHE_SPARK_MASTER, and the local Spark defaults through PYSPARK_SUBMIT_ARGS."""
    env = dict(os.environ)
    env.pop("AWS_PROFILE", None)
    env.update(cloud.job_environment())
    submit = [
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip
    for setting in conf:  # key=value
        submit += ["--conf", setting]
    if driver_memory:
        submit = ["--driver-memory", driver_memory, *submit]
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "LETHE_SPARK_MASTER": master,
            "PYTHONPATH": JOB_PYTHONPATH,
            "PYSPARK_SUBMIT_ARGS": shlex.join([*submit, "pyspark-shell"]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if tmp is not None:  # the job's temporary files and Spark's spills go there, deleted after
        env.update({"TMPDIR": str(tmp), "SPARK_LOCAL_DIRS": str(tmp)})
    return env


class _Stderr:
    """The job's stderr: read in a thread, kept in a log file; when the SparkSession was up;
    the last lines."""

    def __init__(self, stream: Any, started: float, log: Path) -> None:
        self.session_s: float | None = None
        self.tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self.log = log
        self._stream, self._started = stream, started
        self._thread = threading.Thread(target=self._pump, name="job-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with self.log.open("w", encoding="utf-8") as out:
            for line in self._stream:
                if self.session_s is None and _SESSION_UP in line:
                    self.session_s = time.perf_counter() - self._started
                self.tail.append(line.rstrip("\n"))
                out.write(line)

    def join(self) -> None:
        self._thread.join(timeout=10)


def jfr_conf(recording: Path) -> str:
    """The Spark setting that records the driver JVM (in local mode also the executors') with
    Java Flight Recorder's profiling settings, written to `recording` when it exits."""
    return (
        "spark.driver.extraJavaOptions=-XX:StartFlightRecording="
        f"filename={recording.resolve()},settings=profile,dumponexit=true"
    )


def run_job(
    cloud: MotoCloud,
    batch: list[dict[str, str]],
    *,
    rows: int,
    correlation_id: str,
    master: str,
    driver_memory: str | None = None,
    timeout: float = 3600,
    tmp: Path | None = None,
    extra_args: Sequence[str] = (),
    conf: Sequence[str] = (),
    profile_dir: Path | None = None,
) -> JobRun:
    """Run `python spark_jobs/ingest.py` on `batch` and wait for it, sampling its process tree.
    With `profile_dir`, the driver and every Python worker task run under cProfile and write
    their profiles there, and Spark its event log under `events/` (bench/ingest_profile.py)."""
    profiling: tuple[str, ...] = ()
    if profile_dir is not None:
        events = profile_dir / "events"  # Spark's event log: each stage's task metrics
        events.mkdir(parents=True, exist_ok=True)
        conf = [
            *conf,
            "spark.python.daemon.module=profiled_daemon",
            "spark.eventLog.enabled=true",
            f"spark.eventLog.dir={events.resolve().as_uri()}",
            jfr_conf(profile_dir / "jvm.jfr"),
        ]
        profiling = ("-m", "cProfile", "-o", str(profile_dir / "driver.prof"))
    env = job_environment(cloud, master, driver_memory, tmp, conf)
    if profile_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(BENCH_DIR)])
        env["LETHE_BENCH_PROFILE_DIR"] = str(profile_dir)
    args = [*cloud.job_args(batch, correlation_id), *extra_args]
    command = [sys.executable, *profiling, str(INGEST_SCRIPT), *args]
    moto_before = _self_cpu()
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the JVM is ended with it
    )
    log = Path(tmp or tempfile.gettempdir()) / f"{correlation_id}.stderr.log"
    stderr = _Stderr(process.stderr, started, log)
    sampler = TreeSampler(process.pid).start()
    try:
        assert process.stdout is not None
        stdout = process.stdout.read()  # one JSON line; the job ends after writing it
        code = wait_sampled(process, sampler, timeout)
    finally:
        sampler.stop()
        _end_group(process)
    wall = time.perf_counter() - started
    moto_cpu = _self_cpu() - moto_before
    stderr.join()
    run = JobRun(
        objects=len(batch),
        rows=rows,
        wall_s=wall,
        session_s=stderr.session_s or 0.0,
        moto_cpu_s=moto_cpu,
        tree=sampler.report(),
        summary={"objects": [], "counts": {}},
    )
    if code != 0:
        kept = FAILED_LOGS / f"{correlation_id}.stderr.log"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stderr.log, kept)
        reason = failure_reason(kept)
        raise JobFailedError(
            f"the ingest job exited with {code} after {wall:.0f} s: {reason} (its stderr: {kept})",
            run,
            reason,
        )
    stderr.log.unlink()
    run.summary = json.loads(stdout.strip().splitlines()[-1])
    return run


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _end_group(process: subprocess.Popen[str]) -> None:
    """Kill what is left of the job's own process group (a JVM that outlived its driver)."""
    if process.poll() is None:
        process.kill()
        process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def check_outcome(run: JobRun, objects: Sequence[csv_objects.CsvObject]) -> None:
    """Every object INGESTED with exactly its valid rows written and the others quarantined."""
    by_key = {o.key: o for o in objects}
    for outcome in run.summary["objects"]:
        expected = by_key[outcome["key"]]
        got = (outcome["status"], outcome["rows_written"], outcome["rows_quarantined"])
        if got != ("INGESTED", expected.valid, expected.rejected):
            raise JobFailedError(
                f"{outcome['key']}: {got}, expected INGESTED, {expected.valid} written, "
                f"{expected.rejected} quarantined ({outcome.get('error')})"
            )


def upload(cloud: MotoCloud, objects: Sequence[csv_objects.CsvObject]) -> list[dict[str, str]]:
    """A fresh moto state with the dataset registered and `objects` uploaded; the batch."""
    cloud.reset()
    cloud.register(csv_objects.dataset_document())
    dataset = csv_objects.DATASET_ID
    return [
        {
            "dataset_id": dataset,
            "key": o.key,
            "version_id": cloud.upload_file(o.key, o.path, dataset),
        }
        for o in objects
    ]


# ------------------------------------------------------------------------------ baseline


def convert_baseline(objects: Sequence[csv_objects.CsvObject], out: Path) -> tuple[float, float]:
    """Each file: `pyarrow.csv.read_csv` then `pyarrow.parquet.write_table` (snappy) to local
    disk, single-threaded (no reader threads, Arrow's CPU pool at 1). Types are inferred (the
    invalid `stars` values make that column a string), rows with the wrong number of fields
    skipped; nothing is validated, quarantined or indexed. Returns (wall s, CPU s)."""
    read = pacsv.ReadOptions(use_threads=False)
    parse = pacsv.ParseOptions(invalid_row_handler=lambda _row: "skip")
    threads = pa.cpu_count()
    pa.set_cpu_count(1)
    try:
        cpu, started = _self_cpu(), time.perf_counter()
        for number, obj in enumerate(objects):
            table = pacsv.read_csv(obj.path, read_options=read, parse_options=parse)
            pq.write_table(table, out / f"{number:05d}.parquet", compression="snappy")
            del table
        wall, cpu = time.perf_counter() - started, _self_cpu() - cpu
    finally:
        pa.set_cpu_count(threads)
    for path in out.glob("*.parquet"):
        path.unlink()
    return wall, cpu


# ------------------------------------------------------------------------------ 1. throughput


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "values": list(values),
    }


def make_objects(
    out: Path, args: argparse.Namespace, *, count: int, rows: int, comment_words: int
) -> list[csv_objects.CsvObject]:
    model = generate_lake.SubjectModel(args.subjects, args.skew, args.seed)
    return [
        csv_objects.write_object(
            out / f"upload-{i:05d}.csv",
            index=i,
            rows=rows,
            model=model,
            seed=args.seed,
            days=args.days,
            comment_words=comment_words,
        )
        for i in range(count)
    ]


def measure_throughput(
    args: argparse.Namespace, cloud: MotoCloud, objects: list[csv_objects.CsvObject], scratch: Path
) -> dict[str, Any]:
    rows = sum(o.rows for o in objects)
    converted = scratch / "baseline"
    converted.mkdir(exist_ok=True)
    cores = args.cores
    master = f"local[{cores}]"

    def ingest(round_: int) -> JobRun:
        batch = upload(cloud, objects)
        run = run_job(
            cloud,
            batch,
            rows=rows,
            correlation_id=f"bench-batch-{round_}",
            master=master,
            timeout=args.timeout,
            tmp=args.tmp,
        )
        check_outcome(run, objects)
        if round_ == 0:
            run.index_items = cloud.index_items()
        print(f"   ingest run {round_}: {run.wall_s:.1f} s", flush=True)
        return run

    print("   warm-up: one baseline pass, one job run of one object", flush=True)
    convert_baseline(objects, converted)
    warm = run_job(
        cloud,
        upload(cloud, objects[:1]),
        rows=objects[0].rows,
        correlation_id="bench-warm-up",
        master=master,
        timeout=args.timeout,
        tmp=args.tmp,
    )
    baseline: list[tuple[float, float]] = []
    runs: list[JobRun] = []
    for round_ in range(args.repeats):  # the order alternates: baseline first on even rounds
        if round_ % 2 == 0:
            baseline.append(convert_baseline(objects, converted))
        runs.append(ingest(round_))
        if round_ % 2 == 1:
            baseline.append(convert_baseline(objects, converted))
    return throughput_result(objects, baseline, runs, warm, cores)


def throughput_result(
    objects: list[csv_objects.CsvObject],
    baseline: list[tuple[float, float]],
    runs: list[JobRun],
    warm: JobRun,
    cores: int,
) -> dict[str, Any]:
    rows = sum(o.rows for o in objects)
    base_per_core = [rows / wall for wall, _ in baseline]  # one thread: one core
    job_per_core = [rows / (r.wall_s * cores) for r in runs]
    return {
        "objects": len(objects),
        "rows": rows,
        "valid_rows": sum(o.valid for o in objects),
        "rejected_rows": sum(o.rejected for o in objects),
        "bytes": sum(o.bytes for o in objects),
        "cores": cores,
        "baseline": {
            "wall_s": summary([w for w, _ in baseline]),
            "cpu_s": summary([c for _, c in baseline]),
            "rows_per_s_per_core": summary(base_per_core),
        },
        "ingest": {
            "wall_s": summary([r.wall_s for r in runs]),
            "session_s": summary([r.session_s for r in runs]),
            "after_session_s": summary([r.wall_s - r.session_s for r in runs]),
            "job_cpu_s": summary([r.tree["cpu_s_total"] for r in runs]),
            "moto_cpu_s": summary([r.moto_cpu_s for r in runs]),
            "rows_per_s_per_core": summary(job_per_core),
            "runs": [r.to_json() for r in runs],
        },
        # per round, the baseline and the job run of that round
        "ratio_baseline_to_ingest_per_core": summary(
            [b / j for b, j in zip(base_per_core, job_per_core, strict=True)]
        ),
        "warm_up_run": warm.to_json(),
    }


def measure_per_object(
    args: argparse.Namespace, cloud: MotoCloud, objects: list[csv_objects.CsvObject]
) -> dict[str, Any] | None:
    """The first `--per-object` objects, one job run each."""
    chosen = objects[: args.per_object]
    if not chosen:
        return None
    runs = []
    for number, obj in enumerate(chosen):
        run = run_job(
            cloud,
            upload(cloud, [obj]),
            rows=obj.rows,
            correlation_id=f"bench-one-{number}",
            master=f"local[{args.cores}]",
            timeout=args.timeout,
            tmp=args.tmp,
        )
        check_outcome(run, [obj])
        print(f"   one-object run {number}: {run.wall_s:.1f} s", flush=True)
        runs.append(run)
    return {
        "runs": len(runs),
        "rows_per_object": chosen[0].rows,
        "wall_s": summary([r.wall_s for r in runs]),
        "session_s": summary([r.session_s for r in runs]),
        "rows_per_s_per_core": summary([r.rows / (r.wall_s * args.cores) for r in runs]),
        "job_cpu_s": summary([r.tree["cpu_s_total"] for r in runs]),
        "moto_cpu_s": summary([r.moto_cpu_s for r in runs]),
        "details": [r.to_json() for r in runs],
    }


def measure_profile(
    args: argparse.Namespace, cloud: MotoCloud, objects: list[csv_objects.CsvObject], scratch: Path
) -> dict[str, Any]:
    """One more run of the batch, driver and Python workers under cProfile."""
    target = scratch / "profile"
    target.mkdir()
    rows = sum(o.rows for o in objects)
    run = run_job(
        cloud,
        upload(cloud, objects),
        rows=rows,
        correlation_id="bench-profile",
        master=f"local[{args.cores}]",
        timeout=args.timeout,
        tmp=args.tmp,
        profile_dir=target,
    )
    check_outcome(run, objects)
    print(f"   profiled run: {run.wall_s:.1f} s", flush=True)
    roles = run.tree
    cpu: dict[str, float] = {
        f"job: {role}": float(figures.get("cpu_s", 0.0))
        for role, figures in roles.items()
        if isinstance(figures, dict) and "cpu_s" in figures
    }
    cpu["moto server (stands in for S3 and DynamoDB)"] = round(run.moto_cpu_s, 2)
    result = {
        "run": run.to_json(),
        "driver": ingest_profile.driver_phases(target / "driver.prof"),
        "workers": ingest_profile.worker_profile(sorted(target.glob("worker-*.prof"))),
        "stages": ingest_profile.spark_stages(target / "events"),
        "jvm": ingest_profile.jvm_profile(target / "jvm.jfr"),
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
    }
    shutil.rmtree(target)
    return result


# ------------------------------------------------------------------------------ 2. batching


class _CountingSfn:
    """Stands in for boto3's Step Functions client: counts StartExecution, keeps input sizes."""

    class exceptions:  # boto3's spelling
        class ExecutionAlreadyExists(Exception):
            pass

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.input_bytes: list[int] = []

    def start_execution(self, *, stateMachineArn: str, name: str, input: str) -> None:
        if name in self.names:
            raise self.exceptions.ExecutionAlreadyExists(name)
        self.names.add(name)
        self.input_bytes.append(len(input.encode()))


class _CountingS3:
    def __init__(self) -> None:
        self.manifests = 0

    def put_object(self, **_: Any) -> None:
        self.manifests += 1


def simulated_uploads(count: int, key_bytes: int = 0) -> list[CatalogItem]:
    """`count` new raw object versions of one dataset, as the catalog records them; keys as a
    producer names them, or padded to `key_bytes` (S3 allows 1,024)."""
    bucket = "lethe-prod-raw-123456789012-us-east-1"  # the template's naming
    items = []
    for n in range(count):
        key = f"orders/2026/11/{n % 28 + 1:02d}/export-{n:06d}.csv"
        if key_bytes:
            key = f"orders/{'p' * (key_bytes - len(key) - 1)}/{key[7:]}"
        items.append(
            CatalogItem(
                bucket=bucket,
                key=key,
                version_id=f"{n:032x}",
                zone=Zone.RAW,
                status=ObjectStatus.RECEIVED,
                sequencer=f"{n + 1:020X}",
                dataset_id="orders",
            )
        )
    return items


def runs_for(items: list[CatalogItem], per_invocation: int) -> dict[str, Any]:
    """Job runs when the object events function receives `items` in SQS batches of
    `per_invocation` records: per batch the real collector, grouping and starter."""
    sfn, s3 = _CountingSfn(), _CountingS3()
    starter = ingestion.StepFunctionsBatchStarter(sfn, s3, "arn:aws:states:::x", "reports")
    invocations = 0
    for first in range(0, len(items), per_invocation):
        collector = ingestion.IngestionCollector()
        for number, item in enumerate(items[first : first + per_invocation]):
            collector.for_record(f"message-{first + number}").start(item)
        for group in collector.groups():
            starter.start(group)
        invocations += 1
    return {
        "records_per_invocation": per_invocation,
        "invocations": invocations,
        "job_runs": len(sfn.names),
        "manifests": s3.manifests,
        "objects_per_run_mean": len(items) / len(sfn.names),
        "max_execution_input_bytes": max(sfn.input_bytes),
    }


def measure_batching(uploads: int, sizes: Sequence[int]) -> dict[str, Any]:
    params = load_template()["Parameters"]
    size = params["IngestionBatchSize"]
    window = params["IngestionBatchWindowSeconds"]
    default, allowed = int(size["Default"]), int(size["MaxValue"])
    sizes = sorted({default, *(s for s in sizes if 1 <= s <= allowed)})
    record = json.loads((REPO / "events" / "object_created_raw.json").read_text())["Records"][0]
    items = simulated_uploads(uploads)
    long_items = simulated_uploads(uploads, key_bytes=1024)
    # Steady arrival: a batch holds what arrives within one batching window (at most BatchSize).
    window_s = int(window["Default"])
    steady = [(rate, max(1, min(default, int(rate * window_s)))) for rate in (1.0, 0.1)]
    return {
        "uploads": uploads,
        "before_batching_job_runs": uploads,
        "max_batch_objects": ingestion.MAX_BATCH_OBJECTS,
        "max_input_bytes": ingestion.MAX_INPUT_BYTES,
        "batch_size_default": default,
        "batch_size_max": allowed,
        "window_s_default": window_s,
        "sqs_record_bytes": len(json.dumps(record)),
        "full_batches": [runs_for(items, s) for s in sizes],
        "full_batches_1024_byte_keys": [runs_for(long_items, s) for s in sizes],
        "steady_arrival_default_size": [
            {"uploads_per_s": rate, **runs_for(items, per)} for rate, per in steady
        ],
    }


# ------------------------------------------------------------------------------ 3. memory


def measure_memory(args: argparse.Namespace, cloud: MotoCloud, scratch: Path) -> dict[str, Any]:
    """One job run per size; a run that fails (the JVM running out of heap) is recorded with
    its reason and what was measured until then, and the next size still runs."""
    model = generate_lake.SubjectModel(args.subjects, args.skew, args.seed)
    words = args.memory_comment_words
    piece_bytes = int(args.piece_mib * MIB)
    points = []
    for number, size_mb in enumerate(args.memory_sizes):
        rows = csv_objects.rows_for_bytes(int(size_mb * MIB), comment_words=words, seed=args.seed)
        path = scratch / f"large-{number}.csv"
        started = time.perf_counter()
        obj = csv_objects.write_object(
            path,
            index=1000 + number,
            rows=rows,
            model=model,
            seed=args.seed,
            days=args.days,
            comment_words=words,
        )
        generated = time.perf_counter() - started
        try:
            batch = upload(cloud, [obj])
        finally:
            path.unlink()  # moto holds its copy
        print(f"   {obj.bytes / MIB:,.0f} MiB, {rows:,} rows: running", flush=True)
        point: dict[str, Any] = {
            "file_mib": round(obj.bytes / MIB, 1),
            "rows": rows,
            "pieces": -(-obj.bytes // piece_bytes) if obj.bytes > piece_bytes else 1,
            "generated_s": round(generated, 1),
            "expected_written": obj.valid,
        }
        try:
            run = run_job(
                cloud,
                batch,
                rows=rows,
                correlation_id=f"bench-memory-{number}",
                master=args.memory_master,
                driver_memory=args.driver_memory,
                timeout=args.timeout,
                tmp=args.tmp,
                extra_args=["--piece-bytes", str(piece_bytes)],
                conf=[f"spark.executor.memory={args.executor_memory}"],
            )
            check_outcome(run, [obj])
            outcome = run.summary["objects"][0]
            point |= {
                "status": outcome["status"],
                "rows_written": outcome["rows_written"],
                "rows_quarantined": outcome["rows_quarantined"],
                "error": None,
            }
        except JobFailedError as failed:
            if failed.run is None:
                raise
            run = failed.run
            point |= {"status": "JOB FAILED", "rows_written": 0, "error": failed.reason}
        tree = run.tree
        print(
            f"   ... {point['status']} after {run.wall_s:.1f} s, driver peak "
            f"{tree['driver']['peak_hwm_mib']} MiB, driver JVM peak "
            f"{tree['jvm']['peak_hwm_mib']} MiB, executor JVM peak "
            f"{tree['executors']['peak_hwm_mib']} MiB"
            + (f": {point['error']}" if point["error"] else ""),
            flush=True,
        )
        points.append(point | run.to_json())
        cloud.reset()  # moto lets go of the object
    return {
        "master": args.memory_master,
        "driver_memory": args.driver_memory,
        "executor_memory": args.executor_memory,
        "piece_bytes": piece_bytes,
        "comment_words": words,
        "points": points,
        "growth": _growth([p for p in points if p["error"] is None]),
        "failed_runs": sum(1 for p in points if p["error"] is not None),
    }


def _growth(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Largest / smallest file of the runs that completed: file size, and each peak."""
    if len(points) < 2:
        return None
    first, last = points[0]["processes"], points[-1]["processes"]
    return {
        "file": points[-1]["file_mib"] / points[0]["file_mib"],
        **{
            role: _ratio(last[role]["peak_hwm_mib"], first[role]["peak_hwm_mib"])
            for role in ("driver", "jvm", "executors", "workers")
        },
        "tree": _ratio(last["peak_tree_rss_mib"], first["peak_tree_rss_mib"]),
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


# ------------------------------------------------------------------------------ report


def machine_facts() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if "model name" in line),
        platform.processor(),
    )
    memory = next((line.split()[1] for line in _lines("/proc/meminfo") if "MemTotal" in line), "0")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(int(memory) / MIB, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pyspark": pyspark.__version__,
        "java": (java.stderr.splitlines() or ["?"])[0],
        "git_commit": _git_commit(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def _git_commit() -> str:
    def git(*command: str) -> str:
        done = subprocess.run(
            ["git", *command], cwd=REPO, capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return commit + ("+dirty" if dirty else "")


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _range(s: dict[str, float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(s['min'])}-{fmt.format(s['max'])}"


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Ingestion benchmark, {result['date_utc']}, `{result['command']}`", ""]
    if result.get("throughput"):
        lines += _md_throughput(result["throughput"], result.get("per_object"))
    if result.get("profile"):
        timed = result.get("throughput", {}).get("ingest", {}).get("wall_s", {}).get("median")
        lines += ["", *ingest_profile.markdown(result["profile"], timed)]
    if result.get("batching"):
        lines += ["", *_md_batching(result["batching"])]
    if result.get("memory"):
        lines += ["", *_md_memory(result["memory"])]
    return "\n".join(lines)


def _md_throughput(t: dict[str, Any], one: dict[str, Any] | None) -> list[str]:
    b, i = t["baseline"], t["ingest"]
    first = i["runs"][0]
    lines = [
        f"**1. Throughput per core** ({t['objects']} CSV objects, {t['rows']:,} rows, "
        f"{t['bytes'] / MIB:.1f} MiB, {t['rejected_rows']:,} rows to reject; "
        f"{len(i['runs'])} rounds after a warm-up; median [min-max])",
        "",
        "| measurement | wall s | min-max | cores | rows/s per core | min-max |",
        "|---|---:|---:|---:|---:|---:|",
        f"| baseline: pyarrow read_csv + write_table, one thread | {b['wall_s']['median']:.2f} | "
        f"{_range(b['wall_s'], '{:.2f}')} | 1 | {_n(b['rows_per_s_per_core']['median'])} | "
        f"{_range(b['rows_per_s_per_core'], '{:,.0f}')} |",
        f"| ingest job, one batch of {t['objects']} objects, local[{t['cores']}] | "
        f"{i['wall_s']['median']:.1f} | {_range(i['wall_s'])} | {t['cores']} | "
        f"{_n(i['rows_per_s_per_core']['median'])} | "
        f"{_range(i['rows_per_s_per_core'], '{:,.0f}')} |",
    ]
    if one:
        lines.append(
            f"| ingest job, one object per run ({one['runs']} runs of {one['rows_per_object']:,} "
            f"rows) | {one['wall_s']['median']:.1f} | {_range(one['wall_s'])} | {t['cores']} | "
            f"{_n(one['rows_per_s_per_core']['median'])} | "
            f"{_range(one['rows_per_s_per_core'], '{:,.0f}')} |"
        )
    r = t["ratio_baseline_to_ingest_per_core"]
    lines += [
        f"| **ratio baseline / ingest (per core)** | | | | **{r['median']:.0f}x** | "
        f"{_range(r, '{:.0f}')}x |",
        "",
        f"Where the job's time goes (medians): SparkSession start-up and planning "
        f"{i['session_s']['median']:.1f} s, the rest {i['after_session_s']['median']:.1f} s; "
        f"CPU of the job's processes {i['job_cpu_s']['median']:.0f} s (of "
        f"{i['wall_s']['median'] * t['cores']:.0f} core-seconds); CPU of the moto server "
        f"{i['moto_cpu_s']['median']:.0f} s. First run: {first['lake_files']} lake files, "
        f"{first['index_items']:,} index items written "
        f"({first['index_items'] / t['rows']:.2f} per row), {first['rows_written']:,} rows "
        f"written, {first['rows_quarantined']:,} quarantined (as expected). Baseline CPU "
        f"{b['cpu_s']['median']:.2f} s for {b['wall_s']['median']:.2f} s wall.",
    ]
    if one:
        per_object = one["wall_s"]["median"]
        lines.append(
            f"One job run per object: {per_object:.1f} s each (start-up "
            f"{one['session_s']['median']:.1f} s); {t['objects']} objects that way would take "
            f"about {per_object * t['objects']:.0f} s against {i['wall_s']['median']:.0f} s "
            "for the batch."
        )
    return lines


def _md_batching(b: dict[str, Any]) -> list[str]:
    lines = [
        f"**2. Spark job runs per {b['uploads']:,} uploads** (the object events path's grouping "
        f"code; at most {b['max_batch_objects']} objects and {b['max_input_bytes']:,} bytes of "
        f"input per execution; before batching: {b['before_batching_job_runs']:,} runs)",
        "",
        "| SQS records per invocation (IngestionBatchSize) | invocations | job runs | "
        "objects per run | runs with 1,024-byte keys | largest execution input (bytes) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for short, long in zip(b["full_batches"], b["full_batches_1024_byte_keys"], strict=True):
        size = short["records_per_invocation"]
        label = f"{size} (default)" if size == b["batch_size_default"] else str(size)
        lines.append(
            f"| {label} | {short['invocations']} | **{short['job_runs']}** | "
            f"{short['objects_per_run_mean']:.0f} | {long['job_runs']} | "
            f"{long['max_execution_input_bytes']:,} |"
        )
    steady = "; ".join(
        f"{s['uploads_per_s']:g} upload/s: {s['records_per_invocation']} per batch, "
        f"{s['job_runs']} runs"
        for s in b["steady_arrival_default_size"]
    )
    lines += [
        "",
        f"Full batches (a burst of uploads). At a steady rate a batch holds what arrives within "
        f"the {b['window_s_default']} s window: {steady}. An SQS record is about "
        f"{b['sqs_record_bytes']:,} bytes, so {b['batch_size_max']:,} records are "
        f"{b['sqs_record_bytes'] * b['batch_size_max'] / 1e6:.1f} MB (Lambda's limit: 6 MB).",
    ]
    return lines


def _md_memory(m: dict[str, Any]) -> list[str]:
    lines = [
        f"**3. Peak RSS of the job as one CSV object grows** (`--driver-memory "
        f"{m['driver_memory']}`, `{m['master']}` with `spark.executor.memory` "
        f"{m['executor_memory']}, pieces of {m['piece_bytes'] / MIB:.0f} MiB; VmHWM sampled "
        "from /proc every 0.1 s)",
        "",
        "| file MiB | rows | pieces | outcome | wall s | driver Python MiB | driver JVM MiB | "
        "largest executor JVM MiB | largest Python worker MiB | whole tree MiB |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in m["points"]:
        pr = p["processes"]
        if p["error"]:
            outcome = f"**job failed**: {p['error']}"
        else:
            wrong = "" if p["rows_written"] == p["expected_written"] else " (WRONG)"
            outcome = f"{p['status']}, {p['rows_written']:,} rows written{wrong}"
        lines.append(
            f"| {p['file_mib']:,.0f} | {p['rows']:,} | {p['pieces']} | {outcome} | "
            f"{p['wall_s']:.0f} | {pr['driver']['peak_hwm_mib']:.0f} | "
            f"{pr['jvm']['peak_hwm_mib']:.0f} | {pr['executors']['peak_hwm_mib']:.0f} | "
            f"{pr['workers']['peak_hwm_mib']:.0f} | "
            f"{pr['peak_tree_rss_mib']:.0f} |"
        )
    g = m["growth"]

    def times(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    lines.append("")
    if g is None:
        lines.append("Fewer than two runs completed: no growth ratio.")
    else:
        lines.append(
            f"Largest / smallest completed run: file {g['file']:.1f}x; driver Python "
            f"{times(g['driver'])}, driver JVM {times(g['jvm'])}, largest executor JVM "
            f"{times(g['executors'])}, largest worker {times(g['workers'])}, "
            f"whole tree {times(g['tree'])}."
        )
    if m["failed_runs"]:
        lines.append(f"{m['failed_runs']} run(s) failed: see the outcome column.")
    return lines


# ------------------------------------------------------------------------------ main

# The size before `make bench` had to fit 15 minutes (40-50 minutes on 2 cores): `--full`.
FULL = {
    "objects": 20,
    "rows_per_object": 10_000,
    "repeats": 3,
    "per_object": 3,
    "memory_sizes": [16.0, 64.0, 256.0, 1024.0, 1536.0],
}
QUICK = {
    "objects": 8,
    "rows_per_object": 2_000,
    "repeats": 1,
    "per_object": 1,
    "memory_sizes": [16.0, 64.0, 160.0],
}


def _sizes(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Ingestion benchmark (see bench/README.md and docs/BENCHMARKS.md)."
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run (a few minutes)")
    parser.add_argument(
        "--full",
        action="store_true",
        help="the size before the 15-minute default: 20 x 10,000 rows, 3 rounds, 3 one-object "
        "runs, section 3 at 16-1536 MiB (40-50 minutes on 2 cores)",
    )
    parser.add_argument("--objects", type=int, default=8, help="objects of the batch")
    parser.add_argument("--rows-per-object", type=int, default=4_000)
    parser.add_argument("--subjects", type=int, default=1_000, help="distinct subjects")
    parser.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of the subjects")
    parser.add_argument("--days", type=int, default=3, help="dates (partitions) in each object")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="timed rounds after a warm-up")
    parser.add_argument(
        "--per-object",
        type=int,
        default=0,
        help="objects also ingested one job run each (default 0; --full: 3)",
    )
    parser.add_argument("--cores", type=int, default=2, help="the job's master: local[N]")
    parser.add_argument(
        "--memory-sizes",
        type=_sizes,
        default=[],
        help="MiB of the single objects of section 3, comma-separated (default: none, the "
        "section is skipped; --full: 16,64,256,1024,1536)",
    )
    parser.add_argument("--driver-memory", default="512m", help="section 3's spark driver memory")
    parser.add_argument(
        "--memory-master",
        default="local-cluster[2,1,2048]",
        help="section 3's master: local-cluster gives the driver and each executor a JVM of "
        "its own, so the driver's memory is measured apart from the executors'",
    )
    parser.add_argument(
        "--executor-memory", default="1536m", help="section 3's spark.executor.memory"
    )
    parser.add_argument(
        "--piece-mib",
        type=float,
        default=PIECE_BYTES / MIB,
        help="section 3: the job's --piece-bytes, in MiB (default: the job's default)",
    )
    parser.add_argument(
        "--memory-comment-words",
        type=int,
        default=40,
        help="most words of a comment in section 3's objects (40: rows of about 200 bytes)",
    )
    parser.add_argument("--uploads", type=int, default=1000, help="uploads of section 2")
    parser.add_argument(
        "--batch-sizes", type=_sizes, default=[10.0, 1000.0], help="section 2's other sizes"
    )
    parser.add_argument(
        "--skip",
        default="",
        help="sections to skip, comma-separated: throughput,batching,memory,profile",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per job run")
    parser.add_argument(
        "--out-json", type=Path, default=BENCH_DIR / "results" / "ingest_latest.json"
    )
    args = parser.parse_args(argv)
    if args.quick or args.full:
        explicit = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for name, value in (QUICK if args.quick else FULL).items():
            if f"--{name.replace('_', '-')}" not in explicit:
                setattr(args, name, value)
    return args


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    args.tmp = scratch / "tmp"  # every temporary file of the jobs and of moto: deleted at the end
    args.tmp.mkdir()
    tempfile.tempdir = str(args.tmp)
    load_at_start = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {
        "benchmark": "ingestion",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "parameters": {k: v for k, v in vars(args).items() if k != "out_json"},
    }
    print("2. job runs per 1,000 uploads ...", flush=True)
    if "batching" not in skip:
        sizes = [int(s) for s in args.batch_sizes]
        result["batching"] = measure_batching(args.uploads, sizes)
    with MotoCloud.start() as cloud:
        if "throughput" not in skip:
            print("1. throughput ...", flush=True)
            objects = make_objects(
                scratch / "objects",
                args,
                count=args.objects,
                rows=args.rows_per_object,
                comment_words=15,
            )
            result["throughput"] = measure_throughput(args, cloud, objects, scratch)
            print("1b. one object per job run ...", flush=True)
            result["per_object"] = measure_per_object(args, cloud, objects)
            if "profile" not in skip:
                print("1c. where the time goes: a profiled run ...", flush=True)
                result["profile"] = measure_profile(args, cloud, objects, scratch)
            shutil.rmtree(scratch / "objects")
        if "memory" not in skip and args.memory_sizes:
            print("3. driver memory ...", flush=True)
            result["memory"] = measure_memory(args, cloud, scratch)
    result["machine"] = {**machine_facts(), "load_average_1m_at_start": load_at_start}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lethe-ingest-bench-") as scratch:
        result = run(args, Path(scratch))
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(markdown(result))
    print()
    print(f"results: {args.out_json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
