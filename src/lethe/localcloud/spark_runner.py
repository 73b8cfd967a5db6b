"""Run one Spark job script on this machine the way Glue or EMR Serverless would run it.

The local cloud's Step Functions hooks (`sfn_hooks`, P5) call `run_spark_job` for every
`glue:startJobRun.sync` and `emr-serverless:startJobRun.sync` task. What a job sees:

- its script and every py-file are downloaded from the (moto) S3 endpoint into a fresh working
  directory, as the services do; the working directory is removed afterwards;
- it runs as `python script.py ARGS...` with the project's interpreter, in its own process group,
  so one `killpg` ends the driver and the JVM it started;
- its environment is this process's environment plus `Endpoints.client_environment()` (boto3 and
  pyarrow talk to the local cloud), `PYSPARK_PYTHON`/`PYSPARK_DRIVER_PYTHON` (workers get the
  venv's pyarrow), `SPARK_LOCAL_IP=127.0.0.1`, `PYTHONPATH` with the py-files first (zip files
  work on PYTHONPATH, for the driver and for the Python workers Spark starts), and
  `LETHE_SPARK_MASTER` (the job builds its own SparkSession and takes its master from there);
- Spark configuration the service would apply (`--conf k=v`, EMR `spark-defaults`) reaches the
  job through `PYSPARK_SUBMIT_ARGS`, which pyspark reads when it starts the JVM, together with
  local defaults (driver bound to 127.0.0.1, UI off) that the job may override in its builder.
  Keys that would make Spark download something or change the deployment mode are dropped, and
  so are the Python environment settings of EMR Serverless (`spark.archives` and the
  `PYSPARK_PYTHON` / `PYSPARK_DRIVER_PYTHON` that point into it, docs/SPARK.md): the local run
  uses this venv's interpreter, which has the same pinned packages;
- at most `RunSlots.limit` runs go at once (`LETHE_LOCAL_SPARK_RUNS`, default 2: each run is a
  JVM with a `local[2]` master, and a burst of executions would otherwise start one JVM each);
  a run waits for a slot after downloading its files, and its time limit counts from its slot;
- with slots, each slot keeps a warm driver (`spark_driver.py`: Python with PySpark imported and
  its JVM started) that runs the script with a SparkSession of its own, instead of starting a
  new interpreter and JVM per run (`LETHE_LOCAL_SPARK_WARM=0` turns it off). The run sees the
  same argv, environment, working directory, py-files and Spark configuration; a failed,
  timed-out or cancelled run retires its driver (the next run gets a fresh one), and so does
  every 25th run. Configuration only a JVM launch can apply (`spark.driver.*` but the host and
  bind address) makes the run cold;
- stdout and stderr go to `<logs_dir>/spark-<run_id>.log`; on failure `error_message` is the
  final line(s) of the last Python traceback on stderr (what Glue's ErrorMessage and EMR's

The slots and warm drivers are `spark_slots`; the spark-submit parameters and the Spark
configuration a run takes, `spark_submit`; stopping a run's process group, `spark_process`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.spark_process import (
    POLL_SECONDS,
    STDERR_TAIL_LINES,
    kill_group,
    kill_stragglers,
    still_wanted,
)
from lethe.localcloud.spark_slots import RunSlots, WarmDriverError, warm_allowed
from lethe.localcloud.spark_submit import LOCAL_SPARK_DEFAULTS, usable_spark_conf

DEFAULT_MASTER = "local[2]"
_MAX_ERROR_CHARS = 2000
# log4j lines as Spark prints them: "26/01/02 10:11:12 INFO SparkContext: ..."
_LOG4J_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} [A-Z]+ ")
_TRACEBACK_START = "Traceback (most recent call last):"


@dataclass(frozen=True)
class SparkRunResult:
    """How one job run ended."""

    succeeded: bool
    exit_code: int | None  # None when the process was never started (e.g. the script is missing)
    error_message: str  # "" on success
    log_path: Path
    duration: float  # seconds, wall clock, download included
    timed_out: bool = False
    cancelled: bool = False


def extract_error_message(stderr_lines: Iterable[str], exit_code: int | None) -> str:
    """What an operator needs to see first: the exception line(s) of the last Python traceback,
    else the last meaningful stderr lines, else the exit code."""
    lines = [line.rstrip("\n") for line in stderr_lines]
    start = max(
        (i for i, line in enumerate(lines) if line.startswith(_TRACEBACK_START)), default=None
    )
    if start is not None:
        message = _exception_after_traceback(lines[start + 1 :])
        if message:
            return message[:_MAX_ERROR_CHARS]
    meaningful = [
        line
        for line in lines
        if line.strip() and not _LOG4J_LINE.match(line) and not line.startswith("\t")
    ]
    if meaningful:
        return "\n".join(meaningful[-3:])[:_MAX_ERROR_CHARS]
    return f"the job exited with code {exit_code}" if exit_code is not None else "the job failed"


def _exception_after_traceback(lines: Sequence[str]) -> str:
    for index, line in enumerate(lines):
        if not line.strip() or line.startswith((" ", "\t")):
            continue  # a frame ("  File ...") or its source line
        message = [line]
        for follow in lines[index + 1 : index + 6]:  # multi-line messages (Py4JJavaError: ...)
            if (
                not follow.strip()
                or _LOG4J_LINE.match(follow)
                or follow.startswith((" ", "\t", _TRACEBACK_START))
            ):
                break
            message.append(follow)
        return "\n".join(message)
    return ""


def run_spark_job(
    script_url: str,
    args: Sequence[str],
    py_files: Sequence[str],
    *,
    endpoints: Endpoints,
    logs_dir: Path,
    run_id: str,
    timeout_seconds: float,
    spark_conf: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    master: str = DEFAULT_MASTER,
    should_continue: Callable[[], bool] | None = None,
    base_dir: Path | None = None,
    slots: RunSlots | None = None,
) -> SparkRunResult:
    """Run `python <script> *args` as Glue / EMR Serverless would, and wait for it.

    `script_url` and `py_files` are `s3://bucket/key` URLs on the local cloud's S3 (local paths
    and `file://` URLs work too, relative ones against `base_dir`). The run is killed (whole
    process group) when `timeout_seconds` pass or when `should_continue()` returns False (the
    Step Functions task was stopped or timed out). With `slots`, the run first waits for one
    (after its downloads); `timeout_seconds` counts from then. Never raises for a failing job:
    the result says what happened.
    """
    started = time.monotonic()
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / f"spark-{_safe_name(run_id)}.log"
    workdir = Path(tempfile.mkdtemp(prefix=f"lethe-spark-{_safe_name(run_id)[:40]}-"))
    try:
        log_path.write_text("", encoding="utf-8")
        # Append mode: the job's stdout (its own descriptor) and our lines never overwrite.
        with log_path.open("a", encoding="utf-8") as log:
            log.write(
                f"# lethe local Spark run {run_id}\n# script {script_url}\n"
                f"# args {list(args)}\n# py-files {list(py_files)}\n"
            )
            try:
                # as on AWS, the job's execution role reads its files (extra_env's credentials)
                script = _fetch(script_url, workdir, endpoints, base_dir, extra_env)
                # One folder per py-file: two `helpers.py` from different prefixes both import.
                deps = [
                    _fetch(url, workdir / "py-files" / str(number), endpoints, base_dir, extra_env)
                    for number, url in enumerate(py_files)
                ]
            except Exception as exc:
                message = f"could not download the job's files: {exc}"
                log.write(f"# {message}\n")
                return SparkRunResult(False, None, message, log_path, time.monotonic() - started)
            env = _job_environment(endpoints, deps, master, spark_conf or {}, extra_env or {})
            command = [sys.executable, str(script), *args]
            log.write(f"# command {shlex.join(command)}\n")
            log.write(f"# PYSPARK_SUBMIT_ARGS {env['PYSPARK_SUBMIT_ARGS']}\n")
            log.flush()
            downloaded = time.monotonic()
            slot = slots.acquire(should_continue) if slots is not None else -1
            if slot is None:
                log.write("# cancelled while waiting for a run slot\n")
                return SparkRunResult(
                    False, None, "the job run was cancelled", log_path,
                    time.monotonic() - started, cancelled=True,
                )  # fmt: skip
            assert slots is None or slot is not None
            if slots is not None and slots.limit:
                log.write(
                    f"# waited {time.monotonic() - downloaded:.1f} s for one of {slots.limit} "
                    "run slots\n"
                )
                log.flush()
            deadline = time.monotonic() + timeout_seconds
            try:
                conf = {**LOCAL_SPARK_DEFAULTS, **usable_spark_conf(spark_conf or {})}
                if slots is not None and slots.warm and warm_allowed(conf):
                    return _run_warm(
                        slots, slot, command, env, conf, workdir,
                        logs_dir=logs_dir, log=log, log_path=log_path, started=started,
                        deadline=deadline, timeout_seconds=timeout_seconds,
                        should_continue=should_continue,
                    )  # fmt: skip
                return _run(
                    command,
                    env=env,
                    workdir=workdir,
                    log=log,
                    log_path=log_path,
                    started=started,
                    deadline=deadline,
                    timeout_seconds=timeout_seconds,
                    should_continue=should_continue,
                )
            finally:
                if slots is not None:
                    slots.release(slot)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_warm(  # noqa: PLR0917 - the run's parts, as _run takes them
    slots: RunSlots,
    slot: int,
    command: list[str],
    env: dict[str, str],
    conf: Mapping[str, str],
    workdir: Path,
    *,
    logs_dir: Path,
    log: IO[str],
    log_path: Path,
    started: float,
    deadline: float,
    timeout_seconds: float,
    should_continue: Callable[[], bool] | None,
) -> SparkRunResult:
    """`_run`, on the slot's warm driver (`spark_driver.py`)."""
    try:
        driver = slots.driver(slot, env, logs_dir)
    except WarmDriverError as exc:
        log.write(f"# {exc}: running cold\n")
        return _run(
            command, env=env, workdir=workdir, log=log, log_path=log_path, started=started,
            deadline=deadline, timeout_seconds=timeout_seconds, should_continue=should_continue,
        )  # fmt: skip
    log.write(f"# on warm driver pid {driver.process.pid}, its run {driver.runs + 1}\n")
    request = {
        "script": command[1],
        "argv": command[2:],
        "cwd": str(workdir),
        "env": env,
        "python_path": [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p],
        "conf": dict(conf),
    }
    code, timed_out, cancelled, tail = driver.run(
        request, log=log, deadline=deadline, should_continue=should_continue
    )
    if code != 0 or timed_out or cancelled:
        # a failed run never leaves its driver to the next; the next one starts at once
        slots.retire(slot, logs_dir=logs_dir)
    return _outcome(code, timed_out, cancelled, tail, log, log_path, started, timeout_seconds)


