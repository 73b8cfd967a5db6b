"""The local cloud's TransactWriteItems copies no table: it keeps a journal of the items it
touches (lethe.localcloud.dynamodb_transactions), and still rolls back as moto does: every put,
update and delete of a failed transaction undone, on tables with and without a range key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models.table import Table

from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.deployment import Endpoints
from tests.integration.conftest import moto_server

pytestmark = pytest.mark.integration
TABLE = "lt-transactions"


@pytest.fixture
def endpoints() -> Iterator[Endpoints]:
    undo = configure_moto()
    try:
        with moto_server() as started:
            yield started
    finally:
        undo()


@pytest.fixture
def dynamodb(endpoints: Endpoints) -> Iterator[Any]:
    client = endpoints.client("dynamodb")
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for n in range(200):
        client.put_item(TableName=TABLE, Item={"pk": {"S": f"old-{n}"}, "v": {"N": "1"}})
    yield client
    client.delete_table(TableName=TABLE)  # the server's backend outlives the test


def _puts(count: int) -> list[dict[str, Any]]:
    return [
        {"Put": {"TableName": TABLE, "Item": {"pk": {"S": f"new-{n}"}, "v": {"N": "2"}}}}
        for n in range(count)
    ]


def test_a_transaction_of_25_items_copies_no_table(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    patched = Table.__deepcopy__  # type: ignore[attr-defined]

    def counting(self: Any, memo: dict[int, Any]) -> Any:
        clone = patched(self, memo)
        asked.append(int(clone is self))
        return clone

    monkeypatch.setattr(Table, "__deepcopy__", counting)

    dynamodb.transact_write_items(TransactItems=_puts(25))

    assert asked == [1] * 25  # moto asked 25 times; each time the table itself, no copy
    assert dynamodb.scan(TableName=TABLE, Select="COUNT")["Count"] == 225


def test_a_failed_transaction_still_rolls_back_every_write(dynamodb: Any) -> None:
    failing = [
        *_puts(10),
        {
            "ConditionCheck": {
                "TableName": TABLE, "Key": {"pk": {"S": "old-0"}},
                "ConditionExpression": "v = :two",
                "ExpressionAttributeValues": {":two": {"N": "2"}},
            }
        },
    ]  # fmt: skip

    with pytest.raises(ClientError, match="TransactionCanceledException"):
        dynamodb.transact_write_items(TransactItems=failing)

    assert dynamodb.scan(TableName=TABLE, Select="COUNT")["Count"] == 200
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "new-0"}})


def test_outside_a_transaction_a_table_deep_copies_as_before(dynamodb: Any) -> None:
    import copy  # noqa: PLC0415

    from moto.dynamodb.models import dynamodb_backends  # noqa: PLC0415

    backend = dynamodb_backends["123456789012"]["us-east-1"]
    table = backend.tables[TABLE]
    first, second = copy.deepcopy(table), copy.deepcopy(table)
    assert first is not second
    assert first.items is not table.items
    assert sorted(first.items) == sorted(table.items)


def test_a_failed_transaction_undoes_updates_and_deletes_and_keeps_other_tables(
    endpoints: Endpoints, dynamodb: Any
) -> None:
    client = endpoints.client("dynamodb")
    ranged = "lt-transactions-ranged"
    client.create_table(
        TableName=ranged,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        for sk in ("a", "b"):
            client.put_item(
                TableName=ranged, Item={"pk": {"S": "p"}, "sk": {"S": sk}, "v": {"N": "1"}}
            )
        actions = [
            {"Update": {
                "TableName": ranged, "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                "UpdateExpression": "SET v = :nine, w = :nine",
                "ExpressionAttributeValues": {":nine": {"N": "9"}},
            }},
            {"Delete": {"TableName": ranged, "Key": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
            {"Put": {"TableName": ranged, "Item": {"pk": {"S": "p"}, "sk": {"S": "c"}}}},
            {"Update": {
                "TableName": TABLE, "Key": {"pk": {"S": "old-1"}},
                "UpdateExpression": "SET v = :nine",
                "ExpressionAttributeValues": {":nine": {"N": "9"}},
            }},
            {"ConditionCheck": {
                "TableName": TABLE, "Key": {"pk": {"S": "old-0"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }},
        ]  # fmt: skip

        with pytest.raises(ClientError, match="TransactionCanceledException"):
            client.transact_write_items(TransactItems=actions)

        items = client.query(
            TableName=ranged,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
        )["Items"]
        assert sorted((i["sk"]["S"], i["v"]["N"], "w" in i) for i in items) == [
            ("a", "1", False),
            ("b", "1", False),
        ]
        old = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "old-1"}})["Item"]
        assert old["v"] == {"N": "1"}

        # and the same transaction without the failing check writes all of it
        client.transact_write_items(TransactItems=actions[:4])
        items = client.query(
            TableName=ranged,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
        )["Items"]
        assert sorted(i["sk"]["S"] for i in items) == ["a", "c"]
    finally:
        client.delete_table(TableName=ranged)
