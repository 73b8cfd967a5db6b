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
    target = MotoTarget({"DatasetsTableName": table.name, "IndexBackfillStateMachineArn": machine})
    monkeypatch.setattr(datasets, "resolve", lambda args: target)
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset())
    registry.register(parse_dataset({**DOCUMENT, "dataset_id": "other"}))

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
