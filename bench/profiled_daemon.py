"""Spark's Python daemon with every task's Python worker under cProfile (the ingestion
benchmark's profile run: `spark.python.daemon.module=profiled_daemon`, this directory on the
job's PYTHONPATH, LETHE_BENCH_PROFILE_DIR set). Each task's `pyspark.worker.main` call is
profiled and dumped to its own file there; bench/ingest_profile.py sums them."""

from __future__ import annotations

import cProfile
import itertools
import os
from typing import Any

from pyspark import daemon

_TARGET = os.environ.get("LETHE_BENCH_PROFILE_DIR", "")
_CALLS = itertools.count()
_worker_main = daemon.worker_main


def _profiled(infile: Any, outfile: Any) -> Any:
    profile = cProfile.Profile()
    profile.enable()
    try:
        return _worker_main(infile, outfile)
    finally:
        profile.disable()
        if _TARGET:  # written whole, then renamed: a worker ended mid-write leaves no file
            name = os.path.join(_TARGET, f"worker-{os.getpid()}-{next(_CALLS)}.prof")
            profile.dump_stats(name + ".part")
            os.replace(name + ".part", name)


daemon.worker_main = _profiled  # daemon.worker looks the name up at each call

if __name__ == "__main__":
    daemon.manager()
