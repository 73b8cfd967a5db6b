"""Removing any single statement from a role's policy makes a named test fail (issue 21).

Every Allow statement of every role of the translated template, in either branch of an
`Fn::If` policy, names at least one test that fails without it, from one of two sources:

- the record, tests/iam_statement_record.json: the tests during which the statement was the
  only one allowing some call of the local cloud (written by tests/iam_coverage.py from the
  sfn and e2e tiers' IAM decision logs). Remove the statement and that call is denied; the e2e
  tier fails a test during which any call was denied, the sfn tier too (tests/sfn/conftest.py);
- TEMPLATE_TESTS below: statements that only AWS uses on the role's behalf, or that exist only
  with a customer key, each held by a test of tests/unit/test_iam_service_side_statements.py
  to the actions, resources and conditions the cited AWS page requires.

A new statement with neither fails `test_every_statement_names_a_test_that_fails_without_it`;
a statement gone from the template but still recorded fails the record check (regenerate the
record: tests/iam_coverage.py says how); a named test that no longer exists fails too.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from typing import Any

import pytest

from lethe.localcloud.template import REPO_ROOT, translated_template
from tests.iam_coverage import RECORD_PATH
from tests.unit.test_iam_service_side_statements import (
    CUSTOMER_KEY_POLICIES,
    LIST_INDEX_BUCKET,
    LOGGING_STATE_MACHINES,
    STATE_MACHINES,
)

pytestmark = pytest.mark.unit

SERVICE_SIDE = "tests/unit/test_iam_service_side_statements.py"
BACKFILL_POLICY = "IndexBackfillStateMachineRole/IndexBackfillStateMachineRolePolicy0"


def _template_tests() -> dict[str, str]:
    tests = {
        f"{BACKFILL_POLICY}/RunDistributedMapChildren": (
            f"{SERVICE_SIDE}::test_distributed_map_may_start_its_child_executions"
        ),
        f"{BACKFILL_POLICY}/TrackDistributedMapChildren": (
            f"{SERVICE_SIDE}::test_distributed_map_may_watch_and_stop_its_child_executions"
        ),
        "SparkJobRole/spark-data-access/JobLogs": (
            f"{SERVICE_SIDE}::test_glue_jobs_may_write_their_logs"
        ),
        "SparkJobRole/spark-data-access/SparkLogGroup": (
            f"{SERVICE_SIDE}::test_emr_serverless_jobs_may_write_to_the_spark_log_group"
        ),
        "SparkJobRole/spark-data-access/FindSparkLogGroup": (
            f"{SERVICE_SIDE}::test_emr_serverless_jobs_may_find_the_spark_log_group"
        ),
        "RetentionScheduleRole/RetentionScheduleRolePolicy0/StartRetentionRuns": (
            f"{SERVICE_SIDE}::test_the_retention_schedule_may_start_the_retention_machine_and_nothing_else"
        ),
        "RetentionStateMachineRole/RetentionStateMachineRolePolicy0/RunSparkOnGlue": (
            f"{SERVICE_SIDE}::test_the_retention_machine_on_glue_may_run_exactly_the_jobs_its_definition_starts"
        ),
        "IndexCompactionScheduleRole/IndexCompactionScheduleRolePolicy0/StartCompactionRuns": (
            f"{SERVICE_SIDE}::test_the_compaction_schedule_may_start_the_compaction_machine_and_nothing_else"
        ),
        "IndexCompactionStateMachineRole/IndexCompactionStateMachineRolePolicy0/RunSparkOnGlue": (
            f"{SERVICE_SIDE}::test_the_compaction_machine_on_glue_may_run_exactly_the_compaction_job"
        ),
        "IndexObjectFunctionRole/IndexObjectFunctionEventInvokeConfigOnFailureSQSPolicy/#0": (
            f"{SERVICE_SIDE}::test_index_object_function_may_deliver_failures_to_its_destination"
        ),
    }
    for role in LOGGING_STATE_MACHINES:
        tests[f"{role}/{role}Policy0/DeliverLogs"] = (
            f"{SERVICE_SIDE}::test_state_machine_log_delivery_is_what_step_functions_documents[{role}]"
        )
    for role in STATE_MACHINES:
        tests[f"{role}/{role}Policy0/NotifyEncrypted"] = (
            f"{SERVICE_SIDE}::test_state_machines_may_publish_to_the_encrypted_topic[{role}]"
        )
    for name in LIST_INDEX_BUCKET:
        tests[name] = (
            f"{SERVICE_SIDE}::test_roles_reading_segments_may_list_the_index_bucket_so_a_gone_segment_is_a_404[{name}]"
        )
    for name in CUSTOMER_KEY_POLICIES:
        tests[name] = (
            f"{SERVICE_SIDE}::test_customer_key_statements_grant_the_key_and_nothing_else[{name}]"
        )
    return tests


TEMPLATE_TESTS = _template_tests()


def _branches(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict) and "Fn::If" in value:
        return [found for branch in value["Fn::If"][1:] for found in _branches(branch)]
    return [value] if isinstance(value, dict) else []


def template_statements(translated: dict[str, Any]) -> dict[str, str]:
    """`<Role>/<PolicyName>/<Sid or #n>` -> Effect, for every inline statement of every role,
    in every branch of an `Fn::If`."""
    found: dict[str, str] = {}
    for logical_id, resource in translated["Resources"].items():
        if resource.get("Type") != "AWS::IAM::Role":
            continue
        for policy in resource["Properties"].get("Policies", []):
            for branch in _branches(policy):
                if "PolicyName" not in branch:
                    continue
                for index, statement in enumerate(branch["PolicyDocument"]["Statement"]):
                    for each in _branches(statement):
                        sid = each.get("Sid") or f"#{index}"
                        found[f"{logical_id}/{branch['PolicyName']}/{sid}"] = each["Effect"]
    return found


@pytest.fixture(scope="module")
def statements() -> dict[str, str]:
    return template_statements(translated_template())


@pytest.fixture(scope="module")
def record() -> dict[str, list[str]]:
    recorded: dict[str, list[str]] = json.loads(RECORD_PATH.read_text())
    return recorded


@cache
def _functions_in(path: str) -> frozenset[str]:
    tree = ast.parse((REPO_ROOT / path).read_text())
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def _exists(test_id: str) -> bool:
    path, _, name = test_id.partition("::")
    if not (REPO_ROOT / path).is_file():
        return False
    function = name.split("::")[-1].split("[", 1)[0]
    return function in _functions_in(path)


def test_every_statement_names_a_test_that_fails_without_it(
    statements: dict[str, str], record: dict[str, list[str]]
) -> None:
    allows = sorted(name for name, effect in statements.items() if effect == "Allow")
    assert len(allows) > 100
    unnamed = [name for name in allows if not record.get(name) and name not in TEMPLATE_TESTS]
    assert unnamed == [], (
        "statements no test needs (a local run that needs them, recorded by tests/iam_coverage.py,"
        " or a template test in TEMPLATE_TESTS):\n" + "\n".join(unnamed)
    )


def test_the_record_and_the_table_name_only_statements_of_the_template(
    statements: dict[str, str], record: dict[str, list[str]]
) -> None:
    stale = sorted((set(record) | set(TEMPLATE_TESTS)) - set(statements))
    assert stale == [], "no longer in the template (regenerate the record):\n" + "\n".join(stale)
    named = set(record) | set(TEMPLATE_TESTS)
    assert sorted(name for name in named if statements[name] != "Allow") == []


def test_every_named_test_exists(record: dict[str, list[str]]) -> None:
    named = {test for tests in record.values() for test in tests} | set(TEMPLATE_TESTS.values())
    missing = sorted(test for test in named if not _exists(test))
    assert missing == [], "named tests that do not exist:\n" + "\n".join(missing)
