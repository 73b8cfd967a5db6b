"""`lethe trace ID`: every log line and state machine step of one story.

A story is what one upload or one request set going. Its correlation id is carried from the
event through the state machine into the Spark job (docs/OPERATIONS.md, "Following one story"):

- an upload: the object events function logs the S3 event with the object's URL and the
  EventBridge event id (its correlation id while it handles that record), then the batch it
  put the version in, as the ingestion execution's name, with every version of the batch
  (`versions`); the execution passes its name to the Spark job as `--correlation-id`, which the
  job stamps on every line it logs, records on the catalog item of the raw version
  (`ingest_correlation_id`) and writes into the S3 metadata of every lake object
  (`lethe-correlation-id`);
- an erasure request: its id (`er-...`) is the correlation id of the functions that handle it,
  names the execution (`erasure-<id>`), which passes that name to the erase and verify jobs,
  and is written into the metadata of every version the erasure rewrote (`lethe-erasure`).

`resolve` turns what the operator has (an `s3://` object URL, a request id, an execution name or
a correlation id, an EventBridge event id, an API Gateway request id) into search terms:
an object's catalog items and S3 metadata give the executions that handled it. `collect` then
finds the executions among the stack's state machines (their history: states entered and left,
Spark job runs submitted) and the log lines that contain a term, in the local cloud's log files
or, on AWS, with one CloudWatch Logs Insights query over the stack's log groups. Log lines that
name an execution in a `execution` field (the batch line of an upload) add it as a term, once.

Privacy: nothing here reads an execution's input or output or a message body beyond the log
lines themselves, which carry subject ids only as keyed hashes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from botocore.exceptions import ClientError

from lethe.adapters import object_catalog
from lethe.target import Target
from lethe_shared.aws.errors import is_execution_not_found
from lethe_shared.aws.executions import execution_name
from lethe_shared.aws.s3 import CORRELATION_METADATA, ERASURE_METADATA

#: The state machines of a deployment, by output name: searched for executions of a story.
STATE_MACHINE_OUTPUTS: Final = (
    "IngestionStateMachineArn",
    "ErasureStateMachineArn",
    "IndexBackfillStateMachineArn",
    "IndexReconcileStateMachineArn",
)
REQUEST_ID: Final = re.compile(r"^er-[A-Za-z0-9_-]+$")
#: Local cloud log files that are not a story's: every emulated AWS API call.
SKIPPED_LOG_FILES: Final = frozenset({"moto.log", "localcloud.log"})
SPARK_HEADER_LINES: Final = 4  # `# lethe local Spark run ...`, `# script`, `# args`, `# py-files`
INSIGHTS_MAX_GROUPS: Final = 50  # log groups one Logs Insights query may name
INSIGHTS_POLL_SECONDS: Final = 1.0
INSIGHTS_TIMEOUT_SECONDS: Final = 300.0
DEFAULT_LIMIT: Final = 2000
EXPANSION_ROUNDS: Final = 2  # terms found in log lines are searched for once more

# Seams for tests.
_sleep: Callable[[float], None] = time.sleep
_clock: Callable[[], float] = time.monotonic


class TraceError(Exception):
    """The story cannot be searched (a malformed id, a query that failed)."""


@dataclass(frozen=True)
class Step:
    """One event of an execution's history that says what happened (no input, no output)."""

    time: str
    type: str
    state: str = ""
    detail: str = ""


@dataclass
class ExecutionTrace:
    name: str
    state_machine: str
    status: str
    started: str
    stopped: str = ""
    steps: list[Step] = field(default_factory=list)
    job_runs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Line:
    time: str  # ISO 8601 UTC, or "" when the line carries no time and none came before it
    source: str  # a local log file's name, or a log group and stream
    text: str


