"""Lake layout (lethe_jobs.layout) and the Arrow <-> Spark bridge (lethe_jobs.arrow_bridge)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lethe_jobs import layout
from lethe_jobs.arrow_bridge import dataframe_to_table, table_to_dataframe


def test_object_hash_is_per_raw_key() -> None:
    # sha256("lethe-test-raw/reviews/2026/11/batch-1.csv"), first 16 hex digits
    assert layout.object_hash("lethe-test-raw", "reviews/2026/11/batch-1.csv") == "bf6f28df84c0c9eb"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([dt.date(2026, 11, 22), "eu"], "day=2026-11-22/region=eu"),
        ([None, ""], "day=__HIVE_DEFAULT_PARTITION__/region=__HIVE_DEFAULT_PARTITION__"),
        ([Decimal("12.30"), "a/b=c%"], "day=12.30/region=a%2Fb%3Dc%25"),
        ([True, "x y"], "day=true/region=x y"),
    ],
)
def test_partition_paths_are_hive_style(values: list[object], expected: str) -> None:
    assert layout.partition_path(["day", "region"], values) == expected


def test_lake_and_quarantine_keys() -> None:
    assert layout.lake_key("reviews", "day=2026-11-22", "abc") == (
        "reviews/day=2026-11-22/part-abc.parquet"
    )
    assert layout.lake_key("reviews", "", "abc") == "reviews/part-abc.parquet"
    assert layout.quarantine_rows_key("reviews", "abc") == "reviews/_quarantine/abc.jsonl"
    assert layout.quarantine_file_key("reviews", "abc") == "reviews/_quarantine/abc.file.json"


def test_partition_groups_keep_row_order() -> None:
    table = pa.table({"day": ["b", "a", "b", None], "n": [1, 2, 3, 4]})

    assert layout.partition_groups(table, ["day"]) == {
        "day=__HIVE_DEFAULT_PARTITION__": [3],
        "day=a": [1],
        "day=b": [0, 2],
    }
    assert layout.partition_groups(table, []) == {"": [0, 1, 2, 3]}


def test_arrow_tables_travel_through_spark_with_types_intact(spark: SparkSession) -> None:
    # Given a table with every kind of type the lake holds, in more rows than one partition takes
    struct = pa.struct([("id", pa.string()), ("inner", pa.struct([("n", pa.int32())]))])
    rows = 5
    table = pa.table(
        {
            "position": pa.array(range(rows), pa.int64()),
            "amount": pa.array([Decimal("12.34")] * rows, pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2026, 11, 22)] * rows, pa.date32()),
            "at": pa.array(
                [dt.datetime(2026, 11, 22, 10, 30, tzinfo=dt.UTC)] * rows, pa.timestamp("us", "UTC")
            ),
            "customer": pa.array([{"id": "c1", "inner": {"n": 7}}] * rows, struct),
            "tags": pa.array([["a", "b"]] * rows, pa.list_(pa.string())),
        }
    )

    # When it goes into Spark in partitions of 2 rows and comes back
    frame = table_to_dataframe(spark, table, rows_per_partition=2)
    back = dataframe_to_table(frame.orderBy("position"))

    # Then the partitioning, the values and the types are what went in
    assert frame.rdd.getNumPartitions() == 3
    assert [f.simpleString() for f in frame.schema.fields] == [
        "position:bigint",
        "amount:decimal(10,2)",
        "day:date",
        "at:timestamp",
        "customer:struct<id:string,inner:struct<n:int>>",
        "tags:array<string>",
    ]
    assert back.to_pylist() == table.to_pylist()
    assert back.schema.field("customer").type == struct
    assert back.schema.field("at").type == pa.timestamp("us", "UTC")


def test_empty_frames_collect_to_an_empty_table_with_the_schema(spark: SparkSession) -> None:
    frame = spark.createDataFrame([], "n int, day date")

    table = dataframe_to_table(frame)

    assert table.num_rows == 0
    assert table.schema == pa.schema([("n", pa.int32()), ("day", pa.date32())])
