"""Where an ingest job's time goes: the ingestion benchmark's profile run, summed.

The profile run is one more run of the real job on the same batch, with the driver under
cProfile (`python -m cProfile -o driver.prof spark_jobs/ingest.py ...`: cProfile's clock is wall
time, and the driver blocks in each Spark action, so the cumulative time of the job's own
functions is the wall time of its phases) and every Python worker task under cProfile
(bench/profiled_daemon.py). Summed here into:

- `driver_phases`: the job's wall time by phase, disjoint, from the driver's profile;
- `worker_categories`: the Python workers' time by what runs (own time of each function,
  grouped by module; a built-in's time goes to the module that called it, split by caller);
- `worker_tasks`: the cumulative time of each task function of `lethe_jobs.ingest_tasks`
  (includes waiting for its input from the JVM).

Plus, from the run's process tree, CPU seconds per process role (bench/proc_tree.py) and of the
moto server. The profilers slow the Python side down: the run's wall time is reported next to
the timed runs' median so the overhead shows.
"""

from __future__ import annotations

import pstats
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# (label, functions whose cumulative time is the phase: (file suffix, function name))
DRIVER_PHASES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Spark session: JVM start-up and session build",
        (("lethe_jobs/session.py", "build_session"),),
    ),
    ("Spark session stop", (("pyspark/sql/session.py", "stop"),)),
    (
        "plan pieces (Parquet footers, large text scanned for line ends)",
        (("lethe_jobs/ingest_planning.py", "plan_pipelines"),),
    ),
    (
        "read and parse the raw objects, partial index entries (first Spark action, cached)",
        (("lethe_jobs/ingest_pipeline.py", "_piece_totals"),),
    ),
    (  # when that job ran in the driver's thread, between the read and the lake writes
        "raw objects' index entries: added up, written to the subject index",
        (("lethe_jobs/ingest_pipeline.py", "_write_raw_entries"),),
    ),
    (  # since their job runs beside the lake writes (ingest_pipeline.Beside): the wait after
        "raw objects' index entries (beside the lake writes): waited for after them",
        (("lethe_jobs/ingest_pipeline.py", "result"),),
    ),
    (
        "validate and conform (Spark SQL), lake Parquet files to S3, their index entries",
        (("lethe_jobs/ingest_pipeline.py", "_write_lake"),),
    ),
    (  # since the lake and quarantine files are written in one pass (ingest_pipeline)
        "validate and conform (Spark SQL), lake and quarantine files to S3, their index entries",
        (("lethe_jobs/ingest_pipeline.py", "_write_files"),),
    ),
    ("quarantine files", (("lethe_jobs/ingest_pipeline.py", "_write_quarantine"),)),
    (
        "outcomes, stale lake files, catalog records (driver, DynamoDB, the index)",
        (
            ("lethe_jobs/ingest_pipeline.py", "_outcomes"),
            ("lethe_jobs/ingest_core.py", "_remove_stale"),
            ("lethe_jobs/ingest_core.py", "_record"),
        ),
    ),
)
RUN_INGEST = ("lethe_jobs/ingest_core.py", "run_ingest")
MAIN = ("spark_jobs/ingest.py", "main")

WORKER_TASKS = (
    "scan_object",  # the split scan of a whole object, in one task (until the ranges)
    "scan_range",
    "read_pieces",
    "write_raw_entries",
    "partition_paths",
    "place_rows",
    "write_files",
    "write_lake_files",
    "write_quarantine",
)

