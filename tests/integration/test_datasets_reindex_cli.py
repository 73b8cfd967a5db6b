"""`lethe datasets reindex` and `lethe datasets list` against the registry and Step Functions on
in-process moto: the re-index of the current generation under a new name, the generations
listed."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lethe import cli
from lethe.commands import datasets
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.subject_hashing.keys import key_fingerprint

DOCUMENT: dict[str, Any] = {
    "dataset_id": "reviews",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "email", "type": "string"},
    ],
}


def _dataset(**changes: Any) -> Dataset:
    return parse_dataset({**DOCUMENT, **changes})


@pytest.fixture
def table(lethe_tables: dict[str, Any]) -> Any:
    return lethe_tables["DatasetsTable"]


SECRET = "k" * 64  # the subject hash key's secret value
KEY = key_fingerprint(SECRET.encode())

# ------------------------------------------------------------- lethe datasets reindex / list


class MotoTarget:
    """What `lethe.target.resolve` gives the datasets commands, on in-process moto."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    def resource(self, service: str) -> Any:
        return boto3.resource(service, region_name="us-east-1")

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name="us-east-1")

    def output(self, name: str) -> str:
        return self.outputs[name]


def test_reindex_starts_the_current_generation_again_and_list_shows_it(
    table: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.create_state_machine(
        name="lethe-local-index-backfill",
        definition=json.dumps(
            {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/lethe-local-index-backfill",
    )["stateMachineArn"]
    secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=SECRET
    )["ARN"]
    target = MotoTarget(
        {
            "DatasetsTableName": table.name,
            "IndexBackfillStateMachineArn": machine,
            "SubjectHashKeySecretArn": secret,
        }
    )
    monkeypatch.setattr(datasets, "resolve", lambda args: target)
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset(), key_fingerprint=KEY)  # as the datasets API registers them
    registry.register(parse_dataset({**DOCUMENT, "dataset_id": "other"}), key_fingerprint=KEY)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    nothing = run("datasets", "reindex", "reviews")
    registry.register(_dataset(subject_columns=["email"]))  # generation 2, pending
    started = run("datasets", "reindex", "reviews")
    listed = run("datasets", "list")
    missing = run("datasets", "reindex", "ghost")

    assert nothing == (0, "dataset reviews: generation 1 is indexed; nothing to do\n", "")
    assert started[0] == 0
    (execution,) = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert started[1] == execution["executionArn"] + "\n"
    assert execution["name"].startswith("reviews-reindex-g2-")
    described = sfn.describe_execution(executionArn=execution["executionArn"])
    assert json.loads(described["input"]) == {
        "dataset_id": "reviews",
        "force": True,
        "generation": 2,
        "key_fingerprint": KEY,  # the key read before the start: recorded on success
    }
    assert "erasure requests for this dataset wait until it completes" in started[2]
    assert listed[0] == 0
    lines = listed[1].splitlines()
    assert lines[0].split() == ["other", "jsonl", "subjects=user_id", "generation=1", "indexed=1"]
    assert lines[1].split() == [
        "reviews",
        "jsonl",
        "subjects=email",
        "generation=2",
        "indexed=1",
        "re-index",
        "pending",
    ]
    assert missing[0] == 3
    assert "dataset ghost is not registered" in missing[2]


def test_after_a_key_rotation_reindex_all_starts_every_dataset_with_the_new_key(
    table: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.create_state_machine(
        name="lethe-local-index-backfill",
        definition=json.dumps(
            {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/lethe-local-index-backfill",
    )["stateMachineArn"]
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    secret = secrets.create_secret(Name="lethe-local-subject-hash-key", SecretString=SECRET)["ARN"]
    target = MotoTarget(
        {
            "DatasetsTableName": table.name,
            "IndexBackfillStateMachineArn": machine,
            "SubjectHashKeySecretArn": secret,
        }
    )
    monkeypatch.setattr(datasets, "resolve", lambda args: target)
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset(), key_fingerprint=KEY)
    registry.register(parse_dataset({**DOCUMENT, "dataset_id": "other"}), key_fingerprint=KEY)
    table.put_item(  # a dataset from before key fingerprints: its key is unknown
        Item={"dataset_id": "legacy", "document": json.dumps({**DOCUMENT, "dataset_id": "legacy"})}
    )

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    def inputs() -> list[dict[str, Any]]:
        listed = sfn.list_executions(stateMachineArn=machine)["executions"]
        described = [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]
        return sorted((json.loads(d["input"]) for d in described), key=json.dumps)

    before = run("datasets", "list")
    forced = run("datasets", "reindex", "reviews", "--force")  # nothing pending: forced anyway
    secrets.put_secret_value(SecretId=secret, SecretString="r" * 64)  # the rotation
    rotated = key_fingerprint(b"r" * 64)
    after = run("datasets", "list")
    started = run("datasets", "reindex", "--all")
    usage = run("datasets", "reindex")

    assert [line.split()[-1] for line in before[1].splitlines()] == [
        "pending",  # legacy: "key re-index pending"
        "indexed=1",
        "indexed=1",
    ]
    assert forced[0] == 0, forced
    assert after[0] == 0
    assert [" ".join(line.split()[-4:]) for line in after[1].splitlines()] == [
        "indexed=1 key re-index pending",
        "indexed=1 key re-index pending",
        "indexed=1 key re-index pending",
    ]
    assert started[0] == 0
    assert len(started[1].splitlines()) == 3  # one execution ARN per dataset
    assert f"with key {rotated} started (index built with {KEY})" in started[2]
    assert f"with key {rotated} started (index built with an unknown key)" in started[2]
    assert SECRET not in started[2] + after[1] + after[2]
    # the forced one carried the old key; the three --all started carry the rotated one
    assert sorted((i["dataset_id"], i["key_fingerprint"]) for i in inputs()) == sorted(
        [("reviews", KEY), ("legacy", rotated), ("other", rotated), ("reviews", rotated)]
    )
    assert {"dataset_id": "legacy", "force": True, "generation": 1, "key_fingerprint": rotated} in (
        inputs()
    )
    assert usage[0] != 0
    assert "name one dataset or give --all" in usage[2]
