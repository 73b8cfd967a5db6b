"""The approval task's token callbacks: how a decision reaches the waiting erasure workflow.

The workflow's Wait For Approval task (`.waitForTaskToken`) waits until SendTaskSuccess or
SendTaskFailure answers its token. The erasure workflow (cancelling a request) and the
approval flow (handing a decision over) answer it through TaskCallbacks; a token whose task
ended raises TaskGoneError. The record holds the token sealed (lethe_shared.erasure.task_tokens):
StepFunctionsCallbacks opens it just before the call, so the raw token exists only there.
Apart from lethe_shared.erasure.workflow, so that the approval functions do not import the
report and certificate steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from lethe_shared.erasure.task_tokens import TokenOpener
from lethe_shared.errors import LetheError


class TaskGoneError(LetheError):
    """The task token is no longer valid: the waiting task timed out or its execution ended."""


class TaskCallbacks(Protocol):
    """Step Functions' task token callbacks (SendTaskSuccess / SendTaskFailure). Both raise
    TaskGoneError when the task no longer waits."""

    def success(self, token: str, output: Mapping[str, Any]) -> None: ...

    def failure(self, token: str, error: str, cause: str) -> None: ...


@dataclass(frozen=True)
class StepFunctionsCallbacks:
    """TaskCallbacks on a boto3 Step Functions client; `tokens` opens the stored (sealed)
    tokens it is given (None: they are raw)."""

    client: Any
    tokens: TokenOpener | None = None

    def _raw(self, token: str) -> str:
        return self.tokens.open(token) if self.tokens is not None else token

    def success(self, token: str, output: Mapping[str, Any]) -> None:
        self._call(
            self.client.send_task_success, taskToken=self._raw(token), output=json.dumps(output)
        )

    def failure(self, token: str, error: str, cause: str) -> None:
        self._call(
            self.client.send_task_failure, taskToken=self._raw(token), error=error, cause=cause
        )

    def _call(self, method: Any, **kwargs: Any) -> None:
        gone = (
            self.client.exceptions.TaskTimedOut,
            self.client.exceptions.InvalidToken,
            self.client.exceptions.TaskDoesNotExist,
        )
        try:
            method(**kwargs)
        except gone as exc:
            raise TaskGoneError(str(exc)) from exc
