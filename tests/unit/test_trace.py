"""`lethe trace`: terms of a story, executions, local log files and the Logs Insights path."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lethe import tracing
from lethe.commands import UsageError
from lethe.commands import trace as trace_command
from lethe.target import Target

pytestmark = pytest.mark.unit

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-prod-erasure"
INGESTION = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-prod-ingestion"
EXECUTION = "reviews-batch-0123456789abcdef"
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _target(**overrides: Any) -> Target:
    values: dict[str, Any] = {
        "outputs": {"ErasureStateMachineArn": MACHINE, "IngestionStateMachineArn": INGESTION},
        "region": "us-east-1",
        "api_url": "",
    }
    values.update(overrides)
    return Target(**values)


class FakeSfn:
    """describe_execution / get_execution_history for the executions it holds, by ARN."""

    def __init__(self, executions: dict[str, list[dict[str, Any]]]) -> None:
        self.executions = executions
        self.described: list[str] = []

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        self.described.append(executionArn)
        if executionArn not in self.executions:
            raise ClientError(
                {"Error": {"Code": "ExecutionDoesNotExist", "Message": "no"}}, "DescribeExecution"
            )
        return {"status": "SUCCEEDED", "startDate": NOW, "stopDate": NOW + timedelta(minutes=3)}

    def get_execution_history(self, executionArn: str, **_: Any) -> dict[str, Any]:
        return {"events": self.executions[executionArn]}


def _arn(machine: str, name: str) -> str:
    return f"{machine.replace(':stateMachine:', ':execution:')}:{name}"


def _history(job_run: str) -> list[dict[str, Any]]:
    return [
        {"timestamp": NOW, "type": "ExecutionStarted", "executionStartedEventDetails": {}},
        {"timestamp": NOW, "type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Run"}},
        {
            "timestamp": NOW,
            "type": "TaskSubmitted",
            "taskSubmittedEventDetails": {
                "resourceType": "glue",
                "resource": "startJobRun.sync",
                "output": json.dumps({"JobRunId": job_run, "secret": "not shown"}),
            },
        },
        {"timestamp": NOW, "type": "TaskStateExited", "stateExitedEventDetails": {"name": "Run"}},
        {"timestamp": NOW, "type": "ExecutionSucceeded", "executionSucceededEventDetails": {}},
    ]


# --------------------------------------------------------------------------- executions


def test_a_request_id_finds_its_erasure_execution_with_steps_and_job_runs() -> None:
    sfn = FakeSfn({_arn(MACHINE, "erasure-er-42"): _history("jr_1")})
    story = tracing.Story(given="er-42", terms=["er-42"])

    found = tracing.find_executions(_with_clients(_target(), stepfunctions=sfn), story)

    (execution,) = found
    assert (execution.name, execution.status, execution.state_machine) == (
        "erasure-er-42",
        "SUCCEEDED",
        "lethe-prod-erasure",
    )
    assert execution.job_runs == ["jr_1"]
    assert [(s.type, s.state) for s in execution.steps] == [
        ("ExecutionStarted", ""),
        ("TaskStateEntered", "Run"),
        ("TaskSubmitted", ""),
        ("TaskStateExited", "Run"),
        ("ExecutionSucceeded", ""),
    ]
    assert "not shown" not in json.dumps([s.detail for s in execution.steps])  # no task output
    # both machines asked for both names the id may be; nothing else
    assert sorted(sfn.described) == sorted(
        _arn(m, n) for m in (MACHINE, INGESTION) for n in ("er-42", "erasure-er-42")
    )


def test_an_s3_url_is_never_taken_for_an_execution_name() -> None:
    assert tracing.execution_names("s3://bucket/key") == []
    assert tracing.execution_names(EXECUTION) == [EXECUTION]
    assert tracing.execution_names("er-1") == ["er-1", "erasure-er-1"]


def test_an_id_with_quotes_or_a_newline_is_refused() -> None:
    for bad in ('er-1" or 1=1', "a\nb", "", "   "):
        with pytest.raises(tracing.TraceError):
            tracing.resolve(_target(), bad)


# --------------------------------------------------------------------------- local logs


def _json(stamp: str, message: str, **fields: Any) -> str:
    """A Powertools JSON log line."""
    return json.dumps({"timestamp": f"2026-11-24 {stamp}+0000", "message": message, **fields})


def _write(path: Path, *lines: str) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _spark_log(folder: Path, run: str, correlation_id: str, *lines: str) -> None:
    """A local Spark run's log file: its header (as spark_runner writes it), then `lines`."""
    _write(
        folder / f"spark-{run}.log",
        f"# lethe local Spark run {run}",
        "# script s3://artifacts/ingest.py",
        f"# args ['--correlation-id', '{correlation_id}']",
        "# py-files []",
        *lines,
    )


