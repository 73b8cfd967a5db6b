"""The local cloud's CPU savings in moto (`lethe.localcloud.moto_speed`, `cloud._failed_requests`)
change no answer: the same backend for every host, the same SQS message counts, and moto.log
still records every failed request."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import ThreadedMotoServer
from moto.sqs.models import Queue

from lethe.localcloud import moto_speed
from lethe.localcloud.cloud import _failed_requests

pytestmark = pytest.mark.integration

HOSTS = [
    None,
    "moto_api",
    "s3",
    "s3.amazonaws.com",
    "bucket.s3.us-east-1.amazonaws.com",
    "dynamodb.us-east-1.amazonaws.com",
    "sqs.eu-west-1.amazonaws.com",
    "states.us-east-1.amazonaws.com",
    "lambda.us-east-1.amazonaws.com",
    "nothing.example.org",
]


def test_each_host_gets_the_backend_moto_itself_picks_and_the_module_list_is_unchanged() -> None:
    plain = DomainDispatcherApplication(create_backend_app)
    expected = {host: plain.get_backend_for_host(host) for host in HOSTS}
    modules = list(backends.list_of_moto_modules())
    assert "s3" in modules
    assert "dynamodb" in modules

    undo = moto_speed.patch_dispatch()
    try:
        patched = DomainDispatcherApplication(create_backend_app)
        for _ in range(2):  # the second round is answered from the cache
            assert {h: patched.get_backend_for_host(h) for h in HOSTS} == expected
        assert list(backends.list_of_moto_modules()) == modules
        assert patched.__dict__["_lethe_backends"].keys() == set(HOSTS)
    finally:
        undo()
    assert "_lethe_backends" not in DomainDispatcherApplication(create_backend_app).__dict__


@pytest.fixture
def sqs() -> Iterator[object]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield boto3.client(
            "sqs",
            endpoint_url=f"http://{host}:{port}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
    finally:
        server.stop()


def _counts(client: object, url: str) -> tuple[str, str, str]:
    attributes = client.get_queue_attributes(  # type: ignore[attr-defined]
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return (
        attributes["ApproximateNumberOfMessages"],
        attributes["ApproximateNumberOfMessagesNotVisible"],
        attributes["ApproximateNumberOfMessagesDelayed"],
    )


def test_queue_counts_are_moto_s_own_with_messages_visible_in_flight_and_delayed(
    sqs: object,
) -> None:
    url = sqs.create_queue(QueueName="counts")["QueueUrl"]  # type: ignore[attr-defined]
    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")  # type: ignore[attr-defined]
    for i in range(2):
        sqs.send_message(QueueUrl=url, MessageBody=f"d{i}", DelaySeconds=600)  # type: ignore[attr-defined]
    received = sqs.receive_message(  # type: ignore[attr-defined]
        QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=600
    )["Messages"]
    assert len(received) == 2
    unpatched = _counts(sqs, url)
    assert unpatched == ("4", "2", "2")

    undo = moto_speed.patch_sqs_counts()
    try:
        assert _counts(sqs, url) == unpatched
        sqs.send_message(QueueUrl=url, MessageBody="m6")  # type: ignore[attr-defined]
        assert _counts(sqs, url) == ("5", "2", "2")
        # a message whose visibility timeout ran out counts as visible again
        sqs.change_message_visibility(  # type: ignore[attr-defined]
            QueueUrl=url, ReceiptHandle=received[0]["ReceiptHandle"], VisibilityTimeout=0
        )
        time.sleep(0.01)
        assert _counts(sqs, url) == ("6", "1", "2")
    finally:
        undo()
    assert isinstance(Queue.__dict__["messages"], property)
    assert _counts(sqs, url) == ("6", "1", "2")


def _request_record(code: str) -> logging.LogRecord:
    return logging.LogRecord(
        "werkzeug", logging.INFO, __file__, 1, '"%s" %s %s', ("POST / HTTP/1.1", code, "-"), None
    )


@pytest.mark.parametrize(
    ("code", "kept"),
    [("200", False), ("204", False), ("304", False), ("400", True), ("404", True), ("500", True)],
)
def test_moto_log_keeps_failed_requests_only(code: str, kept: bool) -> None:
    assert _failed_requests(_request_record(code)) is kept


def test_moto_log_keeps_the_server_s_other_messages() -> None:
    other = logging.LogRecord(
        "werkzeug", logging.ERROR, __file__, 1, "error on request:\n%s", ("Traceback",), None
    )
    plain = logging.LogRecord(
        "werkzeug", logging.INFO, __file__, 1, "serving on 127.0.0.1", None, None
    )
    assert _failed_requests(other)
    assert _failed_requests(plain)


def _attribute(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["S", "N", "B", "SS", "NS", "BS", "NULL", "BOOL"] + (["M", "L"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "S":
        return {"S": rng.choice(["", "a", "ünï", "x" * 40, "0"])}
    if kind == "N":
        return {"N": rng.choice(["0", "-1.5", "12345678901234567890", "3e5"])}
    if kind == "B":
        return {"B": bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))}
    if kind == "SS":
        return {"SS": sorted({f"s{rng.randrange(9)}" for _ in range(3)})}
    if kind == "NS":
        return {"NS": sorted({str(rng.randrange(99)) for _ in range(3)})}
    if kind == "BS":
        return {"BS": sorted({bytes([rng.randrange(256)]) for _ in range(3)})}
    if kind == "NULL":
        return {"NULL": True}
    if kind == "BOOL":
        return {"BOOL": rng.random() < 0.5}
    if kind == "M":
        return {"M": {f"k{i}": _attribute(rng, depth + 1) for i in range(rng.randrange(3))}}
    return {"L": [_attribute(rng, depth + 1) for _ in range(rng.randrange(3))]}


def _dynamodb_bodies(client: Any) -> list[bytes]:
    """Every response body of a fixed sequence of reads (and a write returning values, which
    writes what the item already holds: both rounds read the same table)."""
    bodies: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        bodies.append(http_response.content)

    client.meta.events.register("after-call.dynamodb", keep)
    try:
        for i in range(0, 30, 7):
            client.get_item(TableName="speed", Key={"pk": {"S": "p"}, "sk": {"N": str(i)}})
        client.query(
            TableName="speed",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
        )
        client.query(
            TableName="speed",
            KeyConditionExpression="pk = :p AND sk > :s",
            ExpressionAttributeValues={":p": {"S": "p"}, ":s": {"N": "10"}},
            ProjectionExpression="pk, sk, a1",
            Limit=5,
        )
        client.scan(TableName="speed")
        client.batch_get_item(
            RequestItems={
                "speed": {"Keys": [{"pk": {"S": "p"}, "sk": {"N": str(i)}} for i in range(9)]}
            }
        )
        client.update_item(
            TableName="speed",
            Key={"pk": {"S": "p"}, "sk": {"N": "3"}},
            UpdateExpression="SET touched = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
            ReturnValues="ALL_NEW",
        )
        client.get_item(TableName="speed", Key={"pk": {"S": "nope"}, "sk": {"N": "0"}})
    finally:
        client.meta.events.unregister("after-call.dynamodb", keep)
    return bodies


def test_dynamodb_answers_the_same_bytes_for_every_attribute_type() -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client(
        "dynamodb",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        client.create_table(
            TableName="speed",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        rng = random.Random(24)
        for i in range(30):
            item = {f"a{j}": _attribute(rng) for j in range(rng.randrange(1, 6))}
            client.put_item(TableName="speed", Item={"pk": {"S": "p"}, "sk": {"N": str(i)}, **item})
        client.put_item(
            TableName="speed", Item={"pk": {"S": "p"}, "sk": {"N": "3"}, "touched": {"BOOL": True}}
        )
        unpatched = _dynamodb_bodies(client)
        undo = moto_speed.patch_dynamodb_serializer()
        try:
            patched = _dynamodb_bodies(client)
        finally:
            undo()
    finally:
        server.stop()
    assert len(patched) == len(unpatched) == 11
    assert patched == unpatched
    assert b'"BS"' in b"".join(patched)  # every type was answered (and compared)
    assert b'"M"' in b"".join(patched)
    assert b'"L"' in b"".join(patched)
