"""`lethe index compact` and `lethe datasets retention ID --run` (the runbook's hand-started
runs, issue 23) against the registry, the segment manifest and Step Functions on in-process moto,
whose interpreter runs stand-in state machines (a Pass with the real machine's output shape, or
a Fail with its error): the input and name each command starts its machine with, what --wait
prints for each ending, and the refusals (exit 2 and 3, and exit 1 for an index in DynamoDB)
that start nothing. The real machines run in tests/e2e/test_runbooks.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto.core.config import default_user_config

from lethe import cli
from lethe.commands import index_compact, retention_run
from lethe_shared.aws.executions import timestamped
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.retention_runs import DynamoRunStates, RunState
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.subject_index import IndexEntry
from tests.integration.conftest import REGION, TABLES, create_table_from_template

INDEX_BUCKET = "lethe-local-index"
DOCUMENT: dict[str, Any] = {
    "dataset_id": "notes",
    "format": "csv",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "review_date", "type": "date"},
    ],
    "retention": {"column": "review_date", "days": 30},
}
RUN = {"run_id": "rt-notes-20261128T000000Z-abcdef", "dataset_id": "notes",
       "outcome": "COMPLETED", "complete": True, "rows_removed": 4, "versions_purged": 2,
       "deleted": 1, "rewritten": 2}  # fmt: skip
SKIPPED = {"dataset_id": "ledger", "reason": "legal_hold", "detail": "legal hold h-1: audit"}


class MotoTarget:
    """What `lethe.target.resolve` gives the commands, on in-process moto."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    def resource(self, service: str) -> Any:
        return boto3.resource(service, region_name=REGION)  # type: ignore[call-overload]

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION)  # type: ignore[call-overload]

    def output(self, name: str) -> str:
        return self.outputs[name]


@pytest.fixture
def datasets_table(aws: None) -> Any:
    return create_table_from_template("DatasetsTable", TABLES["DatasetsTable"])


def at(moment: str) -> Callable[[str, str], str]:
    """`timestamped` as at `moment` (UTC): the second a command starts in."""
    when = datetime.fromisoformat(moment).replace(tzinfo=UTC)
    return lambda label, kind: timestamped(label, kind, when)


@pytest.fixture(autouse=True)
def a_second_per_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each start of a test in a second of its own, as an operator's commands are (two starts
    within one second share a name: the first test shows what that does)."""
    seconds = iter(range(10_000))
    base = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)

    def later(label: str, kind: str) -> str:
        return timestamped(label, kind, base + timedelta(seconds=next(seconds)))

    monkeypatch.setattr(index_compact, "timestamped", later)
    monkeypatch.setattr(retention_run, "timestamped", later)


@pytest.fixture
def executing(aws: None) -> Iterator[None]:
    """moto's Step Functions interpreter runs the executions this test starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(default_user_config["stepfunctions"], "execute_state_machine", True)
        yield


def machine(name: str, state: dict[str, Any]) -> str:
    """A one-state machine standing in for a deployed one."""
    return str(
        boto3.client("stepfunctions", region_name=REGION).create_state_machine(
            name=name,
            definition=json.dumps({"StartAt": "Only", "States": {"Only": state}}),
            roleArn=f"arn:aws:iam::123456789012:role/{name}",
        )["stateMachineArn"]
    )


SUCCEEDS: dict[str, Any] = {"Type": "Pass", "Result": {"compacted": True}, "End": True}


@pytest.fixture
def deployment(
    datasets_table: Any, executing: None, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., MotoTarget]:
    """A target whose registry holds `notes` (with a retention rule) and `plain` (none), and
    whose compaction and retention machines are the given states."""
    table = datasets_table
    registry = DynamoDatasetRegistry(table)
    registry.register(parse_dataset(DOCUMENT), key_fingerprint="k" * 16)
    plain = {k: v for k, v in DOCUMENT.items() if k != "retention"} | {"dataset_id": "plain"}
    registry.register(parse_dataset(plain), key_fingerprint="k" * 16)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=INDEX_BUCKET)
    manifest = boto3.resource("dynamodb", region_name=REGION).create_table(
        **manifest_table_definition("lethe-local-index-manifest")
    )
    built: list[MotoTarget] = []

    def build(
        *, compaction: dict[str, Any] = SUCCEEDS, retention: dict[str, Any] = SUCCEEDS,
        store: str = "segments",
    ) -> MotoTarget:  # fmt: skip
        name = f"lethe-local-{{}}-{len(built)}"  # names of their own: a test may deploy twice
        target = MotoTarget({
            "DatasetsTableName": table.name,
            "IndexStore": store,
            "IndexBucketName": INDEX_BUCKET,
            "IndexManifestTableName": manifest.name,
            "SubjectIndexTableName": TABLES["SubjectIndexTable"],
            "IndexCompactionStateMachineArn": machine(name.format("index-compaction"), compaction),
            "RetentionStateMachineArn": machine(name.format("retention"), retention),
        })  # fmt: skip
        monkeypatch.setattr(index_compact, "resolve", lambda args: target)
        monkeypatch.setattr(retention_run, "resolve", lambda args: target)
        built.append(target)
        return target

    return build


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--state-file", "unused.json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def executions(target: MotoTarget, output: str) -> list[dict[str, Any]]:
    sfn: Any = boto3.client("stepfunctions", region_name=REGION)
    listed = sfn.list_executions(stateMachineArn=target.output(output))["executions"]
    return [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]


