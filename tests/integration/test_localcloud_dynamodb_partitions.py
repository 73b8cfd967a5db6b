"""The local cloud's partitioned DynamoDB queries answer exactly what moto's own Query does.

A seeded random sequence of writes (PutItem, UpdateItem setting and removing index key
attributes, UpdateItem creating items, DeleteItem, BatchWriteItem, TransactWriteItems that
commit or roll back, PartiQL INSERT/UPDATE/DELETE, tables deleted and created again) runs
against Lethe's tables as template.yaml declares them. After every write the partition maps
must equal maps built from scratch, and every few writes a batch of queries (base table and
each global secondary index, Limit, ExclusiveStartKey pages, ScanIndexForward False, range
conditions, filters) must page through the same Items, Count, ScannedCount and
LastEvaluatedKey with the patch as with moto's unpatched Table.query.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.table import Table

from lethe.localcloud import dynamodb_partitions
from lethe.localcloud.cloud import configure_moto
from tests.integration.conftest import REGION, create_table_from_template

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
TABLES = {
    "ObjectCatalogTable": "catalog",
    "SubjectIndexTable": "index",
    "ErasureRequestsTable": "requests",
}
URLS = [f"s3://raw/d{d}/o{o}.jsonl" for d in range(2) for o in range(3)]
VERSIONS = [f"v{i}" for i in range(5)]
SUBJECTS = [f"h{i:02x}" for i in range(4)]
DATASETS = ["ds-a", "ds-b", "ds-c"]
STATUSES = ["PENDING", "RUNNING", "COMPLETED"]
REQUESTS = [f"r{i}" for i in range(8)]
WRITES = 400
QUERY_EVERY = 7


@pytest.fixture
def patched(aws: None) -> Iterator[None]:
    undo = configure_moto()
    try:
        yield
    finally:
        undo()


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _key(table: str, rng: random.Random) -> dict[str, Any]:
    if table == "catalog":
        return {"object_url": _s(rng.choice(URLS)), "version_id": _s(rng.choice(VERSIONS))}
    if table == "index":
        return {"subject_hash": _s(rng.choice(SUBJECTS)), "object_url": _s(rng.choice(URLS))}
    return {"request_id": _s(rng.choice(REQUESTS))}


def _item(table: str, rng: random.Random) -> dict[str, Any]:
    item = _key(table, rng)
    if rng.random() < 0.85:  # sometimes without the index key attribute: not in the index
        item["dataset_id" if table != "requests" else "status"] = _s(
            rng.choice(DATASETS if table != "requests" else STATUSES)
        )
    if table == "requests" and rng.random() < 0.85:
        item["created_at"] = _s(f"2026-01-0{rng.randint(1, 9)}")
    item["rows"] = {"N": str(rng.randint(0, 50))}
    if rng.random() < 0.3:
        item["deleted"] = {"BOOL": rng.random() < 0.5}
    return item


def _update(table: str, rng: random.Random) -> dict[str, Any]:
    """An UpdateItem that sets or removes index key attributes (in place, or on a new item)."""
    names = {"#r": "rows"}
    values: dict[str, Any] = {":n": {"N": str(rng.randint(0, 50))}}
    sets = ["#r = :n"]
    removes = []
    gsi_attrs = ["status", "created_at"] if table == "requests" else ["dataset_id"]
    for position, attr in enumerate(gsi_attrs):
        names[f"#g{position}"] = attr
        roll = rng.random()
        if roll < 0.5:
            pool = STATUSES if attr == "status" else DATASETS
            value = rng.choice(pool) if attr != "created_at" else f"2026-01-0{rng.randint(1, 9)}"
            values[f":g{position}"] = _s(value)
            sets.append(f"#g{position} = :g{position}")
        elif roll < 0.7:
            removes.append(f"#g{position}")
    expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
    request: dict[str, Any] = {
        "TableName": table,
        "Key": _key(table, rng),
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    if rng.random() < 0.2:
        request["ConditionExpression"] = "attribute_exists(#r)"
    return request


def _partiql(table: str, rng: random.Random) -> str:
    """A PartiQL statement with literal values (moto's PartiQL parser wants literals)."""
    key = _key(table, rng)
    where = " AND ".join(f"{name} = '{value['S']}'" for name, value in key.items())
    roll = rng.random()
    attr = "status" if table == "requests" else "dataset_id"
    pool = STATUSES if table == "requests" else DATASETS
    if roll < 0.4:
        item = _item(table, rng)
        fields = ", ".join(
            f"'{name}': '{value['S']}'" if "S" in value else f"'{name}': {value['N']}"
            for name, value in item.items()
            if "S" in value or "N" in value
        )
        return f'INSERT INTO "{table}" VALUE {{{fields}}}'
    if roll < 0.8:
        return f"UPDATE \"{table}\" SET {attr} = '{rng.choice(pool)}' WHERE {where}"
    return f'DELETE FROM "{table}" WHERE {where}'


EXPECTED_ERRORS = {
    "ConditionalCheckFailedException",
    "TransactionCanceledException",
    "DuplicateItemException",
    "ValidationException",
}


def _batch(client: Any, table: str, rng: random.Random) -> None:
    batch: dict[str, Any] = {}
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.7:
            item = _item(table, rng)
            key = {name: item[name] for name in _key(table, random.Random(0))}
            request: dict[str, Any] = {"PutRequest": {"Item": item}}
        else:
            key = _key(table, rng)
            request = {"DeleteRequest": {"Key": key}}
        batch[str(sorted(key.items()))] = request
    client.batch_write_item(RequestItems={table: list(batch.values())})


def _transact(client: Any, rng: random.Random) -> None:
    """Puts, updates, deletes and condition checks; a failed condition rolls all back."""
    operations = []
    seen = set()
    for _ in range(rng.randint(1, 4)):
        table = rng.choice(list(TABLES.values()))
        kind = rng.choice(["Put", "Update", "Delete", "ConditionCheck"])
        if kind == "Put":
            body: dict[str, Any] = {"TableName": table, "Item": _item(table, rng)}
            key = {k: body["Item"][k] for k in _key(table, random.Random(0))}
        elif kind == "Update":
            body = _update(table, rng)
            body.pop("ConditionExpression", None)
            key = body["Key"]
        else:
            key = _key(table, rng)
            body = {"TableName": table, "Key": key}
        if kind == "ConditionCheck" or rng.random() < 0.15:
            body["ConditionExpression"] = "attribute_exists(#r)"
            body.setdefault("ExpressionAttributeNames", {})["#r"] = "rows"
        marker = (table, str(sorted(key.items())))
        if marker not in seen:
            seen.add(marker)
            operations.append({kind: body})
    client.transact_write_items(TransactItems=operations)


def _write(client: Any, rng: random.Random) -> None:
    table = rng.choice(list(TABLES.values()))
    roll = rng.random()
    try:
        if roll < 0.3:
            client.put_item(TableName=table, Item=_item(table, rng))
        elif roll < 0.55:
            client.update_item(**_update(table, rng))
        elif roll < 0.65:
            client.delete_item(TableName=table, Key=_key(table, rng))
        elif roll < 0.75:
            _batch(client, table, rng)
        elif roll < 0.87:
            _transact(client, rng)
        elif roll < 0.97:
            client.execute_statement(Statement=_partiql(table, rng))
        else:
            client.delete_table(TableName=table)
            logical = next(k for k, v in TABLES.items() if v == table)
            create_table_from_template(logical, table)
    except ClientError as error:
        if error.response["Error"]["Code"] not in EXPECTED_ERRORS:
            raise


def _queries(rng: random.Random) -> Iterator[dict[str, Any]]:
    limit = rng.choice([None, 1, 2, 3, 5])
    forward = rng.random() < 0.5
    shapes: list[dict[str, Any]] = [
        {
            "TableName": "catalog",
            "KeyConditionExpression": "object_url = :h",
            "ExpressionAttributeValues": {":h": _s(rng.choice(URLS))},
        },
        {
            "TableName": "catalog",
            "KeyConditionExpression": "object_url = :h AND version_id >= :r",
            "ExpressionAttributeValues": {
                ":h": _s(rng.choice(URLS)),
                ":r": _s(rng.choice(VERSIONS)),
            },
        },
        {
            "TableName": "catalog",
            "IndexName": "by_dataset",
            "KeyConditionExpression": "dataset_id = :h",
            "ExpressionAttributeValues": {":h": _s(rng.choice(DATASETS))},
        },
        {
            "TableName": "index",
            "KeyConditionExpression": "subject_hash = :h",
            "ExpressionAttributeValues": {":h": _s(rng.choice(SUBJECTS))},
        },
        {
            "TableName": "index",
            "IndexName": "by_object",
            "KeyConditionExpression": "object_url = :h",
            "ExpressionAttributeValues": {":h": _s(rng.choice(URLS))},
        },
        {
            "TableName": "index",
            "IndexName": "by_object",
            "KeyConditionExpression": "object_url = :h AND subject_hash = :r",
            "ExpressionAttributeValues": {
                ":h": _s(rng.choice(URLS)),
                ":r": _s(rng.choice(SUBJECTS)),
            },
        },
        {
            "TableName": "index",
            "IndexName": "by_dataset",
            "KeyConditionExpression": "dataset_id = :h AND begins_with(object_url, :r)",
            "ExpressionAttributeValues": {":h": _s(rng.choice(DATASETS)), ":r": _s("s3://raw/d1")},
        },
        {
            "TableName": "index",
            "IndexName": "by_dataset",
            "KeyConditionExpression": "dataset_id = :h",
            "FilterExpression": "#d = :t",
            "ExpressionAttributeNames": {"#d": "deleted"},
            "ExpressionAttributeValues": {":h": _s(rng.choice(DATASETS)), ":t": {"BOOL": True}},
        },
        {
            "TableName": "requests",
            "KeyConditionExpression": "request_id = :h",
            "ExpressionAttributeValues": {":h": _s(rng.choice(REQUESTS))},
        },
        {
            "TableName": "requests",
            "IndexName": "by_status",
            "KeyConditionExpression": "#s = :h",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":h": _s(rng.choice(STATUSES))},
        },
        {
            "TableName": "requests",
            "IndexName": "by_status",
            "KeyConditionExpression": "#s = :h AND created_at BETWEEN :a AND :b",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {
                ":h": _s(rng.choice(STATUSES)),
                ":a": _s("2026-01-03"),
                ":b": _s("2026-01-07"),
            },
        },
    ]
    for shape in shapes:
        shape["ScanIndexForward"] = forward
        if limit is not None:
            shape["Limit"] = limit
        yield shape


