"""Pieces of the ingest job's tasks that must agree with Spark itself, and the pipeline's Spark
SQL forms that must agree with the tasks' Python."""

from __future__ import annotations

import datetime as dt
import json
from functools import partial
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_jobs.ingest_pipeline import sql_partition_path
from lethe_jobs.ingest_tasks import PART, BatchObject, TaskSettings, jackson_json, place_rows
from lethe_jobs.validate import REASONS
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.opening import IndexLocation, IndexStore

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


def _settings(partition_by: list[str], lake: str = "lake", dataset_id: str = "ds") -> TaskSettings:
    dataset = parse_dataset(
        {
            "dataset_id": dataset_id,
            "format": "csv",
            "subject_columns": ["user_id"],
            "partition_by": partition_by,
            "schema": [
                {"name": "user_id", "type": "string"},
                {"name": "day", "type": "date"},
                {"name": "Other Day/=", "type": "date"},
                {"name": "site", "type": "string"},
            ],
        }
    )
    obj = BatchObject(
        0, dataset_id, f"{dataset_id}/a.csv", "v", "e", 1, f"s3://raw/{dataset_id}/a.csv"
    )
    return TaskSettings(
        dataset=dataset,
        raw_bucket="raw",
        lake_bucket=lake,
        index=IndexLocation(IndexStore.DYNAMODB, table="index"),
        correlation_id="c",
        now="2026-01-01T00:00:00+00:00",
        objects={0: obj},
        hash_key=b"k" * 32,
    )


FRAME = T.StructType(
    [
        T.StructField("_lethe_object", T.IntegerType()),
        T.StructField(REASONS, T.ArrayType(T.StringType())),
        T.StructField("day", T.DateType()),
        T.StructField("Other Day/=", T.DateType()),
        T.StructField("site", T.StringType()),
    ]
)
ROWS: list[tuple[Any, ...]] = [
    (0, [], dt.date(2026, 11, 22), dt.date(2026, 1, 2), "a"),
    (0, [], dt.date(999, 1, 1), None, "b"),  # a year of three digits; a null date
    (0, ["column stars: 'x' is not a valid int"], dt.date(2026, 11, 23), None, "c"),  # rejected
    (0, [], None, dt.date(1, 1, 1), None),
    (0, None, dt.date(9999, 12, 31), dt.date(2000, 2, 29), ""),  # no reasons at all: valid
]


@pytest.mark.parametrize("partition_by", [["day"], ["day", "Other Day/="], []])
def test_date_partition_paths_in_spark_sql_are_those_place_rows_gives(
    spark: SparkSession, partition_by: list[str]
) -> None:
    settings = _settings(partition_by)
    frame = spark.createDataFrame(ROWS, FRAME)
    rendered = sql_partition_path(frame, settings)
    assert rendered is not None
    valid = F.col(REASONS).isNull() | (F.size(F.col(REASONS)) == 0)

    by_sql = frame.withColumn(PART, F.when(valid, rendered)).collect()
    placed = T.StructType([*FRAME.fields, T.StructField(PART, T.StringType())])
    by_python = frame.mapInArrow(partial(place_rows, settings=settings), placed).collect()

    assert [r.asDict() for r in by_sql] == [r.asDict() for r in by_python]
    if partition_by:
        assert by_sql[1][PART].startswith("day=0999-01-01")
        assert by_sql[2][PART] is None  # a rejected row has no partition


def test_partitions_spark_sql_cannot_render_exactly_are_placed_in_python(
    spark: SparkSession,
) -> None:
    frame = spark.createDataFrame(ROWS, FRAME)
    assert sql_partition_path(frame, _settings(["site"])) is None  # text: escaped, any length
    assert sql_partition_path(frame, _settings(["day", "site"])) is None
    # a lake bucket name so long that the longest lake object URL could pass the index's limit
    assert sql_partition_path(frame, _settings(["day"], lake="l" * 1000)) is None
    assert sql_partition_path(frame, _settings(["day"], lake="l" * 900)) is not None
