"""The Python worker daemon of local Spark runs (`spark.python.daemon.module`, set by the local
cloud only: `spark_submit.LOCAL_SPARK_DEFAULTS`).

PySpark's executor starts `python -m pyspark.daemon` once per SparkContext, and the daemon forks
a worker per Python task slot, each importing the job's libraries itself. This module imports
them once (`spark_warmth.preload_worker_modules`: numpy, pandas, pyarrow, boto3, botocore and
their service models, pydantic), then is PySpark's daemon: the forked workers start with them
imported. The job's own code (its script, its py-files) is imported by each worker, as before;
the environment, `sys.path` and the protocol with the JVM are PySpark's own.
"""

from __future__ import annotations

from lethe.localcloud.spark_warmth import preload_worker_modules

if __name__ == "__main__":
    preload_worker_modules()
    from pyspark.daemon import manager

    manager()  # type: ignore[no-untyped-call]
