"""The local cloud's Distributed Map hooks (lethe.localcloud.sfn_hooks P6/P7) on real executions.

A ThreadedMotoServer on 127.0.0.1 with the hooks installed runs small state machines whose Map
reads an S3 listing (ItemReader `arn:aws:states:::s3:listObjectsV2`, every page) and batches it
(ItemBatcher), in the JSONPath form the index backfill uses and in the JSONata form.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

from lethe.localcloud import sfn_hooks
from lethe.localcloud.deployment import Endpoints

pytestmark = pytest.mark.sfn

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/lethe-sfn"
BUCKET = "lethe-distributed-map"
MANY = 1_005  # more than one ListObjectsV2 page (1,000 keys)
DEADLINE_SECONDS = 120
CHILD = {
    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
    "StartAt": "Batch",
    "States": {"Batch": {"Type": "Pass", "End": True}},  # the batch as the child got it
}


@dataclass
class Cloud:
    endpoints: Endpoints
    uninstall: Any

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoints.endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoints = Endpoints(f"http://127.0.0.1:{port}", REGION, ACCOUNT)
    uninstall = sfn_hooks.install(
        sfn_hooks.HookContext(
            endpoints=endpoints,
            logs_dir=tmp_path_factory.mktemp("distributed-map-logs"),
            repo_root=Path(__file__).resolve().parents[2],
        )
    )
    local = Cloud(endpoints, uninstall)
    try:
        s3 = local.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for n in range(MANY):
            s3.put_object(Bucket=BUCKET, Key=f"many/{n:04d}.txt", Body=b"x" * (n % 5))
        s3.put_object(Bucket=BUCKET, Key="manyother/not-listed.txt", Body=b"y")
        yield local
    finally:
        local.uninstall()
        server.stop()


def _run(cloud: Cloud, name: str, definition: dict[str, Any], payload: Any) -> dict[str, Any]:
    sfn = cloud.client("stepfunctions")
    machine = sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=ROLE)
    arn = sfn.start_execution(
        stateMachineArn=machine["stateMachineArn"], name=name, input=json.dumps(payload)
    )["executionArn"]
    deadline = time.monotonic() + DEADLINE_SECONDS
    while (execution := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"{name} still running"
        time.sleep(0.25)
    runs = sfn.list_map_runs(executionArn=arn)["mapRuns"]
    execution["map_runs"] = [sfn.describe_map_run(mapRunArn=r["mapRunArn"]) for r in runs]
    execution["definition"] = sfn.describe_state_machine(
        stateMachineArn=machine["stateMachineArn"]
    )["definition"]
    return dict(execution)


def _jsonpath_map(batcher: dict[str, Any], *, selector: bool = True) -> dict[str, Any]:
    state: dict[str, Any] = {
        "Type": "Map",
        "ItemReader": {
            "Resource": "arn:aws:states:::s3:listObjectsV2",
            "Parameters": {"Bucket.$": "$.bucket", "Prefix.$": "$.prefix"},
        },
        "ItemBatcher": batcher,
        "MaxConcurrencyPath": "$.concurrency",
        "ToleratedFailureCount": 0,
        "ItemProcessor": CHILD,
        "End": True,
    }
    if selector:
        state["ItemSelector"] = {
            "key.$": "$$.Map.Item.Value.Key",
            "size.$": "$$.Map.Item.Value.Size",
            "index.$": "$$.Map.Item.Index",
        }
    return {"StartAt": "Index", "States": {"Index": state}}


def test_a_listing_of_several_pages_in_batches_jsonpath(cloud: Cloud) -> None:
    definition = _jsonpath_map(
        {
            "MaxItemsPerBatchPath": "$.per_batch",
            "MaxInputBytesPerBatch": 65536,
            "BatchInput": {"dataset.$": "$.prefix", "run.$": "$$.Execution.Name"},
        }
    )
    payload = {"bucket": BUCKET, "prefix": "many/", "per_batch": 250, "concurrency": 3}

    execution = _run(cloud, "batches-jsonpath", definition, payload)

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    batches = json.loads(execution["output"])  # one result per batch, in order
    assert [len(b["Items"]) for b in batches] == [250, 250, 250, 250, 5]
    items = [item for batch in batches for item in batch["Items"]]
    # Every key of both pages once, in listing order; the other prefix is not listed.
    assert [i["key"] for i in items] == [f"many/{n:04d}.txt" for n in range(MANY)]
    assert [i["index"] for i in items] == list(range(MANY))
    assert [i["size"] for i in items] == [n % 5 for n in range(MANY)]
    assert {json.dumps(b["BatchInput"]) for b in batches} == {
        json.dumps({"dataset": "many/", "run": "batches-jsonpath"})
    }
    (map_run,) = execution["map_runs"]
    assert map_run["itemCounts"]["total"] == map_run["itemCounts"]["succeeded"] == MANY
    assert map_run["executionCounts"]["total"] == map_run["executionCounts"]["succeeded"] == 5
    # The state machine keeps its definition: the hooks read ItemBatcher, they do not remove it.
    assert json.loads(execution["definition"]) == definition


def test_listing_items_have_the_item_reader_shape(cloud: Cloud) -> None:
    definition = _jsonpath_map({"MaxItemsPerBatch": 2}, selector=False)
    payload = {"bucket": BUCKET, "prefix": "many/000", "concurrency": 1}

    execution = _run(cloud, "listing-items", definition, payload)

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    batches = json.loads(execution["output"])
    assert [len(b["Items"]) for b in batches] == [2, 2, 2, 2, 2]
    assert set(batches[0]) == {"Items"}  # no BatchInput without one
    first = batches[0]["Items"][0]
    head = cloud.client("s3").head_object(Bucket=BUCKET, Key="many/0000.txt")
    assert first == {
        "Etag": head["ETag"],
        "Key": "many/0000.txt",
        "LastModified": int(head["LastModified"].timestamp()),
        "Size": 0,
        "StorageClass": "STANDARD",
    }


def test_an_empty_listing_runs_no_child(cloud: Cloud) -> None:
    definition = _jsonpath_map({"MaxItemsPerBatch": 10})
    payload = {"bucket": BUCKET, "prefix": "nothing-here/", "concurrency": 1}

    execution = _run(cloud, "empty-listing", definition, payload)

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == []
    (map_run,) = execution["map_runs"]
    assert map_run["itemCounts"]["total"] == map_run["executionCounts"]["total"] == 0


def test_a_listing_of_a_missing_bucket_fails_the_item_reader(cloud: Cloud) -> None:
    definition = _jsonpath_map({"MaxItemsPerBatch": 10})
    payload = {"bucket": "lethe-no-such-bucket", "prefix": "x/", "concurrency": 1}

    execution = _run(cloud, "missing-bucket", definition, payload)

    assert execution["status"] == "FAILED"
    assert execution["error"] == "States.ItemReaderFailed"
    assert "NoSuchBucket" in execution["cause"]


def test_a_batch_limit_that_is_no_positive_integer_fails_the_map(cloud: Cloud) -> None:
    definition = _jsonpath_map({"MaxItemsPerBatchPath": "$.per_batch"})
    payload = {"bucket": BUCKET, "prefix": "many/000", "per_batch": 0, "concurrency": 1}

    execution = _run(cloud, "zero-per-batch", definition, payload)

    assert execution["status"] == "FAILED"
    assert execution["error"] == "States.Runtime"
    assert "MaxItemsPerBatch must be a positive integer" in execution["cause"]


def test_batches_in_a_jsonata_map(cloud: Cloud) -> None:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Index",
        "States": {
            "Index": {
                "Type": "Map",
                "ItemReader": {
                    "Resource": "arn:aws:states:::s3:listObjectsV2",
                    "Arguments": {"Bucket": BUCKET, "Prefix": "{% $states.input.prefix %}"},
                },
                "ItemSelector": {"key": "{% $states.context.Map.Item.Value.Key %}"},
                "ItemBatcher": {
                    "MaxItemsPerBatch": "{% $states.input.per_batch %}",
                    "MaxInputBytesPerBatch": 132,
                    "BatchInput": {"prefix": "{% $states.input.prefix %}", "fixed": [1, 2]},
                },
                "MaxConcurrency": 2,
                "ItemProcessor": {
                    **CHILD,
                    "States": {
                        "Batch": {
                            "Type": "Pass",
                            "Output": {
                                "keys": "{% [$states.input.Items.key] %}",
                                "prefix": "{% $states.input.BatchInput.prefix %}",
                            },
                            "End": True,
                        }
                    },
                },
                "Output": "{% $states.result %}",
                "End": True,
            }
        },
    }

    execution = _run(cloud, "batches-jsonata", definition, {"prefix": "many/000", "per_batch": 4})

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    batches = json.loads(execution["output"])
    # {"Items":[{"key":"many/0000.txt"},...],"BatchInput":{...}}: 3 of them are 132 bytes.
    assert [len(b["keys"]) for b in batches] == [3, 3, 3, 1]
    assert [k for b in batches for k in b["keys"]] == [f"many/000{n}.txt" for n in range(10)]
    assert {b["prefix"] for b in batches} == {"many/000"}


@pytest.mark.parametrize(
    ("batcher", "mode", "message"),
    [
        ({"BatchInput": {}}, "DISTRIBUTED", "needs MaxItemsPerBatch(Path)"),
        ({"MaxItemsPerBatch": 1, "MaxItemsPerBatchPath": "$.n"}, "DISTRIBUTED", "exclusive"),
        ({"MaxInputBytesPerBatch": 300_000}, "DISTRIBUTED", "at most 262144"),
        ({"MaxItemsPerBatch": 1}, "INLINE", "needs a Map in DISTRIBUTED mode"),
    ],
)
def test_an_invalid_item_batcher_is_refused_on_create(
    cloud: Cloud, batcher: dict[str, Any], mode: str, message: str
) -> None:
    definition = _jsonpath_map(batcher)
    state = definition["States"]["Index"]
    state["ItemProcessor"] = {**CHILD, "ProcessorConfig": {"Mode": mode}}
    if mode == "INLINE":
        del state["ItemReader"]

    with pytest.raises(ClientError) as refused:
        cloud.client("stepfunctions").create_state_machine(
            name=f"invalid-{len(message)}", definition=json.dumps(definition), roleArn=ROLE
        )

    # moto answers InvalidDefinition with an empty error code; the message is the parser's.
    error = refused.value.response["Error"]
    assert error["Message"].startswith("ASLParserException Index: ItemBatcher")
    assert message in error["Message"]


def test_uninstall_restores_moto(cloud: Cloud, tmp_path: Path) -> None:
    """Runs last: moto's own parser refuses ItemBatcher again, then the hooks come back."""
    patched = AmazonStateLanguageParser.parse
    cloud.uninstall()

    assert AmazonStateLanguageParser.parse is not patched
    with pytest.raises(Exception, match="ItemBatcher"):
        AmazonStateLanguageParser.parse(json.dumps(_jsonpath_map({"MaxItemsPerBatch": 1})))

    cloud.uninstall = sfn_hooks.install(
        sfn_hooks.HookContext(
            endpoints=cloud.endpoints,
            logs_dir=tmp_path,
            repo_root=Path(__file__).resolve().parents[2],
        )
    )
    AmazonStateLanguageParser.parse(json.dumps(_jsonpath_map({"MaxItemsPerBatch": 1})))
