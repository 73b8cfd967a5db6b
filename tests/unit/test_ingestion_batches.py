"""lethe_shared.ingestion.starter: grouping object versions into executions, names, manifests,
inputs,
and starting them (Step Functions and S3 in moto)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone
from lethe_shared.ingestion import starter as ingestion
from lethe_shared.ingestion.starter import (
    MAX_BATCH_OBJECTS,
    IngestionCollector,
    IngestionGroup,
    StartOutcome,
    StepFunctionsBatchStarter,
    plan_groups,
)

pytestmark = pytest.mark.lambda_runtime

RAW = "lethe-local-raw-123456789012-us-east-1"
REPORTS = "lethe-local-reports-123456789012-us-east-1"
REGION = "us-east-1"


def _item(dataset: str, key: str, version: str = "v1") -> CatalogItem:
    return CatalogItem(
        bucket=RAW,
        key=f"{dataset}/{key}",
        version_id=version,
        zone=Zone.RAW,
        status=ObjectStatus.RECEIVED,
        sequencer="0" * 20,
        dataset_id=dataset,
    )


def test_groups_are_sorted_by_dataset_object_and_version_whatever_the_arrival_order() -> None:
    items = [
        _item("reviews", "b.jsonl", "v2"),
        _item("orders", "z.csv"),
        _item("reviews", "a.jsonl"),
        _item("reviews", "b.jsonl", "v1"),
    ]
    shuffled = items[:]
    random.Random(7).shuffle(shuffled)

    (group,) = plan_groups((item, f"m{n}") for n, item in enumerate(items))
    (again,) = plan_groups((item, f"m{items.index(item)}") for item in shuffled)

    assert [(i.dataset_id, i.key, i.version_id) for i in group.items] == [
        ("orders", "orders/z.csv", "v1"),
        ("reviews", "reviews/a.jsonl", "v1"),
        ("reviews", "reviews/b.jsonl", "v1"),
        ("reviews", "reviews/b.jsonl", "v2"),
    ]
    assert again == group
    assert group.record_ids == {"m0", "m1", "m2", "m3"}


def test_a_version_asked_for_twice_is_one_object_with_both_records() -> None:
    item = _item("reviews", "a.jsonl")

    (group,) = plan_groups([(item, "first"), (item, "redelivered")])

    assert group.items == (item,)
    assert group.record_ids == {"first", "redelivered"}


def test_groups_hold_at_most_max_batch_objects() -> None:
    items = [_item("reviews", f"{n:04d}.jsonl") for n in range(2 * MAX_BATCH_OBJECTS + 1)]

    groups = plan_groups((item, item.key) for item in reversed(items))

    assert [len(g.items) for g in groups] == [MAX_BATCH_OBJECTS, MAX_BATCH_OBJECTS, 1]
    assert [i for g in groups for i in g.items] == items  # every one once, in order
    assert groups[0].record_ids == {i.key for i in items[:MAX_BATCH_OBJECTS]}
    assert len({g.name for g in groups}) == 3


def test_the_module_limit_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingestion, "MAX_BATCH_OBJECTS", 2)

    groups = plan_groups((_item("reviews", f"{n}.jsonl"), str(n)) for n in range(5))

    assert [len(g.items) for g in groups] == [2, 2, 1]


def test_long_keys_split_a_group_before_the_step_functions_input_limit() -> None:
    long = "k" * 1000  # S3 keys may have 1,024 bytes
    items = [_item("reviews", f"{n:03d}-{long}") for n in range(MAX_BATCH_OBJECTS)]

    groups = plan_groups((item, item.key) for item in items)

    assert len(groups) > 1
    for group in groups:
        size = len(json.dumps(group.execution_input(REPORTS)))
        assert size <= ingestion.MAX_INPUT_BYTES < 256 * 1024
    assert sum(len(g.items) for g in groups) == MAX_BATCH_OBJECTS


def test_the_name_is_deterministic_short_and_depends_on_every_version() -> None:
    items = (_item("reviews", "a.jsonl"), _item("reviews", "b.jsonl"))
    group = IngestionGroup(items=items)
    other_version = IngestionGroup(items=(items[0], _item("reviews", "b.jsonl", "v2")))
    mixed = IngestionGroup(items=(_item("orders", "o.csv"), *items))
    long_dataset = IngestionGroup(items=(_item("d" * 63, "x.csv"),))

    assert group.name == IngestionGroup(items=items).name
    assert group.name.startswith("reviews-batch-")
    assert group.name != other_version.name
    assert mixed.name.startswith("batch-")
    for name in (group.name, mixed.name, long_dataset.name):
        assert len(name) <= 80
        assert all(c.isalnum() or c in "-_" for c in name)
    assert group.manifest_key == f"manifests/ingest/{group.name}.json"


def test_manifest_and_execution_input_list_the_objects_in_the_same_order() -> None:
    items = (_item("orders", "o.csv", "q1"), _item("reviews", "a.jsonl", "v9"))
    group = IngestionGroup(items=items)

    assert group.manifest() == [
        {"dataset_id": "orders", "key": "orders/o.csv", "version_id": "q1"},
        {"dataset_id": "reviews", "key": "reviews/a.jsonl", "version_id": "v9"},
    ]
    assert group.execution_input(REPORTS) == {
        "manifest": f"s3://{REPORTS}/manifests/ingest/{group.name}.json",
        "objects": [
            {
                "dataset_id": "orders",
                "bucket": RAW,
                "key": "orders/o.csv",
                "version_id": "q1",
                "object_url": f"s3://{RAW}/orders/o.csv",
            },
            {
                "dataset_id": "reviews",
                "bucket": RAW,
                "key": "reviews/a.jsonl",
                "version_id": "v9",
                "object_url": f"s3://{RAW}/reviews/a.jsonl",
            },
        ],
    }


def test_the_collector_leaves_out_what_failed_records_asked_for() -> None:
    collector = IngestionCollector()
    a, b = _item("reviews", "a.jsonl"), _item("reviews", "b.jsonl")
    assert collector.for_record("m1").start(a) is True
    assert collector.for_record("m2").start(b) is True
    assert collector.for_record("m3").start(b) is True  # the same version, another record

    (group,) = collector.groups(failed_records={"m1", "m2"})

    assert group.items == (b,)
    assert group.record_ids == {"m3"}
    assert collector.groups(failed_records={"m1", "m2", "m3"}) == []


# -------------------------------------------------------------------- starting, against moto


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=REPORTS)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(
            name="lethe-local-ingestion",
            definition=json.dumps({"StartAt": "W", "States": {"W": {"Type": "Pass", "End": True}}}),
            roleArn="arn:aws:iam::123456789012:role/sfn",
        )["stateMachineArn"]
        yield {"s3": s3, "sfn": sfn, "arn": arn}


def test_a_group_gets_its_manifest_then_its_execution(aws: dict[str, Any]) -> None:
    group = IngestionGroup(items=(_item("reviews", "a.jsonl"), _item("reviews", "a.jsonl", "v2")))
    starter = StepFunctionsBatchStarter(aws["sfn"], aws["s3"], aws["arn"], REPORTS)

    assert starter.start(group) is StartOutcome.STARTED

    manifest = aws["s3"].get_object(Bucket=REPORTS, Key=f"manifests/ingest/{group.name}.json")
    assert manifest["ContentType"] == "application/json"
    assert json.loads(manifest["Body"].read()) == group.manifest()
    (execution,) = aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"]
    assert execution["name"] == group.name
    described = aws["sfn"].describe_execution(executionArn=execution["executionArn"])
    assert json.loads(described["input"]) == group.execution_input(REPORTS)


def test_the_same_group_again_starts_nothing_new(aws: dict[str, Any]) -> None:
    group = IngestionGroup(items=(_item("reviews", "a.jsonl"),))
    starter = StepFunctionsBatchStarter(aws["sfn"], aws["s3"], aws["arn"], REPORTS)
    starter.start(group)
    aws["sfn"].stop_execution(
        executionArn=aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"][0][
            "executionArn"
        ]
    )  # a finished execution: Step Functions refuses its name from now on

    assert starter.start(group) is StartOutcome.ALREADY_STARTED
    assert len(aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"]) == 1


def test_a_failed_manifest_write_starts_no_execution(aws: dict[str, Any]) -> None:
    group = IngestionGroup(items=(_item("reviews", "a.jsonl"),))
    starter = StepFunctionsBatchStarter(aws["sfn"], aws["s3"], aws["arn"], "no-such-bucket")

    with pytest.raises(aws["s3"].exceptions.NoSuchBucket):
        starter.start(group)

    assert aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"] == []
