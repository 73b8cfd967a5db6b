"""Erasure requests API (IAM-authenticated REST) and the `Erasure Requested` event intake.

    POST /erasure-requests                  file a request (Idempotency-Key honoured): 202
    GET  /erasure-requests[?status=S]       list requests, newest first
    GET  /erasure-requests/{id}             one request: status, history, report, result
    POST /erasure-requests/{id}/cancel      stop a request that has not started erasing
    POST /erasure-requests/{id}/resume      run a FAILED request's approved report again, while
                                            its approval is valid (Idempotency-Key honoured):
                                            202; 409 with the reason (and "file a new request"
                                            when a new approval is needed)

The same function takes EventBridge events (`source: lethe.requests`, detail-type `Erasure
Requested`, detail = the POST body plus an optional `idempotency_key`; the event id is the key
otherwise, so a redelivered event files one request). Subject ids are hashed as soon as they
are read, per dataset of the request's scope (optional `datasets`, default every registered
dataset; lethe_shared.erasure.subjects), and never logged or stored; an empty or
whitespace-only id, an unknown dataset, a `requested_by` that is not an e-mail address or an
IAM principal ARN on one line (lethe_shared.erasure.requester), are 400s that name the field
(never a value). The IAM caller's ARN is recorded
on the request (`requester_principal`); a request filed by event records the event's
account and source instead (`event:<account>:<source>`: EventBridge passes no caller). A
`requested_by` naming an approver of APPROVER_PRINCIPALS is accepted only from that approver's
principal (403 otherwise; an event, unless the approver is mapped to its sender, is refused).
A cancel, and a resume (lethe_shared.erasure.resume), is accepted from the request's requester
principal or an approver's principal when either is known (403 otherwise). A GET of a request
whose approver's decision is recorded but did not reach the workflow hands it over again
(lethe_shared.erasure.decision_delivery.deliver_decision).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.config import Settings
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.authority import DEFAULT_APPROVAL_VALIDITY_HOURS
from lethe_shared.erasure.decision_delivery import deliver_decision, pending_delivery
from lethe_shared.erasure.intake import StepFunctionsStarter, cancel_request, file_request
from lethe_shared.erasure.principals import (
    ApproverPrincipalsSetting,
    CancelNotAllowedError,
    RequesterNotCallerError,
    event_principal,
)
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureRequestError,
    ErasureStatus,
    IdempotencyConflictError,
    InvalidTransitionError,
    RequestNotFoundError,
    parse_request_body,
)
from lethe_shared.erasure.resume import ResumeRefusedError, StepFunctionsResumer, resume_request
from lethe_shared.erasure.task_callbacks import StepFunctionsCallbacks, TaskGoneError
from lethe_shared.erasure.task_tokens import KmsTaskTokens
from lethe_shared.subject_hashing.keys import key_from_secret

logger = Logger()
tracer = Tracer()
metrics = Metrics()
app = APIGatewayRestResolver()
KEY_CACHE_SECONDS = 300


def _secret(arn: str) -> str:
    """The secret string of `arn`, cached for KEY_CACHE_SECONDS. Powertools' parameters utility
    (and boto3 with it) is imported at the first read, with the clients, not at import."""
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return str(parameters.get_secret(arn, max_age=KEY_CACHE_SECONDS))


REQUEST_EVENT = "Erasure Requested"


class ErasureApiSettings(Settings):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)
    state_machine_arn: str = Field(alias="ERASURE_STATE_MACHINE_ARN", min_length=20)
    approver_principals: ApproverPrincipalsSetting = Field(alias="APPROVER_PRINCIPALS")
    # the task token key: the record holds the token sealed (lethe_shared.erasure.task_tokens)
    task_token_key_arn: str = Field(alias="TASK_TOKEN_KEY_ARN", min_length=1)
    # how long an approval lets a FAILED request be resumed (the template's bounds)
    approval_validity_hours: float = Field(
        default=DEFAULT_APPROVAL_VALIDITY_HOURS, alias="APPROVAL_VALIDITY_HOURS", ge=1, le=720
    )


@dataclass(frozen=True)
class _Dependencies:
    settings: ErasureApiSettings
    requests: DynamoErasureRequests
    registry: DynamoDatasetRegistry
    starter: StepFunctionsStarter
    callbacks: StepFunctionsCallbacks
    resumer: StepFunctionsResumer


def _build(settings: ErasureApiSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        settings=settings,
        requests=DynamoErasureRequests(aws.table(settings.requests_table)),
        registry=DynamoDatasetRegistry(aws.table(settings.datasets_table)),
        starter=StepFunctionsStarter(aws.client("stepfunctions"), settings.state_machine_arn),
        callbacks=StepFunctionsCallbacks(
            aws.client("stepfunctions"),
            KmsTaskTokens(aws.client("kms"), settings.task_token_key_arn),
        ),
        resumer=StepFunctionsResumer(aws.client("stepfunctions"), settings.state_machine_arn),
    )


_dependencies = wiring(ErasureApiSettings, _build)


class BadRequestError(Exception):
    """The request itself (not its fields) is unusable."""


def _json(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


def _file(
    document: Any, idempotency_key: str | None, via: str, caller: str | None
) -> dict[str, Any]:
    body = parse_request_body(document)
    deps = _dependencies()
    filed = file_request(
        body,
        hash_key=key_from_secret(_secret(deps.settings.hash_key_secret_arn)),
        datasets=list(deps.registry.list()),
        requests=deps.requests,
        starter=deps.starter,
        idempotency_key=idempotency_key,
        via=via,
        caller=caller,
        principals=deps.settings.approver_principals,
    )
    record = filed.request
    metrics.add_metric(
        name="ErasureRequestsDuplicate" if filed.duplicate else "ErasureRequestsFiled",
        unit=MetricUnit.Count,
        value=1,
    )
    logger.info(
        "erasure request filed" if not filed.duplicate else "erasure request already filed",
        extra={
            "request_id": record.request_id,
            "subjects": record.subject_count,
            "datasets": len(record.scope) or "all",
            "via": via,
        },
    )
    return {
        "request_id": record.request_id,
        "status": record.status.value,
        "duplicate": filed.duplicate,
    }


def document_of_body(body: str | None) -> Any:
    """A POST body's JSON document (validated by parse_request_body when filed), or
    BadRequestError."""
    try:
        return json.loads(body or "")
    except json.JSONDecodeError as exc:
        raise BadRequestError(f"body is not JSON: {exc.msg} at position {exc.pos}") from exc


@app.post("/erasure-requests")
@tracer.capture_method
def post_request() -> Response[str]:
    document = document_of_body(app.current_event.body)
    headers = {k.lower(): v for k, v in (app.current_event.headers or {}).items()}
    key = headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 256:
        raise BadRequestError("Idempotency-Key must have 1 to 256 characters")
    caller = app.current_event.request_context.identity.user_arn  # IAM authenticated it
    return _json(202, _file(document, key, f"api ({caller or 'unknown caller'})", caller))


def status_filter(status_text: str | None) -> ErasureStatus | None:
    """The list's `status` query parameter (None: every status), or BadRequestError."""
    try:
        return ErasureStatus(status_text) if status_text else None
    except ValueError as exc:
        raise BadRequestError(
            f"status must be one of {', '.join(s.value for s in ErasureStatus)}"
        ) from exc


