"""The local cloud's DynamoDB is atomic per request, as DynamoDB is per item."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from moto.dynamodb.models import DynamoDBBackend

from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.deployment import Endpoints
from tests.integration.conftest import moto_server

ATTRIBUTES = 30


@pytest.fixture
def endpoints() -> Iterator[Endpoints]:
    undo = configure_moto()
    try:
        with moto_server() as started:
            yield started
    finally:
        undo()


def test_a_query_never_sees_a_half_built_item(endpoints: Endpoints) -> None:
    dynamodb = endpoints.client("dynamodb")
    dynamodb.create_table(
        TableName="t",
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
    names = {f"#a{i}": f"attr{i}" for i in range(ATTRIBUTES)}
    values = {f":v{i}": {"S": str(i)} for i in range(ATTRIBUTES)}
    expression = "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(ATTRIBUTES))
    done = threading.Event()
    partial: list[int] = []

    def write() -> None:
        client = endpoints.client("dynamodb")
        for n in range(150):
            client.update_item(
                TableName="t",
                Key={"pk": {"S": "p"}, "sk": {"S": f"{n:04d}"}},
                UpdateExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reader = endpoints.client("dynamodb")
    while not done.is_set():
        items = reader.query(
            TableName="t",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
        )["Items"]
        partial.extend(len(i) for i in items if len(i) != ATTRIBUTES + 2)
    writer.join(timeout=60)

    assert partial == []


def test_the_patch_is_reverted() -> None:
    original = DynamoDBBackend.update_item

    configure_moto()()

    assert DynamoDBBackend.update_item is original
