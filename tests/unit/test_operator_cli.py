"""The operator CLI's contract without a cloud: --version, exit codes per situation, global AWS
options, error messages that say what to do, progress on stderr only, dead letter summaries
that never copy a body, and re-ingestion execution names."""

from __future__ import annotations

import argparse
import io
import json
import tomllib
from importlib.metadata import PackageNotFoundError
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

import lethe
from lethe import cli, target
from lethe.commands import (
    CommandError,
    ExitCode,
    NotFoundError,
    UnreachableError,
    UsageError,
    dlq,
)
from lethe.commands.local import sam_env_vars
from lethe.progress import Waiting
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone
from lethe_shared.ingestion.starter import IngestionGroup, plan_groups
from tests.conftest import REPO_ROOT

RAW_ID = "u-SECRET-4242"


def _pyproject_version() -> str:
    return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])


# ------------------------------------------------------------------------------ version


def test_version_is_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"lethe {_pyproject_version()}"


def test_version_from_source_falls_back_to_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(cli, "distribution_version", missing)
    assert cli.version() == lethe.__version__ == _pyproject_version()


# ------------------------------------------------------------------------------ exit codes


def test_exit_codes_are_defined_once() -> None:
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 130]
    assert CommandError.exit_code == 1
    assert UsageError.exit_code == 2
    assert NotFoundError.exit_code == 3
    assert UnreachableError.exit_code == 4
    assert target.TargetError("x").exit_code == 4


def test_no_target_exits_4_and_says_how_to_start_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LETHE_STATE_FILE", raising=False)
    monkeypatch.delenv("LETHE_STACK_NAME", raising=False)
    assert cli.main(["datasets", "list"]) == 4
    err = capsys.readouterr().err
    assert "lethe local up --detach --state-file F" in err
    assert "--stack-name S" in err


def test_a_missing_state_file_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.json"
    assert cli.main(["objects", "list", "--dataset", "d", "--state-file", str(missing)]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"lethe local up --detach --state-file {missing}" in captured.err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["objects", "reingest", "--dataset", "d"])  # neither --key nor --status
    assert exited.value.code == 2
    assert cli.main(["objects", "reingest", "--dataset", "d", "--status", "DELETED"]) == 2
    with pytest.raises(SystemExit) as refused:  # not a choice of redrive (issue 23)
        cli.main(["dlq", "redrive", "--queue", "workflow"])
    assert refused.value.code == 2
    assert "no source queue" in capsys.readouterr().err


def test_keyboard_interrupt_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(dlq, "list_messages", interrupted)
    assert cli.main(["dlq", "list"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "code", "hint"),
    [
        (NoCredentialsError(), 4, "AWS_PROFILE"),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), 4, "lethe local up"),
        (
            ClientError({"Error": {"Code": "ExpiredToken", "Message": "old"}}, "GetItem"),
            4,
            "renew them",
        ),
        (
            ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetItem"),
            1,
            "LETHE_DEBUG=1",
        ),
        (ValueError("boom"), 1, "ValueError: boom"),
    ],
)
def test_errors_are_mapped_to_codes_and_hints(error: Exception, code: int, hint: str) -> None:
    got, message = cli.explain(error)
    assert got == code
    assert hint in message