@app.get("/erasure-requests")
@tracer.capture_method
def list_requests() -> Response[str]:
    status = status_filter(app.current_event.get_query_string_value("status"))
    records = _dependencies().requests.list(status)
    return _json(200, {"requests": [r.public() for r in records]})


@app.get("/erasure-requests/<request_id>")
@tracer.capture_method
def get_request(request_id: str) -> Response[str]:
    deps = _dependencies()
    record = deps.requests.get(request_id)
    if record is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if pending_delivery(record):  # a decision recorded, its hand-over to the workflow failed
        try:
            deliver_decision(record, requests=deps.requests, callbacks=deps.callbacks)
        except TaskGoneError:  # the approval task ended first: the workflow expires it
            logger.warning(
                "approval task ended before the decision", extra={"request_id": request_id}
            )
        record = deps.requests.get(request_id) or record
    return _json(200, record.public())


def canceller_of(body: str | None, caller: str) -> str:
    """Who cancels: the optional body's `requested_by`, else the IAM caller; BadRequestError for
    a body that is not JSON."""
    try:
        document = json.loads(body or "{}")
    except json.JSONDecodeError as exc:
        raise BadRequestError(f"body is not JSON: {exc.msg}") from exc
    return str(document.get("requested_by") or caller) if isinstance(document, dict) else caller


@app.post("/erasure-requests/<request_id>/cancel")
@tracer.capture_method
def cancel(request_id: str) -> Response[str]:
    caller_arn = app.current_event.request_context.identity.user_arn
    caller = caller_arn or "unknown caller"
    by = canceller_of(app.current_event.body, caller)
    deps = _dependencies()
    found = deps.requests.get(request_id)
    if found is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    deps.settings.approver_principals.check_canceller(found.requester_principal, caller_arn)
    record = cancel_request(request_id, by, requests=deps.requests, callbacks=deps.callbacks)
    metrics.add_metric(name="ErasureRequestsCancelled", unit=MetricUnit.Count, value=1)
    logger.info("erasure request cancelled", extra={"request_id": request_id})
    return _json(200, record.public())


