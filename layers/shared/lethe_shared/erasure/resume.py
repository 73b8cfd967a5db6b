"""Resuming a FAILED erasure without a new approval: `POST /erasure-requests/{id}/resume`
(functions/erasure_api) and `lethe erasure resume ID`.

A request whose erase run failed (the erase or verify Spark run, the index update, the
certificate step) keeps its frozen report and its approval. While that approval is valid (the
template's ApprovalValidityHours, counted from the decision; lethe_shared.erasure.authority
`why_not_resumable`) the same report may be run again:

1. the API checks the rule and records the resume on the request in one conditional write
   (the request stays FAILED; its history gains an event by the IAM caller, `resume requested`,
   and the record `resume`: run number, execution name, who, when, the Idempotency-Key's hash);
   the write is conditional on the record being as it was read (`updated_at`), so of two
   concurrent resumes exactly one records run n; the other is refused (409);
2. it starts the execution `erasure-<request id>-resume-<n>` with
   `{request_id, resume: <that name>, manifest_sha256}`: the state machine goes straight to Mark
   Erasing, which moves the request FAILED -> ERASING only for the execution the resume recorded,
   with the approval still valid and the stored report unchanged (workflow.start_erasing), in one
   conditional write. The erase job checks the report's pins itself.

The new run writes new results, verification and certificate; the failed run's partial
certificate (lethe_shared.erasure.failure) stays in the chain and in `partial_certificates`.

A repeated call with the same Idempotency-Key answers the resume it recorded (and starts its
execution if that start was lost). A resume is refused while the run an earlier resume started
is still running, and once the request is no longer FAILED.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from lethe_shared.erasure.authority import why_not_resumable
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureRequests,
    ErasureStatus,
    InvalidTransitionError,
    RequestNotFoundError,
)
from lethe_shared.errors import LetheError

LOG = logging.getLogger("lethe.erasure")
RESUME_REQUESTED = "resume requested"
_NAME_LIMIT = 80


class ResumeRefusedError(LetheError):
    """The request may not be resumed (the message says why and what to do): nothing changed."""


class ResumeStarter(Protocol):
    def start(self, name: str, document: Mapping[str, Any]) -> str:
        """Start the execution `name` with `document` as input (or find it); its ARN."""

    def running(self, arn: str) -> bool:
        """Whether that execution is still running (False when there is none)."""

    def arn(self, name: str) -> str:
        """The ARN the execution `name` has (or will have)."""


@dataclass(frozen=True)
class Resumed:
    request: ErasureRequest
    run: int
    execution_arn: str
    repeated: bool  # the Idempotency-Key named a resume recorded before


def resume_execution_name(request_id: str, run: int) -> str:
    """The execution of the request's run `run` (2: its first resume)."""
    name = f"erasure-{request_id}-resume-{run - 1}"
    if len(name) > _NAME_LIMIT:
        raise ResumeRefusedError(f"request {request_id}: its id is too long to be resumed")
    return name


def key_hash(idempotency_key: str | None, caller: str) -> str:
    """What the record keeps of an Idempotency-Key: a hash of the caller and the key."""
    if not idempotency_key:
        return ""
    return hashlib.sha256(json.dumps([caller, idempotency_key]).encode()).hexdigest()[:32]


def _recorded(record: ErasureRequest) -> Mapping[str, Any]:
    resume = (record.model_extra or {}).get("resume")
    return resume if isinstance(resume, Mapping) else {}


def resume_request(
    request_id: str,
    *,
    caller: str,
    requests: ErasureRequests,
    starter: ResumeStarter,
    validity: timedelta,
    idempotency_key: str | None = None,
    now: datetime | None = None,
) -> Resumed:
    """Record and start a resume of request `request_id` (module docstring). Raises
    RequestNotFoundError, or ResumeRefusedError (why, and "file a new request" when a new
    approval is needed)."""
    at = now or datetime.now(UTC)
    record = requests.get(request_id)
    if record is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    recorded = _recorded(record)
    hashed = key_hash(idempotency_key, caller)
    if hashed and recorded.get("key") == hashed:  # a retry of a resume recorded before
        return _start(record, recorded, starter, repeated=True)
    refusal = why_not_resumable(record, now=at, validity=validity)
    if refusal:
        raise ResumeRefusedError(refusal)
    previous = str(recorded.get("execution_arn") or "")
    if previous and starter.running(previous):
        raise ResumeRefusedError(
            f"request {request_id}: the run a resume started ({recorded.get('execution')}) is "
            "still running: wait for it to end"
        )
    run = int(recorded.get("run", 1)) + 1
    name = resume_execution_name(request_id, run)
    arn = starter.arn(name)
    resume = {
        "run": run,
        "execution": name,
        "execution_arn": arn,
        "by": caller,
        "at": at.isoformat(),
        "key": hashed,
        "previous_error": dict(record.error),
    }
    try:
        updated = requests.transition(
            request_id,
            ErasureStatus.FAILED,
            by=caller,
            detail=f"{RESUME_REQUESTED}: run {run} ({name})",
            allowed_from=frozenset({ErasureStatus.FAILED}),
            updates={"resume": resume, "execution_arn": arn},
            require={"updated_at": record.updated_at},
        )
    except InvalidTransitionError:
        raise ResumeRefusedError(
            f"request {request_id} changed while its resume was recorded (another resume, or "
            "its workflow): look at it again"
        ) from None
    LOG.info("request %s: resume run %d recorded", request_id, run)
    return _start(updated, resume, starter, repeated=False)


def _start(
    record: ErasureRequest, resume: Mapping[str, Any], starter: ResumeStarter, *, repeated: bool
) -> Resumed:
    """Start the recorded resume's execution; a repeated start finds it (same name, same
    input: Step Functions answers the running one, or ExecutionAlreadyExists for a closed one,
    which the starter treats as found)."""
    name = str(resume.get("execution", ""))
    document = {
        "request_id": record.request_id,
        "resume": name,
        "manifest_sha256": str(record.report.get("manifest_sha256", "")),
    }
    arn = starter.start(name, document)
    return Resumed(record, int(resume.get("run", 2)), arn, repeated)


@dataclass(frozen=True)
class StepFunctionsResumer:
    """ResumeStarter on a boto3 Step Functions client and the erasure state machine."""

    client: Any
    state_machine_arn: str

    def arn(self, name: str) -> str:
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"

    def start(self, name: str, document: Mapping[str, Any]) -> str:
        try:
            started = self.client.start_execution(
                stateMachineArn=self.state_machine_arn, name=name, input=json.dumps(document)
            )
        except self.client.exceptions.ExecutionAlreadyExists:
            return self.arn(name)
        return str(started["executionArn"])

    def running(self, arn: str) -> bool:
        from lethe_shared.aws.errors import is_execution_not_found  # noqa: PLC0415

        try:
            described = self.client.describe_execution(executionArn=arn)
        except self.client.exceptions.ClientError as exc:
            if is_execution_not_found(exc):
                return False
            raise
        return bool(described.get("status") == "RUNNING")
