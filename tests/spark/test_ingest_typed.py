"""CSV values the read task converts (lethe_jobs.ingest_tasks.typed) against Spark's own path:
every text, converted there or not, gives the row the same value and the same reasons as when
validation casts the text itself, and a converted value renders (cast to string) as its text,
which the quarantine writer rebuilds a rejected record from."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_jobs.ingest_tasks.typed import (
    UTC_ZONE,
    convertible,
    split_texts,
    typed_column,
    typed_fields,
)
from lethe_jobs.validate import POSITION, REASONS, conform, spark_type
from lethe_shared.datasets.document import parse_dataset, parse_type
from tests.unit.test_ingest_typed import short_decimal_texts, timestamp_text

_NEAR = [
    "",
    " ",
    "0",
    "-0",
    "+0",
    "00",
    "01",
    "-01",
    "+1",
    "1 ",
    " 1",
    "\t1",
    "1\n",
    "1.",
    ".5",
    "1.0",
    "1e3",
    "1E3",
    "x",
    "--1",
    "1-",
    "\u0663",
    "\uff11",
    "0x10",
    "1_000",
    "1,000",
    "NaN",
    "Infinity",
    "true",
    "false",
    "TRUE",
    "True",
    "t",
    "f",
    "yes",
    "no",
    "y",
    "n",
    "1",
    "on",
    "2026-01-03",
    "2026-02-30",
    "2024-02-29",
    "2023-02-29",
    "2026-1-3",
    "2026-01-03 ",
    "0999-01-01",
    "1000-01-01",
    "9999-12-31",
    "10000-01-01",
    "2026-13-01",
    "2026-00-10",
    "2026-01-00",
    "2026-01-32",
    "2026/01/03",
    "+2026-01-03",
    "2026-01-03T00:00:00",
    "0.00",
    "-0.00",
    "0.05",
    "-0.05",
    "11.60",
    "11.6",
    "11.600",
    "-1.00",
    "1.005",
    ".50",
    "1234567890.12",
    "12345678901.12",
    "9999999999.99",
    "-9999999999.99",
    "0.5",
    "5",
]
_TIMESTAMPS = [
    "2026-01-03 04:07:00.099411", "2026-01-03 04:07:00", "2026-01-03 04:07:00.50",
    "2026-01-03 24:00:00", "2026-01-03 23:59:60", "2026-01-03T04:07:00", "2026-01-03 04:07",
    "1969-12-31 23:59:59.999999", "2026-01-03 04:07:00.", " 2026-01-03 04:07:00",
    "2026-02-30 00:00:00", "0999-01-01 00:00:00", "2026-01-03 04:07:00.1234567",
]  # fmt: skip
_LIMITS = [
    "127",
    "128",
    "-128",
    "-129",
    "99",
    "-99",
    "100",
    "32767",
    "32768",
    "-32768",
    "9999",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "999999999",
    "1000000000",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "999999999999999999",
    "1000000000000000000",
    "-999999999999999999",
]
TYPES = [
    "byte", "short", "int", "long", "boolean", "date",
    "decimal(12,2)", "decimal(10,0)", "decimal(2,2)", "decimal(38,6)", "decimal(5,3)",
    "timestamp",
]  # fmt: skip


def _generated(ddl: str, seed: int, count: int = 400) -> list[str]:
    """Canonical texts of the type and near misses, at random."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        sign = rng.choice(["", "", "-", "+"])
        whole = digits.lstrip("0") or "0" if rng.random() < 0.8 else digits
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 8)))
        year = rng.choice([rng.randint(1, 9999), rng.randint(1900, 2100)])
        date = f"{year:04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}"
        texts += [
            sign + whole,
            f"{sign}{whole}.{fraction}",
            date,
            f"{year}-{rng.randint(1, 12)}-{rng.randint(1, 28)}",
            rng.choice(["true", "false"]),
            *short_decimal_texts(rng),
            timestamp_text(rng),
        ]
    return texts


def _dataset(ddl: str, nullable: bool) -> Any:
    return parse_dataset(
        {
            "dataset_id": "t",
            "format": "csv",
            "subject_columns": ["id"],
            "schema": [
                {"name": "id", "type": "string"},
                {"name": "v", "type": ddl, "nullable": nullable},
            ],
        }
    )


@pytest.mark.parametrize("ddl", TYPES)
def test_converted_texts_give_what_spark_gives(spark: SparkSession, ddl: str) -> None:
    declared = parse_type(ddl)
    assert convertible(declared)
    texts = [*_NEAR, *_TIMESTAMPS, *_LIMITS, *_generated(ddl, seed=len(ddl) * 7 + 1)]
    assert spark.conf.get("spark.sql.session.timeZone") == UTC_ZONE
    typed, rest = split_texts(pa.array(texts, pa.string()), declared, UTC_ZONE)
    converted = [t is not None for t in typed.to_pylist()]
    assert sum(converted) > 20  # the comparison covers converted texts, not only the others
    assert [r is None for r in rest.to_pylist()] == converted
    target = spark_type(declared)
    for nullable in (True, False):
        dataset = _dataset(ddl, nullable)
        assert [f.name for f in typed_fields(dataset)] == [typed_column(1)]
        before = spark.createDataFrame(
            [(i, "s", t) for i, t in enumerate(texts)], f"{POSITION} long, id string, v string"
        ).transform(conform(dataset))
        schema = T.StructType(
            [
                T.StructField(POSITION, T.LongType()),
                T.StructField("id", T.StringType()),
                T.StructField("v", T.StringType()),
                T.StructField(typed_column(1), target),
            ]
        )
        rows = [
            (i, "s", text, value)
            for i, (text, value) in enumerate(zip(rest.to_pylist(), typed.to_pylist(), strict=True))
        ]
        after = spark.createDataFrame(rows, schema).transform(
            conform(dataset, typed={"v": typed_column(1)})
        )
        assert after.schema == before.schema
        # compared as text: Spark holds dates Python cannot (year 10000, read by Spark only)
        shown = [F.col(POSITION), F.col("v").cast("string"), F.col(REASONS)]
        wanted = sorted(before.select(*shown).collect())
        got = sorted(after.select(*shown).collect())
        assert got == wanted
    # a converted value renders as its text (the quarantine writer's rebuilt record)
    frame = spark.createDataFrame(
        [(t, v) for t, v, c in zip(texts, typed.to_pylist(), converted, strict=True) if c],
        T.StructType([T.StructField("t", T.StringType()), T.StructField("v", target)]),
    )
    assert frame.where(F.col("v").cast("string") != F.col("t")).count() == 0
    # and Spark reads that text as that value, with no reason (the checks above, once more)
    valid = before.where(F.size(F.col(REASONS)) == 0).count()
    assert valid >= sum(converted)
