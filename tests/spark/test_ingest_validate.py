"""The ingest job's pure transformations on tiny inline frames (lethe_jobs.validate)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lethe_jobs.validate import (
    POSITION,
    REASONS,
    RECORD,
    _decimal_parts,
    _plainly_fits,
    _rounds_parts,
    _rounds_text,
    conform,
    extra_columns,
    extract_json_fields,
    rejected_rows,
    valid_rows,
    with_record,
)
from lethe_shared.datasets.document import Dataset, parse_dataset


def rounded(value: str, ddl: str = "decimal(10,2)", column: str = "v") -> str:
    return (
        f"column {column}: '{value}' has more fraction digits than {ddl} holds"
        " (it would be rounded)"
    )


def make_dataset(
    schema: list[dict[str, Any]], subjects: list[str], fmt: str = "csv", **more: Any
) -> Dataset:
    return parse_dataset(
        {"dataset_id": "t", "format": fmt, "subject_columns": subjects, "schema": schema, **more}
    )


@pytest.mark.parametrize(
    ("ddl", "rows", "expected_ddl", "expected"),
    [
        (
            "int",
            ["42", " 7 ", "abc", "5.5", "", None],
            "int",
            [
                (42, []),
                (7, []),
                (None, ["column v: 'abc' is not a valid int"]),
                (None, ["column v: '5.5' is not a valid int"]),
                (None, []),
                (None, []),
            ],
        ),
        (
            "long",
            ["9000000000", "1e3"],
            "bigint",
            [(9000000000, []), (None, ["column v: '1e3' is not a valid long"])],
        ),
        (
            "double",
            ["2.5", "x"],
            "double",
            [(2.5, []), (None, ["column v: 'x' is not a valid double"])],
        ),
        (
            "boolean",
            ["true", "FALSE", "maybe"],
            "boolean",
            [(True, []), (False, []), (None, ["column v: 'maybe' is not a valid boolean"])],
        ),
        (
            "date",
            ["2026-11-22", "2026-13-01"],
            "date",
            [(dt.date(2026, 11, 22), []), (None, ["column v: '2026-13-01' is not a valid date"])],
        ),
        (
            "timestamp",
            ["2026-11-22T10:30:00Z", "2026-11-22 10:30:00", "noon"],
            "timestamp",
            [
                (dt.datetime(2026, 11, 22, 10, 30), []),
                (dt.datetime(2026, 11, 22, 10, 30), []),
                (None, ["column v: 'noon' is not a valid timestamp"]),
            ],
        ),
        (
            "decimal(10,2)",
            ["12.345", "7", "123456789012", "1,5"],
            "decimal(10,2)",
            [
                (
                    None,  # never rounded to 12.35: a changed value is rejected
                    [
                        "column v: '12.345' has more fraction digits than decimal(10,2) holds"
                        " (it would be rounded)"
                    ],
                ),
                (Decimal("7.00"), []),
                (None, ["column v: '123456789012' is not a valid decimal(10,2)"]),
                (None, ["column v: '1,5' is not a valid decimal(10,2)"]),
            ],
        ),
        (
            "decimal(10,2)",
            [
                "12.340",  # trailing zeros are no digits of the value
                "99999999.99",  # the precision's limit, exactly
                "-99999999.99",
                "999999999.99",  # one integer digit over
                "1.5e1",
                "1e-2",
                "1e-3",
                " +.25 ",
                "0.005",
                "-0.004",
                "1E-99999999999",  # rounds to 0.00 in a cast, if it were allowed to
                "0.00000000000000000000000000000000000001",
            ],
            "decimal(10,2)",
            [
                (Decimal("12.34"), []),
                (Decimal("99999999.99"), []),
                (Decimal("-99999999.99"), []),
                (None, ["column v: '999999999.99' is not a valid decimal(10,2)"]),
                (Decimal("15.00"), []),
                (Decimal("0.01"), []),
                (None, [rounded("1e-3")]),
                (Decimal("0.25"), []),
                (None, [rounded("0.005")]),
                (None, [rounded("-0.004")]),
                (None, ["column v: '1E-99999999999' is not a valid decimal(10,2)"]),
                (
                    None,
                    [
                        "column v: '0.00000000000000000000000000000000000001' has more fraction"
                        " digits than decimal(10,2) holds (it would be rounded)"
                    ],
                ),
            ],
        ),
        ("string", ["abc", ""], "string", [("abc", []), ("", [])]),
    ],
)
def test_casts_text_to_the_declared_type_and_names_what_does_not_convert(
    spark: SparkSession,
    ddl: str,
    rows: list[str | None],
    expected_ddl: str,
    expected: list[tuple[Any, list[str]]],
) -> None:
    # Given a CSV-like frame of strings with a subject column that is always there
    dataset = make_dataset([{"name": "id", "type": "string"}, {"name": "v", "type": ddl}], ["id"])
    frame = spark.createDataFrame([(f"s{i}", v) for i, v in enumerate(rows)], "id string, v string")

    # When it is conformed
    actual = frame.transform(conform(dataset))

    # Then every value has the declared type, and only non-empty unconvertible text is rejected
    wanted = spark.createDataFrame(
        [(f"s{i}", value, reasons) for i, (value, reasons) in enumerate(expected)],
        f"id string, v {expected_ddl}, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)


def test_keeps_every_reason_of_a_row(spark: SparkSession) -> None:
    dataset = make_dataset(
        [
            {"name": "user_id", "type": "string"},
            {"name": "stars", "type": "int"},
            {"name": "day", "type": "date", "nullable": False},
            {"name": "amount", "type": "decimal(10,2)"},
        ],
        ["user_id"],
    )
    frame = spark.createDataFrame(
        [(None, "abc", None, "ten")], "user_id string, stars string, day string, amount string"
    )

    actual = frame.transform(conform(dataset))

    assert actual.collect()[0][REASONS] == [
        "column stars: 'abc' is not a valid int",
        "column amount: 'ten' is not a valid decimal(10,2)",
        "column day must not be null",
        "subject column user_id is missing",
    ]


def test_nested_subject_column_must_be_present(spark: SparkSession) -> None:
    # Given JSON text for a struct column whose `id` field is the subject
    dataset = make_dataset(
        [{"name": "customer", "type": "struct<id:string,age:int>"}, {"name": "n", "type": "int"}],
        ["customer.id"],
        fmt="jsonl",
    )
    frame = spark.createDataFrame(
        [
            (1, '{"id": "c1", "age": 30}'),
            (2, '{"age": 31}'),
            (3, None),
            (4, '{"id": "c4", "age": "old"}'),
            (5, '"c5"'),
        ],
        f"{POSITION} long, customer string",
    )

    actual = frame.transform(conform(dataset))

    wanted = spark.createDataFrame(
        [
            (1, ("c1", 30), None, []),
            (2, (None, 31), None, ["subject column customer.id is missing"]),
            (3, None, None, ["subject column customer.id is missing"]),
            (
                4,
                ("c4", None),
                None,
                [
                    'column customer: \'{"id": "c4", "age": "old"}\' is not a valid '
                    "struct<id:string,age:int>"
                ],
            ),
            (5, None, None, ["column customer: '\"c5\"' is not a valid struct<id:string,age:int>"]),
        ],
        f"{POSITION} long, customer struct<id:string,age:int>, n int, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)


def test_nested_leaves_of_the_wrong_type_are_rejected(spark: SparkSession) -> None:
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "tags", "type": "array<int>"},
            {"name": "attrs", "type": "map<string,double>"},
        ],
        ["id"],
    )
    frame = spark.createDataFrame(
        [("a", "[1, 2]", '{"x": 1.5}'), ("b", '[1, "two"]', '{"x": "y"}'), ("c", "", "[]")],
        "id string, tags string, attrs string",
    )

    actual = frame.transform(conform(dataset)).orderBy("id").collect()

    assert [(r["tags"], r["attrs"], r[REASONS]) for r in actual] == [
        ([1, 2], {"x": 1.5}, []),
        (
            [1, None],
            {"x": None},
            [
                "column tags: '[1, \"two\"]' is not a valid array<int>",
                'column attrs: \'{"x": "y"}\' is not a valid map<string,double>',
            ],
        ),
        (None, None, ["column attrs: '[]' is not a valid map<string,double>"]),
    ]


def test_composite_subject_key_needs_every_part(spark: SparkSession) -> None:
    dataset = make_dataset(
        [{"name": "tenant", "type": "string"}, {"name": "user_id", "type": "long"}],
        ["tenant", "user_id"],
    )
    frame = spark.createDataFrame(
        [("t1", "1"), (None, "2"), (None, None)], "tenant string, user_id string"
    )

    actual = frame.transform(conform(dataset))

    wanted = spark.createDataFrame(
        [
            ("t1", 1, []),
            (None, 2, ["subject column tenant is missing"]),
            (None, None, ["subject column tenant is missing", "subject column user_id is missing"]),
        ],
        f"tenant string, user_id long, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)


def test_empty_string_and_zero_are_valid_subject_ids(spark: SparkSession) -> None:
    # "" is a value a producer wrote (not a null) and 0 is a number: both can be erased exactly
    dataset = make_dataset(
        [{"name": "email", "type": "string"}, {"name": "account", "type": "int"}],
        ["email", "account"],
    )
    frame = spark.createDataFrame([("", "0")], "email string, account string")

    actual = frame.transform(conform(dataset))

    assertDataFrameEqual(
        actual,
        spark.createDataFrame([("", 0, [])], f"email string, account int, {REASONS} array<string>"),
    )


def test_non_nullable_column_must_hold_a_value(spark: SparkSession) -> None:
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "created", "type": "string", "nullable": False},
            {"name": "day", "type": "date", "nullable": False},
        ],
        ["id"],
    )
    frame = spark.createDataFrame(
        [("a", "", "2026-11-22"), ("b", None, "")], "id string, created string, day string"
    )

    actual = frame.transform(conform(dataset))

    wanted = spark.createDataFrame(
        [
            ("a", "", dt.date(2026, 11, 22), []),
            ("b", None, None, ["column created must not be null", "column day must not be null"]),
        ],
        f"id string, created string, day date, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)


def test_extra_columns_are_dropped_and_missing_nullable_columns_are_null(
    spark: SparkSession,
) -> None:
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "stars", "type": "int"},
            {"name": "added_later", "type": "double"},
        ],
        ["id"],
    )
    frame = spark.createDataFrame([("a", "5", "x")], "id string, stars string, surplus string")

    actual = frame.transform(conform(dataset))

    assert extra_columns(frame.columns, dataset) == ["surplus"]
    assertDataFrameEqual(
        actual,
        spark.createDataFrame(
            [("a", 5, None, [])],
            f"id string, stars int, added_later double, {REASONS} array<string>",
        ),
    )


def test_typed_columns_convert_or_conflict(spark: SparkSession) -> None:
    # Given Parquet-like typed columns: a long declared int, a struct declared int
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "n", "type": "int"},
            {"name": "size", "type": "int"},
            {"name": "day", "type": "date"},
        ],
        ["id"],
        fmt="parquet",
    )
    frame = spark.createDataFrame(
        [("a", 5, (1,), dt.date(2026, 1, 2)), ("b", 3_000_000_000, None, None)],
        "id string, n long, size struct<w:int>, day date",
    )

    actual = frame.transform(conform(dataset))

    wanted = spark.createDataFrame(
        [
            (
                "a",
                5,
                None,
                dt.date(2026, 1, 2),
                ["column size: type struct<w:int> in the file cannot be converted to int"],
            ),
            ("b", None, None, None, ["column n: '3000000000' is not a valid int"]),
        ],
        f"id string, n int, size int, day date, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)


def test_typed_and_nested_decimals_are_never_rounded(spark: SparkSession) -> None:
    # Given Parquet-like typed values and JSON arrays, into decimal(10,2)
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "d", "type": "decimal(10,2)"},
            {"name": "f", "type": "decimal(10,2)"},
            {"name": "a", "type": "array<decimal(10,2)>"},
        ],
        ["id"],
        fmt="parquet",
    )
    frame = spark.createDataFrame(
        [
            ("fits", Decimal("1.2300"), 0.25, "[1.25, 2]"),
            ("d", Decimal("1.2345"), None, None),
            ("f", None, 0.005, None),
            ("a", None, None, "[1.25, 1.255]"),
            ("limit", Decimal("99999999.9900"), None, "[-99999999.99]"),
        ],
        "id string, d decimal(12,4), f double, a string",
    )

    actual = {r["id"]: r for r in frame.transform(conform(dataset)).collect()}

    fits = actual["fits"]
    assert (fits["d"], fits["f"], fits["a"], fits[REASONS]) == (
        Decimal("1.23"),
        Decimal("0.25"),
        [Decimal("1.25"), Decimal("2.00")],
        [],
    )
    assert actual["d"][REASONS] == [
        "column d: '1.2345' has more fraction digits than decimal(10,2) holds (it would be rounded)"
    ]
    assert actual["f"][REASONS] == [
        "column f: '0.005' has more fraction digits than decimal(10,2) holds (it would be rounded)"
    ]
    assert actual["a"][REASONS] == ["column a: '[1.25, 1.255]' is not a valid array<decimal(10,2)>"]
    limit = actual["limit"]
    assert (limit["d"], limit["a"], limit[REASONS]) == (
        Decimal("99999999.99"),
        [Decimal("-99999999.99")],
        [],
    )


def test_json_lines_fields_come_from_the_record_text(spark: SparkSession) -> None:
    dataset = make_dataset(
        [
            {"name": "id", "type": "string"},
            {"name": "price", "type": "decimal(10,2)"},
            {"name": "tags", "type": "array<string>"},
        ],
        ["id"],
        fmt="jsonl",
    )
    frame = spark.createDataFrame(
        [(1, '{"id": "a", "price": 1.10, "tags": ["x"], "other": 1}'), (2, '{"price": "9"}')],
        f"{POSITION} long, {RECORD} string",
    )

    actual = frame.transform(extract_json_fields(dataset)).transform(conform(dataset))

    wanted = spark.createDataFrame(
        [
            (
                1,
                "a",
                Decimal("1.10"),
                ["x"],
                [],
                '{"id": "a", "price": 1.10, "tags": ["x"], "other": 1}',
            ),
            (2, None, Decimal("9.00"), None, ["subject column id is missing"], '{"price": "9"}'),
        ],
        f"{POSITION} long, id string, price decimal(10,2), tags array<string>, "
        f"{REASONS} array<string>, {RECORD} string",
    )
    assertDataFrameEqual(actual, wanted)


def test_valid_and_rejected_rows_split_a_conformed_frame(spark: SparkSession) -> None:
    dataset = make_dataset([{"name": "id", "type": "string"}, {"name": "n", "type": "int"}], ["id"])
    frame = spark.createDataFrame(
        [(2, "a", "1"), (3, "b", "x")], f"{POSITION} long, id string, n string"
    )

    conformed = frame.transform(with_record).transform(conform(dataset))

    assertDataFrameEqual(
        valid_rows(conformed),
        spark.createDataFrame([(2, "a", 1)], f"{POSITION} long, id string, n int"),
    )
    assertDataFrameEqual(
        rejected_rows(conformed),
        spark.createDataFrame(
            [(3, ["column n: 'x' is not a valid int"], '{"id":"b","n":"x"}')],
            f"{POSITION} long, {REASONS} array<string>, {RECORD} string",
        ),
    )


_OLD_DECIMAL_TEXT = r"^\s*[+-]?\p{Nd}*(?:\.(\p{Nd}*))?(?:[eE]([+-]?\p{Nd}+))?\s*$"


def _old_rounds_text(text: Any, scale: int) -> Any:
    """The rounding check as it was (four regular expression matches per value), verbatim: the
    reference the one-match form (`validate._rounds_text`) is compared with."""
    fraction = F.regexp_replace(F.regexp_extract(text, _OLD_DECIMAL_TEXT, 1), "0+$", "")
    exponent_text = F.regexp_extract(text, _OLD_DECIMAL_TEXT, 2)
    exponent = F.when(exponent_text == "", F.lit(0.0)).otherwise(exponent_text.cast("double"))
    needed = F.length(fraction).cast("double") - exponent
    return ~text.rlike(_OLD_DECIMAL_TEXT) | exponent.isNull() | (needed > F.lit(float(scale)))


def test_the_rounding_check_matches_once_and_judges_as_before(spark: SparkSession) -> None:
    texts = [
        "1", "1.5", "1.50", "1.500", "1.505", "1.005", "12.345", "0.005", "-0.004", "+3.10",
        " 4.20 ", "\t5.1\n", "1e-3", "1E2", "1.23e1", "1.234e1", "1.2345E+2", "5.", ".5", ".",
        "", "abc", "1,5", "1.2.3", "#1#2", "1.5#", "\u0661.\u0662\u0663", "1.\u0660\u0660",
        "1e", "e5", "1.5e-99999999999", "1.5e99999999999", "00.0100", "1.5\u0085", "1.5\x01",
        "-.50e-1", "9" * 40 + ".1", "1.5 x", None,
    ]  # fmt: skip
    texts += [f"1.5{c}" for c in ("\u0085", "\u2028", "\u2029", "\u0085\u0085", "\r\n", "\n\u2028")]
    texts += ["1.505\u2028", "1.5e1\u0085", " -2.50 \u2029"]
    # plain texts (found without the pattern, `validate._plainly_fits`) and near misses
    texts += [
        "-", "+", "-.", "+.", "-.5", "+.123", "1-", "--1", "+-1", "-1-", ".-1", "1.2.", "-1.2.",
        "12.34", "12.345", "-12.34500", "0.10", "100", "-0", "1 ", " 1", "1.5\u0660", "\u0661",
        "1e2", "-1.2e-1", "12345678901.12", "1.", "+1.", "..", "-..", "1.5.", "99.999",
    ]  # fmt: skip
    frame = spark.createDataFrame([(t,) for t in texts], "t string")
    for scale in (0, 2, 5):
        target = T.DecimalType(12, scale)
        # as the job asks it: only of a text the cast reads (`validate._rounds`)
        read = F.expr(f"try_cast(t AS decimal(12,{scale}))").isNotNull()
        got = frame.select(
            "t",
            (read & _rounds_text(F.col("t"), target)).alias("new"),
            (read & _old_rounds_text(F.col("t"), scale)).alias("old"),
            # every text, read or not: the plain texts' shortcut judges as the match does
            _rounds_text(F.col("t"), target).alias("shortcut"),
            _rounds_parts(_decimal_parts(F.col("t")), target).alias("matched"),
            _plainly_fits(F.col("t"), scale).alias("plain"),
        ).collect()
        assert [(r["t"], r["new"]) for r in got] == [(r["t"], r["old"]) for r in got]
        assert [(r["t"], r["shortcut"]) for r in got] == [(r["t"], r["matched"]) for r in got]
        assert any(r["new"] for r in got)
        assert any(r["new"] is False for r in got)
        assert any(r["plain"] for r in got)
        assert any(r["plain"] is False and r["matched"] is False for r in got)
