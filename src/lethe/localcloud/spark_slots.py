"""How local Spark runs share this machine: at most `RunSlots.limit` at once, each slot with
a warm driver (`WarmDriver`, `python -m lethe.localcloud.spark_driver`) between runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from lethe.localcloud.spark_process import (
    POLL_SECONDS,
    STDERR_TAIL_LINES,
    kill_group,
    kill_stragglers,
    still_wanted,
)
from lethe.localcloud.spark_submit import LOCAL_SPARK_DEFAULTS, submit_args

RUNS_ENV = "LETHE_LOCAL_SPARK_RUNS"
WARM_ENV = "LETHE_LOCAL_SPARK_WARM"
DEFAULT_CONCURRENT_RUNS = 2
RUNS_PER_DRIVER = 25
_DRIVER_START_SECONDS = 300.0
_WARM_SAFE_DRIVER_KEYS = frozenset({"spark.driver.host", "spark.driver.bindAddress"})


class RunSlots:
    """At most `limit` Spark runs at once on this machine; the others wait for a slot.

    A Step Functions execution runs in a thread of the cloud process, so a burst of executions
    (1,000 uploads, 50 erasure requests) would start one JVM each at the same moment, on a
    machine with a couple of cores: every run slows down, memory runs out, none finishes
    sooner. On AWS each run has its own workers; here they take turns. With `warm`, each slot
    keeps a `WarmDriver` between runs, and a run takes the slot freed last (its driver is the
    one most likely started): runs one after another share one driver, and a second driver
    (another JVM start) is started only when runs overlap."""

    def __init__(self, limit: int | None, *, warm: bool = False) -> None:
        self.limit = limit  # None: no limit
        self.warm = warm and bool(limit)
        self._free: queue.Queue[int] = queue.LifoQueue()  # the warm slot first
        for slot in range(limit or 0):
            self._free.put(slot)
        self._drivers: dict[int, WarmDriver] = {}
        self._successors: dict[int, _Successor] = {}
        self._lock = threading.Lock()
        self._closed = False

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
                return self._free.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if should_continue is not None and not still_wanted(should_continue):
                    return None

    def release(self, slot: int) -> None:
        if slot >= 0:
            self._free.put(slot)

    def driver(self, slot: int, env: Mapping[str, str], logs_dir: Path) -> WarmDriver:
        """The slot's warm driver for this environment: the one it has, its successor (started
        while the last run of the one before it ran, or after a failed run), or a new one."""
        with self._lock:
            current = self._drivers.get(slot)
        if current is not None and current.usable(env):
            if current.runs == RUNS_PER_DRIVER - 1:  # this run is its last: start the next
                self._prepare(slot, env, logs_dir)
            return current
        if current is not None:
            current.stop()
        with self._lock:
            successor = self._successors.pop(slot, None)
        started = successor.take(env) if successor is not None else None
        if started is None:
            started = WarmDriver(env, logs_dir / f"spark-driver-{slot}.log")
        with self._lock:
            self._drivers[slot] = started
        return started

    def _prepare(self, slot: int, env: Mapping[str, str], logs_dir: Path) -> None:
        """Start the slot's next driver in the background (its JVM starts while a run goes)."""
        with self._lock:
            if self._closed or slot in self._successors:
                return
            self._successors[slot] = _Successor(env, logs_dir / f"spark-driver-{slot}.log")

    def retire(self, slot: int, *, logs_dir: Path | None = None) -> None:
        """Stop the slot's driver; with `logs_dir`, start its successor in the background."""
        with self._lock:
            current = self._drivers.pop(slot, None)
        if current is not None:
            current.stop()
            if logs_dir is not None:
                self._prepare(slot, current.base, logs_dir)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            drivers, self._drivers = list(self._drivers.values()), {}
            successors, self._successors = list(self._successors.values()), {}
        for driver in drivers:
            driver.stop()
        for successor in successors:
            successor.discard()


