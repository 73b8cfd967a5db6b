"""The local IAM check's request mapping for the services that need moto's state to name a
resource or a condition value (lethe.localcloud.iam.services): DynamoDB leading keys and
attributes, KMS aliases and ciphertexts, Secrets Manager names, SQS URLs, EventBridge buses."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lethe.localcloud.iam.http_calls import Call
from lethe.localcloud.iam.services import SERVICES

ACCOUNT = "123456789012"
REGION = "us-east-1"


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def _requests(service: str, operation: str, params: dict[str, Any]) -> list[Any]:
    call = Call("ASIA", service, REGION, "POST", "/", {}, {}, operation=operation, params=params)
    result = SERVICES[service](call, ACCOUNT)
    assert not isinstance(result, str), result
    return result


def test_dynamodb_items_queries_and_transactions(aws: None) -> None:
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName="catalog",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "obj", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {"IndexName": "by_object", "KeySchema": [{"AttributeName": "obj", "KeyType": "HASH"}],
             "Projection": {"ProjectionType": "ALL"}}
        ],
        BillingMode="PAY_PER_REQUEST",
    )  # fmt: skip
    table = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/catalog"
    (get,) = _requests("dynamodb", "GetItem", {
        "TableName": "catalog", "Key": {"pk": {"S": "ledger#1"}, "sk": {"S": "v"}},
        "ProjectionExpression": "#s, outcome", "ExpressionAttributeNames": {"#s": "status"},
    })  # fmt: skip
    assert (get.action, get.resource) == ("dynamodb:GetItem", table)
    assert get.context["dynamodb:leadingkeys"] == ["ledger#1"]
    assert get.context["dynamodb:attributes"] == ["outcome", "pk", "sk", "status"]
    (whole,) = _requests(
        "dynamodb", "GetItem", {"TableName": "catalog", "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}}
    )
    assert "*" in whole.context["dynamodb:attributes"]  # no projection: every attribute
    (query,) = _requests("dynamodb", "Query", {
        "TableName": "catalog", "IndexName": "by_object",
        "KeyConditionExpression": "#o = :o", "ExpressionAttributeNames": {"#o": "obj"},
        "ExpressionAttributeValues": {":o": {"S": "s3://b/k"}},
    })  # fmt: skip
    assert query.resource == f"{table}/index/by_object"
    assert query.context["dynamodb:leadingkeys"] == ["s3://b/k"]
    assert query.context["dynamodb:select"] == ["ALL_ATTRIBUTES"]
    transaction = _requests("dynamodb", "TransactWriteItems", {"TransactItems": [
        {"Put": {"TableName": "catalog", "Item": {"pk": {"S": "x"}, "sk": {"S": "1"}}}},
        {"ConditionCheck": {"TableName": "catalog", "Key": {"pk": {"S": "y"}, "sk": {"S": "1"}}}},
    ]})  # fmt: skip
    assert [r.action for r in transaction] == ["dynamodb:PutItem", "dynamodb:ConditionCheckItem"]
    batch = _requests("dynamodb", "BatchWriteItem", {"RequestItems": {"catalog": [
        {"PutRequest": {"Item": {"pk": {"S": "ledger#2"}, "sk": {"S": "1"}}}},
        {"DeleteRequest": {"Key": {"pk": {"S": "object#3"}, "sk": {"S": "1"}}}},
    ]}})  # fmt: skip
    assert [r.context["dynamodb:leadingkeys"] for r in batch] == [["ledger#2"], ["object#3"]]
    unmapped = Call("ASIA", "dynamodb", REGION, "POST", "/", {}, {}, operation="RestoreTable")
    assert isinstance(SERVICES["dynamodb"](unmapped, ACCOUNT), str)  # denied as not mapped


def test_kms_secrets_sqs_and_events_name_the_resource_aws_authorises(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    key = kms.create_key()["KeyMetadata"]
    kms.create_alias(AliasName="alias/tokens", TargetKeyId=key["KeyId"])
    blob = kms.encrypt(
        KeyId="alias/tokens", Plaintext=b"x", EncryptionContext={"lethe:purpose": "t"}
    )
    (by_alias,) = _requests(
        "kms", "Encrypt", {"KeyId": "alias/tokens", "EncryptionContext": {"lethe:purpose": "t"}}
    )
    assert by_alias.resource == key["Arn"]
    assert by_alias.context["kms:requestalias"] == ["alias/tokens"]
    assert by_alias.context["kms:encryptioncontext:lethe:purpose"] == ["t"]
    (decrypt,) = _requests("kms", "Decrypt", {
        "CiphertextBlob": base64.b64encode(blob["CiphertextBlob"]).decode(),
    })  # fmt: skip
    assert decrypt.resource == key["Arn"]
    assert "kms:encryptioncontext:lethe:purpose" in decrypt.modelled  # absent: the condition fails
    secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="hash-key", SecretString="s"
    )
    (get_secret,) = _requests("secretsmanager", "GetSecretValue", {"SecretId": "hash-key"})
    assert get_secret.resource == secret["ARN"]
    url = f"http://127.0.0.1:5000/{ACCOUNT}/object-events"
    (delete,) = _requests("sqs", "DeleteMessageBatch", {"QueueUrl": url})
    assert (delete.action, delete.resource) == (
        "sqs:DeleteMessage",
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:object-events",
    )
    (put,) = _requests(
        "events", "PutEvents", {"Entries": [{"Source": "lethe.ingestion", "DetailType": "X"}]}
    )
    assert put.resource == f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"
    assert put.context["events:source"] == ["lethe.ingestion"]


def test_a_task_token_names_the_state_machine_whose_execution_waits_on_it() -> None:
    """SendTaskSuccess/SendTaskFailure are authorised on the state machine whose running
    execution waits on the token. The local cloud runs executions with moto's interpreter,
    whose executions live in moto's parser backend: the token is found there (before, it was
    looked up in the other backend only, found nowhere, and the call went unchecked)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sqs = boto3.client("sqs", region_name=REGION)
        queue = sqs.create_queue(QueueName="tokens")["QueueUrl"]
        definition = {
            "StartAt": "Wait For Approval",
            "States": {
                "Wait For Approval": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": queue, "MessageBody": {"token.$": "$$.Task.Token"}},
                    "End": True,
                }
            },
        }
        sfn = boto3.client("stepfunctions", region_name=REGION)
        machine = sfn.create_state_machine(
            name="waits",
            definition=json.dumps(definition),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/any",
        )["stateMachineArn"]
        sfn.start_execution(stateMachineArn=machine, name="one", input="{}")
        token = ""
        deadline = time.monotonic() + 30
        while not token and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                token = json.loads(message["Body"])["token"]

        assert token, "the execution did not reach its task"
        (request,) = _requests("states", "SendTaskSuccess", {"taskToken": token})
        assert (request.action, request.resource) == ("states:SendTaskSuccess", machine)
        assert _requests("states", "SendTaskFailure", {"taskToken": "unknown"}) == []