# own-time categories of worker functions, first match wins: (label, file or name fragments)
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Python imports (a worker's first task)", ("<frozen importlib", "<frozen zipimport")),
    ("HMAC-SHA256 of subjects", ("_hashlib", "hashlib", "hmac")),
    ("CSV read and parse (pyarrow)", ("pyarrow._csv", "pyarrow/csv", "read_csv", "open_csv")),
    ("Parquet write (pyarrow)", ("pyarrow._parquet", "pyarrow/parquet", "ParquetWriter")),
    (
        "AWS calls to the emulator (boto3, HTTP client side)",
        ("botocore", "boto3", "urllib3", "http/client", "s3transfer", "ssl.py", "socket.py"),
    ),
    (
        "Lethe: index entries (lethe_shared.index.arrow_entries)",
        ("lethe_shared/index/arrow_entries",),
    ),
    ("Lethe: other job code (lethe_jobs, lethe_shared)", ("lethe_jobs/", "lethe_shared/")),
    (
        "Spark worker: Arrow batches from and to the JVM, waiting for it",
        ("pyspark/", "pyarrow/ipc", "pyarrow.lib.RecordBatchStreamReader", "pyarrow.ipc"),
    ),
    ("Arrow compute and conversions (pyarrow, other)", ("pyarrow",)),
)
OTHER = "other Python (standard library, json, logging)"


def _matches(func: tuple[str, int, str], file_suffix: str, name: str) -> bool:
    return func[0].replace("\\", "/").endswith(file_suffix) and func[2] == name


def _cumulative(stats: dict[Any, Any], wanted: Iterable[tuple[str, str]]) -> float:
    total = 0.0
    for suffix, name in wanted:
        total += sum(v[3] for f, v in stats.items() if _matches(f, suffix, name))
    return total


def driver_phases(profile: Path) -> dict[str, Any]:
    """The driver's wall time by phase (seconds), disjoint; `total_s` is the profile's."""
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = max((v[3] for v in stats.values()), default=0.0)
    phases = {label: _cumulative(stats, funcs) for label, funcs in DRIVER_PHASES}
    run_ingest = _cumulative(stats, [RUN_INGEST])
    inside = sum(v for k, v in phases.items() if not k.startswith("Spark session"))
    main = _cumulative(stats, [MAIN])
    session = sum(v for k, v in phases.items() if k.startswith("Spark session"))
    phases["batch document, object heads, catalog look-ups (driver, S3 and DynamoDB)"] = max(
        run_ingest - inside, 0.0
    )
    phases["hash key, AWS clients, logging (driver)"] = max(main - run_ingest - session, 0.0)
    phases["Python start-up and imports of the driver"] = max(total - main, 0.0)
    return {"total_s": round(total, 3), "phases_s": {k: round(v, 3) for k, v in phases.items()}}


def _category_of_file(func: tuple[str, int, str]) -> str | None:
    where = f"{func[0].replace(chr(92), '/')}:{func[2]}"
    for label, fragments in CATEGORIES:
        if any(fragment in where for fragment in fragments):
            return label
    return None


TOP = 10


def _name(func: tuple[str, int, str]) -> str:
    """module-ish name of a profiled function: the file's last two parts and the function."""
    if func[0] == "~":
        return func[2]
    parts = func[0].replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{func[1]}({func[2]})"


def worker_profile(files: Iterable[Path]) -> dict[str, Any]:
    """Worker time by category and by task function (seconds, summed over every task)."""
    paths, unreadable = [], 0
    for path in files:
        try:
            pstats.Stats(str(path))
        except (EOFError, ValueError, TypeError, OSError):  # cut short: its worker was ended
            unreadable += 1
            continue
        paths.append(str(path))
    if not paths:
        return {"tasks": 0, "unreadable": unreadable, "total_s": 0.0, "categories_s": {},
                "task_functions_s": {}}  # fmt: skip
    stats = pstats.Stats(*paths).stats  # type: ignore[attr-defined]
    categories: dict[str, float] = defaultdict(float)
    for func, (_cc, _nc, own, _cum, callers) in stats.items():
        label = _category_of_file(func)
        if label is None and func[0] == "~" and callers:  # a C function: to its callers' modules
            caller_own = sum(c[2] for c in callers.values())
            for caller, figures in callers.items():
                share = own * (figures[2] / caller_own if caller_own else 1 / len(callers))
                categories[_category_of_file(caller) or OTHER] += share
            continue
        categories[label or OTHER] += own
    tasks = {
        name: round(
            sum(v[3] for f, v in stats.items() if f[2] == name and "ingest_tasks" in f[0]), 3
        )
        for name in WORKER_TASKS
    }
    total = sum(categories.values())
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:TOP]
    return {
        "unreadable": unreadable,
        "top_own_s": [
            {"function": _name(func), "own_s": round(v[2], 3), "calls": v[1]} for func, v in top
        ],
        "tasks": len(paths),
        "total_s": round(total, 3),
        "categories_s": {
            k: round(v, 3) for k, v in sorted(categories.items(), key=lambda kv: -kv[1])
        },
        "task_functions_s": {k: v for k, v in tasks.items() if v > 0},
    }


