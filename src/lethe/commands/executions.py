"""Starting and following one Step Functions execution: what the commands that start a
workflow share (`index backfill | reconcile | compact`, `datasets retention --run`).

- `start_execution` starts a state machine under a name the caller chose (the commands use
  `lethe_shared.aws.executions.timestamped`: `<dataset>-<kind>-<UTC time to the second>`, a
  start of its own each second) and returns the execution ARN; a name taken by an execution with
  another input is a CommandError (exit 1) that says to try again;
- `wait_for_execution` polls DescribeExecution until the execution ends (progress on stderr
  through `lethe.progress`); past `timeout` it raises CommandError (the execution goes on);
- `finished` is the output of a SUCCEEDED execution, or CommandError (exit 1) with the
  execution's status, error, cause and ARN.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Final

from lethe.commands import CommandError, UsageError
from lethe.progress import Waiting
from lethe_shared.datasets.document import DATASET_ID_PATTERN

WAIT_TIMEOUT_SECONDS: Final = 6 * 3600.0
POLL_FIRST_SECONDS: Final = 1.0
POLL_MAX_SECONDS: Final = 10.0  # the poll interval grows to this and stays there


def check_dataset_id(dataset_id: str, flag: str = "--dataset") -> None:
    """UsageError (exit 2) unless `dataset_id` is a dataset id (before any call)."""
    if not re.fullmatch(DATASET_ID_PATTERN, dataset_id):
        raise UsageError(f"{flag} {dataset_id!r} is not a dataset id")


def start_execution(sfn: Any, state_machine_arn: str, name: str, document: dict[str, Any]) -> str:
    """StartExecution under `name` with `document` as its input; the execution ARN."""
    try:
        started = sfn.start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps(document)
        )
    except sfn.exceptions.ExecutionAlreadyExists as exc:
        raise CommandError(
            f"an execution named {name} with another input exists; try again in a second"
        ) from exc
    return str(started["executionArn"])


def wait_for_execution(
    sfn: Any,
    execution_arn: str,
    *,
    timeout: float,
    progress: Callable[[], str] | None = None,
    waiting: Waiting | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """describe_execution until the execution ends; `progress` lines go to `waiting` (stderr:
    a spinner on a terminal, a line per change otherwise, nothing with --quiet). The interval
    grows from 1 s to 10 s; after `timeout` s it raises CommandError (the execution goes on)."""
    deadline = clock() + timeout
    interval = POLL_FIRST_SECONDS
    shown = waiting if waiting is not None else Waiting("execution")
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING":
            return described
        if progress is not None:
            shown.update(progress())
        else:
            shown.update(str(described["status"]))
        if clock() + interval > deadline:
            raise CommandError(f"still RUNNING after {timeout:.0f} s; it goes on: {execution_arn}")
        sleep(interval)
        interval = min(interval * 1.5, POLL_MAX_SECONDS)


def failure_text(described: dict[str, Any], what: str) -> str:
    """`<what> <STATUS>: <error>: <cause>` and the execution's ARN on a second line."""
    status = described["status"]
    error = described.get("error", "")
    cause = described.get("cause", "")
    return f"{what} {status}: {error}: {cause}".rstrip(": ") + (
        f"\nexecution: {described['executionArn']}"
    )


def finished(described: dict[str, Any], what: str) -> dict[str, Any]:
    """The output of a SUCCEEDED execution; otherwise CommandError (exit 1) naming it."""
    if described["status"] != "SUCCEEDED":
        raise CommandError(failure_text(described, what))
    output: dict[str, Any] = json.loads(described.get("output") or "{}")
    return output
