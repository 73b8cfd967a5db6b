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
  stateDetails show), or the last meaningful stderr lines when there is no traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from lethe.localcloud.deployment import Endpoints

LOG = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
RUNS_ENV = "LETHE_LOCAL_SPARK_RUNS"
WARM_ENV = "LETHE_LOCAL_SPARK_WARM"
DEFAULT_CONCURRENT_RUNS = 2
RUNS_PER_DRIVER = 25
_DRIVER_START_SECONDS = 300.0
_WARM_SAFE_DRIVER_KEYS = frozenset({"spark.driver.host", "spark.driver.bindAddress"})
_POLL_SECONDS = 0.25
_KILL_GRACE_SECONDS = 10.0
_STDERR_TAIL_LINES = 400
_MAX_ERROR_CHARS = 2000

# Local defaults for every job; a job's own SparkSession.builder.config(...) wins over these.
_LOCAL_SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}
# Configuration that cannot work on this machine (no Maven, no cluster manager, no s3a) or that
# would change how the job is deployed. Dropped with a log line, never passed to Spark.
_DROPPED_CONF_KEYS = frozenset(
    {
        "spark.master",
        "spark.submit.deployMode",
        "spark.submit.pyFiles",
        "spark.jars",
        "spark.jars.packages",
        "spark.jars.repositories",
        "spark.jars.ivy",
        "spark.archives",
        "spark.files",
        "spark.pyspark.python",
        "spark.pyspark.driver.python",
        # EMR Serverless: the interpreter inside the spark.archives environment
        "spark.executorEnv.PYSPARK_PYTHON",
        "spark.executorEnv.PYSPARK_DRIVER_PYTHON",
    }
)
_DROPPED_CONF_PREFIXES = ("spark.emr-serverless.", "spark.kubernetes.", "spark.yarn.")

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


class RunSlots:
    """At most `limit` Spark runs at once on this machine; the others wait for a slot.

    A Step Functions execution runs in a thread of the cloud process, so a burst of executions
    (1,000 uploads, 50 erasure requests) would start one JVM each at the same moment, on a
    machine with a couple of cores: every run slows down, memory runs out, none finishes
    sooner. On AWS each run has its own workers; here they take turns. With `warm`, each slot
    keeps a `WarmDriver` between runs."""

    def __init__(self, limit: int | None, *, warm: bool = False) -> None:
        self.limit = limit  # None: no limit
        self.warm = warm and bool(limit)
        self._free: queue.Queue[int] = queue.Queue()
        for slot in range(limit or 0):
            self._free.put(slot)
        self._drivers: dict[int, WarmDriver] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RunSlots:
        """`LETHE_LOCAL_SPARK_RUNS`: a positive number, or `none` for no limit;
        `LETHE_LOCAL_SPARK_WARM`: `0` for a new interpreter and JVM per run."""
        environ = environ if environ is not None else os.environ
        value = environ.get(RUNS_ENV, "").strip()
        warm = environ.get(WARM_ENV, "1").strip() not in {"0", "false", "no"}
        if not value:
            return cls(DEFAULT_CONCURRENT_RUNS, warm=warm)
        if value.lower() == "none":
            return cls(None)
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{RUNS_ENV} must be a positive number or 'none', not {value!r}")
        return cls(int(value), warm=warm)

    def acquire(self, should_continue: Callable[[], bool] | None) -> int | None:
        """Wait for a slot and return it; None when `should_continue()` says the run is no
        longer wanted. Without a limit, every run gets slot -1 at once."""
        if not self.limit:
            return -1
        while True:
            try:
                return self._free.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if should_continue is not None and not _still_wanted(should_continue):
                    return None

    def release(self, slot: int) -> None:
        if slot >= 0:
            self._free.put(slot)

    def driver(self, slot: int, env: Mapping[str, str], logs_dir: Path) -> WarmDriver:
        """The slot's warm driver for this environment: the one it has, or a new one."""
        with self._lock:
            current = self._drivers.get(slot)
        if current is not None and current.usable(env):
            return current
        if current is not None:
            current.stop()
        started = WarmDriver(env, logs_dir / f"spark-driver-{slot}.log")
        with self._lock:
            self._drivers[slot] = started
        return started

    def retire(self, slot: int) -> None:
        with self._lock:
            current = self._drivers.pop(slot, None)
        if current is not None:
            current.stop()

    def shutdown(self) -> None:
        with self._lock:
            drivers, self._drivers = list(self._drivers.values()), {}
        for driver in drivers:
            driver.stop()


class WarmDriverError(RuntimeError):
    """The warm driver could not start, or died outside a job."""


