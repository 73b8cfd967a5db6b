"""The approval page: `GET` and `POST /approvals/{approval_id}` (public; the link is the key).

A GET renders the confirmation page (what will be erased, the confirmation code, the two
forms) and changes nothing: mail scanners open every link. A POST decides only with an
authentic unexpired link, the page's CSRF cookie and token, an allowed approver and the typed
code, and only once (lethe_shared.erasure.approval_flow.ApprovalPage). The requester is not an
allowed
approver, by address or by the IAM principal that filed the request (APPROVER_PRINCIPALS).
Every answer is an HTML page with strict security headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.erasure.approval_flow import (
    ApprovalPage,
    ApproversSettingsBase,
    HttpAnswer,
    HttpRequest,
)
from lethe_shared.erasure.approval_pages import response_headers
from lethe_shared.erasure.requests import DynamoApprovals, DynamoErasureRequests
from lethe_shared.erasure.task_callbacks import StepFunctionsCallbacks
from lethe_shared.erasure.task_tokens import KmsTaskTokens

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


class ApprovalPageSettings(ApproversSettingsBase):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)
    approvals_table: str = Field(alias="APPROVALS_TABLE", min_length=1)
    signing_key_secret_arn: str = Field(alias="APPROVAL_SIGNING_KEY_SECRET_ARN", min_length=1)
    # the task token key: the record holds the token sealed (lethe_shared.erasure.task_tokens)
    task_token_key_arn: str = Field(alias="TASK_TOKEN_KEY_ARN", min_length=1)


@dataclass(frozen=True)
class _Dependencies:
    settings: ApprovalPageSettings
    requests: DynamoErasureRequests
    approvals: DynamoApprovals
    callbacks: StepFunctionsCallbacks


def _build(settings: ApprovalPageSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        settings=settings,
        requests=DynamoErasureRequests(aws.table(settings.requests_table)),
        approvals=DynamoApprovals(aws.table(settings.approvals_table)),
        callbacks=StepFunctionsCallbacks(
            aws.client("stepfunctions"),
            KmsTaskTokens(aws.client("kms"), settings.task_token_key_arn),
        ),
    )


_dependencies = wiring(ApprovalPageSettings, _build)


def _page() -> ApprovalPage:
    deps = _dependencies()
    key = _secret(deps.settings.signing_key_secret_arn)
    return ApprovalPage(
        requests=deps.requests,
        approvals=deps.approvals,
        callbacks=deps.callbacks,
        signing_key=key.encode(),
        approvers=deps.settings.approvers,
        principals=deps.settings.approver_principals,
    )


def _request(approval_id: str) -> HttpRequest:
    return http_request_of(app.current_event, approval_id)


def http_request_of(event: APIGatewayProxyEvent, approval_id: str) -> HttpRequest:
    """What the approval page reads of an API Gateway request
    (lethe_shared.erasure.approval_flow)."""
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    cookies = "; ".join((event.multi_value_headers or {}).get("Cookie", [])) or headers.get(
        "cookie"
    )
    return HttpRequest(
        approval_id=approval_id,
        query=dict(event.query_string_parameters or {}),
        cookie=cookies,
        body=event.body,
        is_base64=bool(event.is_base64_encoded),
        content_type=headers.get("content-type"),
        secure=headers.get("x-forwarded-proto", "https") == "https",
        public_path=event.request_context.path,
    )


def _answer(answer: HttpAnswer) -> Response[str]:
    outcome = answer.page.outcome or "confirmation"
    metrics.add_metric(name=f"ApprovalPage_{outcome}", unit=MetricUnit.Count, value=1)
    logger.info(
        "approval page answered", extra={"outcome": outcome, "status": answer.page.status_code}
    )
    return Response(
        status_code=answer.page.status_code,
        body=answer.page.html,
        headers=response_headers(set_cookie=answer.set_cookie),
    )


@app.get("/approvals/<approval_id>")
@tracer.capture_method
def show(approval_id: str) -> Response[str]:
    return _answer(_page().get(_request(approval_id)))


@app.post("/approvals/<approval_id>")
@tracer.capture_method
def decide(approval_id: str) -> Response[str]:
    return _answer(_page().post(_request(approval_id)))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