@app.post("/erasure-requests/<request_id>/resume")
@tracer.capture_method
def resume(request_id: str) -> Response[str]:
    caller_arn = app.current_event.request_context.identity.user_arn
    caller = caller_arn or "unknown caller"
    headers = {k.lower(): v for k, v in (app.current_event.headers or {}).items()}
    key = headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 256:
        raise BadRequestError("Idempotency-Key must have 1 to 256 characters")
    deps = _dependencies()
    found = deps.requests.get(request_id)
    if found is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    try:
        deps.settings.approver_principals.check_canceller(found.requester_principal, caller_arn)
    except CancelNotAllowedError:
        raise CancelNotAllowedError(
            "only the IAM principal that filed this request or an approver's may resume it"
        ) from None
    resumed = resume_request(
        request_id,
        caller=caller,
        requests=deps.requests,
        starter=deps.resumer,
        validity=timedelta(hours=deps.settings.approval_validity_hours),
        idempotency_key=key,
    )
    if not resumed.repeated:
        metrics.add_metric(name="ErasureRequestsResumed", unit=MetricUnit.Count, value=1)
    logger.info("erasure request resumed", extra={"request_id": request_id, "run": resumed.run})
    record = deps.requests.get(request_id) or resumed.request
    return _json(
        202,
        {
            **record.public(),
            "resumed": {
                "run": resumed.run,
                "execution_arn": resumed.execution_arn,
                "repeated": resumed.repeated,
            },
        },
    )


@app.exception_handler(ResumeRefusedError)
def _not_resumable(exc: ResumeRefusedError) -> Response[str]:
    return _json(409, {"message": str(exc)})


@app.exception_handler(ErasureRequestError)
def _invalid_request(exc: ErasureRequestError) -> Response[str]:
    return _json(400, {"message": "invalid erasure request", "errors": exc.problems})


@app.exception_handler(BadRequestError)
def _bad_request(exc: BadRequestError) -> Response[str]:
    return _json(400, {"message": str(exc)})


@app.exception_handler(RequesterNotCallerError)
def _not_the_requester(exc: RequesterNotCallerError) -> Response[str]:
    return _json(403, {"message": str(exc)})


@app.exception_handler(CancelNotAllowedError)
def _not_allowed_to_cancel(exc: CancelNotAllowedError) -> Response[str]:
    return _json(403, {"message": str(exc)})


@app.exception_handler(IdempotencyConflictError)
def _reused_key(exc: IdempotencyConflictError) -> Response[str]:
    return _json(409, {"message": str(exc)})


@app.exception_handler(RequestNotFoundError)
def _not_found(exc: RequestNotFoundError) -> Response[str]:
    return _json(404, {"message": str(exc)})


@app.exception_handler(InvalidTransitionError)
def _not_cancellable(exc: InvalidTransitionError) -> Response[str]:
    return _json(
        409, {"message": f"the request cannot be cancelled: it is {exc.current or 'unknown'}"}
    )


def is_request_event(event: dict[str, Any]) -> bool:
    """An EventBridge `Erasure Requested` event (anything else is an API Gateway request)."""
    return event.get("detail-type") == REQUEST_EVENT


def request_of_event(event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """An `Erasure Requested` event's request body (validated by parse_request_body when filed)
    and idempotency key: the detail's `idempotency_key`, else the event id."""
    detail = dict(event.get("detail") or {})
    key = str(detail.pop("idempotency_key", "") or event.get("id") or "") or None
    return detail, key


def _from_event(event: dict[str, Any]) -> dict[str, Any]:
    """An `Erasure Requested` event: a bad one is logged and dropped (retrying cannot help)."""
    detail, key = request_of_event(event)
    try:
        sender = event_principal(event.get("account"), event.get("source")) or None
        return _file(detail, key, f"event {event.get('source', '')}", sender)
    except ErasureRequestError as exc:
        metrics.add_metric(name="ErasureRequestsRefused", unit=MetricUnit.Count, value=1)
        logger.error("erasure request event refused", extra={"problems": exc.problems})
        return {"refused": exc.problems}
    except (IdempotencyConflictError, RequesterNotCallerError) as exc:
        metrics.add_metric(name="ErasureRequestsRefused", unit=MetricUnit.Count, value=1)
        logger.error("erasure request event refused", extra={"problem": str(exc)})
        return {"refused": [str(exc)]}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if is_request_event(event):
        return _from_event(event)
    return app.resolve(event, context)
