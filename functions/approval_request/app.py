"""Wait For Approval: the erasure workflow's `.waitForTaskToken` task.

Keeps the task token on the request record, sealed with the task token key (TASK_TOKEN_KEY_ARN,
lethe_shared.erasure.task_tokens), creates one signed link
per configured approver (never the requester, by address or by the IAM principal that filed
the request: APPROVER_PRINCIPALS) and emails each approver their own link through
SES (lethe_shared.erasure.approval_flow.request_approval), with the configuration set
SES_CONFIGURATION_SET when given, whose bounces and complaints reach the notifications topic.
The task then waits until an approver decides on the approval page, the request is cancelled,
or the deadline passes (the task's TimeoutSeconds, from ApprovalTimeoutHours).

`{"action": "resend", "request_id", "approver"?}` (invoked by `lethe erasure resend`) emails
the approvers of a request AWAITING_APPROVAL the same links again
(lethe_shared.erasure.approval_flow.resend_approval: no new link, deadline or token); it answers
`{"request_id", "resent": [addresses]}`, or `{"request_id", "refused": why, "not_found"}`
without sending anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.scrub import scrubbed_errors
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.erasure.approval_flow import (
    ApproversSettingsBase,
    ResendRefusedError,
    SesMailer,
    request_approval,
    resend_approval,
)
from lethe_shared.erasure.requests import (
    DynamoApprovals,
    DynamoErasureRequests,
    InvalidTransitionError,
    RequestNotFoundError,
)
from lethe_shared.erasure.task_tokens import KmsTaskTokens
from lethe_shared.models import Model

logger = Logger()
tracer = Tracer()
metrics = Metrics()
KEY_CACHE_SECONDS = 300


def _secret(arn: str) -> str:
    """The secret string of `arn`, cached for KEY_CACHE_SECONDS. Powertools' parameters utility
    (and boto3 with it) is imported at the first read, with the clients, not at import."""
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return str(parameters.get_secret(arn, max_age=KEY_CACHE_SECONDS))


class ApprovalRequestSettings(ApproversSettingsBase):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)
    approvals_table: str = Field(alias="APPROVALS_TABLE", min_length=1)
    sender: str = Field(alias="SENDER_EMAIL", min_length=3)
    # SES configuration set for bounces and complaints (template.yaml); empty: none
    configuration_set: str = Field(default="", alias="SES_CONFIGURATION_SET")
    signing_key_secret_arn: str = Field(alias="APPROVAL_SIGNING_KEY_SECRET_ARN", min_length=1)
    api_url: str = Field(alias="API_URL", pattern=r"^https?://")
    timeout_hours: float = Field(alias="APPROVAL_TIMEOUT_HOURS", gt=0)
    # the task token key: the record holds the token sealed (lethe_shared.erasure.task_tokens)
    task_token_key_arn: str = Field(alias="TASK_TOKEN_KEY_ARN", min_length=1)


class ApprovalTask(Model):
    request_id: str = Field(min_length=1)
    task_token: str = Field(min_length=1)


class ResendTask(Model):
    action: Literal["resend"]
    request_id: str = Field(min_length=1, max_length=128)
    approver: str = Field(default="", max_length=320)


@dataclass(frozen=True)
class _Dependencies:
    settings: ApprovalRequestSettings
    requests: DynamoErasureRequests
    approvals: DynamoApprovals
    mailer: SesMailer
    tokens: KmsTaskTokens


def _build(settings: ApprovalRequestSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        settings=settings,
        requests=DynamoErasureRequests(aws.table(settings.requests_table)),
        approvals=DynamoApprovals(aws.table(settings.approvals_table)),
        mailer=SesMailer(aws.client("ses"), settings.sender, settings.configuration_set),
        tokens=KmsTaskTokens(aws.client("kms"), settings.task_token_key_arn),
    )


_dependencies = wiring(ApprovalRequestSettings, _build)


@logger.inject_lambda_context(correlation_id_path="request_id", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@scrubbed_errors  # Step Functions keeps the error text in the execution history
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, dict) and event.get("action") == "resend":
        return _resend(ResendTask.model_validate(event))
    task = ApprovalTask.model_validate(event)
    deps = _dependencies()
    settings = deps.settings
    key = _secret(settings.signing_key_secret_arn)
    links = request_approval(
        task.request_id,
        task.task_token,
        requests=deps.requests,
        approvals=deps.approvals,
        mailer=deps.mailer,
        approvers=settings.approvers,
        signing_key=key.encode(),
        base_url=settings.api_url,
        timeout=timedelta(hours=settings.timeout_hours),
        principals=settings.approver_principals,
        tokens=deps.tokens,
    )
    metrics.add_metric(name="ApprovalEmailsSent", unit=MetricUnit.Count, value=len(links))
    logger.info("approval requested", extra={"request_id": task.request_id, "links": len(links)})
    return {"request_id": task.request_id, "approvers": len(links)}


def _resend(task: ResendTask) -> dict[str, Any]:
    """The approval email of a request AWAITING_APPROVAL, sent again (module docstring)."""
    deps = _dependencies()
    settings = deps.settings
    try:
        sent = resend_approval(
            task.request_id,
            requests=deps.requests,
            mailer=deps.mailer,
            approvers=settings.approvers,
            signing_key=_secret(settings.signing_key_secret_arn).encode(),
            base_url=settings.api_url,
            principals=settings.approver_principals,
            only=task.approver,
        )
    except RequestNotFoundError:
        return {"request_id": task.request_id, "refused": "no such request", "not_found": True}
    except (ResendRefusedError, InvalidTransitionError) as exc:
        return {"request_id": task.request_id, "refused": str(exc), "not_found": False}
    metrics.add_metric(name="ApprovalEmailsResent", unit=MetricUnit.Count, value=len(sent))
    logger.info(
        "approval email sent again", extra={"request_id": task.request_id, "links": len(sent)}
    )
    return {"request_id": task.request_id, "resent": sent}
