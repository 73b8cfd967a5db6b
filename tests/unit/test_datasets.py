"""The dataset document contract (ARCHITECTURE.md) and its validation."""

from __future__ import annotations

from typing import Any

import pytest

from lethe_shared.datasets.document import Compression, DataFormat, parse_dataset, parse_type
from lethe_shared.errors import DatasetValidationError

pytestmark = pytest.mark.lambda_runtime

CONTRACT_EXAMPLE: dict[str, Any] = {
    "dataset_id": "reviews",
    "format": "jsonl",
    "compression": "auto",
    "subject_columns": ["user_id"],
    "partition_by": ["review_date"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "stars", "type": "int"},
        {"name": "review_date", "type": "date"},
    ],
}


def _doc(**changes: Any) -> dict[str, Any]:
    return {**CONTRACT_EXAMPLE, **changes}


def _errors(document: Any) -> list[str]:
    with pytest.raises(DatasetValidationError) as caught:
        parse_dataset(document)
    return caught.value.errors


def test_contract_example_is_valid_and_round_trips() -> None:
    dataset = parse_dataset(CONTRACT_EXAMPLE)

    assert dataset.format is DataFormat.JSONL
    assert dataset.compression is Compression.AUTO
    assert dataset.document()["schema"][1] == {"name": "stars", "type": "int", "nullable": True}
    assert parse_dataset(dataset.document()) == dataset


def test_extra_fields_are_kept() -> None:
    dataset = parse_dataset(_doc(owner="team-reviews"))

    assert dataset.document()["owner"] == "team-reviews"


def test_nested_and_composite_subject_columns() -> None:
    dataset = parse_dataset(
        _doc(
            subject_columns=["customer.id", "tenant"],
            partition_by=[],
            schema=[
                {"name": "customer", "type": "struct<id:bigint,email:string>"},
                {"name": "tenant", "type": "string"},
            ],
        )
    )

    nested = dataset.column_type("customer.id")
    assert nested is not None
    assert nested.name == "long"
    assert dataset.column_type("customer.phone") is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"schema": [{"name": "user_id", "type": "strng"}], "partition_by": []},
            "schema[0].type: 'strng' is not a valid type (unknown type 'strng')",
        ),
        (
            {"subject_columns": ["customer_id"]},
            "subject_columns[0]: 'customer_id' is not a column of the schema",
        ),
        (
            {"partition_by": ["country"]},
            "partition_by[0]: 'country' is not a column of the schema",
        ),
        (
            {
                "subject_columns": ["tags"],
                "schema": [{"name": "tags", "type": "array<string>"}],
                "partition_by": [],
            },
            "subject_columns[0]: 'tags' has type array<string>; a subject column must be one of "
            "boolean, byte, date, decimal, int, long, short, string",
        ),
        (
            {"format": "parquet", "compression": "gzip"},
            "compression: parquet files carry their own codec; use 'auto' or 'none'",
        ),
        (
            {
                "schema": [
                    {"name": "user_id", "type": "string"},
                    {"name": "user_id", "type": "int"},
                ],
                "partition_by": [],
            },
            "schema: column 'user_id' is declared more than once",
        ),
    ],
)
def test_semantic_errors_name_the_field(changes: dict[str, Any], expected: str) -> None:
    assert _errors(_doc(**changes)) == [expected]


def test_every_problem_is_reported_at_once() -> None:
    errors = _errors(_doc(subject_columns=["nope"], partition_by=["gone"]))

    assert errors == [
        "subject_columns[0]: 'nope' is not a column of the schema",
        "partition_by[0]: 'gone' is not a column of the schema",
    ]


@pytest.mark.parametrize(
    ("document", "expected_prefix"),
    [
        ([1, 2], "document: must be a JSON object"),
        (_doc(format="xml"), "format: Input should be 'csv', 'jsonl' or 'parquet'"),
        (_doc(dataset_id="Reviews!"), "dataset_id: String should match pattern"),
        (_doc(subject_columns=[]), "subject_columns: List should have at least 1 item"),
        (_doc(subject_columns=["user_id", "user_id"]), "subject_columns: Value error, names must"),
    ],
)
def test_shape_errors(document: Any, expected_prefix: str) -> None:
    errors = _errors(document)

    assert len(errors) == 1
    assert errors[0].startswith(expected_prefix)


@pytest.mark.parametrize(
    ("text", "ddl"),
    [
        ("STRING", "string"),
        ("integer", "int"),
        ("bigint", "long"),
        ("decimal(12, 2)", "decimal(12,2)"),
        ("decimal", "decimal(10,0)"),
        ("array<struct<a:string,b:int>>", "array<struct<a:string,b:int>>"),
        ("map<string, array<double>>", "map<string,array<double>>"),
        ("timestamp", "timestamp"),
    ],
)
def test_parse_type_canonical_ddl(text: str, ddl: str) -> None:
    assert parse_type(text).ddl() == ddl


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("array<string", "unexpected end of type"),
        ("struct<a:int,a:string>", "struct has duplicate field names"),
        ("decimal(40,2)", "decimal(40,2) is out of range"),
        ("string int", "unexpected 'int' after the type"),
        ("map<string;int>", "unexpected character ';'"),
    ],
)
def test_parse_type_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_type(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "index_partition_bits: Input should be a valid integer"),
        ("3", "index_partition_bits: Input should be a valid integer"),
        (3.0, "index_partition_bits: Input should be a valid integer"),
        (-1, "index_partition_bits: Input should be greater than or equal to 0"),
        (17, "index_partition_bits: Input should be less than or equal to 16"),
    ],
)
def test_index_partition_bits_is_a_small_whole_number(value: Any, expected: str) -> None:
    assert _errors(_doc(index_partition_bits=value)) == [expected]


def test_index_partition_bits_is_kept_where_declared_and_absent_otherwise() -> None:
    declared = parse_dataset(_doc(index_partition_bits=8))
    assert declared.index_partition_bits == 8
    assert declared.document()["index_partition_bits"] == 8
    assert parse_dataset(declared.document()) == declared  # round-trips
    plain = parse_dataset(_doc())
    assert plain.index_partition_bits is None
    assert "index_partition_bits" not in plain.document()


def test_the_document_s_bound_is_the_segment_index_s() -> None:
    from lethe_shared.datasets.document import MAX_INDEX_PARTITION_BITS  # noqa: PLC0415
    from lethe_shared.index.segments.format import MAX_PARTITION_BITS  # noqa: PLC0415

    assert MAX_INDEX_PARTITION_BITS == MAX_PARTITION_BITS
