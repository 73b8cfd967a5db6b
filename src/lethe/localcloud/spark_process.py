"""The processes of a local Spark run: whether the run is still wanted, and ending its process
group (the driver and the JVM it started).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger("lethe.localcloud.spark_runner")


POLL_SECONDS = 0.25
_KILL_GRACE_SECONDS = 10.0
STDERR_TAIL_LINES = 400


def still_wanted(should_continue: Callable[[], bool]) -> bool:
    try:
        return bool(should_continue())
    except Exception:
        LOG.exception("should_continue probe failed; the job keeps running")
        return True


def kill_group(process: subprocess.Popen[Any]) -> None:
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


def kill_stragglers(group: int) -> None:
    """A JVM the driver left behind is still in the run's process group: end it too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
