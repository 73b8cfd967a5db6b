"""The re-index of a changed dataset, as template.yaml and the backfill machine wire it: the
datasets API may start the backfill machine and nothing else, and the machine's last step may
change only the attributes it writes, exactly those that the registry reads back."""

from __future__ import annotations

import json
import re
from typing import Any

from lethe.localcloud.template import load_template
from lethe_shared.datasets.registry import registration_of_item
from lethe_shared.datasets.reindex import reindex_input
from tests.conftest import REPO_ROOT

MACHINE = json.loads((REPO_ROOT / "statemachines" / "index_backfill.asl.json").read_text())
RECORD = MACHINE["States"]["Record Indexed Generation"]


def _statements(lid: str) -> dict[str, dict[str, Any]]:
    resource = load_template()["Resources"][lid]
    if lid.endswith("Role"):
        policies = [
            p["PolicyDocument"] for p in resource["Properties"]["Policies"] if "PolicyDocument" in p
        ]
    else:
        policies = [
            p
            for p in resource["Properties"]["Policies"]
            if isinstance(p, dict) and "Statement" in p
        ]
    return {s["Sid"]: s for policy in policies for s in policy["Statement"] if "Sid" in s}


def test_the_datasets_api_may_start_the_backfill_machine_only() -> None:
    function = load_template()["Resources"]["DatasetsApiFunction"]["Properties"]
    statements = _statements("DatasetsApiFunction")

    assert function["Environment"]["Variables"]["INDEX_BACKFILL_STATE_MACHINE_ARN"] == {
        "Ref": "IndexBackfillStateMachine"
    }
    start = statements["StartReindex"]
    assert (start["Action"], start["Resource"]) == (
        ["states:StartExecution"],
        {"Ref": "IndexBackfillStateMachine"},
    )
    describe = statements["ReadReindexStatus"]
    assert describe["Action"] == ["states:DescribeExecution"]
    assert describe["Resource"]["Fn::Sub"].endswith(":execution:lethe-${Stage}-index-backfill:*")


def test_the_record_step_writes_only_what_its_policy_allows() -> None:
    statement = _statements("IndexBackfillStateMachineRole")["RecordIndexedGeneration"]
    allowed = set(statement["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"])
    arguments = RECORD["Arguments"]
    expressions = f"{arguments['UpdateExpression']} {arguments['ConditionExpression']}"
    named = set(re.findall(r"\b([a-z_]+)\s*=", expressions))

    assert statement["Action"] == ["dynamodb:UpdateItem"]
    assert statement["Resource"] == {"Fn::GetAtt": ["DatasetsTable", "Arn"]}
    assert RECORD["Resource"] == "arn:aws:states:::dynamodb:updateItem"
    assert named == {
        "indexed_generation",
        "indexed_at",
        "indexed_execution",
        "indexed_key_fingerprint",  # with key_fingerprint: the key the index was built with
        "matching_generation",
    }
    assert named | set(arguments["Key"]) <= allowed
    assert arguments["TableName"] == "${DatasetsTable}"


def test_the_record_step_sets_the_generation_only_while_it_is_the_current_one() -> None:
    arguments = RECORD["Arguments"]

    assert arguments["ConditionExpression"] == "matching_generation = :g"
    assert "indexed_generation = :g" in arguments["UpdateExpression"]
    assert [c["ErrorEquals"] for c in RECORD["Catch"]] == [
        ["DynamoDB.ConditionalCheckFailedException"],  # superseded: succeed, record nothing
        ["States.ALL"],  # anything else: notified, and the execution fails
    ]
    assert RECORD["Catch"][0]["Next"] == "Backfill Complete"
    assert RECORD["Catch"][1]["Next"] == "Notify Failure"


def test_what_the_record_step_writes_is_what_the_registry_reads() -> None:
    document = json.dumps(
        {
            "dataset_id": "d",
            "format": "jsonl",
            "subject_columns": ["u"],
            "schema": [{"name": "u", "type": "string"}],
        }
    )
    item = {
        "dataset_id": "d",
        "document": document,
        "version": 3,
        "matching_fingerprint": "f",
        "matching_generation": 2,
        "indexed_generation": 1,
    }
    # the step's update, applied as DynamoDB would (the condition holds: generation 2 is current)
    updated = {**item, "indexed_generation": 2, "indexed_at": "t", "indexed_execution": "arn"}

    assert registration_of_item(item).reindex_pending
    assert not registration_of_item(updated).reindex_pending
    assert set(reindex_input("d", 2)) == {"dataset_id", "force", "generation"}
    assert reindex_input("d", 2, "0123456789abcdef")["key_fingerprint"] == "0123456789abcdef"
    # with a key: the same step also records indexed_key_fingerprint, which the registry reads
    keyed = {**updated, "indexed_key_fingerprint": "0123456789abcdef"}
    assert registration_of_item(item).key_reindex_pending("0123456789abcdef")  # unknown
    assert not registration_of_item(keyed).key_reindex_pending("0123456789abcdef")
    assert registration_of_item(keyed).key_reindex_pending("fedcba9876543210")


def test_the_datasets_api_reads_exactly_the_hash_key_secret() -> None:
    function = load_template()["Resources"]["DatasetsApiFunction"]["Properties"]
    statement = _statements("DatasetsApiFunction")["ReadHashKeyFingerprint"]

    assert function["Environment"]["Variables"]["HASH_KEY_SECRET_ARN"] == {
        "Ref": "SubjectHashKeySecret"
    }
    assert (statement["Action"], statement["Resource"]) == (
        ["secretsmanager:GetSecretValue"],
        {"Ref": "SubjectHashKeySecret"},
    )


def test_the_record_step_writes_the_key_only_when_given_with_its_generation() -> None:
    arguments = RECORD["Arguments"]
    normalise = MACHINE["States"]["Normalise Input"]["Assign"]

    assert (
        "$key_fingerprint != null ? ', indexed_key_fingerprint = :k'"
        in (arguments["UpdateExpression"])
    )
    assert "$key_fingerprint != null ? {':k'" in arguments["ExpressionAttributeValues"]
    assert "key_fingerprint must be 16 lowercase hex digits" in normalise["problems"]
