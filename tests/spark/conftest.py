"""Spark tier: one local SparkSession for the whole run (start-up costs ~3 s).

Spark needs PYSPARK_PYTHON pointing at the venv's interpreter (its workers import pyarrow) and
SPARK_LOCAL_IP=127.0.0.1; the Makefile exports both, and the fixture sets them when unset so that
`pytest tests/spark` works from a bare shell too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import numpy
import pytest
from pyspark.sql import SparkSession

# pyspark.testing imports pyspark.pandas, which on Spark 3.5 still reads `numpy.NaN` (removed in
# numpy 2; the lock pins numpy 2.x for pyarrow). Restore the alias before any test module imports
# pyspark.testing; pyspark.pandas also wants PYARROW_IGNORE_TIMEZONE set before it is imported.
if not hasattr(numpy, "NaN"):
    numpy.NaN = numpy.nan  # type: ignore[attr-defined]
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 3.5 compares versions with distutils' LooseVersion on every pandas/Arrow check
    config.addinivalue_line(
        "filterwarnings", "ignore:distutils Version classes are deprecated:DeprecationWarning"
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
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
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