def _pages(client: Any, request: dict[str, Any]) -> list[dict[str, Any]]:
    pages = []
    start = None
    while True:
        page = client.query(**request, **({"ExclusiveStartKey": start} if start else {}))
        page.pop("ResponseMetadata", None)
        pages.append(page)
        start = page.get("LastEvaluatedKey")
        if not start or len(pages) > 50:
            return pages


def _unpatched(run: Callable[[], Any]) -> Any:
    patched = Table.query
    assert dynamodb_partitions.moto_query is not None
    Table.query = dynamodb_partitions.moto_query  # type: ignore[method-assign]
    try:
        return run()
    finally:
        Table.query = patched  # type: ignore[method-assign]


def _all_consistent() -> bool:
    tables = dynamodb_backends[ACCOUNT][REGION].tables.values()
    return all(dynamodb_partitions.partitions_consistent(t) for t in tables)


@pytest.mark.parametrize("seed", [1, 2])
def test_partitioned_queries_equal_moto_queries(patched: None, seed: int) -> None:
    for logical, name in TABLES.items():
        create_table_from_template(logical, name)
    client = boto3.client("dynamodb", region_name=REGION)
    rng = random.Random(seed)
    compared = nonempty = 0

    for step in range(WRITES):
        _write(client, rng)
        assert _all_consistent(), f"partition map out of date after write {step}"
        if step % QUERY_EVERY:
            continue
        for request in _queries(rng):
            ours = _pages(client, request)
            theirs = _unpatched(lambda request=request: _pages(client, request))
            assert ours == theirs, request
            compared += 1
            nonempty += any(page["Items"] for page in ours)

    assert compared > 500
    assert nonempty > compared / 3


def test_a_base_table_query_does_not_add_a_partition(patched: None) -> None:
    create_table_from_template("ObjectCatalogTable", "catalog")
    client = boto3.client("dynamodb", region_name=REGION)

    client.query(
        TableName="catalog",
        KeyConditionExpression="object_url = :h",
        ExpressionAttributeValues={":h": _s("s3://raw/missing")},
    )

    assert dict(dynamodb_backends[ACCOUNT][REGION].tables["catalog"].items) == {}


def test_the_partition_patch_is_reverted() -> None:
    original = Table.query

    configure_moto()()

    assert Table.query is original
    assert dynamodb_partitions.moto_query is None
