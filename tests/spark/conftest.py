"""Spark tier: one local SparkSession and one moto server for the whole run.

Spark needs PYSPARK_PYTHON pointing at the venv's interpreter (its workers import pyarrow) and
SPARK_LOCAL_IP=127.0.0.1; the Makefile exports both, and the fixture sets them when unset so that
`pytest tests/spark` works from a bare shell too.

The moto server (server mode, as the local cloud runs it) starts before the session: the index
and reconcile jobs talk to AWS from Spark tasks, in Python workers whose environment is fixed
when the session starts, so the session gives them the server's endpoint, test credentials and
the project's import path (`spark.executorEnv.*`), as the local cloud's runner gives a job's
whole process. Each test gets a fresh moto state (`cloud`).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator

import numpy
import pytest
import requests
from moto.server import ThreadedMotoServer
from pyspark.sql import SparkSession

from lethe.localcloud.moto_ranges import patch_range_reads
from lethe_jobs.session import DAEMON, DAEMON_MODULE
from tests.conftest import REPO_ROOT
from tests.spark.cloud import REGION, Cloud, new_cloud

# pyspark.testing imports pyspark.pandas, which on Spark 3.5 still reads `numpy.NaN` (removed in
# numpy 2; the lock pins numpy 2.x for pyarrow). Restore the alias before any test module imports
# pyspark.testing; pyspark.pandas also wants PYARROW_IGNORE_TIMEZONE set before it is imported.
if not hasattr(numpy, "NaN"):
    numpy.NaN = numpy.nan  # type: ignore[attr-defined]
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
WORKER_PYTHONPATH = os.pathsep.join(
    str(REPO_ROOT / p) for p in ("spark_jobs", "layers/shared", "src", ".")
)


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 3.5 compares versions with distutils' LooseVersion on every pandas/Arrow check
    config.addinivalue_line(
        "filterwarnings", "ignore:distutils Version classes are deprecated:DeprecationWarning"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
    unranged = patch_range_reads()  # a ranged GET reads its range only, as the local cloud's
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's request log
    yield f"http://127.0.0.1:{port}"
    server.stop()
    unranged()


@pytest.fixture(scope="session")
def spark(moto_endpoint: str) -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    worker_env = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "PYTHONPATH": WORKER_PYTHONPATH,
        **TEST_CREDENTIALS,
    }
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("lethe-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config(DAEMON_MODULE, DAEMON)  # the jobs' daemon (lethe_jobs.session.build_session)
    )
    for name, value in worker_env.items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def cloud(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> Cloud:
    """A fresh moto state: versioned raw and lake buckets, a reports bucket, the datasets,
    catalog and subject index tables (keys and indexes from template.yaml) and the subject
    hash key secret."""
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return new_cloud(moto_endpoint)
