"""The plain Spark job the ingestion-vs-Spark benchmark measures Lethe's ingest job against.

    python bench/plain_spark_ingest.py --dataset DOC.json --out DIR CSV [CSV ...]

What a data engineer would write without Lethe: `spark.read.csv(paths, schema=..., header=True)`
with the dataset's declared schema (`lethe_jobs.validate.schema_of`: the same Spark types the
ingest job converts to), then `.write.partitionBy(<the dataset's partition columns>)
.parquet(out)` (Snappy, Spark's default). The SparkSession is built by the ingest job's own
`lethe_jobs.session.build_session`, so both jobs run with the same settings; the benchmark
gives both processes the same environment (master, PYSPARK_SUBMIT_ARGS, Python).

Nothing is validated row by row (a value that does not convert becomes null: PERMISSIVE mode,
with `spark.sql.legacy.timeParserPolicy=CORRECTED` so that an impossible date is a null, not a
failed job),
nothing is quarantined, indexed or recorded, and the files are read from and written to local
disk (the ingest job reads from and writes to S3, here a moto server). Prints one JSON line:
the rows written (counted from the written files' footers, after the timed part) and the
seconds inside the job (read and write), beside the benchmark's own wall clock of the process.
This module imports nothing but pyspark and the two Lethe modules it needs, so that its start-up
is not burdened by the benchmark's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "layers" / "shared")]

from lethe_jobs.session import build_session  # noqa: E402
from lethe_jobs.validate import schema_of  # noqa: E402
from lethe_shared.datasets.document import parse_dataset  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, type=Path, help="the dataset document")
    parser.add_argument("--out", required=True, help="the output directory (must not exist)")
    parser.add_argument("inputs", nargs="+", help="CSV files")
    args = parser.parse_args(argv)
    dataset = parse_dataset(json.loads(args.dataset.read_text(encoding="utf-8")))
    started = time.perf_counter()
    spark = build_session("plain-spark-ingest", os.environ.get("LETHE_SPARK_MASTER") or None)
    # Spark 3 refuses a date its legacy parser would read differently ("2026-02-30", one of the
    # generator's invalid rows) unless told which parser is right: the new one, a null
    spark.conf.set("spark.sql.legacy.timeParserPolicy", "CORRECTED")
    session_s = time.perf_counter() - started
    try:
        frame = spark.read.csv(
            [str(Path(p).resolve()) for p in args.inputs], schema=schema_of(dataset), header=True
        )
        writer = frame.write
        if dataset.partition_by:
            writer = writer.partitionBy(*dataset.partition_by)
        writer.parquet(args.out)
        job_s = time.perf_counter() - started - session_s
    finally:
        spark.stop()
    rows = _rows_written(Path(args.out))
    print(json.dumps({"rows_written": rows, "session_s": session_s, "job_s": job_s}), flush=True)
    return 0


def _rows_written(out: Path) -> int:
    import pyarrow.parquet as pq  # noqa: PLC0415 (after the timed part)

    return sum(pq.ParquetFile(path).metadata.num_rows for path in out.rglob("*.parquet"))


if __name__ == "__main__":
    raise SystemExit(main())
