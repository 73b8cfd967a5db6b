"""The index reads subject columns by the field-name rule (lethe_shared.datasets.field_names):
the record path (`subject_hashing.records`), the Arrow path (`subject_hashing.arrow`) and the
entries built from them, never by position; an ambiguous name is never a guess."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.field_names import AmbiguousFieldError
from lethe_shared.index.arrow_entries import ObjectRef, entries_from_table
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys
from lethe_shared.subject_hashing.records import (
    SubjectRows,
    column_subject_hashes,
    column_texts,
    record_subject_rows,
    subject_hashes_of_rows,
    subject_table,
    typed_subject_rows,
)

pytestmark = pytest.mark.lambda_runtime

KEY = b"field-names-index-unit-test-key-0123456789"
REF = ObjectRef("s3://lake/ds/part-1.parquet", Zone.LAKE, "parquet", "v1", "e1")


def dataset(subjects: list[str], schema: list[tuple[str, str]]) -> Dataset:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": "parquet",
            "subject_columns": subjects,
            "schema": [{"name": n, "type": t} for n, t in schema],
        }
    )


NESTED = dataset(["customer.customerid"], [("customer", "struct<customerid:string,name:string>")])
FLAT = dataset(["user_id"], [("user_id", "string")])


def hashes(rows: SubjectRows, ds: Dataset) -> list[Any]:
    return list(subject_hashes_of_rows(rows, ds, key=KEY).to_pylist())


# ------------------------------------------------------------------------------ record path


def test_json_records_find_a_case_variant_at_every_level_and_never_a_position() -> None:
    records: list[dict[str, Any]] = [
        {"customer": {"name": "Ann", "customerid": "c1"}},  # swapped: by name
        {"Customer": {"customerId": "c2", "name": "Bob"}},  # case variants, top and nested
        {"customer": '{"CUSTOMERID": "c3"}'},  # a struct held as JSON text
        {"customer": {"customerid": None, "customerId": "c9"}},  # the exact name wins
        {"customer": {"name": "Dee"}},  # absent: nobody's
    ]

    rows = record_subject_rows(NESTED, records, [1, 2, 3, 4, 5])

    assert rows == SubjectRows([1, 2, 3, 4, 5], [["c1", "c2", "c3", None, None]])
    assert hashes(rows, NESTED) == [hash_of_id(KEY, s) for s in ("c1", "c2", "c3")] + [None] * 2


def test_an_ambiguous_record_is_held_under_each_reading_and_never_matched_on_a_guess() -> None:
    records = [
        {"customer": {"customerId": "c5", "CustomerID": "c6"}},  # two readings
        {"customer": {"customerId": "c7", "CustomerID": "c7"}},  # readings that agree
        {"customer": {"customerid": "c8"}},
    ]

    rows = record_subject_rows(NESTED, records, [1, 2, 3])

    assert (rows.coordinates, rows.texts, rows.ambiguous) == (
        [1, 1, 2, 3],
        [["c5", "c6", "c7", "c8"]],
        (1,),
    )
    with pytest.raises(AmbiguousFieldError) as raised:
        subject_hashes_of_rows(rows, NESTED, key=KEY)
    assert raised.value.candidates == ("CustomerID", "customerId")
    others = rows.unambiguous()
    assert (others.coordinates, others.texts) == ([2, 3], [["c7", "c8"]])
    assert hashes(others, NESTED) == [hash_of_id(KEY, "c7"), hash_of_id(KEY, "c8")]


def test_a_composite_key_with_an_ambiguous_part_has_each_combination() -> None:
    ds = dataset(["tenant", "user_id"], [("tenant", "string"), ("user_id", "long")])
    records = [{"Tenant": "a", "TENANT": "b", "user_id": 1}]

    rows = record_subject_rows(ds, records, [7])

    assert (rows.coordinates, rows.texts, rows.ambiguous) == (
        [7, 7],
        [["a", "b"], ["1", "1"]],
        (7,),
    )
    table = subject_table(ds, rows.texts)
    assert list(row_subject_hashes(table, ds, {}, key=KEY).to_pylist()) == [
        hash_of_keys(KEY, ["tenant", "user_id"], {"tenant": t, "user_id": 1}) for t in "ab"
    ]


# ------------------------------------------------------------------------------- typed rows


def test_typed_rows_find_a_case_variant_struct_field_and_column() -> None:
    struct = pa.struct([("customerId", pa.string()), ("name", pa.string())])
    table = pa.table({"Customer": pa.array([{"customerId": "c1", "name": "Ann"}, None], struct)})

    assert [c.to_pylist() for c in column_texts(table, NESTED)] == [["c1", None]]
    assert column_subject_hashes(table, NESTED, key=KEY).to_pylist() == [
        hash_of_id(KEY, "c1"),
        None,
    ]
    flat = pa.table({"USER_ID": ["u1"], "user_ID": ["u2"], "user_id": ["u3"]})  # exact wins
    assert column_texts(flat, FLAT)[0].to_pylist() == ["u3"]


def test_typed_rows_with_an_ambiguous_struct_field() -> None:
    struct = pa.struct([("customerId", pa.string()), ("CustomerID", pa.string())])
    table = pa.table(
        {"customer": pa.array([{"customerId": "c5", "CustomerID": "c6"},
                               {"customerId": "c7", "CustomerID": "c7"}], struct)}
    )  # fmt: skip

    rows = typed_subject_rows(table, NESTED, [0, 1])

    assert (rows.coordinates, rows.texts, rows.ambiguous) == ([0, 0, 1], [["c5", "c6", "c7"]], (0,))
    with pytest.raises(AmbiguousFieldError):
        column_subject_hashes(table, NESTED, key=KEY)
    agreeing = table.slice(1)  # every row's readings agree: one subject each
    assert column_subject_hashes(agreeing, NESTED, key=KEY).to_pylist() == [hash_of_id(KEY, "c7")]


# ------------------------------------------------------------------------------ Arrow path


def test_lake_entries_find_fields_by_name_and_refuse_to_guess() -> None:
    struct = pa.struct([("name", pa.string()), ("CUSTOMERID", pa.string())])
    table = pa.table({"CUSTOMER": pa.array([{"name": "Ann", "CUSTOMERID": "c1"}], struct)})

    (entry,) = entries_from_table(table, NESTED, REF, key=KEY)

    assert (entry.subject_hash, entry.row_hints) == (hash_of_id(KEY, "c1"), (0,))
    flat = pa.table({"User_Id": ["u1", "u2"], "user_id": ["u3", "u3"]})
    assert row_subject_hashes(flat, FLAT, {}, key=KEY).to_pylist() == [hash_of_id(KEY, "u3")] * 2
    ambiguous = pa.table({"User_Id": ["u1"], "USER_ID": ["u2"]})
    with pytest.raises(AmbiguousFieldError):
        entries_from_table(ambiguous, FLAT, REF, key=KEY)
