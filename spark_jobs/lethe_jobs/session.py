"""The one place a job builds its SparkSession and configures its logging."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from lethe_shared.aws.scrub import UrlNamer, shown_urls
from lethe_shared.subject_hashing.shown_keys import KeyNamer

LOG_FORMAT = "%(asctime)s %(levelname)s [%(correlation_id)s] %(name)s: %(message)s"
_QUIET_LOGGERS = ("py4j", "botocore", "boto3", "urllib3", "s3transfer")


class _CorrelationFilter(logging.Filter):
    """Stamps the job's correlation id on every record the handler emits."""

    def __init__(self, correlation_id: str) -> None:
        super().__init__()
        self.correlation_id = correlation_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.correlation_id = self.correlation_id
        return True


def configure_logging(
    correlation_id: str, level: int = logging.INFO, namer: UrlNamer | None = None
) -> None:
    """Log to stderr (stdout carries the job's one-line JSON summary), correlation id on every
    line. Replaces handlers installed by an earlier call, so a second run in one process logs
    with its own id. With `namer` (a KeyNamer of the job's hash key and datasets), every
    `s3://` URL of a line is shown by its shown key: a backstop behind the jobs' own lines, so
    that a subject column's partition value never reaches the Spark logs."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "lethe_job_handler", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(_CorrelationFilter(correlation_id))
    if namer is not None:
        handler.addFilter(_ShownKeysFilter(namer))
    handler.lethe_job_handler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def logging_shown_keys(correlation_id: str, hash_key: bytes, datasets: Any) -> KeyNamer:
    """configure_logging with the backstop: URLs of lines shown with every subject column's
    partition value keyed-hashed (`datasets`: a dataset by id, a function or a mapping; the rest
    of a key is kept: report URLs, raw keys). Returns the namer, for the job's summary line
    (`shown_urls`), which goes to the same log."""
    lookup = datasets.get if hasattr(datasets, "get") else datasets
    namer = KeyNamer(hash_key, lookup, whole_keys=False)
    configure_logging(correlation_id, namer=namer)
    return namer


class _ShownKeysFilter(logging.Filter):
    def __init__(self, namer: UrlNamer) -> None:
        super().__init__()
        self.namer = namer

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        if "s3://" in message:
            record.msg, record.args = shown_urls(message, self.namer), None
        return True


DAEMON_MODULE = "spark.python.daemon.module"
DAEMON = "lethe_jobs.daemon"  # Spark's daemon, the task modules imported before it forks


def _submitted(name: str) -> bool:
    """Whether the JVM was started with the setting `name` (spark-submit's --conf, the
    cluster's defaults): the JVM is started first, its settings read as SparkConf reads them."""
    SparkContext._ensure_initialized()
    return bool(SparkConf().contains(name))


def build_session(app_name: str, master: str | None) -> SparkSession:
    """The job's SparkSession.

    `master` comes from LETHE_SPARK_MASTER (read by the entry script): set on this machine, unset
    on Glue and EMR Serverless, where the cluster decides. Times are UTC whatever the host says.
    An already active session (the test suite's) is reused; runtime settings still apply.
    A new one runs its Python workers from `lethe_jobs.daemon` (the task modules imported
    once, before the daemon forks them) unless the submit arguments name another daemon (the
    benchmark's profiler does).
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if SparkSession.getActiveSession() is None and not _submitted(DAEMON_MODULE):
        builder = builder.config(DAEMON_MODULE, DAEMON)
    if master:
        builder = (
            builder.master(master)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    return builder.getOrCreate()


@contextmanager
def job_session(app_name: str) -> Iterator[SparkSession]:
    """The job's SparkSession: local[N] when LETHE_SPARK_MASTER says so (the local cloud, tests),
    the cluster's otherwise. Stopped at the end only if this job created it (tests share one)."""
    owns_session = SparkSession.getActiveSession() is None
    spark = build_session(app_name, os.environ.get("LETHE_SPARK_MASTER") or None)
    try:
        yield spark
    finally:
        if owns_session:
            spark.stop()
