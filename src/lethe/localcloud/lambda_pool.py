"""The execution environments of one function: worker subprocesses (`Worker`, speaking the
protocol of `lethe.localcloud.lambda_worker`) and their pool (`Pool`), for
`lethe.localcloud.lambdas.LambdaRuntime`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lethe.localcloud.deployment import FunctionSpec

logger = logging.getLogger("lethe.localcloud.lambdas")


class WorkerExited(Exception):
    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"worker exited with {returncode}")
        self.returncode = returncode


class Worker:
    """One execution environment (a subprocess) of one function."""

    def __init__(self, spec: FunctionSpec, env: dict[str, str], log_path: Path) -> None:
        self.spec = spec
        self._env = env
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    @property
    def started(self) -> bool:
        return self._proc is not None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, deadline: float) -> dict[str, Any] | None:
        """Start the process and wait for init; return the init error document, if any.

        Raises TimeoutError if init does not finish before `deadline` (time.monotonic()).
        """
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "lethe.localcloud.lambda_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.spec.code_uri,
                env=self._env,
                start_new_session=True,  # its own process group: a timeout kills what it spawned
                bufsize=0,
            )
        message = self.receive(deadline)
        if message.get("error"):
            self.kill()
            return dict(message["error"])
        return None

    def send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerExited(self._wait_exit()) from exc

    def receive(self, deadline: float) -> dict[str, Any]:
        """Read one protocol message; TimeoutError after `deadline`, WorkerExited on EOF."""
        assert self._proc is not None
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerExited(self._wait_exit())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line))

    def _wait_exit(self) -> int | None:
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            return self._proc.returncode

    def kill(self) -> None:
        """Kill the worker and everything in its process group."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("worker %s of %s did not die", proc.pid, self.spec.name)
        self._close_pipes()

    def stop(self) -> None:
        """Ask the worker to exit (EOF on stdin); kill it if it does not."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _close_pipes(self) -> None:
        assert self._proc is not None
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Pool:
    """The execution environments of one function."""

    def __init__(self, factory: Callable[[], Worker], max_workers: int) -> None:
        self._factory = factory
        self._max = max_workers
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._closed = False

    def acquire(self) -> Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the Lambda runtime is shut down")
                while self._idle:
                    worker = self._idle.pop()  # most recently used: the warmest
                    if worker.alive():
                        return worker
                    self._discard(worker)
                if len(self._all) < self._max:
                    worker = self._factory()
                    self._all.add(worker)
                    return worker
                self._cond.wait()

    def release(self, worker: Worker, *, keep: bool) -> None:
        with self._cond:
            if keep and not self._closed and worker.alive():
                self._idle.append(worker)
            else:
                self._discard(worker)
            self._cond.notify()

    def _discard(self, worker: Worker) -> None:
        self._all.discard(worker)
        worker.kill()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.stop()
