"""`lethe index lookup` against the registry, the subject index and the hash key secret on
in-process moto: a subject is looked up by the hash a request for it would use in each
dataset (its id as a value of that dataset's subject column type), never by the id as given."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pyarrow as pa
import pytest

from lethe import cli
from lethe.commands import index as index_command
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.index.arrow_entries import ObjectRef, entry_batch
from lethe_shared.index.subject_index import DynamoSubjectIndex
from tests.integration.test_datasets_reindex_cli import MotoTarget

KEY = b"lookup-test-key-0123456789abcdefghij"
ORDERS = parse_dataset(
    {"dataset_id": "orders", "format": "parquet", "subject_columns": ["customer_id"],
     "schema": [{"name": "customer_id", "type": "bigint"}, {"name": "total", "type": "double"}]}
)  # fmt: skip
REVIEWS = parse_dataset(
    {"dataset_id": "reviews", "format": "parquet", "subject_columns": ["user_id"],
     "schema": [{"name": "user_id", "type": "string"}]}
)  # fmt: skip


def _indexed(index: DynamoSubjectIndex, dataset: Any, url: str, column: str, values: list[Any]):
    """The entries ingestion would write for a lake file holding `values` (computed from the
    rows, as the index writers do)."""
    ref = ObjectRef(url, Zone.LAKE, "parquet", "v1", "e1")
    index.replace_object(url, entry_batch(pa.table({column: values}), dataset, ref, key=KEY))


@pytest.fixture
def lookup(
    lethe_tables: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=KEY.decode()
    )["ARN"]
    target = MotoTarget({
        "DatasetsTableName": lethe_tables["DatasetsTable"].name,
        "SubjectIndexTableName": lethe_tables["SubjectIndexTable"].name,
        "SubjectHashKeySecretArn": secret,
    })  # fmt: skip
    monkeypatch.setattr(index_command, "resolve", lambda args: target)
    monkeypatch.setattr("lethe.commands.datasets.resolve", lambda args: target)
    registry = DynamoDatasetRegistry(lethe_tables["DatasetsTable"])
    registry.register(ORDERS)
    registry.register(REVIEWS)
    index = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    _indexed(index, ORDERS, "s3://lake/orders/a.parquet", "customer_id", [1001, 1001, 7])
    _indexed(index, REVIEWS, "s3://lake/reviews/zero.parquet", "user_id", ["01001"])
    _indexed(index, REVIEWS, "s3://lake/reviews/plain.parquet", "user_id", ["1001", "1001"])

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["index", "lookup", *argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _found(out: str) -> set[tuple[str, str, int]]:
    return {(r["dataset"], r["key"], r["rows"]) for r in json.loads(out)}


def test_an_id_is_looked_up_as_a_value_of_each_dataset_s_subject_column_type(lookup: Any) -> None:
    # "01001" is the integer 1001 in orders, and the string "01001" in reviews: never the
    # string subject "1001", another person
    code, out, err = lookup("--subject", "01001", "--json")

    assert code == 0, err
    assert _found(out) == {
        ("orders", "orders/a.parquet", 2),
        ("reviews", "reviews/zero.parquet", 1),
    }

    code, out, _ = lookup("--subject", "1001", "--json")
    assert _found(out) == {
        ("orders", "orders/a.parquet", 2),
        ("reviews", "reviews/plain.parquet", 2),
    }


def test_a_scoped_lookup_and_an_id_no_column_can_hold(lookup: Any) -> None:
    code, out, _ = lookup("--subject", "01001", "--dataset", "orders", "--json")
    assert (code, _found(out)) == (0, {("orders", "orders/a.parquet", 2)})

    # "xyz" is no integer: nothing in orders; the text output says so without the id
    code, out, err = lookup("--subject", "xyz", "--dataset", "orders")
    assert code == 0, err
    assert "none: no dataset's subject column can hold it" in out
    assert "no index entries" in out
    assert "xyz" not in out + err


def test_a_blank_id_is_refused_without_a_lookup(lookup: Any) -> None:
    code, out, err = lookup("--subject", "   ", "--json")

    assert code != 0
    assert "--subject is empty or whitespace only" in err
    assert out == ""


# ------------------------------------------------- one --subject-key syntax (issue 23)

VISITS = parse_dataset(
    {"dataset_id": "visits", "format": "parquet", "subject_columns": ["tenant", "user_id"],
     "schema": [{"name": "tenant", "type": "string"}, {"name": "user_id", "type": "bigint"}]}
)  # fmt: skip
TENANT = "acme-SECRET-tenant"


@pytest.fixture
def composite(lookup: Any, lethe_tables: dict[str, Any]) -> Any:
    DynamoDatasetRegistry(lethe_tables["DatasetsTable"]).register(VISITS)
    url = "s3://lake/visits/v.parquet"
    ref = ObjectRef(url, Zone.LAKE, "parquet", "v1", "e1")
    rows = pa.table({"tenant": [TENANT, TENANT, "other"], "user_id": [42, 42, 42]})
    DynamoSubjectIndex(lethe_tables["SubjectIndexTable"]).replace_object(
        url, entry_batch(rows, VISITS, ref, key=KEY)
    )
    return lookup


def test_a_composite_key_is_one_flag_as_in_erasure_request(composite: Any) -> None:
    # the request form, one whole key per flag; "042" is the bigint 42, as a request hashes it
    code, out, err = composite("--subject-key", f"tenant={TENANT},user_id=042", "--json")
    assert code == 0, err
    assert _found(out) == {("visits", "visits/v.parquet", 2)}

    # scoped to the dataset, and two keys (two subjects) in one lookup
    code, out, err = composite(
        "--subject-key", f"tenant={TENANT},user_id=42", "--subject-key", "tenant=other,user_id=42",
        "--dataset", "visits",
    )  # fmt: skip
    assert code == 0, err
    assert "#1" in out
    assert "#2" in out
    assert out.count("visits/v.parquet") == 2
    assert TENANT not in out + err


def test_one_column_per_flag_is_refused_never_hashed(composite: Any) -> None:
    # the form `index lookup` took before issue 23: exit 2, and a message showing the one form
    code, out, err = composite(
        "--subject-key", f"tenant={TENANT}", "--subject-key", "user_id=42", "--dataset", "visits"
    )
    assert code == 2
    assert out == ""
    assert "--subject-key is one whole key per flag" in err
    assert "--subject-key tenant=...,user_id=..." in err
    assert TENANT not in err


def test_a_partial_key_is_a_usage_error_naming_columns_only(composite: Any) -> None:
    code, out, err = composite("--subject-key", f"tenant={TENANT}", "--json")
    assert code == 2
    assert "--subject-key: no registered dataset has exactly the subject columns tenant" in err
    assert TENANT not in out + err

    code, _, err = composite("--subject-key", f"tenant={TENANT}", "--dataset", "visits")
    assert code == 2
    assert "subject_keys lacks user_id" in err

    with pytest.raises(SystemExit) as refused:  # not COLUMN=VALUE at all: argparse's exit 2
        composite("--subject-key", "no-equals-sign")
    assert refused.value.code == 2


def test_every_subject_is_looked_up_in_one_call(
    lookup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, item 4: one `lookup_many` for every hash of every subject, not a `lookup` each;
    the same rows as before."""
    calls: list[list[str]] = []
    many = DynamoSubjectIndex.lookup_many

    def counted(self: DynamoSubjectIndex, hashes: Any) -> Any:
        wanted = list(hashes)
        calls.append(wanted)
        return many(self, wanted)

    def refused(self: DynamoSubjectIndex, subject_hash: str) -> Any:
        raise AssertionError("looked up one hash at a time")

    monkeypatch.setattr(DynamoSubjectIndex, "lookup_many", counted)
    monkeypatch.setattr(DynamoSubjectIndex, "lookup", refused)
    code, out, err = lookup("--subject", "01001", "--subject", "1001", "--json")

    assert code == 0, err
    assert len(calls) == 1
    assert len(calls[0]) == 3  # "01001": 1001 in orders, "01001" in reviews; "1001": 1001
    assert _found(out) == {
        ("orders", "orders/a.parquet", 2),
        ("reviews", "reviews/zero.parquet", 1),
        ("reviews", "reviews/plain.parquet", 2),
    }
