"""Memory and CPU of a process tree, sampled from /proc while it runs (Linux).

`TreeSampler(pid)` polls the process `pid` and every descendant (found through
/proc/<pid>/task/*/children) and keeps, per process, its peak resident set (VmHWM: the kernel's
own high-water mark, so a peak between two samples is not missed as long as the process is
still there at the next sample) and its CPU time (utime + stime). Processes get a role by their
place in the tree of a PySpark job started as `python script.py`:

- `driver`: the root, the job's Python driver;
- `jvm`: its direct child, the JVM that pyspark's launcher starts (spark-submit execs into it):
  the driver's JVM; in local mode it hosts the executors too;
- `executors`: executor JVMs under it (`local-cluster` mode: a process of its own per executor,
  `CoarseGrainedExecutorBackend`);
- `workers`: Python processes under a JVM (pyspark's daemon and its forked workers);
- `other`: anything else (the short-lived launcher JVM and shells of spark-submit).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("driver", "jvm", "executors", "workers", "other")
_TICK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def status(pid: int) -> dict[str, str]:
    """Fields of /proc/<pid>/status ({} when the process is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def kib(value: str | None) -> int:
    return int(value.split()[0]) if value else 0


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of the process itself (not of its children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of stat(5)


def _is_executor(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"CoarseGrainedExecutorBackend" in command


@dataclass
class _Seen:
    role: str
    name: str
    hwm_kib: int = 0
    cpu_s: float = 0.0


@dataclass
class TreeSampler:
    """Samples the tree under `root` every `interval` seconds in a thread, until `stop()`."""

    root: int
    interval: float = 0.1
    processes: dict[int, _Seen] = field(default_factory=dict)
    peak_tree_rss_kib: int = 0  # the largest sum of VmRSS over the tree at one sample
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, name="tree-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def _walk(self) -> list[tuple[int, str]]:
        """(pid, role) of the tree, parents first."""
        found = [(self.root, "driver")]
        queue = [(self.root, "driver")]
        while queue:
            pid, role = queue.pop()
            for child in children(pid):
                if _is_executor(child):  # wherever a launcher shell put it
                    child_role = "executors"
                else:
                    child_role = "jvm" if role == "driver" else "workers"
                found.append((child, child_role))
                queue.append((child, child_role))
        return found

    def sample(self) -> None:
        total = 0
        for pid, role in self._walk():
            fields = status(pid)
            if not fields:
                continue
            name = fields.get("Name", "?").strip()
            seen = self.processes.setdefault(pid, _Seen(role, name))
            seen.name = name  # spark-submit's shell execs into the JVM: the name changes
            if seen.role == "executors":  # for good: an exiting executor loses its cmdline
                pass
            elif role == "workers" and not name.startswith("python"):
                seen.role = "other"
            else:  # a process forked by the JVM shows the JVM's cmdline until it execs
                seen.role = role
            seen.hwm_kib = max(seen.hwm_kib, kib(fields.get("VmHWM")))
            total += kib(fields.get("VmRSS"))
            cpu = cpu_seconds(pid)
            if cpu is not None:
                seen.cpu_s = max(seen.cpu_s, cpu)
        self.peak_tree_rss_kib = max(self.peak_tree_rss_kib, total)
        self.samples += 1

    def report(self) -> dict[str, Any]:
        """Per role: peak VmHWM (MiB; for executors and workers, of the largest one),
        processes, CPU s."""
        by_role: dict[str, Any] = {}
        for role in ROLES:
            seen = [s for s in self.processes.values() if s.role == role]
            by_role[role] = {
                "processes": len(seen),
                "peak_hwm_mib": round(max((s.hwm_kib for s in seen), default=0) / 1024, 1),
                "cpu_s": round(sum(s.cpu_s for s in seen), 2),
            }
        return {
            **by_role,
            "peak_tree_rss_mib": round(self.peak_tree_rss_kib / 1024, 1),
            "cpu_s_total": round(sum(s.cpu_s for s in self.processes.values()), 2),
            "samples": self.samples,
        }


def wait_sampled(process: Any, sampler: TreeSampler, timeout: float) -> int | None:
    """Wait for `process` (a Popen) up to `timeout` seconds while `sampler` runs; None on a
    timeout."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return int(process.returncode)
