"""Subject values typed without Spark (lethe_jobs.subject_values) agree with Spark's own casts.

The ingest job indexes a raw object with the values Spark's validation typed; the index and
reconcile jobs type the same raw values without Spark. These tests ask Spark itself what
`try_cast` gives for each input, so a difference shows up as a failing case here rather than
as drift between ingestion and backfill.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lethe_shared.datasets.document import parse_type
from lethe_shared.subject_hashing.values import (
    java_double_text,
    json_leaf_text,
    spark_text,
    subject_text,
    subject_value,
)

TEXTS: dict[str, list[str]] = {
    "int": [
        "1001", " 1001", "01001", "+1001", "-7", "\t5\n", "1001.0", "1e3", "1_000", "2147483647",
        "2147483648", "abc", "\uff11\uff12", "7\x7f", "\xa07",
    ],
    "long": ["2147483648", "-9223372036854775808", "9223372036854775808", " 0 "],
    "byte": ["127", "128", "-128"],
    "short": ["32767", "32768"],
    "decimal(10,2)": [
        "12.5", "12.555", "12.545", " 12.50 ", "1e2", "1E-1", ".5", "5.", "-0.00", "+3", "1_0",
        "NaN", "Infinity", "123456789.1", "12345678.999", "99999999.995", "0x10", "-.5e1",
        "1e-400", "1e400", "7\x7f",
    ],
    "decimal(5,0)": ["12345", "123456", "0.5", "-0.5"],
    "date": [
        "2026-11-22", "2026-1-2", "2026", "2026-11", "2026-11-22 10:00", "2026-11-22T10:00:00Z",
        "2026-11-22x", " 2026-11-22 ", "+2026-11-22", "2026-02-30", "26-11-22", "2026/11/22",
        "2026-11-22T", "2026-11-22\t10", "2026-00-10", "0001-01-01",
    ],
    "boolean": ["true", "True", " TRUE ", "t", "y", "yes", "1", "0", "no", "n", "f", "2", "on"],
    "string": ["u-1", " u-1 ", "", "0"],
}  # fmt: skip
CASES = [(t, text) for t, texts in TEXTS.items() for text in texts]


@pytest.fixture(scope="module")
def spark_casts(spark: SparkSession) -> dict[tuple[str, str], str | None]:
    """Spark's try_cast of every case, in one query, printed by Spark (some texts are dates
    beyond what Python can hold when cast to a type they were not written for)."""
    frame = spark.createDataFrame(
        [(i, text) for i, (_, text) in enumerate(CASES)], "i int, text string"
    )
    columns = [
        F.expr(f"CAST(try_cast(text AS {t}) AS STRING)").alias(f"c{n}") for n, t in enumerate(TEXTS)
    ]
    rows = frame.select("i", *columns).collect()
    names = list(TEXTS)
    return {CASES[r["i"]]: r[f"c{names.index(CASES[r['i']][0])}"] for r in rows}


@pytest.mark.parametrize(("ddl", "text"), CASES)
def test_text_is_typed_as_spark_types_it(
    spark_casts: dict[tuple[str, str], str | None], ddl: str, text: str
) -> None:
    spark_value = spark_casts[(ddl, text)]
    # where Spark gives null, the value as read (an empty text is a null for non-strings)
    expected = spark_value if spark_value is not None else (None if text == "" else text)

    assert spark_text(subject_value(text, parse_type(ddl))) == expected


TYPED = {
    "d": (Decimal("12.75"), "decimal(10,2)"),
    "n": (Decimal("-12.75"), "decimal(10,2)"),
    "f": (1.7, "double"),
    "g": (3.0e9, "double"),
    "b": (True, "boolean"),
    "i": (5, "int"),
    "z": (0, "int"),
    "dt": (dt.date(2026, 11, 22), "date"),
    "ts": (dt.datetime(2026, 11, 22, 23, 30, tzinfo=dt.UTC), "timestamp"),
}
TYPED_CASES = [
    ("d", "int"), ("n", "int"), ("f", "int"), ("g", "int"), ("g", "long"), ("b", "int"),
    ("d", "decimal(3,0)"), ("f", "decimal(5,2)"), ("i", "decimal(5,2)"), ("i", "boolean"),
    ("z", "boolean"), ("ts", "date"), ("dt", "string"), ("d", "string"), ("f", "string"),
    ("g", "string"), ("b", "string"), ("ts", "string"), ("i", "string"),
]  # fmt: skip


def test_typed_values_are_converted_as_spark_converts_them(spark: SparkSession) -> None:
    # Given one row of typed values, as a Parquet file gives them
    schema = ", ".join(f"{name} {ddl}" for name, (_, ddl) in TYPED.items())
    frame = spark.createDataFrame([tuple(v for v, _ in TYPED.values())], schema)
    columns = [
        F.expr(f"try_cast({c} AS {t})").alias(f"r{n}") for n, (c, t) in enumerate(TYPED_CASES)
    ]
    (row,) = frame.select(*columns).collect()

    for n, (column, ddl) in enumerate(TYPED_CASES):
        value = TYPED[column][0]
        spark_value = row[f"r{n}"]
        # where Spark gives null, the value as read, as Spark prints it
        expected = spark_value if spark_value is not None else spark_text(value)
        assert subject_value(value, parse_type(ddl)) == expected, (column, ddl)


def test_json_values_read_as_text_as_spark_reads_them(spark: SparkSession) -> None:
    document = (
        '{"a": 1.50, "b": 1001, "c": true, "d": {"x": 1, "y": "z"}, "e": 1e2, "f": "s",'
        ' "g": [1, "a"], "h": -0.0, "i": 12345678.9, "j": 0.0001}'
    )
    names = list(json.loads(document))
    frame = spark.createDataFrame([(document,)], "doc string")
    (row,) = frame.select(F.json_tuple("doc", *names).alias(*names)).collect()

    parsed = json.loads(document)
    assert {n: json_leaf_text(parsed[n]) for n in names} == row.asDict()


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.5, "1.5"), (100.0, "100.0"), (1e20, "1.0E20"), (1.2345e-5, "1.2345E-5"),
     (12345678.0, "1.2345678E7"), (-0.0, "-0.0"), (0.001, "0.001"), (float("nan"), "NaN")],
)  # fmt: skip
def test_doubles_print_as_java_prints_them(value: float, text: str) -> None:
    assert java_double_text(value) == text


@pytest.mark.parametrize(
    ("value", "ddl", "text"),
    [
        ("12.50", "decimal(10,2)", "12.5"),  # the same subject as Decimal("12.50") in Parquet
        (Decimal("12.50"), "decimal(10,2)", "12.5"),
        ("1001", "int", "1001"),
        (" 01001", "long", "1001"),
        ("2026-1-2", "date", "2026-01-02"),
        ("", "string", None),  # "" names nobody (canonical.is_no_subject)
        (" \t", "string", None),  # nor does whitespace only
        (" 7 ", "string", " 7 "),  # strings keep their spaces
        ("", "int", None),  # an empty CSV value is null for a non-string column
        ("abc", "int", "abc"),  # a rejected value is indexed as it was read
        (1.5, "int", "1"),  # a Parquet double in an int column is truncated, as Spark casts
        ("1.5", "int", "1.5"),  # but the text 1.5 is no int: rejected, indexed as read
        (None, "string", None),
    ],
)
def test_canonical_text_of_subject_values(value: Any, ddl: str, text: str | None) -> None:
    assert subject_text(value, parse_type(ddl)) == text
