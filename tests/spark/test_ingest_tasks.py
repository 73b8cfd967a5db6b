"""Pieces of the ingest job's tasks that must agree with Spark itself."""

from __future__ import annotations

import json

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lethe_jobs.ingest_tasks import jackson_json

TRICKY = [
    "plain",
    "",
    'quote " and backslash \\',
    "line\nbreak, tab\t, return\r, form feed\f, backspace\b",
    "control \x00 \x01 \x1f and delete \x7f",
    "non-ASCII: é 中文 🙂 and \u2028 \u2029",
    "slash / and </script>",
    "   spaces kept   ",
]


def test_csv_records_are_the_json_spark_writes(spark: SparkSession) -> None:
    names = ["user_id", 'a "quoted" name', "back\\slash", "é"]
    rows = [tuple(TRICKY[(i + j) % len(TRICKY)] for j in range(len(names))) for i in range(8)]
    frame = spark.createDataFrame(rows, [f"c{i}" for i in range(len(names))])
    struct = F.struct(*[F.col(f"c{i}").alias(n) for i, n in enumerate(names)])
    expected = [r[0] for r in frame.select(F.to_json(struct)).collect()]

    found = [jackson_json(names, row) for row in rows]

    assert found == expected
    assert [json.loads(text) for text in found] == [dict(zip(names, r, strict=True)) for r in rows]
