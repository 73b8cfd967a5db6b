"""The record of processing of a dataset (lethe_shared.datasets.processing): optional, additive
fields of the dataset document (purpose, legal basis, data categories, recipients, retention),
validated with every problem named, left out of the matching fingerprint, and the Art. 30
record built from them."""

from __future__ import annotations

from typing import Any

import pytest

from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.datasets.processing import LegalBasis, processing_record, record_lines
from lethe_shared.errors import DatasetValidationError

pytestmark = pytest.mark.lambda_runtime

BASE: dict[str, Any] = {
    "dataset_id": "orders",
    "format": "jsonl",
    "subject_columns": ["customer_id"],
    "schema": [
        {"name": "customer_id", "type": "string"},
        {"name": "order_date", "type": "date"},
        {"name": "placed_at", "type": "timestamp"},
        {"name": "total", "type": "decimal(10,2)"},
        {"name": "shipping", "type": "struct<day:date,city:string>"},
    ],
}
RECORD: dict[str, Any] = {
    "purpose": "order fulfilment and invoicing",
    "legal_basis": "contract",
    "data_categories": ["contact", "purchase history"],
    "recipients": ["payment provider", "carrier"],
    "retention": {"column": "order_date", "days": 3650},
}


def _errors(**changes: Any) -> list[str]:
    with pytest.raises(DatasetValidationError) as caught:
        parse_dataset({**BASE, **changes})
    return caught.value.errors


def test_a_document_without_the_record_fields_reads_and_writes_as_before() -> None:
    dataset = parse_dataset(BASE)

    assert dataset.document() == {
        **BASE,
        "compression": "auto",
        "partition_by": [],
        "csv": {"delimiter": ",", "header": True, "quote": '"', "escape": '"'},
        "description": "",
        "schema": [{**c, "nullable": True} for c in BASE["schema"]],
    }
    for name in ("purpose", "legal_basis", "data_categories", "recipients", "retention"):
        assert name not in dataset.document()


def test_the_record_fields_round_trip_and_leave_the_matching_fingerprint_alone() -> None:
    dataset = parse_dataset({**BASE, **RECORD})

    document = dataset.document()
    assert {k: document[k] for k in RECORD} == RECORD
    assert parse_dataset(document) == dataset
    assert dataset.legal_basis is LegalBasis.CONTRACT
    # describing the processing never changes which rows match which subject: no re-index
    assert matching_fingerprint(dataset) == matching_fingerprint(parse_dataset(BASE))


def test_retention_by_object_age_is_accepted() -> None:
    dataset = parse_dataset({**BASE, "retention": {"object_age_days": 30}})

    assert dataset.retention is not None
    assert dataset.document()["retention"] == {"object_age_days": 30}
    assert dataset.retention.text() == "rows expire 30 day(s) after their object was written"


@pytest.mark.parametrize(
    ("basis", "article"),
    [
        ("consent", "Art. 6(1)(a)"),
        ("contract", "Art. 6(1)(b)"),
        ("legal_obligation", "Art. 6(1)(c)"),
        ("vital_interests", "Art. 6(1)(d)"),
        ("public_task", "Art. 6(1)(e)"),
        ("legitimate_interests", "Art. 6(1)(f)"),
    ],
)
def test_each_lawful_basis_of_article_6_is_accepted_with_its_point(
    basis: str, article: str
) -> None:
    dataset = parse_dataset({**BASE, "legal_basis": basis})

    assert processing_record(dataset)["legal_basis_article"] == article


def test_an_unknown_legal_basis_is_refused_naming_the_field() -> None:
    (error,) = _errors(legal_basis="because")

    assert error.startswith("legal_basis: ")
    assert "consent" in error
    assert "legitimate_interests" in error


@pytest.mark.parametrize(
    ("retention", "expected"),
    [
        ({"column": "order_date"}, "retention: Value error, a retention by column needs both"),
        ({"days": 30}, "retention: Value error, a retention by column needs both"),
        ({}, "retention: Value error, give column and days, or object_age_days"),
        (
            {"column": "order_date", "days": 30, "object_age_days": 3},
            "retention: Value error, give either column and days, or object_age_days, not both",
        ),
        ({"column": "order_date", "days": 0}, "retention.days: Input should be greater than"),
        ({"object_age_days": 40000}, "retention.object_age_days: Input should be less than"),
        ({"column": "order_date", "days": 3, "hours": 1}, "retention.hours: Extra inputs"),
    ],
)
def test_a_malformed_retention_is_refused_naming_the_field(
    retention: dict[str, Any], expected: str
) -> None:
    errors = _errors(retention=retention)

    assert any(e.startswith(expected) for e in errors), errors


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ("ordered", "retention.column: 'ordered' is not a column of the schema"),
        ("total", "retention.column: 'total' has type decimal(10,2); a retention column must be "
         "date or timestamp"),
        ("shipping.day", "retention.column: 'shipping.day': the retention column must be top "
         "level"),
    ],
)  # fmt: skip
def test_a_retention_column_must_be_a_top_level_date_or_timestamp(
    column: str, expected: str
) -> None:
    assert _errors(retention={"column": column, "days": 30}) == [expected]


def test_a_timestamp_retention_column_is_accepted() -> None:
    dataset = parse_dataset({**BASE, "retention": {"column": "placed_at", "days": 90}})

    assert dataset.retention is not None
    assert dataset.retention.text() == "rows expire 90 day(s) after their placed_at"


def test_every_problem_is_named_at_once() -> None:
    errors = _errors(
        legal_basis="nope", data_categories=["contact", " "], recipients="carrier", purpose=""
    )

    assert sorted(e.split(":")[0] for e in errors) == [
        "data_categories",
        "legal_basis",
        "purpose",
        "recipients",
    ]


def test_the_record_names_what_is_declared_and_what_is_missing() -> None:
    full = processing_record(parse_dataset({**BASE, **RECORD, "description": "web orders"}))
    partial = processing_record(parse_dataset({**BASE, "purpose": "analytics"}))

    assert full == {
        "dataset_id": "orders",
        "description": "web orders",
        "purpose": "order fulfilment and invoicing",
        "legal_basis": "contract",
        "legal_basis_article": "Art. 6(1)(b)",
        "data_categories": ["contact", "purchase history"],
        "recipients": ["payment provider", "carrier"],
        "data_subjects_identified_by": ["customer_id"],
        "retention": {"column": "order_date", "days": 3650},
        "retention_text": "rows expire 3650 day(s) after their order_date",
        "missing": [],
    }
    assert partial["missing"] == ["legal_basis", "data_categories", "recipients", "retention"]
    assert partial["retention_text"] == "not declared"
    lines = record_lines([full, partial])
    assert "  legal basis:      contract (Art. 6(1)(b))" in lines
    assert "  not declared:     legal_basis, data_categories, recipients, retention" in lines
