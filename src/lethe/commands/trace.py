"""`lethe trace ID`: every state machine step and log line of one story (lethe.tracing).

ID is what the operator has: an object's `s3://` URL (raw or lake, `?versionId=V` for one
version), an erasure request id (`er-...`), an execution name or correlation id, an EventBridge
event id or an API Gateway request id. On the local cloud the search reads its log files; on AWS
it runs one CloudWatch Logs Insights query over the stack's log groups (`--since` bounds it;
Logs Insights bills by the bytes it scans).
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import Final

from lethe.commands import NotFoundError, UsageError
from lethe.target import add_target_arguments, resolve

DURATION: Final = re.compile(r"^(\d+)([mhd])$")
UNITS: Final = {"m": "minutes", "h": "hours", "d": "days"}
TEXT_WIDTH: Final = 400  # characters of a log line in the text output (--json keeps them whole)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="every state machine step and log line of one upload or request",
        description="Finds the executions and log lines of one story: give an s3:// object URL "
        "(raw or lake; ?versionId=V for one version), an erasure request id, an execution name "
        "or correlation id, an EventBridge event id or an API Gateway request id.",
    )
    parser.add_argument("id", help="s3://BUCKET/KEY[?versionId=V], er-..., or a name or id")
    parser.add_argument(
        "--since",
        default="7d",
        help="on AWS: how far back the log search goes (e.g. 90m, 12h, 30d; default 7d)",
    )
    parser.add_argument(
        "--limit", type=int, default=2000, help="most log lines (default 2000, oldest first)"
    )
    parser.add_argument("--json", action="store_true", help="print the story as JSON")
    add_target_arguments(parser)
    parser.set_defaults(func=trace)


def parse_since(value: str) -> timedelta:
    match = DURATION.match(value.strip())
    if not match or int(match.group(1)) == 0:
        raise UsageError(f"--since {value!r}: give minutes, hours or days, such as 90m, 12h, 7d")
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


def trace(args: argparse.Namespace) -> int:
    from lethe import tracing  # noqa: PLC0415 - boto3 resources and lethe_shared: when used

    since = parse_since(args.since)
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    target = resolve(args)
    try:
        story = tracing.resolve(target, args.id)
        tracing.collect(target, story, since=since, limit=args.limit)
    except tracing.TraceError as exc:
        raise UsageError(str(exc)) from None
    if not story.found:
        where = "the local cloud's logs" if target.is_local else f"the last {args.since} of logs"
        raise NotFoundError(
            f"no execution and no log line mention {args.id} (searched {', '.join(story.terms)} "
            f"in the state machines and {where}); check the id, or widen --since"
        )
    if args.json:
        print(json.dumps(story.to_json(), indent=2))
        return 0
    print(f"story {story.given}: searched {', '.join(story.terms)}")
    for note in story.notes:
        print(f"  {note}")
    for execution in story.executions:
        print(
            f"\nexecution {execution.name} ({execution.state_machine}): {execution.status}, "
            f"{execution.started} to {execution.stopped or '...'}"
        )
        for step in execution.steps:
            print(f"  {step.time}  {step.type:24} {step.state}  {step.detail}".rstrip())
    more = " (more left out: --limit)" if story.truncated else ""
    print(f"\n{len(story.lines)} log lines{more}")
    for line in story.lines:
        text = line.text if len(line.text) <= TEXT_WIDTH else line.text[:TEXT_WIDTH] + "..."
        print(f"{line.time or '-':24}  {line.source}  {text}")
    return 0