class WarmDriver:
    """One `python -m lethe.localcloud.spark_driver` process (and its JVM), in its own process
    group. Its stdout and stderr are copied into the log of the run it is running (into
    `idle_log` between runs); its answers come on a pipe of their own."""

    def __init__(self, env: Mapping[str, str], idle_log: Path) -> None:
        self.base = _driver_environment(env)
        self.runs = 0
        self._lock = threading.Lock()
        self._sink: IO[str] | None = None
        self._tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._idle = idle_log.open("a", encoding="utf-8")
        self._home = Path(tempfile.mkdtemp(prefix="lethe-spark-driver-"))
        read_fd, write_fd = os.pipe()
        try:
            self.process = subprocess.Popen(  # noqa: S603 - our interpreter, our module
                [sys.executable, "-m", "lethe.localcloud.spark_driver", str(write_fd)],
                cwd=self._home,
                env=self.base,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                text=True,
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        control = os.fdopen(read_fd, "r", encoding="utf-8")
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        for name, stream, is_err in (
            ("out", self.process.stdout, False),
            ("err", self.process.stderr, True),
            ("control", control, None),
        ):
            threading.Thread(
                target=self._control if is_err is None else self._copy,
                args=(stream,) if is_err is None else (stream, is_err),
                name=f"spark-driver-{self.process.pid}-{name}",
                daemon=True,
            ).start()
        self._idle.write(f"# warm driver pid {self.process.pid} starting\n")
        self._idle.flush()
        try:
            ready = self._answers.get(timeout=_DRIVER_START_SECONDS)
        except queue.Empty:
            ready = None
        if not ready or not ready.get("ready"):
            self.stop()
            raise WarmDriverError(f"the warm Spark driver did not start (see {idle_log})")

    def usable(self, env: Mapping[str, str]) -> bool:
        """Alive and not worn. The run's own environment is applied per run (in the driver,
        and as `spark.executorEnv.*` for the workers), so only the endpoints must match: a
        variable of the driver's start that a run lacks stays visible to its Python workers."""
        same_cloud = all(
            env.get(name) == self.base.get(name)
            for name in ("AWS_ENDPOINT_URL", "PYSPARK_PYTHON", "LETHE_SPARK_MASTER")
        )
        return self.process.poll() is None and self.runs < RUNS_PER_DRIVER and same_cloud

    def _copy(self, stream: IO[str], is_err: bool) -> None:
        for line in stream:
            with self._lock:
                if is_err:
                    self._tail.append(line)
                sink = self._sink if self._sink is not None else self._idle
                if not sink.closed:
                    sink.write(line)
                    sink.flush()

    def _control(self, stream: IO[str]) -> None:
        for line in stream:
            with contextlib.suppress(ValueError):
                self._answers.put(json.loads(line))
        self._answers.put(None)  # the driver is gone

    def run(
        self,
        request: Mapping[str, Any],
        *,
        log: IO[str],
        deadline: float,
        should_continue: Callable[[], bool] | None,
    ) -> tuple[int | None, bool, bool, list[str]]:
        """Run one job: (exit code or None, timed out, cancelled, stderr tail)."""
        self.runs += 1
        with self._lock:
            log.flush()
            self._sink, self._tail = log, deque(maxlen=_STDERR_TAIL_LINES)
        timed_out = cancelled = False
        code: int | None = None
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            while True:
                try:
                    answer = self._answers.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        timed_out = True
                    elif should_continue is not None and not _still_wanted(should_continue):
                        cancelled = True
                    if timed_out or cancelled:
                        self.stop()
                        break
                    continue
                if answer is None:  # died outside the job's own exit (a JVM crash, a kill)
                    code = self.process.wait()
                    break
                code = int(answer.get("exit_code", 1))
                break
        except (OSError, ValueError) as exc:
            log.write(f"# the warm driver failed: {exc}\n")
            self.stop()
        finally:
            time.sleep(0.05)  # the last lines of the pipes
            with self._lock:
                self._sink, tail = None, list(self._tail)
        return code, timed_out, cancelled, tail

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            _kill_group(self.process)
        _kill_stragglers(self.process.pid)
        with self._lock:
            if not self._idle.closed:
                self._idle.write(f"# warm driver pid {self.process.pid} stopped\n")
                self._idle.close()
        shutil.rmtree(self._home, ignore_errors=True)


def _driver_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a warm driver starts with: the run's environment without what is the run's own
    (its py-files path, its Spark configuration: both are applied per run)."""
    base = {k: v for k, v in env.items() if k not in {"PYTHONPATH", "PYSPARK_SUBMIT_ARGS"}}
    base["PYSPARK_SUBMIT_ARGS"] = _submit_args(_LOCAL_SPARK_DEFAULTS)
    if os.environ.get("PYTHONPATH"):
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return base


def _submit_args(conf: Mapping[str, str]) -> str:
    submit = [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]
    return shlex.join([*submit, "pyspark-shell"])


def _warm_allowed(conf: Mapping[str, str]) -> bool:
    """False when the configuration needs a JVM launch (driver memory, class path, options)."""
    return not any(
        key.startswith("spark.driver.") and key not in _WARM_SAFE_DRIVER_KEYS for key in conf
    )


@dataclass(frozen=True)
class SparkSubmitOptions:
    """What the local run honours of a spark-submit command line."""

    py_files: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def parse_spark_submit_parameters(parameters: str | None) -> SparkSubmitOptions:
    """Parse EMR Serverless `SparkSubmitParameters`: `--py-files a,b` and `--conf k=v` count
    (`--opt=value` spelling too); every other option is ignored and reported in `ignored`."""
    options = SparkSubmitOptions()
    tokens = shlex.split(parameters or "")
    index = 0
    while index < len(tokens):
        token = tokens[index]
        name, has_inline, inline_value = (
            token.partition("=") if token.startswith("--") else (token, "", "")
        )
        value: str | None = inline_value if has_inline else None
        if (
            value is None
            and name.startswith("--")
            and index + 1 < len(tokens)
            and not tokens[index + 1].startswith("--")
        ):
            value = tokens[index + 1]
            index += 1
        index += 1
        if name == "--py-files" and value:
            options.py_files.extend(part for part in value.split(",") if part)
        elif name == "--conf" and value and "=" in value:
            key, _, conf_value = value.partition("=")
            options.conf[key.strip()] = conf_value.strip()
        else:
            options.ignored.append(token if value is None else f"{name} {value}")
    return options


def usable_spark_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The part of a job's Spark configuration that is passed on to the local run."""
    kept: dict[str, str] = {}
    for key, value in conf.items():
        if (
            key in _DROPPED_CONF_KEYS
            or key.startswith(_DROPPED_CONF_PREFIXES)
            or not key.startswith("spark.")
        ):
            LOG.info("local Spark run ignores configuration %s=%s", key, value)
            continue
        kept[key] = value
    return kept


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
                script = _fetch(script_url, workdir, endpoints, base_dir)
                # One folder per py-file: two `helpers.py` from different prefixes both import.
                deps = [
                    _fetch(url, workdir / "py-files" / str(number), endpoints, base_dir)
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
                conf = {**_LOCAL_SPARK_DEFAULTS, **usable_spark_conf(spark_conf or {})}
                if slots is not None and slots.warm and _warm_allowed(conf):
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
        slots.retire(slot)  # a failed run never leaves its driver to the next
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
    tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
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
        elif should_continue is not None and not _still_wanted(should_continue):
            cancelled = True
        if timed_out or cancelled:
            _kill_group(process)
            break
        time.sleep(_POLL_SECONDS)
    exit_code = process.wait()
    _kill_stragglers(process.pid)
    pump.join(timeout=5)
    with lock:  # the stderr pump may still be writing the log and the tail
        return _outcome(
            exit_code, timed_out, cancelled, tail, log, log_path, started, timeout_seconds
        )


def _still_wanted(should_continue: Callable[[], bool]) -> bool:
    try:
        return bool(should_continue())
    except Exception:
        LOG.exception("should_continue probe failed; the job keeps running")
        return True


def _pump_stderr(stream: IO[str], log: IO[str], lock: threading.Lock, tail: deque[str]) -> None:
    for line in stream:
        tail.append(line)
        with lock:
            if log.closed:  # a straggler after the run was reported: keep the tail only
                continue
            log.write(line)
            log.flush()


def _kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGTERM the run's process group (driver and JVM), SIGKILL what is left after a grace."""
    for sig, grace in ((signal.SIGTERM, _KILL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_stragglers(group: int) -> None:
    """A JVM the driver left behind is still in the run's process group: end it too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


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
    conf = {**_LOCAL_SPARK_DEFAULTS, **usable_spark_conf(spark_conf)}
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


def _fetch(url: str, target_dir: Path, endpoints: Endpoints, base_dir: Path | None) -> Path:
    target_dir.mkdir(parents=True, exist_ok=True)
    parsed = urlparse(url)
    if parsed.scheme in {"s3", "s3a", "s3n"}:
        key = parsed.path.lstrip("/")
        if not parsed.netloc or not key:
            raise ValueError(f"not an S3 object URL: {url}")
        target = target_dir / Path(key).name
        endpoints.client("s3").download_file(parsed.netloc, key, str(target))
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
