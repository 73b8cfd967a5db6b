"""`lethe datasets retention ID --run [--wait [--timeout S]] [--json]`: a retention run of one
dataset started by hand (docs/RUNBOOK.md, "Retention runs"); without `--run` the command prints
the dataset's plan, a dry run (lethe.commands.datasets_records).

`--run` starts the retention state machine (statemachines/retention.asl.json, output
`RetentionStateMachineArn`) with `{"dataset_ids": [ID]}`, the input the schedule's runs take
limited to the dataset, named `<dataset>-retention-<UTC time>` (as `index backfill` names its
runs). The run is the scheduled one in every other way: it plans (a legal hold, a rule still in
its notice period, or nothing past the cutoff skip the dataset, recorded in its run state), and
a planned run removes the expired rows, verifies, re-indexes and certifies. A run by hand does
not shorten the notice period (RetentionNoticeDays): the rule is the standing authorisation.

Without `--wait` it prints the execution ARN and returns. With `--wait` it follows the
execution (lethe.commands.executions) and prints each run (its id, COMPLETED with the rows
removed and versions purged) or why the dataset was skipped; when the execution fails
(`RetentionIncomplete`: a run is not complete, its certificate's not_removed says why) it prints
the dataset's last run as the run state records it (what `lethe datasets show` shows) and exits
1.

Exit statuses: 0 started (with --wait: the execution SUCCEEDED, which includes a skipped
dataset), 1 the execution FAILED (a run INCOMPLETE) or the wait timed out, 2 usage (`--wait`
without `--run`, a dataset that declares no retention), 3 the dataset is not registered, 4 the
deployment cannot be reached."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from lethe.commands import CommandError, NotFoundError, UsageError
from lethe.commands.executions import (
    WAIT_TIMEOUT_SECONDS,
    check_dataset_id,
    failure_text,
    start_execution,
    wait_for_execution,
)
from lethe.progress import waiting
from lethe.target import Target, resolve
from lethe_shared.aws.executions import timestamped
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.retention_runs import DynamoRunStates


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """`--run`, `--wait`, `--timeout` of `lethe datasets retention`."""
    parser.add_argument(
        "--run",
        action="store_true",
        help="start a retention run of the dataset now (the retention state machine, as the "
        "schedule starts it) instead of printing the plan",
    )
    parser.add_argument(
        "--wait", action="store_true", help="with --run: follow the run until it ends"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        metavar="S",
        help="with --wait: seconds to wait (default 6 h; the run goes on after that)",
    )


def last_run_line(last: dict[str, Any]) -> str:
    """A dataset's last retention run in words (its run state's `last_run`)."""
    detail = last.get("detail") or (
        f"{last.get('rows_removed', 0)} row(s) removed, "
        f"{last.get('versions_purged', 0)} version(s) purged, cutoff {last.get('cutoff')}"
    )
    if last.get("not_removed"):  # an INCOMPLETE run: why (its certificate says where)
        detail += "; not removed: " + ", ".join(sorted(set(last["not_removed"])))
    return f"last run {last.get('at')}: {last.get('outcome')} ({detail})"


def run_retention(args: argparse.Namespace) -> int:
    check_dataset_id(args.dataset_id, "dataset")
    target = resolve(args)
    table = target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    registration = DynamoDatasetRegistry(table).registration(args.dataset_id)
    if registration is None:
        raise NotFoundError(
            f"dataset {args.dataset_id} is not registered: list them with `lethe datasets list`"
        )
    if registration.dataset.retention is None:
        raise UsageError(
            f"dataset {args.dataset_id} declares no retention: there is no run to start (a "
            "rule is the document's `retention` field, docs/DATASETS.md)"
        )
    sfn = target.client("stepfunctions")
    execution_arn = start_execution(
        sfn,
        target.output("RetentionStateMachineArn"),
        timestamped(args.dataset_id, "retention"),
        {"dataset_ids": [args.dataset_id]},
    )
    shown: dict[str, Any] = {
        "dataset_id": args.dataset_id,
        "execution_arn": execution_arn,
        "status": "RUNNING",
    }
    if not args.wait:
        print(json.dumps(shown, indent=2, sort_keys=True) if args.json else execution_arn)
        print(
            f"retention run of {args.dataset_id} started; `lethe datasets show "
            f"{args.dataset_id}` shows its outcome",
            file=sys.stderr,
        )
        return 0
    print(execution_arn, file=sys.stderr if args.json else sys.stdout, flush=True)
    with waiting(args, f"retention run of {args.dataset_id}") as progress:
        described = wait_for_execution(sfn, execution_arn, timeout=args.timeout, waiting=progress)
    return _report(target, table, args, described, shown)


def _report(
    target: Target,
    table: Any,
    args: argparse.Namespace,
    described: dict[str, Any],
    shown: dict[str, Any],
) -> int:
    """What the ended execution did to the dataset: its runs and skips (the execution's output
    when it SUCCEEDED), and the last run its run state records since the execution started."""
    dataset_id = args.dataset_id
    output = json.loads(described.get("output") or "{}")
    state = DynamoRunStates(table).get(dataset_id)
    last = state.last_run if state else {}
    if not _since(last, described.get("startDate")):
        last = {}  # from an earlier run: this execution recorded nothing (it failed before)
    shown |= {
        "status": described["status"],
        "runs": [r for r in output.get("runs", []) if r.get("dataset_id") == dataset_id],
        "skipped": [s for s in output.get("skipped", []) if s.get("dataset_id") == dataset_id],
        "last_run": last,
    }
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        for line in _lines(dataset_id, shown):
            print(line)
    if described["status"] != "SUCCEEDED":
        raise CommandError(failure_text(described, f"retention run of {dataset_id}"))
    return 0


def _since(last: dict[str, Any], started: Any) -> bool:
    """Whether the run state's last run was recorded by an execution started at `started`."""
    if not last.get("at") or not isinstance(started, datetime):
        return bool(last)
    try:
        return datetime.fromisoformat(str(last["at"])) >= started.replace(microsecond=0)
    except (TypeError, ValueError):
        return False


def _lines(dataset_id: str, shown: dict[str, Any]) -> list[str]:
    lines = []
    for run in shown["runs"]:
        lines.append(
            f"retention run {run['run_id']} of {dataset_id}: {run['outcome']} "
            f"({run.get('rows_removed', 0)} row(s) removed, {run.get('versions_purged', 0)} "
            f"version(s) purged); its certificate: `lethe erasure certificate {run['run_id']} "
            "--verify`"
        )
    for skip in shown["skipped"]:
        lines.append(f"retention of {dataset_id} skipped ({skip['reason']}): {skip['detail']}")
        if skip["reason"] == "notice":
            lines.append(
                "  a run by hand does not shorten the notice period (RetentionNoticeDays): the "
                "rule applies from the date above"
            )
    if not shown["runs"] and not shown["skipped"] and shown["last_run"]:
        lines.append(f"{dataset_id}: {last_run_line(shown['last_run'])}")
    elif not shown["runs"] and not shown["skipped"]:
        lines.append(f"retention of {dataset_id}: no run recorded by this execution")
    return lines
