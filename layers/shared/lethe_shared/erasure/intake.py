"""Intake of an erasure request: file it (hash, store, start its workflow) or cancel it.

The erasure API (functions/erasure_api) calls these with its ports; nothing here reads the
environment. Filing is keyed by the request id (from the Idempotency-Key or event id) and the
execution name (`erasure-<request id>`), so a repeated filing starts one workflow. The steps of
the started workflow are lethe_shared.erasure.workflow.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from lethe_shared.aws.executions import execution_name
from lethe_shared.erasure.principals import ApproverPrincipals
from lethe_shared.erasure.requests import (
    CANCELLABLE,
    ErasureRequest,
    ErasureRequestBody,
    ErasureRequests,
    ErasureStatus,
    IdempotencyConflictError,
    hash_subjects,
    idempotent_request_id,
    new_request,
    new_request_id,
)
from lethe_shared.erasure.task_callbacks import TaskCallbacks, TaskGoneError
from lethe_shared.subject_hashing.keys import key_fingerprint

if TYPE_CHECKING:
    from lethe_shared.datasets.document import Dataset

LOG = logging.getLogger("lethe.erasure")


class ErasureStarter(Protocol):
    def start(self, request_id: str) -> str:
        """Start (or find) the request's workflow execution; returns its ARN."""


def erasure_execution_name(request_id: str) -> str:
    """One workflow execution per request: a repeated start finds the running one."""
    return execution_name("erasure", request_id)


@dataclass(frozen=True)
class Filed:
    request: ErasureRequest
    duplicate: bool  # an Idempotency-Key (or event id) named a request filed before


def file_request(
    body: ErasureRequestBody,
    *,
    hash_key: bytes,
    datasets: Sequence[Dataset],
    requests: ErasureRequests,
    starter: ErasureStarter,
    idempotency_key: str | None = None,
    via: str = "api",
    caller: str | None = None,
    principals: ApproverPrincipals | None = None,
    now: datetime | None = None,
) -> Filed:
    """Hash the subjects (for each dataset of the request's scope, as that dataset's subject
    column type holds them: lethe_shared.erasure.subjects), store the request (RECEIVED) and
    start its workflow. `datasets` are the registered datasets.

    `caller` is the authenticated IAM caller's ARN (None: none, as for an event); it is
    recorded as the request's `requester_principal`. With an idempotency key, the request id
    derives from it: a retry with the same body gets the same request (and starts nothing
    new); another body under the same key is refused with IdempotencyConflictError. Raises
    ErasureRequestError for a bad body, RequesterNotCallerError when `requested_by` names an
    approver of `principals` and the caller is not theirs."""
    (principals or ApproverPrincipals()).check_requester(body.requested_by, caller)
    subjects = hash_subjects(body, hash_key, datasets)
    request_id = (
        idempotent_request_id(idempotency_key, body.requested_by)
        if idempotency_key
        else new_request_id(now)
    )
    record, created = requests.create(
        new_request(
            request_id,
            body,
            subjects,
            now=now,
            via=via,
            principal=caller or "",
            hash_key_fingerprint=key_fingerprint(hash_key),
        )
    )
    if not created and record.fingerprint != new_request(request_id, body, subjects).fingerprint:
        raise IdempotencyConflictError(
            "this Idempotency-Key was used for another request body; use a new key"
        )
    if not record.execution_arn:  # also a retry whose first attempt died before starting
        record = requests.update(request_id, {"execution_arn": starter.start(request_id)})
    return Filed(record, duplicate=not created)


def cancel_request(
    request_id: str, by: str, *, requests: ErasureRequests, callbacks: TaskCallbacks
) -> ErasureRequest:
    """Stop a request that has not started erasing: REJECTED with outcome CANCELLED, and a
    waiting approval task fails with `ErasureCancelled` (the workflow then notifies).
    Raises InvalidTransitionError once it is erasing or ended."""
    record = requests.transition(
        request_id,
        ErasureStatus.REJECTED,
        by=by,
        detail="cancelled by the requester",
        allowed_from=CANCELLABLE,
        updates={"outcome": "CANCELLED"},
    )
    if record.task_token:
        try:
            callbacks.failure(record.task_token, "ErasureCancelled", f"cancelled by {by}")
        except TaskGoneError:  # the approval task timed out meanwhile: the workflow ends anyway
            LOG.info("request %s: cancelled after its approval task ended", request_id)
    return record


@dataclass(frozen=True)
class StepFunctionsStarter:
    """ErasureStarter on a boto3 Step Functions client: the execution is named after the
    request, so a repeated start finds the running one."""

    client: Any
    state_machine_arn: str

    def start(self, request_id: str) -> str:
        name = erasure_execution_name(request_id)
        try:
            started = self.client.start_execution(
                stateMachineArn=self.state_machine_arn,
                name=name,
                input=json.dumps({"request_id": request_id}),
            )
        except self.client.exceptions.ExecutionAlreadyExists:
            arn = self.state_machine_arn.replace(":stateMachine:", ":execution:")
            return f"{arn}:{name}"
        return str(started["executionArn"])