def level0_segments(target: MotoTarget, dataset_id: str, count: int) -> None:
    """`count` active level-0 segments of the dataset, one object written per segment."""
    index = SegmentSubjectIndex(
        boto3.client("s3", region_name=REGION), INDEX_BUCKET,
        boto3.resource("dynamodb", region_name=REGION).Table(
            target.output("IndexManifestTableName")
        ),
        settle_seconds=0,
    )  # fmt: skip
    for i in range(count):
        url = f"s3://lake/{dataset_id}/part-{i}.parquet"
        index.replace_object(url, [IndexEntry(
            subject_hash=hashlib.sha256(f"s-{i}".encode()).hexdigest(), object_url=url,
            dataset_id=dataset_id, zone=Zone.LAKE, format="parquet", rows=1, row_hints=(1,),
            version_id="v1", etag="e1", matching_fingerprint="m" * 16, key_fingerprint="k" * 16,
        )])  # fmt: skip


# ---------------------------------------------------------------------- lethe index compact


def test_compact_starts_the_machine_with_the_runbook_s_input_and_returns(
    deployment: Callable[..., MotoTarget],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = deployment()
    monkeypatch.setattr(index_compact, "timestamped", at("2026-11-28T10:00:00"))

    code, out, _ = run(capsys, "index", "compact", "--dataset", "notes")
    same_second = run(capsys, "index", "compact", "--dataset", "notes", "--min-level0", "4")
    monkeypatch.setattr(index_compact, "timestamped", at("2026-11-28T10:00:01"))
    again = run(capsys, "index", "compact", "--dataset", "notes", "--min-level0", "4", "--json")

    (first, second) = sorted(executions(target, "IndexCompactionStateMachineArn"),
                             key=lambda e: e["name"])  # fmt: skip
    assert code == 0
    assert out == first["executionArn"] + "\n"
    assert json.loads(first["input"]) == {"dataset_id": "notes", "min_level0": 1}
    assert first["name"] == "notes-compact-20261128T100000Z"
    # another input in the same second: refused (as backfill's), and said how to go on
    assert same_second[0] == 1
    assert "with another input exists; try again in a second" in same_second[2]
    assert second["name"] == "notes-compact-20261128T100001Z"
    assert again[0] == 0
    assert json.loads(again[1]) == {
        "dataset_id": "notes", "execution_arn": second["executionArn"], "min_level0": 4,
        "status": "RUNNING", "level0_before": 0, "level1_before": 0,
    }  # fmt: skip
    assert json.loads(second["input"]) == {"dataset_id": "notes", "min_level0": 4}


def test_compact_wait_prints_the_segments_before_and_after(
    deployment: Callable[..., MotoTarget], capsys: pytest.CaptureFixture[str]
) -> None:
    target = deployment()
    level0_segments(target, "notes", 2)

    under = run(capsys, "index", "compact", "--dataset", "notes", "--min-level0", "3", "--wait")
    at = run(capsys, "index", "compact", "--dataset", "notes", "--wait", "--json")

    assert under[0] == 0, under[2]
    arn, summary = under[1].splitlines()
    assert arn.startswith("arn:aws:states:")
    assert ":notes-compact-" in arn
    assert summary == (
        "compaction of notes SUCCEEDED: active level-0 segments 2 -> 2, level-1 segments 0 -> 0"
        " (fewer than --min-level0 3: left alone)"
    )
    # the segments were written just now: younger than the compaction's settle time (60 s)
    assert "2 level-0 segment(s) of notes are younger than the 60 s settle time" in under[2]
    assert at[0] == 0, at[2]
    shown = json.loads(at[1])  # the ARN went to stderr
    assert "arn:aws:states:" in at[2]
    assert (shown["status"], shown["level0_before"], shown["level0_after"]) == ("SUCCEEDED", 2, 2)
    assert (shown["level1_after"], shown["level0_settling"]) == (0, 2)


def test_a_failed_compaction_exits_1_naming_error_and_execution(
    deployment: Callable[..., MotoTarget], capsys: pytest.CaptureFixture[str]
) -> None:
    deployment(compaction={"Type": "Fail", "Error": "IndexCompactionFailed",
                           "Cause": "SparkArtifactsMissing: run lethe deploy"})  # fmt: skip

    code, _, err = run(capsys, "index", "compact", "--dataset", "notes", "--wait")

    assert code == 1
    assert "compaction of notes FAILED: IndexCompactionFailed: SparkArtifactsMissing" in err
    assert "execution: arn:aws:states:" in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--dataset", "Not A Dataset"], 2, "--dataset 'Not A Dataset' is not a dataset id"),
        (["--dataset", "notes", "--min-level0", "0"], 2, "--min-level0 must be at least 1"),
        (["--dataset", "ghost"], 3, "dataset ghost is not registered"),
    ],
)
def test_compact_refusals_start_nothing(
    deployment: Callable[..., MotoTarget],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    target = deployment()

    refused = run(capsys, "index", "compact", *argv)

    assert refused[0] == code
    assert message in refused[2]
    assert executions(target, "IndexCompactionStateMachineArn") == []


def test_compact_on_a_dynamodb_index_is_refused(
    deployment: Callable[..., MotoTarget], capsys: pytest.CaptureFixture[str]
) -> None:
    target = deployment(store="dynamodb")

    code, _, err = run(capsys, "index", "compact", "--dataset", "notes")

    assert code == 1
    assert "IndexStore=dynamodb" in err
    assert "segment index only" in err
    assert executions(target, "IndexCompactionStateMachineArn") == []


# ------------------------------------------------------------ lethe datasets retention --run


def test_a_run_by_hand_starts_the_retention_machine_for_the_dataset(
    deployment: Callable[..., MotoTarget], capsys: pytest.CaptureFixture[str]
) -> None:
    target = deployment()

    code, out, err = run(capsys, "datasets", "retention", "notes", "--run")

    (execution,) = executions(target, "RetentionStateMachineArn")
    assert code == 0
    assert out == execution["executionArn"] + "\n"
    assert json.loads(execution["input"]) == {"dataset_ids": ["notes"]}
    assert execution["name"].startswith("notes-retention-")
    assert "`lethe datasets show notes` shows its outcome" in err


def test_run_wait_prints_each_run_and_skip_of_the_dataset(
    deployment: Callable[..., MotoTarget], capsys: pytest.CaptureFixture[str]
) -> None:
    notice = {"dataset_id": "notes", "reason": "notice", "detail": "rule abc first seen X"}
    result = {"runs": [RUN, {**RUN, "dataset_id": "other"}], "skipped": [SKIPPED]}
    deployment(retention={"Type": "Pass", "Result": result, "End": True})

    code, out, err = run(capsys, "datasets", "retention", "notes", "--run", "--wait")
    shown = run(capsys, "datasets", "retention", "notes", "--run", "--wait", "--json")

    assert code == 0, err
    arn, line = out.splitlines()
    assert arn.startswith("arn:aws:states:")
    assert line == (
        f"retention run {RUN['run_id']} of notes: COMPLETED (4 row(s) removed, 2 version(s) "
        f"purged); its certificate: `lethe erasure certificate {RUN['run_id']} --verify`"
    )
    assert shown[0] == 0
    document = json.loads(shown[1])
    assert document["status"] == "SUCCEEDED"
    assert document["runs"] == [RUN]  # the other dataset's run and skip are not this one's
    assert document["skipped"] == []
    # a rule in its notice period: skipped, and the run by hand says it does not shorten it
    deployment(retention={"Type": "Pass", "Result": {"runs": [], "skipped": [notice]},
                          "End": True})  # fmt: skip
    skipped = run(capsys, "datasets", "retention", "notes", "--run", "--wait")
    assert skipped[0] == 0
    assert "retention of notes skipped (notice): rule abc first seen X" in skipped[1]
    assert "does not shorten the notice period (RetentionNoticeDays)" in skipped[1]


def test_an_incomplete_run_exits_1_with_the_last_run_the_dataset_records(
    deployment: Callable[..., MotoTarget],
    datasets_table: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployment(retention={"Type": "Fail", "Error": "RetentionIncomplete",
                          "Cause": "a retention run is not complete"})  # fmt: skip
    states = DynamoRunStates(datasets_table)
    earlier = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    states.put(RunState(dataset_id="notes", last_run={"at": earlier, "outcome": "COMPLETED"}))

    stale = run(capsys, "datasets", "retention", "notes", "--run", "--wait")
    # the run this execution certified (recorded while it ran: after it started)
    during = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    states.put(RunState(dataset_id="notes", last_run={
        "at": during, "outcome": "INCOMPLETE", "run_id": RUN["run_id"], "cutoff": "2026-10-29",
        "rows_removed": 3, "versions_purged": 1, "not_removed": ["verification_failed"],
    }))  # fmt: skip
    code, out, err = run(capsys, "datasets", "retention", "notes", "--run", "--wait")

    assert stale[0] == 1
    assert "retention of notes: no run recorded by this execution" in stale[1]
    assert code == 1
    assert f"notes: last run {during}: INCOMPLETE (3 row(s) removed, 1 version(s) purged" in out
    assert "not removed: verification_failed" in out
    assert "retention run of notes FAILED: RetentionIncomplete" in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["notes", "--wait"], 2, "--wait needs --run"),
        (["plain", "--run"], 2, "dataset plain declares no retention"),
        (["ghost", "--run"], 3, "dataset ghost is not registered"),
        (["Bad Id", "--run"], 2, "dataset 'Bad Id' is not a dataset id"),
    ],
)
def test_retention_run_refusals_start_nothing(
    deployment: Callable[..., MotoTarget],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    target = deployment()

    refused = run(capsys, "datasets", "retention", *argv)

    assert refused[0] == code
    assert message in refused[2]
    assert executions(target, "RetentionStateMachineArn") == []