def spark_stages(events: Path) -> list[dict[str, Any]]:
    """Each Spark stage of the run, from its event log (`spark.eventLog.dir`, one file): where
    it was called from, its tasks, its wall time (submitted to completed) and its tasks' metrics
    summed: run time (which includes waiting for the Python workers), the executors' JVM CPU,
    GC, shuffle written and read, disk spilled. The JVM's share the driver and worker profiles
    do not show."""
    import json  # noqa: PLC0415

    files = sorted(f for f in events.glob("*") if f.is_file()) if events.is_dir() else []
    stages: dict[int, dict[str, Any]] = {}
    for path in files:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerTaskEnd":
                    stage = stages.setdefault(event["Stage ID"], _new_stage())
                    _add_task(stage, event.get("Task Metrics") or {})
                elif kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    stage = stages.setdefault(info["Stage ID"], _new_stage())
                    stage["name"] = _call_site(info.get("Stage Name", ""))
                    stage["tasks"] = info.get("Number of Tasks", 0)
                    started, ended = info.get("Submission Time"), info.get("Completion Time")
                    if started and ended:
                        stage["wall_s"] = round((ended - started) / 1000, 3)
    return [
        {"stage": number, **{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()}}
        for number, s in sorted(stages.items())
    ]


def _new_stage() -> dict[str, Any]:
    return {
        "name": "", "tasks": 0, "wall_s": 0.0, "run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0,
        "shuffle_write_mib": 0.0, "shuffle_read_mib": 0.0, "spill_mib": 0.0,
    }  # fmt: skip


def _add_task(stage: dict[str, Any], metrics: dict[str, Any]) -> None:
    mib = 1024 * 1024
    stage["run_s"] += metrics.get("Executor Run Time", 0) / 1000
    stage["cpu_s"] += metrics.get("Executor CPU Time", 0) / 1e9
    stage["gc_s"] += metrics.get("JVM GC Time", 0) / 1000
    written = metrics.get("Shuffle Write Metrics") or {}
    stage["shuffle_write_mib"] += written.get("Shuffle Bytes Written", 0) / mib
    read = metrics.get("Shuffle Read Metrics") or {}
    stage["shuffle_read_mib"] += (
        read.get("Remote Bytes Read", 0) + read.get("Local Bytes Read", 0)
    ) / mib
    stage["spill_mib"] += metrics.get("Disk Bytes Spilled", 0) / mib


def _call_site(name: str) -> str:
    """`collect at /path/to/ingest_pipeline.py:103` -> `collect at ingest_pipeline.py:103`."""
    action, at, where = name.partition(" at ")
    return f"{action}{at}{where.replace(chr(92), '/').rsplit('/', 1)[-1]}" if at else name