class _Successor:
    """A WarmDriver starting in a thread of its own; `take` waits for it."""

    def __init__(self, env: Mapping[str, str], idle_log: Path) -> None:
        self._done = threading.Event()
        self._discarded = False
        self._lock = threading.Lock()
        self.driver: WarmDriver | None = None
        threading.Thread(
            target=self._start, args=(dict(env), idle_log), name="spark-driver-next", daemon=True
        ).start()

    def _start(self, env: dict[str, str], idle_log: Path) -> None:
        try:
            driver: WarmDriver | None = WarmDriver(env, idle_log)
        except (WarmDriverError, OSError):
            driver = None
        with self._lock:
            self.driver = driver
            discarded = self._discarded
        self._done.set()
        if discarded and driver is not None:
            driver.stop()

    def take(self, env: Mapping[str, str]) -> WarmDriver | None:
        """The started driver when it suits `env`; None (and it stopped) otherwise."""
        self._done.wait(_DRIVER_START_SECONDS + 5)
        with self._lock:
            driver, self.driver = self.driver, None
            self._discarded = True  # a start that ends later stops its driver
        if driver is not None and not driver.usable(env):
            driver.stop()
            return None
        return driver

    def discard(self) -> None:
        with self._lock:
            driver, self.driver = self.driver, None
            self._discarded = True
        if driver is not None:
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
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
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
            self._sink, self._tail = log, deque(maxlen=STDERR_TAIL_LINES)
        timed_out = cancelled = False
        code: int | None = None
        timings: dict[str, Any] = {}
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            while True:
                try:
                    answer = self._answers.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        timed_out = True
                    elif should_continue is not None and not still_wanted(should_continue):
                        cancelled = True
                    if timed_out or cancelled:
                        self.stop()
                        break
                    continue
                if answer is None:  # died outside the job's own exit (a JVM crash, a kill)
                    code = self.process.wait()
                    break
                code = int(answer.get("exit_code", 1))
                timings = answer.get("timings") or {}
                break
        except (OSError, ValueError) as exc:
            log.write(f"# the warm driver failed: {exc}\n")
            self.stop()
        finally:
            time.sleep(0.05)  # the last lines of the pipes
            with self._lock:
                self._sink, tail = None, list(self._tail)
            if timings:
                log.write(_timings_line(timings))
        return code, timed_out, cancelled, tail

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            kill_group(self.process)
        kill_stragglers(self.process.pid)
        with self._lock:
            if not self._idle.closed:
                self._idle.write(f"# warm driver pid {self.process.pid} stopped\n")
                self._idle.close()
        shutil.rmtree(self._home, ignore_errors=True)


def _timings_line(timings: Mapping[str, Any]) -> str:
    """Where a warm run's time went, as its log says it (`spark_driver.run_one`)."""
    try:
        return (
            f"# driver timings: enter {float(timings['enter']):.2f} s, script "
            f"{float(timings['script']):.2f} s (SparkContext start "
            f"{float(timings['context_start']):.2f} s, stop {float(timings['context_stop']):.2f} "
            f"s), leave {float(timings['leave']):.2f} s\n"
        )
    except (KeyError, TypeError, ValueError):
        return f"# driver timings: {dict(timings)}\n"


def _driver_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a warm driver starts with: the run's environment without what is the run's own
    (its py-files path, its Spark configuration: both are applied per run)."""
    base = {k: v for k, v in env.items() if k not in {"PYTHONPATH", "PYSPARK_SUBMIT_ARGS"}}
    base["PYSPARK_SUBMIT_ARGS"] = submit_args(LOCAL_SPARK_DEFAULTS)
    if os.environ.get("PYTHONPATH"):
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return base


def warm_allowed(conf: Mapping[str, str]) -> bool:
    """False when the configuration needs a JVM launch (driver memory, class path, options)."""
    return not any(
        key.startswith("spark.driver.") and key not in _WARM_SAFE_DRIVER_KEYS for key in conf
    )
