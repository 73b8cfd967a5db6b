"""The runbook's hand-started runs without a cloud (issue 23): how `lethe index compact` and
`lethe datasets retention ID --run` parse, the usage errors they give before any target is
read, and the execution helpers every workflow command shares (lethe.commands.executions):
the poll interval, the time-out that leaves the execution running, and a failed execution's
message."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe import cli
from lethe.commands import CommandError, UsageError, index_compact, retention_run
from lethe.commands.datasets_records import retention_command
from lethe.commands.executions import (
    WAIT_TIMEOUT_SECONDS,
    check_dataset_id,
    finished,
    wait_for_execution,
)
from lethe.localcloud.template import load_template
from lethe.progress import Waiting


def test_compact_parses_with_the_by_hand_defaults() -> None:
    args = cli.build_parser().parse_args(["index", "compact", "--dataset", "reviews"])

    assert args.func is index_compact.compact_dataset
    assert (args.dataset, args.min_level0, args.wait, args.json) == ("reviews", 1, False, False)
    assert args.timeout == WAIT_TIMEOUT_SECONDS
    waited = cli.build_parser().parse_args(
        ["index", "compact", "--dataset", "reviews", "--min-level0", "8", "--wait",
         "--timeout", "60", "--json"]
    )  # fmt: skip
    assert (waited.min_level0, waited.wait, waited.timeout, waited.json) == (8, True, 60.0, True)


@pytest.mark.parametrize(
    "argv",
    [
        ["index", "compact"],  # --dataset is required
        ["index", "compact", "--dataset", "d", "--min-level0", "some"],
        ["datasets", "retention", "--run"],  # the dataset is required
    ],
)
def test_argparse_refuses_with_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "usage: lethe" in capsys.readouterr().err


def test_retention_parses_a_plan_or_a_run() -> None:
    parser = cli.build_parser()
    plan = parser.parse_args(["datasets", "retention", "orders"])
    started = parser.parse_args(["datasets", "retention", "orders", "--run", "--wait", "--json"])

    assert plan.func is retention_command
    assert (plan.run, plan.wait) == (False, False)
    assert (started.dataset_id, started.run, started.wait, started.json) == (
        "orders", True, True, True,
    )  # fmt: skip


def test_wait_without_run_is_a_usage_error_before_any_target(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LETHE_STATE_FILE", raising=False)
    monkeypatch.delenv("LETHE_STACK_NAME", raising=False)

    code = cli.main(["datasets", "retention", "orders", "--wait"])

    assert code == 2
    assert "--wait needs --run" in capsys.readouterr().err


@pytest.mark.parametrize("dataset_id", ["Reviews", "a b", "-x", "x" * 64, ""])
def test_a_dataset_id_is_checked_before_any_call(dataset_id: str) -> None:
    with pytest.raises(UsageError, match="is not a dataset id"):
        check_dataset_id(dataset_id)
    check_dataset_id("reviews_2026-11")


class Executions:
    """describe_execution answering RUNNING `running` times, then `final`."""

    def __init__(self, running: int, final: dict[str, Any]) -> None:
        self.running = running
        self.final = final
        self.calls = 0

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.running:
            return {"executionArn": executionArn, "status": "RUNNING"}
        return {"executionArn": executionArn, **self.final}


def test_the_wait_polls_more_slowly_up_to_10_s_and_returns_the_ended_execution() -> None:
    slept: list[float] = []
    sfn = Executions(running=8, final={"status": "SUCCEEDED", "output": '{"compacted": true}'})
    stream = io.StringIO()

    described = wait_for_execution(
        sfn, "arn:x", timeout=3600, sleep=slept.append, clock=lambda: 0.0,
        waiting=Waiting("compaction of d", stream=stream),
    )  # fmt: skip

    assert described["status"] == "SUCCEEDED"
    assert finished(described, "compaction of d") == {"compacted": True}
    assert slept[:3] == [1.0, 1.5, 2.25]
    assert max(slept) == 10.0
    assert len(slept) == 8
    assert stream.getvalue() == "  RUNNING\n"  # each new state once, on stderr's stream


def test_a_wait_past_its_timeout_says_the_execution_goes_on() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(CommandError, match=r"still RUNNING after 5 s; it goes on: arn:x"):
        wait_for_execution(
            Executions(running=100, final={}), "arn:x", timeout=5, sleep=sleep,
            clock=lambda: now[0], waiting=Waiting("x", quiet=True),
        )  # fmt: skip


def test_a_failed_execution_names_status_error_cause_and_arn() -> None:
    described = {"executionArn": "arn:x", "status": "FAILED", "error": "RetentionIncomplete",
                 "cause": "a retention run is not complete"}  # fmt: skip
    with pytest.raises(CommandError) as failed:
        finished(described, "retention run of notes")
    assert str(failed.value) == (
        "retention run of notes FAILED: RetentionIncomplete: a retention run is not complete\n"
        "execution: arn:x"
    )
    assert failed.value.exit_code == 1


def test_why_level0_segments_remain_after_a_compaction() -> None:
    left = index_compact._left_note
    assert left(before=4, after=0, min_level0=1) == ""
    assert "fewer than --min-level0 8: left alone" in left(before=3, after=3, min_level0=8)
    assert "another run held the dataset's compaction lease" in left(4, 1, min_level0=1)
    assert left(3, 3, min_level0=1, young=3) == (
        " (younger than the 60 s settle time when the run started: the next run takes them; "
        "run it again in a minute)"
    )
    assert "remain: 1 younger than the 60 s settle time, written during the run" in left(
        4, 2, min_level0=1, young=1
    )


def test_the_settle_time_the_command_explains_is_the_template_s() -> None:
    machine = load_template()["Resources"]["IndexCompactionStateMachine"]["Properties"]
    settle = machine["DefinitionSubstitutions"]["CompactionSettleSeconds"]
    assert int(settle) == index_compact.SETTLE_SECONDS


def test_a_last_run_counts_when_this_execution_recorded_it() -> None:
    started = datetime(2026, 11, 28, 3, 30, 0, 250000, tzinfo=UTC)
    since = retention_run._since
    assert since({"at": (started + timedelta(minutes=5)).isoformat()}, started)
    assert since({"at": "2026-11-28T03:30:00+00:00"}, started)  # the same second
    assert not since({"at": (started - timedelta(days=1)).isoformat()}, started)
    assert not since({}, started)
    assert not since({"at": "not a time"}, started)
