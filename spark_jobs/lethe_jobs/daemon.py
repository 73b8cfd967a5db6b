"""Spark's Python daemon with the task modules imported before it forks its workers
(`spark.python.daemon.module=lethe_jobs.daemon`, set by `session.build_session`).

Spark starts one daemon per executor, which forks a Python worker for each concurrent task
(reused across tasks); every worker imported pyarrow, boto3 and the job's task modules itself,
a second or more of CPU each. Imported here once, before the fork, they are the workers' too
(copy-on-write pages). Nothing runs at import but imports: no client, no thread, no file.
"""

from __future__ import annotations

import boto3  # noqa: F401
import pyarrow
import pyarrow.compute
import pyarrow.csv
import pyarrow.ipc
import pyarrow.parquet  # noqa: F401
from pyspark import daemon, worker  # noqa: F401

import lethe_jobs.ingest_tasks  # noqa: F401

if __name__ == "__main__":
    daemon.manager()  # type: ignore[no-untyped-call]
