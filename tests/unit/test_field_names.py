"""The one field-name rule (lethe_shared.datasets.field_names)."""

from __future__ import annotations

import pytest

from lethe_shared.datasets.field_names import (
    AmbiguousFieldError,
    candidate_fields,
    field_map,
    find_field,
)


def test_an_exact_name_wins_over_a_case_variant() -> None:
    assert find_field(["customerId", "customerid"], "customerid") == "customerid"


def test_a_unique_case_variant_is_the_field() -> None:
    assert find_field(["name", "customerId"], "customerid") == "customerId"
    assert find_field(["name", "CUSTOMERID"], "customerId") == "CUSTOMERID"


def test_case_is_lower_case_not_folding() -> None:
    assert find_field(["STRASSE"], "straße") is None


def test_two_case_variants_and_no_exact_name_are_ambiguous() -> None:
    with pytest.raises(AmbiguousFieldError) as raised:
        find_field(["customerId", "CustomerID", "name"], "customerid")
    assert raised.value.candidates == ("CustomerID", "customerId")


def test_an_absent_field_is_none_and_position_never_counts() -> None:
    assert find_field(["name", "id"], "user_id") is None
    assert field_map(["name", "id"], ["id", "name", "age"]) == {
        "id": "id", "name": "name", "age": None,
    }  # fmt: skip


def test_candidates_are_the_exact_field_alone_or_every_case_variant() -> None:
    assert candidate_fields(["customerId", "customerid"], "customerid") == ["customerid"]
    assert candidate_fields(["customerId", "CustomerID", "id"], "customerid") == [
        "customerId", "CustomerID",
    ]  # fmt: skip
    assert candidate_fields(["name"], "customerid") == []
