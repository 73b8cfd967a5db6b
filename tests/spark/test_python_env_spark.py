"""PySpark from the EMR Serverless Python environment archive: the archive `lethe artifacts
build` writes is unpacked as EMR unpacks `spark.archives ...#environment`, and a local[2] Spark
application runs with ./environment/bin/python as driver and worker Python (what the state
machines set with PYSPARK_DRIVER_PYTHON / PYSPARK_PYTHON), pyspark and py4j on PYTHONPATH as
Spark provides them. Its workers import lethe_jobs, pydantic and pyarrow from the archive, and
the Arrow path the jobs use (mapInArrow, which pyspark 3.5 allows only with pandas) works.

The archive's interpreter is EMR's /usr/bin/python3.11; this machine's (Debian 12 has one) or,
failing that, this venv's base CPython 3.11 stands in for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lethe.artifacts import build_python_env, plan_python_env, read_pins
from tests.conftest import REPO_ROOT

PINS = {pin.key: pin.version for pin in read_pins(REPO_ROOT / "spark_jobs" / "requirements.txt")}

DRIVER = """
import json, sys
import pyarrow as pa
from lethe_jobs.arrow_bridge import dataframe_to_table, table_to_dataframe
from lethe_jobs.session import build_session

spark = build_session("lethe-python-env-check", "local[2]")
df = table_to_dataframe(spark, pa.table({"n": list(range(10))}), rows_per_partition=4)

def probe(batches):
    import sys
    import lethe_jobs.erase_rows, pandas, pydantic, pyarrow
    rows = sum(batch.num_rows for batch in batches)
    yield pyarrow.RecordBatch.from_pylist([{
        "rows": rows,
        "prefix": sys.prefix,
        "executable": sys.executable,
        "pydantic": pydantic.VERSION,
        "pyarrow": pyarrow.__version__,
        "pandas": pandas.__version__,
        "lethe_jobs": lethe_jobs.erase_rows.__file__,
    }])

schema = "rows long, prefix string, executable string, pydantic string, pyarrow string, " \\
    "pandas string, lethe_jobs string"
workers = dataframe_to_table(df.mapInArrow(probe, schema)).to_pylist()
spark.stop()
print(json.dumps({"driver_prefix": sys.prefix, "workers": workers}))
"""


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive = build_python_env(
        plan_python_env(REPO_ROOT), tmp_path_factory.mktemp("build") / "pyspark_env.tar.gz"
    )
    environment = tmp_path_factory.mktemp("driver") / "environment"
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(environment, filter="tar")
    link = environment / "bin" / "python3.11"
    if not Path(os.readlink(link)).exists():  # pragma: no cover - machines without it
        link.unlink()
        link.symlink_to(
            Path(getattr(sys, "_base_executable", sys.executable)).resolve()
        )  # the venv's base CPython
    return environment


def test_spark_workers_run_the_jobs_code_from_the_archive(
    environment: Path, tmp_path: Path
) -> None:
    spark_python = tmp_path / "spark-python"  # what Spark puts on PYTHONPATH on EMR
    spark_python.mkdir()
    for name in ("pyspark", "py4j"):
        (spark_python / name).symlink_to(Path(str(__import__(name).__file__)).parent)
    python = environment / "bin" / "python"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(spark_python),
        "PYSPARK_PYTHON": "./environment/bin/python",
        "PYSPARK_DRIVER_PYTHON": "./environment/bin/python",
        "SPARK_LOCAL_IP": "127.0.0.1",
        **{k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "TMPDIR")},
    }

    run = subprocess.run(
        [str(python), "-s", "-c", DRIVER],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=environment.parent,  # Spark's working directory holds ./environment
        check=False,
    )

    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(seen["driver_prefix"]) == environment
    workers = seen["workers"]
    assert sum(worker["rows"] for worker in workers) == 10
    site_packages = environment / "lib" / "python3.11" / "site-packages"
    for worker in workers:
        assert Path(worker["prefix"]).resolve() == environment.resolve()
        assert (worker["pydantic"], worker["pyarrow"], worker["pandas"]) == (
            PINS["pydantic"],
            PINS["pyarrow"],
            PINS["pandas"],
        )
        assert Path(worker["lethe_jobs"]).resolve().is_relative_to(site_packages.resolve())