def _outcome(  # noqa: PLR0917 - what a run ended with
    exit_code: int | None,
    timed_out: bool,
    cancelled: bool,
    tail: Iterable[str],
    log: IO[str],
    log_path: Path,
    started: float,
    timeout_seconds: float,
) -> SparkRunResult:
    duration = time.monotonic() - started
    log.write(f"\n# exit code {exit_code} after {duration:.1f} s\n")
    if timed_out:
        message = f"the job run timed out after {timeout_seconds:g} s"
        return SparkRunResult(False, exit_code, message, log_path, duration, timed_out=True)
    if cancelled:
        return SparkRunResult(
            False, exit_code, "the job run was cancelled", log_path, duration, cancelled=True
        )
    if exit_code == 0:
        return SparkRunResult(True, 0, "", log_path, duration)
    return SparkRunResult(
        False, exit_code, extract_error_message(tail, exit_code), log_path, duration
    )


def _run(
    command: list[str],
    *,
    env: dict[str, str],
    workdir: Path,
    log: IO[str],
    log_path: Path,
    started: float,
    deadline: float,
    timeout_seconds: float,
    should_continue: Callable[[], bool] | None,
) -> SparkRunResult:
    process = subprocess.Popen(  # noqa: S603 - our interpreter, our downloaded script
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    lock = threading.Lock()
    assert process.stderr is not None
    pump = threading.Thread(
        target=_pump_stderr,
        args=(process.stderr, log, lock, tail),
        name=f"spark-stderr-{process.pid}",
        daemon=True,
    )
    pump.start()
    timed_out = cancelled = False
    while process.poll() is None:
        if time.monotonic() >= deadline:
            timed_out = True
        elif should_continue is not None and not still_wanted(should_continue):
            cancelled = True
        if timed_out or cancelled:
            kill_group(process)
            break
        time.sleep(POLL_SECONDS)
    exit_code = process.wait()
    kill_stragglers(process.pid)
    pump.join(timeout=5)
    with lock:  # the stderr pump may still be writing the log and the tail
        return _outcome(
            exit_code, timed_out, cancelled, tail, log, log_path, started, timeout_seconds
        )


def _pump_stderr(stream: IO[str], log: IO[str], lock: threading.Lock, tail: deque[str]) -> None:
    for line in stream:
        tail.append(line)
        with lock:
            if log.closed:  # a straggler after the run was reported: keep the tail only
                continue
            log.write(line)
            log.flush()


def _job_environment(
    endpoints: Endpoints,
    deps: Sequence[Path],
    master: str,
    spark_conf: Mapping[str, str],
    extra_env: Mapping[str, str],
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(endpoints.client_environment())
    python_path: list[str] = []
    for dep in deps:
        entry = str(dep.parent if dep.suffix == ".py" else dep)
        if entry not in python_path:
            python_path.append(entry)
    if env.get("PYTHONPATH"):
        python_path.append(env["PYTHONPATH"])
    conf = {**LOCAL_SPARK_DEFAULTS, **usable_spark_conf(spark_conf)}
    submit = [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "LETHE_SPARK_MASTER": master,
            "PYTHONPATH": os.pathsep.join(python_path),
            "PYSPARK_SUBMIT_ARGS": shlex.join([*submit, "pyspark-shell"]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]
    env.update(extra_env)
    return env


def _fetch(
    url: str,
    target_dir: Path,
    endpoints: Endpoints,
    base_dir: Path | None,
    credentials: Mapping[str, str] | None = None,
) -> Path:
    target_dir.mkdir(parents=True, exist_ok=True)
    parsed = urlparse(url)
    if parsed.scheme in {"s3", "s3a", "s3n"}:
        key = parsed.path.lstrip("/")
        if not parsed.netloc or not key:
            raise ValueError(f"not an S3 object URL: {url}")
        target = target_dir / Path(key).name
        endpoints.client("s3", credentials=credentials).download_file(
            parsed.netloc, key, str(target)
        )
        return target
    if parsed.scheme in {"", "file"}:
        source = Path(parsed.path if parsed.scheme == "file" else url)
        if not source.is_absolute() and base_dir is not None:
            source = base_dir / source
        target = target_dir / source.name
        shutil.copyfile(source, target)
        return target
    raise ValueError(f"unsupported location {url!r} (use s3://bucket/key)")


def _safe_name(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", value) or "run"
