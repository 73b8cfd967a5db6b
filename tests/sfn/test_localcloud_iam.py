"""The local IAM check (lethe.localcloud.iam) on a real run: the ingestion state machine, its
steps function and its Spark job each call AWS as their own role. With the template's policies
as translated the run succeeds and no call is denied; with ONE statement removed from one role's
policy (the state machine's, the function's, the Spark job's) the same run fails, and the
decision log names that role, the action and the resource.

Statements are removed from the role's policy as provisioned from the translated template (the
resolved document in the local IAM), by Sid, and put back after each case."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lethe.localcloud import iam_log
from tests.sfn.conftest import (
    SAMPLES,
    Cloud,
    execution_input,
    register_reviews,
    start_cloud,
)

# Its runs without a statement are denied on purpose: it checks the denials itself (the tier's
# every_call_allowed_by_the_template is off here).
EXPECTS_IAM_DENIALS = True


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory) as started:
        assert started.state["iam"] == "enforce"
        register_reviews(started)
        yield started


def _role(cloud: Cloud, logical_id: str) -> str:
    names = [
        role["RoleName"]
        for page in cloud.client("iam").get_paginator("list_roles").paginate()
        for role in page["Roles"]
        if role["RoleName"].startswith(f"lethe-local-{logical_id}-")
    ]
    assert len(names) == 1, names
    return names[0]


@contextmanager
def without_statement(cloud: Cloud, logical_id: str, sid: str) -> Iterator[str]:
    """The role's inline policy that holds `sid`, without that statement, for the block."""
    iam = cloud.client("iam")
    role = _role(cloud, logical_id)
    for policy_name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        document = iam.get_role_policy(RoleName=role, PolicyName=policy_name)["PolicyDocument"]
        document = json.loads(document) if isinstance(document, str) else document
        kept = [s for s in document["Statement"] if s.get("Sid") != sid]
        if len(kept) == len(document["Statement"]) - 1:
            break
    else:
        raise AssertionError(f"no statement {sid} in the policies of {role}")
    if kept:
        remaining = json.dumps({**document, "Statement": kept})
        iam.put_role_policy(RoleName=role, PolicyName=policy_name, PolicyDocument=remaining)
    else:  # its only statement: IAM takes no empty policy, so the policy goes
        iam.delete_role_policy(RoleName=role, PolicyName=policy_name)
    try:
        yield role
    finally:
        iam.put_role_policy(
            RoleName=role, PolicyName=policy_name, PolicyDocument=json.dumps(document)
        )


def _ingest(cloud: Cloud, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ingestion run of a fresh upload; its result and the IAM decisions made meanwhile."""
    logs_dir = cloud.state["logs_dir"]
    _, offset = iam_log.read_decisions(logs_dir)
    key = f"reviews/{name}/2026/11/21/batch-001.csv"
    version = cloud.upload_unannounced(key, (SAMPLES / "reviews-2026-11-21.csv").read_bytes())
    result = cloud.run(name, execution_input(cloud, name, [("reviews", key, version)]))
    decisions, _ = iam_log.read_decisions(logs_dir, offset)
    return result, decisions


def test_the_untouched_template_allows_every_call_of_an_ingestion_run(cloud: Cloud) -> None:
    result, decisions = _ingest(cloud, "iam-untouched")
    assert result["execution"]["status"] == "SUCCEEDED"
    assert iam_log.distinct_denials(decisions) == []
    roles = {d["role"].split("-")[2] for d in decisions}  # lethe-local-<LogicalId>-<suffix>
    assert {"IngestionStateMachineRole", "IngestionStepsFunctionRole", "SparkJobRole"} <= roles


@pytest.mark.parametrize(
    ("logical_id", "sid", "action", "resource_part"),
    [
        # the state machine's role: its Lambda task invokes the steps function
        (
            "IngestionStateMachineRole",
            "RunSteps",
            "lambda:InvokeFunction",
            ":function:lethe-local-ingestion-steps",
        ),
        # a function's role: the steps function marks the catalog item INGESTING
        (
            "IngestionStepsFunctionRole",
            "CatalogStatus",
            "dynamodb:",
            ":table/lethe-local-object-catalog",
        ),
        # the Spark job's role: the ingest job reads the uploaded version
        ("SparkJobRole", "ReadRaw", "s3:GetObjectVersion", "arn:aws:s3:::lethe-local-raw-"),
    ],
)
def test_a_run_fails_naming_role_action_and_resource_when_one_statement_is_removed(
    cloud: Cloud, logical_id: str, sid: str, action: str, resource_part: str
) -> None:
    with without_statement(cloud, logical_id, sid) as role:
        result, decisions = _ingest(cloud, f"iam-without-{sid.lower()}")
    assert result["execution"]["status"] == "FAILED"
    denied = iam_log.denials(decisions)
    assert denied, "the run failed without a denial"
    assert {d["role"] for d in denied} == {role}
    assert any(d["action"].startswith(action) and resource_part in d["resource"] for d in denied), (
        denied
    )
    assert all(d["reason"] == "no identity-based policy allows it" for d in denied)
