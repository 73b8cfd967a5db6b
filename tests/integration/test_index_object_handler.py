"""IndexObjectFunction against moto: a lake object from elsewhere gets exactly its entries."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.conftest import FakeLambdaContext, load_function_module
from tests.integration.conftest import LAKE

pytestmark = pytest.mark.lambda_runtime

SECRET = "k" * 64
KEY = "reviews/review_date=2026-11-22/part-external-0001.parquet"
URL = f"s3://{LAKE}/{KEY}"
REVIEWS = {
    "dataset_id": "reviews",
    "format": "csv",
    "subject_columns": ["user_id"],
    "partition_by": ["review_date"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "review_date", "type": "date"},
        {"name": "stars", "type": "int"},
    ],
}


@pytest.fixture
def app(
    lethe_tables: dict[str, Any],
    lethe_buckets: Callable[..., None],
    handler_env: Callable[[str], None],
) -> Any:
    handler_env("IndexObjectFunction")
    lethe_buckets()
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=SECRET
    )
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(REVIEWS)}
    )
    return load_function_module("index_object")


def _put_parquet(metadata: dict[str, str] | None = None) -> str:
    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": ["u1", "u2", "u1", None], "stars": [5, 4, 3, 2]}), sink)
    put = boto3.client("s3").put_object(
        Bucket=LAKE, Key=KEY, Body=sink.getvalue(), Metadata=metadata or {}
    )
    return str(put["VersionId"])


def _event(load_event: Callable[[str], dict[str, Any]], version: str) -> dict[str, Any]:
    return {**load_event("index_object_request.json"), "version_id": version}


def test_indexes_a_parquet_object_from_elsewhere(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    version = _put_parquet()

    result = app.handler(_event(load_event, version), lambda_context)

    assert result == {"object_url": URL, "action": "indexed", "entries": 2, "rows": 3}
    items = lethe_tables["SubjectIndexTable"].scan()["Items"]
    key = SECRET.encode()
    assert sorted(
        (i["subject_hash"], int(i["rows"]), [int(h) for h in i["row_hints"]]) for i in items
    ) == sorted(
        [
            (hash_of_id(key, "u1"), 2, [0, 2]),
            (hash_of_id(key, "u2"), 1, [1]),
        ]
    )
    assert {(i["zone"], i["format"], i["version_id"], i["dataset_id"]) for i in items} == {
        ("lake", "parquet", version, "reviews")
    }
    assert "u1" not in json.dumps(items, default=str)


def test_objects_written_by_ingestion_are_skipped(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    version = _put_parquet({"lethe-producer": "ingest"})
    ledger = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    writes = ledger.writer(Writer.INGEST, "exec-1")
    writes.written(LAKE, KEY, writes.intend(LAKE, KEY, 1), version)  # the ingest job's record

    result = app.handler(_event(load_event, version), lambda_context)

    assert result == {"object_url": URL, "action": "skipped", "entries": 0}
    assert lethe_tables["SubjectIndexTable"].scan()["Items"] == []


def test_a_copy_claiming_to_be_ingestions_is_indexed(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    version = _put_parquet({"lethe-producer": "ingest"})  # no ledger record: not Lethe's

    result = app.handler(_event(load_event, version), lambda_context)

    assert result == {"object_url": URL, "action": "indexed", "entries": 2, "rows": 3}


def test_a_gone_object_has_its_entries_removed(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_tables["SubjectIndexTable"].put_item(
        Item={"subject_hash": "b" * 64, "object_url": URL, "dataset_id": "reviews", "rows": 1}
    )

    result = app.handler(_event(load_event, "null"), lambda_context)

    assert result == {"object_url": URL, "action": "removed", "entries": 0}
    assert lethe_tables["SubjectIndexTable"].scan()["Items"] == []