def test_local_log_files_give_the_story_lines_in_time_order(tmp_path: Path) -> None:
    _write(
        tmp_path / "lethe-local-ObjectEvents.log",
        "START RequestId: 1 Version: $LATEST",
        _json("10:00:01,500", "object event recorded", object_url="s3://raw/reviews/a.csv"),
        _json("10:00:02,000", "ingestion batch started", execution=EXECUTION),
        _json("10:00:02,100", "another batch", execution="orders-batch-ffff"),
        "END RequestId: 1",
    )
    _spark_log(
        tmp_path,
        "jr_1",
        EXECUTION,
        "26/11/24 10:00:05 INFO SparkContext: Running Spark version 3.5.9",
        f"2026-11-24 10:00:07,250 INFO [{EXECUTION}] lethe.ingest: wrote 3 rows",
        "Traceback (most recent call last):",
    )
    _spark_log(
        tmp_path,
        "jr_2",
        "orders-batch-ffff",
        "2026-11-24 10:00:06,000 INFO [orders-batch-ffff] lethe.ingest: other rows",
    )
    _write(tmp_path / "moto.log", f"POST /execution/{EXECUTION}")

    lines = tracing.scan_log_files(tmp_path, [EXECUTION])

    assert [(line.time, line.source) for line in lines] == [
        ("2026-11-24T10:00:02.000Z", "lethe-local-ObjectEvents.log"),
        *[("2026-11-24T10:00:05.000Z", "spark-jr_1.log")] * 5,  # header: the first time
        *[("2026-11-24T10:00:07.250Z", "spark-jr_1.log")] * 2,  # a traceback: the one before
    ]
    assert [line.text.split(" ")[1] for line in lines[1:]] == [
        "lethe", "script", "args", "py-files", "10:00:05", "10:00:07,250", "(most",
    ]  # fmt: skip
    assert "ingestion batch started" in lines[0].text


def test_collect_follows_the_execution_a_batch_line_names(tmp_path: Path) -> None:
    _write(
        tmp_path / "lethe-local-ObjectEvents.log",
        _json("10:00:01,500", "object event recorded", object_url="s3://raw/reviews/a.csv"),
        _json(
            "10:00:02,000",
            "ingestion batch started",
            execution=EXECUTION,
            versions=["s3://raw/reviews/a.csv#v1"],
        ),
    )
    _spark_log(
        tmp_path,
        "jr_1",
        EXECUTION,
        f"2026-11-24 10:00:07,250 INFO [{EXECUTION}] lethe.ingest: wrote 3 rows",
    )
    sfn = FakeSfn({_arn(INGESTION, EXECUTION): _history("jr_1")})
    target = _with_clients(_target(logs_dir=tmp_path), stepfunctions=sfn)
    story = tracing.Story(given="s3://raw/reviews/a.csv", terms=["s3://raw/reviews/a.csv"])

    tracing.collect(target, story, now=NOW)

    assert story.terms == ["s3://raw/reviews/a.csv", EXECUTION]
    assert [e.name for e in story.executions] == [EXECUTION]
    assert [line.source for line in story.lines] == [
        "lethe-local-ObjectEvents.log",
        "lethe-local-ObjectEvents.log",
        *["spark-jr_1.log"] * 5,
    ]
    assert story.found


def test_limit_keeps_the_oldest_lines_and_says_so(tmp_path: Path) -> None:
    _write(
        tmp_path / "f.log",
        *(f"2026-11-24 10:00:0{i},000 INFO [x-1] line {i}" for i in (3, 1, 2)),
    )
    story = tracing.Story(given="x-1", terms=["x-1"])
    tracing.collect(_with_clients(_target(logs_dir=tmp_path), stepfunctions=FakeSfn({})), story,
                    limit=2)  # fmt: skip
    assert [line.text[-6:] for line in story.lines] == ["line 1", "line 2"]
    assert story.truncated


# --------------------------------------------------------------------------- AWS


def test_the_insights_query_escapes_terms_and_matches_job_run_streams() -> None:
    query = tracing.insights_query(["s3://raw/a b.csv", 'x"y'], ["jr_1"], 50)
    assert query == (
        "fields @timestamp, @log, @logStream, @message"
        ' | filter @message like "s3://raw/a b.csv" or @message like "x\\"y"'
        ' or @logStream like "jr_1" | sort @timestamp asc | limit 50'
    )