@dataclass
class Story:
    given: str
    terms: list[str]
    executions: list[ExecutionTrace] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    truncated: bool = False

    @property
    def found(self) -> bool:
        return bool(self.executions or self.lines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------- resolution


def resolve(target: Target, given: str) -> Story:
    """The search terms of the story `given` names (module docstring)."""
    given = given.strip()
    if not given or any(c in given for c in "\n\r\"'`\\"):
        raise TraceError(f"{given!r} is not an id: give an s3:// URL, a request id, or a name")
    story = Story(given=given, terms=[given])
    if given.startswith("s3://"):
        _resolve_object(target, story)
    return story


def _add(story: Story, term: str | None) -> bool:
    if term and term not in story.terms:
        story.terms.append(term)
        return True
    return False


def _resolve_object(target: Target, story: Story) -> None:
    parts = urlsplit(story.given)
    bucket, key = parts.netloc, parts.path.lstrip("/")
    if not bucket or not key:
        raise TraceError(f"{story.given!r} names no object: s3://BUCKET/KEY[?versionId=V]")
    version = next(iter(parse_qs(parts.query).get("versionId") or []), None)
    url = f"s3://{bucket}/{key}"
    story.terms[0] = url  # log lines name the object without the version query
    try:
        head = target.client("s3").head_object(
            Bucket=bucket, Key=key, **({"VersionId": version} if version else {})
        )
    except ClientError as exc:
        story.notes.append(f"no HEAD of {story.given}: {exc.response.get('Error', {}).get('Code')}")
    else:
        metadata = head.get("Metadata") or {}
        for name in (ERASURE_METADATA, CORRELATION_METADATA):
            if _add(story, metadata.get(name)):
                story.notes.append(f"{name} of the version: {metadata[name]}")
    for item in object_catalog(target).versions_of(url):
        if version and item.version_id != version:
            continue
        cid = item.ingest_correlation_id
        if _add(story, cid):
            story.notes.append(f"catalog: version {item.version_id} ingested by {cid}")


# ------------------------------------------------------------------------------- executions


def execution_names(term: str) -> list[str]:
    """The execution names a term may be: itself, and `erasure-<id>` for a request id."""
    names = [term] if re.fullmatch(r"[A-Za-z0-9_-]{1,80}", term) else []
    if REQUEST_ID.match(term):
        names.append(execution_name("erasure", term))
    return names


def find_executions(target: Target, story: Story) -> list[ExecutionTrace]:
    sfn = target.client("stepfunctions")
    found: list[ExecutionTrace] = []
    known = {e.name for e in story.executions}
    for output in STATE_MACHINE_OUTPUTS:
        machine = target.outputs.get(output)
        if not machine:
            continue
        for term in list(story.terms):
            for name in execution_names(term):
                if name in known:
                    continue
                arn = f"{machine.replace(':stateMachine:', ':execution:')}:{name}"
                try:
                    described = sfn.describe_execution(executionArn=arn)
                except ClientError as exc:
                    if is_execution_not_found(exc):
                        continue
                    raise
                known.add(name)
                found.append(_execution(sfn, arn, name, machine, described))
    return found


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return str(value or "")


_STEP_DETAILS: Final = {  # history event type -> (its details key, fields worth a line)
    "TaskSubmitted": ("taskSubmittedEventDetails", ("resourceType", "resource")),
    "TaskFailed": ("taskFailedEventDetails", ("error", "cause")),
    "TaskTimedOut": ("taskTimedOutEventDetails", ("error", "cause")),
    "ExecutionFailed": ("executionFailedEventDetails", ("error", "cause")),
    "ExecutionTimedOut": ("executionTimedOutEventDetails", ("error", "cause")),
    "ExecutionAborted": ("executionAbortedEventDetails", ("error", "cause")),
    "MapRunStarted": ("mapRunStartedEventDetails", ("mapRunArn",)),
}
_JOB_RUN_KEYS: Final = ("JobRunId", "jobRunId", "Id")


def _execution(
    sfn: Any, arn: str, name: str, machine: str, described: dict[str, Any]
) -> ExecutionTrace:
    trace = ExecutionTrace(
        name=name,
        state_machine=machine.rsplit(":", 1)[-1],
        status=str(described.get("status", "")),
        started=_iso(described.get("startDate")),
        stopped=_iso(described.get("stopDate")),
    )
    for event in _history(sfn, arn):
        kind = str(event.get("type", ""))
        state = (event.get("stateEnteredEventDetails") or {}).get("name", "")
        detail = ""
        if kind in _STEP_DETAILS:
            key, fields = _STEP_DETAILS[kind]
            details = event.get(key) or {}
            detail = " ".join(f"{f}={str(details[f])[:300]}" for f in fields if details.get(f))
        if kind == "TaskSubmitted":
            output = (event.get("taskSubmittedEventDetails") or {}).get("output") or "{}"
            run = _job_run_id(output)
            if run and run not in trace.job_runs:
                trace.job_runs.append(run)
                detail += f" job_run={run}"
        if kind.endswith("StateExited"):
            state = (event.get("stateExitedEventDetails") or {}).get("name", "")
        if (
            kind.endswith(("StateEntered", "StateExited"))
            or kind in _STEP_DETAILS
            or (kind.startswith("Execution"))
        ):
            trace.steps.append(Step(_iso(event.get("timestamp")), kind, state, detail.strip()))
    return trace


def _history(sfn: Any, arn: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        page = sfn.get_execution_history(
            executionArn=arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        yield from page.get("events", [])
        token = page.get("nextToken")
        if not token:
            return


def _job_run_id(output: str) -> str | None:
    try:
        document = json.loads(output)
    except ValueError:
        return None
    if isinstance(document, dict):
        for key in _JOB_RUN_KEYS:
            value = document.get(key)
            if isinstance(value, str) and value:
                return value
    return None


# ------------------------------------------------------------------------------- log lines

_JVM_TIME: Final = re.compile(r"^(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)")
_PY_TIME: Final = re.compile(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[,.](\d{1,6}))?")
_LAMBDA_REPORT: Final = re.compile(r"^(START|END|REPORT) RequestId: ")


def line_time(text: str) -> str | None:
    """The time a log line says it was written (UTC), or None: Powertools' JSON `timestamp`,
    the Spark jobs' `asctime` and Spark's JVM `yy/MM/dd HH:mm:ss`."""
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if isinstance(document, dict) and isinstance(document.get("timestamp"), str):
            try:
                stamp = datetime.fromisoformat(document["timestamp"].replace("Z", "+00:00"))
            except ValueError:
                return None
            stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
            return _iso(stamp)
        return None
    match = _PY_TIME.match(text)
    if match:
        fraction = (match.group(3) or "0").ljust(3, "0")[:3]
        return f"{match.group(1)}T{match.group(2)}.{fraction}Z"
    match = _JVM_TIME.match(text)
    if match:
        yy, mm, dd, hh, mi, ss = match.groups()
        return f"20{yy}-{mm}-{dd}T{hh}:{mi}:{ss}.000Z"
    return None


def scan_log_files(logs_dir: Path, terms: Sequence[str]) -> list[Line]:
    """The local cloud's log files (`<function>.log`, `spark-<run>.log`): every line that holds
    a term, and every line of a Spark run whose header names one (the job's `--correlation-id`)
    or whose file name holds one (a job run id). A line without a time takes the time of the
    line before it in its file (a traceback's lines follow their record); lines before the
    file's first time (a Spark run's header) take that first time."""
    found: list[Line] = []
    for path in sorted(logs_dir.glob("*.log")):
        if path.name in SKIPPED_LOG_FILES:
            continue
        with path.open(encoding="utf-8", errors="replace") as lines:
            texts = [text.rstrip("\n") for text in lines]
        header = "\n".join(texts[:SPARK_HEADER_LINES]) if path.name.startswith("spark-") else ""
        whole = any(term in header or term in path.name for term in terms) and bool(header)
        stamps = [line_time(text) for text in texts]
        last = next((stamp for stamp in stamps if stamp), "")  # for lines before the first time
        for text, stamp in zip(texts, stamps, strict=True):
            last = stamp or last
            wanted = whole or any(term in text for term in terms)
            if wanted and text.strip() and not _LAMBDA_REPORT.match(text):
                found.append(Line(last, path.name, text))
    return found


def insights_query(terms: Sequence[str], job_runs: Sequence[str], limit: int) -> str:
    """The Logs Insights query of `lethe trace` (also in docs/OPERATIONS.md)."""
    clauses = [f"@message like {_literal(term)}" for term in terms]
    clauses += [f"@logStream like {_literal(run)}" for run in job_runs]
    return (
        "fields @timestamp, @log, @logStream, @message"
        f" | filter {' or '.join(clauses)}"
        f" | sort @timestamp asc | limit {limit}"
    )


def _literal(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def stack_log_groups(target: Target) -> list[str]:
    """Every log group the stack declares (functions, state machines, Spark, API)."""
    if not target.stack_name:
        raise TraceError("no stack name: trace on AWS needs --stack-name")
    cloudformation = target.client("cloudformation")
    groups: list[str] = []
    for page in cloudformation.get_paginator("list_stack_resources").paginate(
        StackName=target.stack_name
    ):
        for resource in page.get("StackResourceSummaries", []):
            if resource.get("ResourceType") == "AWS::Logs::LogGroup":
                groups.append(str(resource["PhysicalResourceId"]))
    return sorted(groups)


def query_log_groups(
    logs: Any,
    groups: Sequence[str],
    query: str,
    *,
    since: datetime,
    until: datetime,
) -> list[Line]:
    """One Logs Insights query per 50 groups, each followed until it completes."""
    found: list[Line] = []
    for start in range(0, len(groups), INSIGHTS_MAX_GROUPS):
        query_id = logs.start_query(
            logGroupNames=list(groups[start : start + INSIGHTS_MAX_GROUPS]),
            startTime=int(since.timestamp()),
            endTime=int(until.timestamp()),
            queryString=query,
        )["queryId"]
        deadline = _clock() + INSIGHTS_TIMEOUT_SECONDS
        while True:
            answer = logs.get_query_results(queryId=query_id)
            status = answer.get("status")
            if status == "Complete":
                break
            if status in ("Failed", "Cancelled", "Timeout", "Unknown"):
                raise TraceError(f"the Logs Insights query {query_id} ended {status}")
            if _clock() > deadline:
                logs.stop_query(queryId=query_id)
                raise TraceError(f"the Logs Insights query {query_id} took too long; stopped")
            _sleep(INSIGHTS_POLL_SECONDS)
        for row in answer.get("results", []):
            fields = {f["field"]: f.get("value", "") for f in row}
            stamp = fields.get("@timestamp", "")
            when = f"{stamp.replace(' ', 'T')}Z" if stamp and "T" not in stamp else stamp
            source = f"{fields.get('@log', '').split(':')[-1]} {fields.get('@logStream', '')}"
            found.append(Line(when, source.strip(), fields.get("@message", "").rstrip("\n")))
    return found


# ------------------------------------------------------------------------------- the search


def _named_executions(lines: Iterable[Line]) -> set[str]:
    """`execution` fields of JSON log lines (the object events function's batch line)."""
    names: set[str] = set()
    for line in lines:
        if '"execution"' not in line.text:
            continue
        start = line.text.find("{")
        try:
            document = json.loads(line.text[start:]) if start >= 0 else None
        except ValueError:
            continue
        if isinstance(document, dict) and isinstance(document.get("execution"), str):
            names.add(document["execution"])
    return names


def collect(
    target: Target,
    story: Story,
    *,
    since: timedelta = timedelta(days=7),
    limit: int = DEFAULT_LIMIT,
    now: datetime | None = None,
) -> Story:
    """Executions and log lines of `story`, searched until no new term turns up (at most
    EXPANSION_ROUNDS more times); lines sorted by time, at most `limit`."""
    until = now or datetime.now(UTC)
    groups = None if target.logs_dir is not None else stack_log_groups(target)
    lines: dict[tuple[str, str, str], Line] = {}
    for _ in range(1 + EXPANSION_ROUNDS):
        story.executions.extend(find_executions(target, story))
        runs = [run for e in story.executions for run in e.job_runs]
        if target.logs_dir is not None:
            found = scan_log_files(target.logs_dir, [*story.terms, *runs])
        else:
            query = insights_query(story.terms, runs, limit)
            found = query_log_groups(
                target.client("logs"), groups or [], query, since=until - since, until=until
            )
        for line in found:
            lines.setdefault((line.time, line.source, line.text), line)
        added = [name for name in sorted(_named_executions(found)) if _add(story, name)]
        if not added:
            break
    ordered = sorted(lines.values(), key=lambda line: (line.time == "", line.time))
    story.truncated = len(ordered) > limit
    story.lines = ordered[:limit]
    return story