# the JVM's time by what runs: each sample of a Spark task thread goes to the first category
# one of whose fragments is in its stack, read from the top (the method running) down
JVM_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("regular expressions (decimal checks, ...)", ("java.util.regex.",)),
    ("CSV parse (univocity)", ("com.univocity.",)),
    ("compression (LZ4, Snappy, Zstandard)", ("lz4", "snappy", "zstd", "Snappy", "LZ4")),
    ("Parquet write", ("org.apache.parquet.",)),
    (
        "Arrow batches to and from the Python workers",
        (
            "org.apache.arrow.",
            "ArrowWriter",
            "ArrowColumnVector",
            ".arrow.",
            "PythonArrow",
            "ArrowPython",
            "ArrowEvalPython",
            "python.PythonRunner",
            "BasePythonRunner",
        ),
    ),
    ("cache: columnar build and scan (persist, DISK_ONLY)", ("execution.columnar.",)),
    (
        "shuffle and sort",
        (
            "org.apache.spark.shuffle.",
            "UnsafeExternalSorter",
            "UnsafeInMemorySorter",
            "UnsafeSorterSpill",
            "ShuffleExternalSorter",
            "util.collection.unsafe.sort.",
            "ExternalSorter",
            "storage.DiskBlockObjectWriter",
            "ShuffleBlockFetcherIterator",
        ),
    ),
    (
        "serialization (Kryo, Java)",
        ("com.esotericsoftware.", "serializer.", "ObjectOutputStream", "ObjectInputStream"),
    ),
    ("JSON (from_json, to_json: Jackson)", ("com.fasterxml.jackson.",)),
    (
        "expressions: casts, checks, projections (generated code)",
        ("GeneratedClass", "catalyst.expressions.", "unsafe.types.UTF8String", "catalyst.util."),
    ),
    ("aggregation (raw objects' entries)", ("execution.aggregate.",)),
    ("disk and socket I/O", ("java.io.", "java.nio.", "sun.nio.", "java.net.")),
)
JVM_OTHER = "other JVM code"
# the threads doing a Spark task's work: the task's own, and the thread that feeds a Python
# worker its input (computing the rows it sends: cache scans, expressions, Arrow conversion)
SPARK_WORK_THREADS = ("Executor task launch worker", "writer for ")


def jvm_profile(recording: Path, top: int = 12) -> dict[str, Any]:
    """The JVM's execution samples of a run (Java Flight Recorder, `settings=profile`: a Java
    thread running Java code is sampled every 10 ms): the samples of the threads doing Spark
    tasks' work (SPARK_WORK_THREADS) by category (JVM_CATEGORIES) and the methods most often
    running, plus how many samples other threads (the driver's, Spark's own) took. A sample is
    about 10 ms of CPU; garbage collection, the JIT compiler and native code are not sampled."""
    import subprocess  # noqa: PLC0415

    if not recording.is_file():
        return {}
    command = ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "96",
               str(recording)]  # fmt: skip
    categories: dict[str, int] = defaultdict(int)
    methods: dict[str, int] = defaultdict(int)
    samples = other_threads = 0
    thread, in_stack = "", False
    frames: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as listing:
        assert listing.stdout is not None
        for raw in listing.stdout:
            line = raw.strip()
            if line.startswith("sampledThread = "):
                thread = line
            elif line == "stackTrace = [":
                frames, in_stack = [], True
            elif in_stack and line == "]":
                in_stack = False
                samples += 1
                if not any(name in thread for name in SPARK_WORK_THREADS):
                    other_threads += 1
                    continue
                categories[_jvm_category(frames)] += 1
                if frames:
                    methods[frames[0].split("(", 1)[0]] += 1
            elif in_stack and line != "...":
                frames.append(line)
    return {
        "samples": samples,
        "other_threads": other_threads,
        "categories": dict(sorted(categories.items(), key=lambda kv: -kv[1])),
        "top_methods": dict(sorted(methods.items(), key=lambda kv: -kv[1])[:top]),
    }


def _jvm_category(frames: list[str]) -> str:
    for frame in frames:
        for label, fragments in JVM_CATEGORIES:
            if any(fragment in frame for fragment in fragments):
                return label
    return JVM_OTHER


def jvm_lines(jvm: dict[str, Any], title: str) -> list[str]:
    """A JVM profile (`jvm_profile`) as a Markdown table."""
    if not jvm or not jvm.get("samples"):
        return []
    tasks = sum(jvm["categories"].values()) or 1
    lines = [
        f"| {title}: JVM samples of the threads doing Spark tasks' work ({tasks:,}, about "
        f"{tasks / 100:,.0f} s of CPU; other threads {jvm['other_threads']:,}) | samples | share |",
        "|---|---:|---:|",
    ]
    for label, count in jvm["categories"].items():
        lines.append(f"| {label} | {count:,} | {100 * count / tasks:.0f} % |")
    methods = "; ".join(f"`{m}` {n:,}" for m, n in list(jvm["top_methods"].items())[:8])
    return [*lines, "", f"Most sampled JVM methods ({title}): {methods}."]