class FakeLogs:
    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses
        self.started: list[dict[str, Any]] = []
        self.stopped: list[str] = []

    def start_query(self, **kwargs: Any) -> dict[str, str]:
        self.started.append(kwargs)
        return {"queryId": f"q{len(self.started)}"}

    def get_query_results(self, queryId: str) -> dict[str, Any]:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        row = [
            {"field": "@timestamp", "value": "2026-11-24 10:00:01.500"},
            {"field": "@log", "value": "123456789012:/lethe/prod/object-events"},
            {"field": "@logStream", "value": "2026/11/24/[$LATEST]abc"},
            {"field": "@message", "value": f'{{"execution": "{EXECUTION}"}}\n'},
        ]
        return {"status": status, "results": [row] if status == "Complete" else []}

    def stop_query(self, queryId: str) -> None:
        self.stopped.append(queryId)


def test_log_groups_are_queried_in_groups_of_50_until_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_sleep", lambda _: None)
    logs = FakeLogs(["Running", "Scheduled", "Complete"])
    groups = [f"/lethe/g{i}" for i in range(51)]

    lines = tracing.query_log_groups(
        logs, groups, "QUERY", since=NOW - timedelta(days=1), until=NOW
    )

    assert [len(q["logGroupNames"]) for q in logs.started] == [50, 1]
    assert logs.started[0]["startTime"] == int((NOW - timedelta(days=1)).timestamp())
    assert lines[0] == tracing.Line(
        "2026-11-24T10:00:01.500Z",
        "/lethe/prod/object-events 2026/11/24/[$LATEST]abc",
        f'{{"execution": "{EXECUTION}"}}',
    )


def test_a_failed_or_endless_query_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_sleep", lambda _: None)
    with pytest.raises(tracing.TraceError, match="ended Failed"):
        tracing.query_log_groups(FakeLogs(["Failed"]), ["/g"], "Q", since=NOW, until=NOW)
    ticks = iter(range(0, 10_000, 100))
    monkeypatch.setattr(tracing, "_clock", lambda: float(next(ticks)))
    logs = FakeLogs(["Running"])
    with pytest.raises(tracing.TraceError, match="took too long"):
        tracing.query_log_groups(logs, ["/g"], "Q", since=NOW, until=NOW)
    assert logs.stopped == ["q1"]


class FakeCloudFormation:
    def get_paginator(self, name: str) -> Any:
        assert name == "list_stack_resources"
        pages = [
            {"StackResourceSummaries": [
                {"ResourceType": "AWS::Logs::LogGroup", "PhysicalResourceId": "/lethe/b"},
                {"ResourceType": "AWS::S3::Bucket", "PhysicalResourceId": "raw"},
            ]},
            {"StackResourceSummaries": [
                {"ResourceType": "AWS::Logs::LogGroup", "PhysicalResourceId": "/lethe/a"},
            ]},
        ]  # fmt: skip

        class Paginator:
            def paginate(self, StackName: str) -> list[dict[str, Any]]:
                assert StackName == "lethe-prod"
                return pages

        return Paginator()


def test_on_aws_the_stack_log_groups_are_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_sleep", lambda _: None)
    logs = FakeLogs(["Complete"])
    target = _with_clients(
        _target(stack_name="lethe-prod"),
        stepfunctions=FakeSfn({}),
        cloudformation=FakeCloudFormation(),
        logs=logs,
    )
    story = tracing.Story(given="er-7", terms=["er-7"])

    tracing.collect(target, story, since=timedelta(hours=2), now=NOW)

    assert logs.started[0]["logGroupNames"] == ["/lethe/a", "/lethe/b"]
    assert logs.started[0]["endTime"] - logs.started[0]["startTime"] == 7200
    # the line names an execution: searched for in a second round, which finds nothing new
    assert story.terms == ["er-7", EXECUTION]
    assert len(logs.started) == 2
    assert len(story.lines) == 1


# --------------------------------------------------------------------------- the command


def test_since_takes_minutes_hours_and_days() -> None:
    assert trace_command.parse_since("90m") == timedelta(minutes=90)
    assert trace_command.parse_since("12h") == timedelta(hours=12)
    assert trace_command.parse_since("7d") == timedelta(days=7)
    for bad in ("0d", "7", "1w", "-1h"):
        with pytest.raises(UsageError):
            trace_command.parse_since(bad)


def _with_clients(target: Target, **clients: Any) -> Target:
    class Fake(Target):
        def client(self, service: Any) -> Any:
            return clients[service]

    return Fake(**{f: getattr(target, f) for f in target.__dataclass_fields__})
