"""A warm Spark driver: one Python process with PySpark imported and its JVM started, that runs
job scripts one after another, each with a SparkSession of its own (`spark_slots.WarmDriver`
starts it and talks to it; docs/LOCAL_CLOUD.md, "Warm drivers").

    python -m lethe.localcloud.spark_driver CONTROL_FD

Requests arrive on stdin, one JSON line each: `{"script", "argv", "cwd", "env", "python_path",
"conf"}`. For each, the driver

- sets `os.environ` to the run's environment, `sys.path` to the run's `python_path` first,
  `sys.argv`, the working directory, and each `conf` item (the job's `--conf`, which a cold run
  passes through `PYSPARK_SUBMIT_ARGS`) as a JVM system property, which `SparkConf` loads as
  spark-submit's `--conf` would; environment variables that differ from the driver's own go to
  the Python workers as `spark.executorEnv.*` (their JVM was started with the driver's);
- runs the script as `__main__` (`runpy.run_path`), its exit code being what `python script`
  would return (0, `sys.exit(n)`, 1 for an exception, whose traceback goes to stderr);
- then stops a SparkContext the job left running, forgets every module loaded from the run's
  folder (the job's own code and its py-files: the next run imports its own), removes logging
  handlers and system properties the run added, drops boto3's default session, and restores
  the environment, `sys.path` and the working directory;
- answers `{"exit_code": n, "timings": {...}}` on CONTROL_FD (where the run's time went:
  entering, the script, its SparkContext's start and stop, leaving; the runner writes it into
  the run's log, not into the job's stderr, whose last lines are the run's error message).
  stdout and stderr (the JVM's too) are the driver's, which the runner copies into the
  current run's log.

Anything that goes wrong outside the job ends the driver: the runner starts a fresh one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import runpy
import sys
import time
import traceback
from typing import Any


def _warm_up() -> Any:
    """Import what every job imports and start the JVM; return the py4j JVM view."""
    import boto3  # noqa: F401, PLC0415 - warm imports
    import pyarrow  # noqa: PLC0415
    import pyarrow.parquet  # noqa: F401, PLC0415
    from pyspark import SparkContext  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: F401, PLC0415

    from lethe.localcloud.spark_warmth import (  # noqa: PLC0415
        share_botocore_models,
        shorten_accumulator_poll,
    )

    share_botocore_models()  # each run's boto3 session parses no model again
    shorten_accumulator_poll()  # each run's SparkContext.stop() without a 1 s poll
    SparkContext._ensure_initialized()  # launches the JVM gateway (PYSPARK_SUBMIT_ARGS)
    return SparkContext._jvm


def _stop_spark() -> None:
    from pyspark import SparkContext  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    sys.stderr.write(f"{exc.code}\n")
    return 1


class _Run:
    """One run's changes to this process, and how to undo them."""

    def __init__(self, request: dict[str, Any], jvm: Any, base_env: dict[str, str]) -> None:
        self.system = jvm.java.lang.System
        self.base_env = base_env
        self.cwd, self.script = str(request["cwd"]), str(request["script"])
        self.env: dict[str, str] = dict(request["env"])
        self.conf: dict[str, str] = dict(request["conf"])
        for name, value in self.env.items():
            if base_env.get(name) != value:  # the Python workers' JVM has the driver's
                self.conf.setdefault(f"spark.executorEnv.{name}", value)
        self.python_path = [str(p) for p in request["python_path"]]
        self.argv = [self.script, *[str(a) for a in request["argv"]]]

    def enter(self) -> None:
        self.saved_path, self.saved_argv, self.saved_cwd = list(sys.path), sys.argv, os.getcwd()
        self.modules_before = set(sys.modules)
        self.handlers_before = list(logging.getLogger().handlers)
        self.level_before = logging.getLogger().level
        self.properties_before = {key: self.system.getProperty(key) for key in self.conf}
        os.environ.clear()
        os.environ.update(self.env)
        # as `python script.py`: the script's folder first, then PYTHONPATH
        sys.path[:0] = [os.path.dirname(self.script), *self.python_path]
        sys.argv = self.argv
        os.chdir(self.cwd)
        for key, value in self.conf.items():
            self.system.setProperty(key, value)

    def leave(self) -> None:
        _stop_spark()
        for key, value in self.properties_before.items():
            if value is None:
                self.system.clearProperty(key)
            else:
                self.system.setProperty(key, value)
        for name in set(sys.modules) - self.modules_before:
            if str(getattr(sys.modules.get(name), "__file__", "") or "").startswith(self.cwd):
                del sys.modules[name]
        for entry in [e for e in sys.path_importer_cache if e.startswith(self.cwd)]:
            del sys.path_importer_cache[entry]
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h not in self.handlers_before]:
            root.removeHandler(handler)
        root.setLevel(self.level_before)
        with contextlib.suppress(ImportError):
            import boto3  # noqa: PLC0415

            boto3.DEFAULT_SESSION = None
        os.chdir(self.saved_cwd)
        sys.path[:] = self.saved_path
        sys.argv = self.saved_argv
        os.environ.clear()
        os.environ.update(self.base_env)


class _Clock:
    """Where a run's time goes: its SparkContext's start and stop, timed by wrapping
    `SparkContext.__init__` and `stop` in this process (the job's code is not touched)."""

    def __init__(self) -> None:
        self.context_start = 0.0
        self.context_stop = 0.0
        self.last: dict[str, float] = {}
        from pyspark import SparkContext  # noqa: PLC0415

        clock = self
        init, stop = SparkContext.__init__, SparkContext.stop

        def timed_init(context: Any, *args: Any, **kwargs: Any) -> None:
            began = time.monotonic()
            try:
                init(context, *args, **kwargs)
            finally:
                clock.context_start += time.monotonic() - began

        def timed_stop(context: Any) -> None:
            began = time.monotonic()
            try:
                stop(context)
            finally:
                clock.context_stop += time.monotonic() - began

        SparkContext.__init__ = timed_init  # type: ignore[method-assign,assignment]
        SparkContext.stop = timed_stop  # type: ignore[method-assign,assignment]

    def reset(self) -> None:
        self.context_start = self.context_stop = 0.0
        self.last = {}


def run_one(
    request: dict[str, Any], jvm: Any, base_env: dict[str, str], clock: _Clock | None = None
) -> int:
    """Run one job script as `python script ARGS` would; its exit code. With `clock`, where the
    run's time went is left in `clock.last` (seconds: enter, script, context_start,
    context_stop, leave), which the driver sends with its answer."""
    began = time.monotonic()
    if clock is not None:
        clock.reset()
    run = _Run(request, jvm, base_env)
    run.enter()
    entered = time.monotonic()
    code = 1
    try:
        runpy.run_path(run.script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # the job's failure, reported as python would
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        ran = time.monotonic()
        run.leave()
        if clock is not None:
            clock.last = {
                "enter": round(entered - began, 2),
                "script": round(ran - entered, 2),
                "context_start": round(clock.context_start, 2),
                "context_stop": round(clock.context_stop, 2),
                "leave": round(time.monotonic() - ran, 2),
            }
    return code


def main(argv: list[str]) -> int:
    control = os.fdopen(int(argv[0]), "w", encoding="utf-8", buffering=1)
    base_env = dict(os.environ)
    jvm = _warm_up()
    clock = _Clock()
    control.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        code = run_one(json.loads(line), jvm, base_env, clock)
        control.write(json.dumps({"exit_code": code, "timings": clock.last}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