def stage_lines(stages: list[dict[str, Any]]) -> list[str]:
    """The stages as a Markdown table."""
    if not stages:
        return []
    lines = [
        "| Spark stage (where the job called it) | tasks | wall s | tasks' run s | executor "
        "JVM CPU s | GC s | shuffle written MiB | shuffle read MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stages:
        lines.append(
            f"| {s['stage']}: `{s['name']}` | {s['tasks']} | {s['wall_s']:.1f} | {s['run_s']:.1f} "
            f"| {s['cpu_s']:.1f} | {s['gc_s']:.1f} | {s['shuffle_write_mib']:,.0f} "
            f"| {s['shuffle_read_mib']:,.0f} |"
        )
    return lines


def markdown(profile: dict[str, Any], timed_median_s: float | None) -> list[str]:
    run = profile["run"]
    wall = run["wall_s"]
    overhead = (
        f" (against the timed runs' median of {timed_median_s:.1f} s: the profilers slow the "
        "Python side down, and the load on the machine moves both; read the shares)"
        if timed_median_s
        else ")"
    )
    driver = profile["driver"]
    lines = [
        f"**Where the time goes** (one more run of the same batch with the driver and every "
        f"Python worker task under cProfile: {wall:.1f} s wall{overhead}",
        "",
        "| phase of the job (driver's wall clock) | s | share |",
        "|---|---:|---:|",
    ]
    total = driver["total_s"] or 1.0
    for label, seconds in sorted(driver["phases_s"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {label} | {seconds:.1f} | {100 * seconds / total:.0f} % |")
    lines.append(f"| **whole driver** | **{driver['total_s']:.1f}** | 100 % |")
    cpu = profile["cpu_s"]
    lines += [
        "",
        "| CPU seconds of the run, by process | s | share |",
        "|---|---:|---:|",
    ]
    cpu_total = sum(cpu.values()) or 1.0
    for label, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {label} | {seconds:.1f} | {100 * seconds / cpu_total:.0f} % |")
    workers = profile["workers"]
    wtotal = workers["total_s"] or 1.0
    lines += [
        "",
        f"| Python workers' time by what runs ({workers['tasks']} task(s), summed; wall time "
        "inside each task) | s | share |",
        "|---|---:|---:|",
    ]
    for label, seconds in workers["categories_s"].items():
        lines.append(f"| {label} | {seconds:.1f} | {100 * seconds / wtotal:.0f} % |")
    tasks = ", ".join(f"`{k}` {v:.1f} s" for k, v in workers["task_functions_s"].items())
    lines += ["", f"Cumulative time of each task function (with its input's wait): {tasks}."]
    top = "; ".join(f"`{t['function']}` {t['own_s']:.1f} s" for t in workers.get("top_own_s", []))
    if top:
        lines += ["", f"The workers' largest own times: {top}."]
    stages = stage_lines(profile.get("stages") or [])
    if stages:
        lines += ["", *stages]
    for key, title in (("jvm", "Lethe"), ("plain_jvm", "plain Spark")):
        jvm = jvm_lines(profile.get(key) or {}, title)
        if jvm:
            lines += ["", *jvm]
    return lines


def plot(profile: dict[str, Any], out: Path) -> Path:
    """A PNG of the three breakdowns (matplotlib, Agg)."""
    import matplotlib  # noqa: PLC0415 (only for the plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    parts = [
        ("driver wall s by phase", profile["driver"]["phases_s"]),
        ("CPU s by process", profile["cpu_s"]),
        ("Python workers s by category", profile["workers"]["categories_s"]),
    ]
    fig, axes = plt.subplots(3, 1, figsize=(10, 11))
    for ax, (title, values) in zip(axes, parts, strict=True):
        items = sorted(values.items(), key=lambda kv: kv[1])
        ax.barh([k[:70] for k, _ in items], [v for _, v in items], color="#4477aa")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Ingest job: where the time goes (profile run)", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return out
