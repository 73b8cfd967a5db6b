"""Index entries from Arrow rows: nested and composite subjects, nulls, "" and 0, hints."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.arrow_entries import ObjectRef, entries_from_table
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
REF = ObjectRef(
    object_url="s3://lake/ds/part-1.parquet",
    zone=Zone.LAKE,
    format="parquet",
    version_id="v1",
    etag="e1",
)


def _dataset(subjects: list[str], schema: list[dict[str, str]], **extra: Any) -> Any:
    return parse_dataset(
        {
            "dataset_id": "ds",
            "format": "parquet",
            "subject_columns": subjects,
            "schema": schema,
            **extra,
        }
    )


def test_one_entry_per_subject_with_counts_and_row_indexes() -> None:
    dataset = _dataset(["user_id"], [{"name": "user_id", "type": "string"}])
    table = pa.table({"user_id": ["a", "b", "a", None, "", "0", " \t"]})

    entries = entries_from_table(table, dataset, REF, key=KEY)

    by_hash = {e.subject_hash: e for e in entries}
    # "0" is a subject; null (row 3), "" (row 4) and whitespace only (row 6) name nobody
    assert set(by_hash) == {hash_of_id(KEY, s) for s in ("a", "b", "0")}
    assert by_hash[hash_of_id(KEY, "a")].rows == 2
    assert by_hash[hash_of_id(KEY, "a")].row_hints == (0, 2)
    assert by_hash[hash_of_id(KEY, "0")].row_hints == (5,)
    assert {(e.version_id, e.etag, e.zone, e.dataset_id) for e in entries} == {
        ("v1", "e1", "lake", "ds")
    }


def test_coordinates_replace_row_indexes() -> None:
    dataset = _dataset(["user_id"], [{"name": "user_id", "type": "long"}])
    table = pa.table({"user_id": pa.array([7, 7, 0], pa.int64())})

    entries = entries_from_table(table, dataset, REF, key=KEY, coordinates=[2, 5, 9])

    assert {e.subject_hash: e.row_hints for e in entries} == {
        hash_of_id(KEY, "7"): (2, 5),
        hash_of_id(KEY, "0"): (9,),
    }


def test_nested_subject_column_and_null_parents() -> None:
    dataset = _dataset(["customer.id"], [{"name": "customer", "type": "struct<id:string>"}])
    table = pa.table({"customer": [{"id": "c1"}, None, {"id": None}, {"id": "c1"}]})

    (entry,) = entries_from_table(table, dataset, REF, key=KEY)

    assert entry.subject_hash == hash_of_id(KEY, "c1")
    assert entry.row_hints == (0, 3)


def test_composite_subject_is_a_tuple() -> None:
    dataset = _dataset(
        ["tenant", "user_id"],
        [{"name": "tenant", "type": "string"}, {"name": "user_id", "type": "long"}],
    )
    table = pa.table(
        {"tenant": ["acme", "acme", "globex", None], "user_id": pa.array([1, 1, 1, 1], pa.int64())}
    )

    entries = entries_from_table(table, dataset, REF, key=KEY)

    expected = {
        hash_of_keys(KEY, ["tenant", "user_id"], {"tenant": "acme", "user_id": "1"}): 2,
        hash_of_keys(KEY, ["tenant", "user_id"], {"tenant": "globex", "user_id": "1"}): 1,
    }
    assert {e.subject_hash: e.rows for e in entries} == expected


def test_subject_from_a_partition_value_not_stored_in_the_file() -> None:
    dataset = _dataset(
        ["country"],
        [{"name": "country", "type": "string"}, {"name": "x", "type": "int"}],
        partition_by=["country"],
    )
    ref = ObjectRef(
        object_url=REF.object_url, zone=Zone.LAKE, format="parquet", constants={"country": "NL"}
    )

    (entry,) = entries_from_table(pa.table({"x": [1, 2]}), dataset, ref, key=KEY)

    assert (entry.subject_hash, entry.rows) == (hash_of_id(KEY, "NL"), 2)


def test_a_boolean_subject_hashes_as_its_canonical_text() -> None:
    dataset = _dataset(["flag"], [{"name": "flag", "type": "boolean"}])

    (entry,) = entries_from_table(pa.table({"flag": [True, True]}), dataset, REF, key=KEY)

    assert (entry.subject_hash, entry.rows) == (hash_of_id(KEY, "true"), 2)


def test_wrong_number_of_coordinates() -> None:
    dataset = _dataset(["user_id"], [{"name": "user_id", "type": "string"}])

    with pytest.raises(ValueError, match="one coordinate per row"):
        entries_from_table(pa.table({"user_id": ["a"]}), dataset, REF, key=KEY, coordinates=[])
