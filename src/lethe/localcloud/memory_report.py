"""Where the local cloud's memory goes: an opt-in diagnostic (docs/LOCAL_CLOUD.md).

With `LETHE_LOCAL_TRACEMALLOC=<seconds>` in its environment, the local cloud process starts
`tracemalloc` and logs, every that many seconds, its resident size, the 15 source lines
holding the most memory allocated since the start, with their growth since the last report, and
the 4 allocation stacks holding the most
(logger `lethe.localcloud.memory`, in logs/localcloud.log). Tracing slows Python down; it is for
finding a leak, never on by default.
"""

from __future__ import annotations

import logging
import os
import threading
import tracemalloc
from typing import Final

ENV: Final = "LETHE_LOCAL_TRACEMALLOC"
TOP: Final = 15
STACKS: Final = 4  # the allocation stacks holding the most, each with its frames
logger = logging.getLogger("lethe.localcloud.memory")


def _rss_mib() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return -1


def start_from_environment(stop: threading.Event) -> bool:
    """Start the periodic report when ENV asks for it; False when it does not."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return False
    interval = max(5.0, float(text))
    tracemalloc.start(12)
    previous: list[tracemalloc.Snapshot] = []

    def report() -> None:
        while not stop.wait(interval):
            snapshot = tracemalloc.take_snapshot().filter_traces(
                (tracemalloc.Filter(False, tracemalloc.__file__),)
            )
            if previous:
                stats = snapshot.compare_to(previous[-1], "lineno")
                lines = [
                    f"{s.size / 2**20:8.1f} MiB ({s.size_diff / 2**20:+.1f}) {s.count:8d} blocks "
                    f"{s.traceback}"
                    for s in sorted(stats, key=lambda s: s.size, reverse=True)[:TOP]
                ]
            else:
                lines = [
                    f"{s.size / 2**20:8.1f} MiB {s.count:8d} blocks {s.traceback}"
                    for s in snapshot.statistics("lineno")[:TOP]
                ]
            stacks = [
                f"{s.size / 2**20:8.1f} MiB {s.count:8d} blocks, allocated at:\n"
                + "\n".join(f"        {frame}" for frame in s.traceback.format())
                for s in snapshot.statistics("traceback")[:STACKS]
            ]
            traced, _ = tracemalloc.get_traced_memory()
            logger.info(
                "rss %d MiB, traced %.1f MiB; top lines:\n%s\ntop stacks:\n%s",
                _rss_mib(), traced / 2**20, "\n".join(lines), "\n".join(stacks),
            )  # fmt: skip
            previous[:] = [snapshot]

    threading.Thread(target=report, name="memory-report", daemon=True).start()
    logger.info("memory report every %.0f s (%s)", interval, ENV)
    return True
