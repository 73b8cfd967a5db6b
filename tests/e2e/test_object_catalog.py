"""Issue 2's slice on the running local cloud: uploads become catalog items by themselves."""

from __future__ import annotations

import json
from typing import Any

from tests.localcloud_support import LocalCloud, catalog_items, wait_for


def test_state_file_describes_the_deployment(local_cloud: LocalCloud) -> None:
    state = local_cloud.state

    assert state["endpoint_url"].startswith("http://127.0.0.1:")
    assert state["api_url"].startswith("http://127.0.0.1:")
    assert state["region"] == "us-east-1"
    assert local_cloud.outputs["RawBucketName"] == "lethe-local-raw-123456789012-us-east-1"
    assert local_cloud.outputs["ObjectCatalogTableName"] == "lethe-local-object-catalog"


def test_upload_under_a_dataset_is_catalogued(registered: LocalCloud) -> None:
    raw = registered.outputs["RawBucketName"]
    put = registered.client("s3").put_object(
        Bucket=raw, Key="reviews/e2e/catalogued.csv", Body=b"user_id,review_date,stars,text\n"
    )

    (item,) = wait_for(
        lambda: catalog_items(registered, "reviews/e2e/catalogued.csv"),
        timeout=10,
        what="the catalog item of the upload",
    )
    assert item["version_id"] == put["VersionId"]
    assert item["etag"] == put["ETag"].strip('"')
    assert item["dataset_id"] == "reviews"
    assert item["zone"] == "raw"
    assert item["status"] in {"RECEIVED", "INGESTING", "INGESTED", "QUARANTINED"}


def test_upload_outside_any_dataset_is_ignored(local_cloud: LocalCloud) -> None:
    raw = local_cloud.outputs["RawBucketName"]
    local_cloud.client("s3").put_object(Bucket=raw, Key="scratch/notes.txt", Body=b"hello")

    (item,) = wait_for(
        lambda: catalog_items(local_cloud, "scratch/notes.txt"),
        timeout=10,
        what="the IGNORED item",
    )
    assert item["status"] == "IGNORED"
    assert "dataset_id" not in item
    assert int(item["expires_at"]) > 0


def test_delete_marks_the_object_deleted(registered: LocalCloud) -> None:
    raw = registered.outputs["RawBucketName"]
    s3 = registered.client("s3")
    s3.put_object(Bucket=raw, Key="scratch/delete-me.txt", Body=b"bye")
    wait_for(
        lambda: catalog_items(registered, "scratch/delete-me.txt"),
        timeout=10,
        what="the created item",
    )

    marker = s3.delete_object(Bucket=raw, Key="scratch/delete-me.txt")

    def deleted() -> list[dict[str, Any]]:
        items = catalog_items(registered, "scratch/delete-me.txt")
        return [i for i in items if i["version_id"] == marker["VersionId"]]

    (item,) = wait_for(deleted, timeout=10, what="the delete marker's item")
    assert item["status"] == "DELETED"
    assert item["delete_marker"] is True
    newest = max(catalog_items(registered, "scratch/delete-me.txt"), key=lambda i: i["sequencer"])
    assert newest["version_id"] == marker["VersionId"]


def _s3_event(bucket: str, key: str, version: str, sequencer: str) -> dict[str, Any]:
    return {
        "version": "0",
        "bucket": {"name": bucket},
        "object": {
            "key": key,
            "size": 3,
            "etag": "acbd18db4cc2f85cedef654fccc4a4d8",
            "version-id": version,
            "sequencer": sequencer,
        },
        "request-id": "E2E",
        "requester": "123456789012",
        "source-ip-address": "127.0.0.1",
        "reason": "PutObject",
    }


def test_the_same_event_delivered_twice_leaves_one_item(local_cloud: LocalCloud) -> None:
    raw = local_cloud.outputs["RawBucketName"]
    entry = {
        "Source": "aws.s3",
        "DetailType": "Object Created",
        "Detail": json.dumps(_s3_event(raw, "scratch/twice.txt", "v-twice", "00AA00")),
        "EventBusName": "default",
    }
    events = local_cloud.client("events")

    events.put_events(Entries=[entry])
    events.put_events(Entries=[entry])

    (item,) = wait_for(
        lambda: catalog_items(local_cloud, "scratch/twice.txt"),
        timeout=10,
        what="the item of the duplicated event",
    )
    assert item["version_id"] == "v-twice"
    assert len(catalog_items(local_cloud, "scratch/twice.txt")) == 1


def test_malformed_event_is_not_retried_forever_and_is_kept(local_cloud: LocalCloud) -> None:
    raw = local_cloud.outputs["RawBucketName"]
    detail = _s3_event(raw, "scratch/malformed.txt", "v-bad", "00BB00")
    del detail["object"]["key"]
    local_cloud.client("events").put_events(
        Entries=[
            {
                "Source": "aws.s3",
                "DetailType": "Object Created",
                "Detail": json.dumps(detail),
                "EventBusName": "default",
            }
        ]
    )
    sqs = local_cloud.client("sqs")
    queue_url = local_cloud.outputs["ObjectEventsDeadLetterQueueUrl"]

    def dead_letter() -> list[dict[str, Any]]:
        return sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            AttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])

    # SQS received it five times (the handler reported it failed each time), then moved it
    (message,) = wait_for(dead_letter, timeout=60, what="the dead-lettered event")
    event = json.loads(message["Body"])  # the EventBridge event, as the rule queued it
    assert event["detail"]["object"]["sequencer"] == "00BB00"
    assert "key" not in event["detail"]["object"]
    assert int(message["Attributes"]["ApproximateReceiveCount"]) >= 5
    assert catalog_items(local_cloud, "scratch/malformed.txt") == []
