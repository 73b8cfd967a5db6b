"""A dataset's matching fingerprint and generations (lethe_shared.datasets.matching), what is
pending re-index (reindex.py), and the re-index's one execution name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.matching import (
    Generations,
    matching_fingerprint,
    matching_view,
    next_generations,
)
from lethe_shared.datasets.registry import registration_of_item
from lethe_shared.datasets.reindex import (
    execution_arn,
    reindex_execution_name,
    reindex_input,
    reindex_pending,
)
from tests.fakes import MemoryRegistry

pytestmark = pytest.mark.lambda_runtime

BASE: dict[str, Any] = {
    "dataset_id": "orders",
    "format": "jsonl",
    "compression": "auto",
    "subject_columns": ["customer.id"],
    "partition_by": ["order_date"],
    "schema": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": "struct<id:string,name:string>"},
        {"name": "order_date", "type": "date"},
        {"name": "amount", "type": "int"},
    ],
    "description": "orders of the shop",
}
CSV: dict[str, Any] = {
    "dataset_id": "clicks",
    "format": "csv",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "page", "type": "string"},
    ],
}


def _fp(document: dict[str, Any], **changes: Any) -> str:
    return matching_fingerprint(parse_dataset({**document, **changes}))


def _schema(**types: str) -> list[dict[str, Any]]:
    columns = {c["name"]: c["type"] for c in BASE["schema"]}
    columns.update(types)
    return [{"name": name, "type": kind} for name, kind in columns.items()]


# ----------------------------------------------------------------------------- fingerprint


def test_the_fingerprint_is_32_hex_digits_and_stable() -> None:
    first = _fp(BASE)

    assert len(first) == 32
    assert int(first, 16) >= 0
    assert _fp(BASE) == first
    assert matching_fingerprint(parse_dataset(dict(reversed(list(BASE.items()))))) == first


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subject_columns", ["order_id"]),
        ("subject_columns", ["customer.name"]),
        ("subject_columns", ["customer.id", "order_id"]),  # a composite key
        ("subject_columns", ["Customer.id"]),  # spelling decides which field the rule finds
        ("format", "csv"),
        ("format", "parquet"),
        ("compression", "gzip"),
        ("compression", "none"),
        ("partition_by", []),
        ("partition_by", ["order_date", "order_id"]),
    ],
)
def test_the_fingerprint_changes_with_what_decides_which_rows_match(field: str, value: Any) -> None:
    document = {**BASE, field: value}
    if field == "subject_columns" and value == ["Customer.id"]:
        document["schema"] = [*BASE["schema"], {"name": "Customer", "type": "struct<id:string>"}]
    assert matching_fingerprint(parse_dataset(document)) != _fp(BASE)


def test_the_order_of_a_composite_key_changes_the_fingerprint() -> None:
    one = _fp(BASE, subject_columns=["customer.id", "order_id"])
    other = _fp(BASE, subject_columns=["order_id", "customer.id"])

    assert one != other  # a composite key is hashed as pairs in this order


@pytest.mark.parametrize(
    "customer",
    [
        "struct<id:long,name:string>",  # the subject column's own type
        "struct<id:string,name:string,tier:int>",  # its parent struct's type
        "struct<name:string,id:string>",  # the parent's field order
    ],
)
def test_the_fingerprint_changes_with_the_subject_column_and_parent_types(customer: str) -> None:
    assert _fp(BASE, schema=_schema(customer=customer)) != _fp(BASE)


def test_a_partition_column_that_is_the_subject_column_changes_it_by_type() -> None:
    partitioned = {**BASE, "subject_columns": ["order_date"]}

    assert _fp(partitioned, schema=_schema(order_date="string")) != _fp(partitioned)


@pytest.mark.parametrize(
    "changes",
    [
        {"description": "another free text"},
        {"owner": "team-a"},  # any other top-level field the contract allows
        {"schema": _schema(amount="long")},  # a column that is no subject
        {"schema": [*BASE["schema"], {"name": "note", "type": "string"}]},
        {"schema": [{**c, "nullable": False} for c in BASE["schema"]]},
        {"schema": _schema(customer="struct<id:string,name:varchar>")},  # same canonical type
        {"partition_by": ["order_date"]},  # the same set
        {"csv": {"delimiter": ";"}},  # CSV options of a dataset that is not CSV
    ],
)
def test_the_fingerprint_ignores_what_does_not_change_matching(changes: dict[str, Any]) -> None:
    assert _fp(BASE, **changes) == _fp(BASE)


def test_equal_types_in_other_spellings_give_the_same_fingerprint() -> None:
    spelled = _fp(BASE, schema=_schema(customer="STRUCT<id: STRING, name: STRING>"))

    assert spelled == _fp(BASE)


@pytest.mark.parametrize(
    "csv",
    [{"delimiter": ";"}, {"quote": "'"}, {"escape": "\\"}, {"header": False}],
)
def test_csv_options_that_change_parsing_change_the_fingerprint(csv: dict[str, Any]) -> None:
    assert _fp(CSV, csv=csv) != _fp(CSV)


def test_without_a_header_every_column_position_counts() -> None:
    headless = {**CSV, "csv": {"header": False}}
    moved = [CSV["schema"][1], CSV["schema"][0]]
    added = [*CSV["schema"], {"name": "ts", "type": "string"}]

    assert _fp(headless, schema=moved) != _fp(headless)
    assert _fp(headless, schema=added) != _fp(headless)
    # with a header, columns are found by name: their order is not matching-relevant
    assert _fp(CSV, schema=moved) == _fp(CSV)


def test_the_view_names_what_it_covers() -> None:
    view = matching_view(parse_dataset(BASE))

    assert view == {
        "scheme": "lethe matching v1",
        "format": "jsonl",
        "compression": "auto",
        "subject_columns": [["customer.id", "string"]],
        "subject_parents": {"customer": "struct<id:string,name:string>"},
        "partition_by": ["order_date"],
    }


# ----------------------------------------------------------------------------- generations


def test_a_new_dataset_is_generation_one_and_indexed() -> None:
    new = next_generations(None, "f1")

    assert new == Generations("f1", 1, 1)
    assert new.indexed == new.matching
    assert not new.reindex_pending


def test_the_generation_bumps_only_when_the_fingerprint_changes() -> None:
    first = next_generations(None, "f1")
    same = next_generations(first, "f1")
    changed = next_generations(same, "f2")
    again = next_generations(changed, "f2")
    back = next_generations(again, "f1")  # back to an earlier definition: still a new generation

    assert same == first
    assert changed == Generations("f2", 2, 1)
    assert changed.reindex_pending
    assert again == changed
    assert back == Generations("f1", 3, 1)


def test_an_item_from_before_generations_reads_as_generation_one_indexed() -> None:
    document = parse_dataset(BASE).document()
    legacy = registration_of_item({"dataset_id": "orders", "document": json.dumps(document)})

    assert legacy.generations == Generations(_fp(BASE), 1, 1)
    assert legacy.version == 0
    # a generation without an indexed one is not indexed (fails closed)
    odd = registration_of_item(
        {
            "dataset_id": "orders",
            "document": json.dumps(document),
            "version": 3,
            "matching_fingerprint": "f",
            "matching_generation": 2,
        }
    )
    assert (odd.matching_generation, odd.indexed_generation, odd.reindex_pending) == (2, 0, True)


# ------------------------------------------------------------------------- pending re-index


def test_reindex_pending_lists_datasets_whose_index_is_of_an_older_generation() -> None:
    registry = MemoryRegistry()
    registry.put(parse_dataset(BASE))
    registry.put(parse_dataset(CSV))
    registry.put(parse_dataset({**BASE, "subject_columns": ["order_id"]}))  # orders: gen 2

    assert reindex_pending(registry, ["clicks", "orders", "ghost", "orders"]) == [("orders", 2, 1)]
    assert registry.record_indexed("orders", 1) is False  # an old generation records nothing
    assert reindex_pending(registry, ["orders"]) == [("orders", 2, 1)]
    assert registry.record_indexed("orders", 2) is True
    assert reindex_pending(registry, ["clicks", "orders"]) == []


def test_the_reindex_execution_is_named_by_dataset_and_generation() -> None:
    assert reindex_execution_name("orders", 2) == "orders-reindex-g2"
    assert reindex_execution_name("orders", 3) != reindex_execution_name("orders", 2)
    long = reindex_execution_name("d" * 63, 12)
    assert len(long) <= 80
    assert long.endswith("-reindex-g12")
    assert reindex_input("orders", 2) == {"dataset_id": "orders", "force": True, "generation": 2}


def test_execution_arn_of_a_name() -> None:
    machine = "arn:aws:states:eu-west-1:123456789012:stateMachine:lethe-prod-index-backfill"

    assert execution_arn(machine, "orders-reindex-g2") == (
        "arn:aws:states:eu-west-1:123456789012:execution:lethe-prod-index-backfill:"
        "orders-reindex-g2"
    )
    with pytest.raises(ValueError, match="not a state machine ARN"):
        execution_arn("arn:aws:lambda:eu-west-1:1:function:x", "n")
