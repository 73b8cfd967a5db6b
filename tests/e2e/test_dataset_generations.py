"""A PUT that changes which column names the subject re-indexes the dataset, on the running
local cloud: the datasets API starts the forced backfill of the new matching generation, the
backfill indexes every object by the new definition and records the generation, and `lethe
datasets` shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.localcloud_support import LocalCloud, catalog_items, sample_dataset_as, wait_for

DATASET = "regen"  # its own dataset: the session's other tests count the samples' partitions
KEY = f"{DATASET}/2026/12/02/batch.csv"
BODY = b"user_id,review_date,stars,text\nu-7001,2026-12-02,5,alias-7001\n"


def _lookup(cloud: LocalCloud, subject: str) -> list[tuple[str, int]]:
    result = cloud.lethe("index", "lookup", "--subject", subject, "--dataset", DATASET, "--json")
    return sorted((e["zone"], e["rows"]) for e in json.loads(result.stdout))


def _ingested(cloud: LocalCloud, version: str) -> bool:
    items = catalog_items(cloud, KEY)
    return any(i["version_id"] == version and i["status"] == "INGESTED" for i in items)


def _generations(cloud: LocalCloud) -> dict[str, Any]:
    item = cloud.table("DatasetsTableName").get_item(
        Key={"dataset_id": DATASET}, ConsistentRead=True
    )["Item"]
    return {k: int(item[k]) for k in ("version", "matching_generation", "indexed_generation")}


def test_changing_the_subject_column_reindexes_the_dataset_for_its_new_generation(
    registered: LocalCloud, tmp_path: Path
) -> None:
    path = sample_dataset_as("reviews", DATASET, tmp_path)
    first = registered.lethe("datasets", "put", str(path))
    version = registered.client("s3").put_object(
        Bucket=registered.outputs["RawBucketName"], Key=KEY, Body=BODY
    )["VersionId"]
    wait_for(lambda: _ingested(registered, version), timeout=300, what="ingestion of the upload")
    assert first.stdout.splitlines()[1:] == ["matching generation 1, indexed"]
    assert _lookup(registered, "u-7001") == [("lake", 1), ("raw", 1)]
    assert _lookup(registered, "alias-7001") == []

    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "subject_columns": ["text"]}))
    changed = registered.lethe("datasets", "put", str(path))
    again = registered.lethe("datasets", "put", str(path))  # a retry: no second re-index

    lines = changed.stdout.splitlines()
    assert lines[:2] == [
        f"updated dataset {DATASET} (version 2)",
        "matching generation 2, index built for generation 1 (re-index pending)",
    ]
    assert lines[2].startswith("re-index of generation 2: arn:")
    assert f":{DATASET}-reindex-g2 (" in lines[2]
    assert lines[2].endswith("erasure requests for this dataset wait until it completes")
    sfn = registered.client("stepfunctions")
    machine = registered.outputs["IndexBackfillStateMachineArn"]
    ours = [
        e
        for e in sfn.list_executions(stateMachineArn=machine)["executions"]
        if e["name"].startswith(f"{DATASET}-reindex")
    ]
    assert [e["name"] for e in ours] == [f"{DATASET}-reindex-g2"]
    assert "re-index of generation 2" in again.stdout

    def finished() -> dict[str, Any] | None:
        described = sfn.describe_execution(executionArn=ours[0]["executionArn"])
        return None if described["status"] == "RUNNING" else dict(described)

    described = wait_for(finished, timeout=600, what="the re-index", every=1)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = json.loads(described["output"])
    assert (output["generation"], output["generation_recorded"]) == (2, True)
    assert _generations(registered) == {
        "version": 3,
        "matching_generation": 2,
        "indexed_generation": 2,
    }
    # the index now names the subject by the new column, in both zones
    assert _lookup(registered, "alias-7001") == [("lake", 1), ("raw", 1)]
    assert _lookup(registered, "u-7001") == []
    listed = registered.lethe("datasets", "list").stdout.splitlines()
    (line,) = [row for row in listed if row.startswith(f"{DATASET} ")]
    assert line.split()[-2:] == ["generation=2", "indexed=2"]

    # A PUT retried after the re-index ended, while the registry still shows the generation
    # pending (its answer and the recording were lost): the API finds the execution of that
    # name (ExecutionAlreadyExists) and reports its status, read with DescribeExecution
    # (ReadReindexStatus), instead of starting another.
    table = registered.table("DatasetsTableName")
    table.update_item(
        Key={"dataset_id": DATASET},
        UpdateExpression="SET indexed_generation = :g",
        ExpressionAttributeValues={":g": 1},
    )
    retried = registered.lethe("datasets", "put", str(path))
    (reported,) = [row for row in retried.stdout.splitlines() if row.startswith("re-index of")]
    assert f":{DATASET}-reindex-g2 (SUCCEEDED); " in reported
    names = [
        e["name"]
        for e in sfn.list_executions(stateMachineArn=machine)["executions"]
        if e["name"].startswith(f"{DATASET}-reindex")
    ]
    assert names == [f"{DATASET}-reindex-g2"]
    table.update_item(  # as the re-index recorded it
        Key={"dataset_id": DATASET},
        UpdateExpression="SET indexed_generation = :g",
        ExpressionAttributeValues={":g": 2},
    )
