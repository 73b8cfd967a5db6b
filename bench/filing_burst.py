"""How long filing an erasure request takes when many arrive at once (issue 24, item 2).

Starts a local cloud of its own (`lethe local up`, as a user does), registers the three sample
datasets, files one request to warm the API's function, then:

1. the baseline: `--sequential` requests one after another (each answer's latency);
2. the burst: `--burst` requests at once from as many threads, each a SigV4-signed
   `POST /erasure-requests` with its own Idempotency-Key, as `lethe erasure request` sends it
   (no retry: `LETHE_API_TIMEOUT` is set high so a slow answer is measured, not retried).

It reports each phase's client latencies (p50, p90, max), the erasure API function's own
durations from its REPORT lines (the Lambda's work, without the wait for a free execution
environment: the local cloud runs at most 4 per function), the 1-minute load average before and
after, and the ratio burst p90 / sequential p50. Every answer must be 202 with a distinct request
id, or the run fails. Results: bench/results/filing_latest.json.

    .venv/bin/python bench/filing_burst.py                 # 50 at once, ~1 minute
    .venv/bin/python bench/filing_burst.py --burst 100
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["LETHE_API_TIMEOUT"] = "300"

from lethe.target import Target, from_state_file  # noqa: E402
from tests.localcloud_support import cli, running_local_cloud  # noqa: E402

RESULTS = REPO / "bench" / "results" / "filing_latest.json"
DATASETS = ("reviews", "orders", "clicks")
DURATION = re.compile(r"^REPORT RequestId: \S+\tDuration: ([0-9.]+) ms", re.MULTILINE)


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p90": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 3),
        "max": round(ordered[-1], 3),
    }


def _file(target: Target, label: str) -> tuple[int, str, float]:
    started = time.monotonic()
    status, answer = target.call_api(
        "POST",
        "/erasure-requests",
        {"subject_ids": [f"burst-{label}"], "reason": "filing benchmark",
         "requested_by": "bench@example.com"},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )  # fmt: skip
    return status, str(answer.get("request_id", "")), time.monotonic() - started


def _durations(log: Path, skip: int) -> list[float]:
    """The function's REPORT durations (seconds) after the first `skip` of them."""
    found = [float(m) / 1000 for m in DURATION.findall(log.read_text())]
    return found[skip:]


def _phase(target: Target, log: Path, labels: list[str], workers: int) -> dict[str, Any]:
    before = len(_durations(log, 0))
    load_before = _load()
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(lambda label: _file(target, label), labels))
    wall = time.monotonic() - started
    statuses = sorted({a[0] for a in answers})
    ids = {a[1] for a in answers}
    if statuses != [202] or len(ids) != len(labels):
        raise SystemExit(f"filing failed: statuses {statuses}, {len(ids)} ids for {len(labels)}")
    time.sleep(1)  # the last REPORT lines reach the log
    return {
        "requests": len(labels),
        "wall_seconds": round(wall, 2),
        "latency_seconds": _quantiles([a[2] for a in answers]),
        "function_seconds": _quantiles(_durations(log, before) or [0.0]),
        "load_before": load_before,
        "load_after": _load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=50, help="requests filed at once")
    parser.add_argument("--sequential", type=int, default=10, help="baseline requests")
    parser.add_argument(
        "--api-workers", default="", help="LETHE_LOCAL_API_WORKERS for the local cloud (default 8)"
    )
    parser.add_argument("--out-json", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        state_file = Path(folder) / "local.json"
        env = {"LETHE_LOCAL_API_WORKERS": args.api_workers} if args.api_workers else None
        with running_local_cloud(state_file, env=env, up_timeout=300, down_timeout=120) as cloud:
            for name in DATASETS:
                put = cli(cloud, "datasets", "put", str(REPO / "samples" / f"{name}.dataset.json"))
                if put.returncode != 0:
                    raise SystemExit(put.stderr)
            target = from_state_file(state_file)
            log = Path(cloud.state["logs_dir"]) / f"{cloud.state['stack_name']}-erasure-api.log"
            _file(target, "warm")
            sequential = _phase(target, log, [f"s{i}" for i in range(args.sequential)], 1)
            burst = _phase(target, log, [f"b{i}" for i in range(args.burst)], args.burst)
    result = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "api_workers": args.api_workers or "8 (default)",
        "sequential": sequential,
        "burst": burst,
        "burst_p90_over_sequential_p50": round(
            burst["latency_seconds"]["p90"] / sequential["latency_seconds"]["p50"], 1
        ),
    }
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