def test_an_unknown_profile_exits_4_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    code = cli.main(["--profile", "nobody", "datasets", "list", "--stack-name", "lethe-prod"])
    assert code == 4
    assert "AWS profile 'nobody' is not configured" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--profile", "ops", "--region", "eu-west-1", "dlq", "list", "--stack-name", "s"],
        ["dlq", "list", "--stack-name", "s", "--profile", "ops", "--region", "eu-west-1"],
    ],
)
def test_profile_and_region_go_before_or_after_the_command(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def from_stack(name: str, region: str | None, profile: str | None) -> Any:
        seen.update(name=name, region=region, profile=profile)
        raise target.TargetError("stop here")

    monkeypatch.setattr(target, "from_stack", from_stack)
    assert cli.main(argv) == 4
    assert seen == {"name": "s", "region": "eu-west-1", "profile": "ops"}


def test_every_read_command_takes_json() -> None:
    parser = cli.build_parser()
    reads = [
        ["datasets", "get", "d"],
        ["datasets", "list"],
        ["objects", "list", "--dataset", "d"],
        ["objects", "reingest", "--dataset", "d", "--status", "FAILED"],
        ["index", "lookup", "--subject", "x"],
        ["index", "reconcile", "--dataset", "d"],
        ["erasure", "status", "er-1"],
        ["erasure", "list"],
        ["erasure", "certificate", "er-1"],
        ["local", "status", "--state-file", "f"],
        ["local", "mail", "--state-file", "f"],
        ["dlq", "list"],
        ["dlq", "redrive"],
    ]
    for argv in reads:
        assert parser.parse_args([*argv, "--json"]).json is True, argv


# ------------------------------------------------------------------------------ progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_without_a_terminal_prints_each_change_once() -> None:
    stream = io.StringIO()
    with Waiting("backfill", stream=stream) as waiting:
        for text in ("starting", "starting", "1 of 2", "1 of 2", "2 of 2"):
            waiting.update(text)
    assert stream.getvalue() == "  starting\n  1 of 2\n  2 of 2\n"


def test_quiet_progress_prints_nothing() -> None:
    stream = Terminal()
    with Waiting("backfill", quiet=True, stream=stream) as waiting:
        waiting.update("1 of 2")
        waiting.tick()
    assert stream.getvalue() == ""


def test_progress_on_a_terminal_is_a_spinner_on_its_stream(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = Terminal()
    with Waiting("backfill", stream=stream) as waiting:
        waiting.update("batches: 1 done")
        waiting.tick()
    assert "batches: 1 done" in stream.getvalue()
    assert "backfill" in stream.getvalue()
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------------ dead letters


def _s3_event() -> dict[str, Any]:
    sqs_event = json.loads((REPO_ROOT / "events" / "object_created_raw.json").read_text())
    return dict(json.loads(sqs_event["Records"][0]["body"]))


def test_an_s3_dead_letter_is_summed_up_by_bucket_and_key() -> None:
    event = _s3_event()
    summary = dlq.summarize(json.dumps(event))
    assert summary.startswith("aws.s3 Object Created s3://")
    assert event["detail"]["object"]["key"] in summary


def test_an_erasure_event_summary_never_shows_its_subject_ids() -> None:
    event = {
        "source": "lethe.requests",
        "detail-type": "Erasure Requested",
        "id": "e-1",
        "detail": {"subject_ids": [RAW_ID], "reason": f"for {RAW_ID}", "request_id": "er-9"},
    }
    summary = dlq.summarize(json.dumps(event))
    assert summary == "lethe.requests Erasure Requested request er-9"
    assert RAW_ID not in summary


def test_a_lambda_destination_record_is_summed_up() -> None:
    record = {
        "requestContext": {
            "functionArn": "arn:aws:lambda:us-east-1:1:function:lethe-dev-index-object:$LATEST",
            "condition": "RetriesExhausted",
        },
        "requestPayload": {"bucket": "lake", "key": "reviews/x.parquet", "subjects": [RAW_ID]},
        "responsePayload": {"errorType": "Throttled", "errorMessage": "slow down"},
    }
    summary = dlq.summarize(json.dumps(record))
    assert summary.startswith("lambda lethe-dev-index-object:$LATEST RetriesExhausted")
    assert "s3://lake/reviews/x.parquet" in summary
    assert summary.endswith("Throttled: slow down")
    assert RAW_ID not in summary


@pytest.mark.parametrize(
    ("body", "summary"),
    [("garbage", "not JSON (7 bytes)"), ("[1]", "JSON list, not an event")],
)
def test_odd_bodies(body: str, summary: str) -> None:
    assert dlq.summarize(body) == summary


def test_an_unknown_object_shows_field_names_only() -> None:
    summary = dlq.summarize(json.dumps({"user_id": RAW_ID}))
    assert summary == "JSON object with fields user_id"


class FakeSqs:
    def __init__(self, listings: list[list[dict[str, Any]]]) -> None:
        self.listings = listings

    def list_message_move_tasks(self, SourceArn: str, MaxResults: int) -> dict[str, Any]:
        return {"Results": self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]}


def test_a_move_task_is_followed_after_sqs_drops_its_handle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dlq, "_sleep", lambda seconds: None)
    running = {"TaskHandle": "h", "Status": "RUNNING", "ApproximateNumberOfMessagesMoved": 1}
    done = {"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 3}  # no handle on AWS
    sqs = FakeSqs([[running], [done]])
    task = dlq.wait_for_move_task(sqs, "arn", "h", timeout=60, waiting=Waiting("x", quiet=True))
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 3


# ------------------------------------------------------------------------------ reingest names


def _item(key: str, version: str = "v1", status: ObjectStatus = ObjectStatus.FAILED) -> Any:
    return CatalogItem(
        bucket="raw",
        key=key,
        version_id=version,
        zone=Zone.RAW,
        status=status,
        sequencer="1",
        dataset_id="reviews-with-a-rather-long-dataset-identifier",
    )


def test_a_rerun_has_its_own_name_and_the_same_input() -> None:
    items = [_item("a.csv"), _item("b.csv")]
    (first,) = plan_groups((i, "r") for i in items)
    (rerun,) = plan_groups(((i, "r") for i in items), rerun="20261122T100000Z")
    (again,) = plan_groups(((i, "r") for i in items), rerun="20261122T100001Z")
    assert len({first.name, rerun.name, again.name}) == 3
    assert "rerun-20261122T100000Z-" in rerun.name
    assert all(len(g.name) <= 80 for g in (first, rerun, again))
    assert rerun.execution_input("reports") == {
        **first.execution_input("reports"),
        "manifest": f"s3://reports/{rerun.manifest_key}",
    }
    assert rerun.manifest() == first.manifest()
    assert IngestionGroup(items=rerun.items, rerun="20261122T100000Z").name == rerun.name


def test_sam_env_sets_the_endpoint_for_every_function_and_keeps_their_variables() -> None:
    state = {
        "endpoint_url": "http://127.0.0.1:4566",
        "function_environments": {"B": {"STAGE": "local"}, "A": {"STAGE": "local", "X": "1"}},
    }
    assert sam_env_vars(state) == {
        "A": {"STAGE": "local", "X": "1", "LETHE_ENDPOINT_URL": "http://127.0.0.1:4566"},
        "B": {"STAGE": "local", "LETHE_ENDPOINT_URL": "http://127.0.0.1:4566"},
    }
    with pytest.raises(CommandError, match="no function environments; restart it"):
        sam_env_vars({"endpoint_url": "http://127.0.0.1:4566"})
