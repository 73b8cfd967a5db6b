"""IAM-true local runs: every principal calls AWS with its own role, every call is authorised.

`install(deployment, mode)` (after provisioning, `LocalCloud` calls it):

1. assumes every `AWS::IAM::Role` of the translated template through the local STS API
   (`principals`): each role gets its own temporary access key;
2. hooks moto's server (`DomainDispatcherApplication.__call__`): before moto answers, the
   `Enforcer` reads the request, finds its role by access key, maps it to IAM actions and
   resource ARNs (`s3_calls`, `services`) and decides them against the role's identity policies
   as provisioned from the template (`evaluate`); a denied call gets the service's AccessDenied
   naming role, action, resource and why. Every decision is a line of
   `<logs_dir>/iam-decisions.jsonl`;
3. hooks the Step Functions interpreter's clients (`boto_client_for` in every module of
   moto's ASL engine that imported it): a task's SDK / optimised integration calls (Lambda
   invoke, DynamoDB, SNS, SQS, `aws-sdk:*`, the S3 ItemReader) are signed with the execution
   role's credentials (or the state's `Credentials.RoleArn`), so they are checked as that role.

Function workers (`lambdas`) take `function_environment(name)`; Spark runs take
`role_environment(role_arn)` of the job's execution role (EMR Serverless `ExecutionRoleArn`, the
Glue job's `Role`) and the starting state machine's role is checked in process for
`emr-serverless:StartJobRun` / `glue:StartJobRun` and `iam:PassRole` (`authorize`).

`LETHE_LOCAL_IAM=enforce` (the default) denies; `off` installs nothing: every principal keeps
the local cloud's own all-powerful credentials, as before. What the check cannot see is listed
in docs (SECURITY.md, "Local IAM check").
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from lethe.localcloud.deployment import Deployment
from lethe.localcloud.iam.enforcer import AccessDenied, Enforcer, denial_message
from lethe.localcloud.iam.evaluate import Request
from lethe.localcloud.iam.principals import Principals

logger = logging.getLogger("lethe.localcloud.iam")

IAM_MODE_ENV: Final = "LETHE_LOCAL_IAM"
DEFAULT_MODE: Final = "enforce"

_current: dict[str, Any] = {"enforcer": None, "deployment": None}


def mode_from_environment() -> str:
    mode = os.environ.get(IAM_MODE_ENV, "").strip().lower() or DEFAULT_MODE
    if mode not in {"enforce", "off"}:
        raise ValueError(f"{IAM_MODE_ENV}={mode!r}: expected enforce or off")
    return mode


def current() -> Enforcer | None:
    """The installed enforcer (None when IAM is off or no cloud runs in this process)."""
    enforcer: Enforcer | None = _current["enforcer"]
    return enforcer


def role_environment(role_arn: str) -> dict[str, str]:
    """AWS_ACCESS_KEY_ID/SECRET/SESSION_TOKEN of `role_arn`; {} when IAM is off."""
    enforcer = current()
    if enforcer is None or not role_arn:
        return {}
    return enforcer.principals.issue(_role_arn(role_arn)).environment()


def function_environment(function_name: str) -> dict[str, str]:
    """The credentials of a Lambda function's execution role; {} when IAM is off."""
    deployment: Deployment | None = _current["deployment"]
    if current() is None or deployment is None:
        return {}
    role = deployment.endpoints.client("lambda").get_function_configuration(
        FunctionName=function_name
    )["Role"]
    return role_environment(str(role))


def authorize(role_arn: str, requests: Sequence[Request], caller: str) -> None:
    """Check in-process calls (no HTTP request) as `role_arn`; raises AccessDenied."""
    enforcer = current()
    if enforcer is not None:
        enforcer.authorize(_role_arn(role_arn), requests, caller)


def _role_arn(role: str) -> str:
    if role.startswith("arn:"):
        return role
    deployment: Deployment | None = _current["deployment"]
    account = deployment.endpoints.account_id if deployment else "123456789012"
    return f"arn:aws:iam::{account}:role/{role}"


def template_roles(deployment: Deployment) -> dict[str, str]:
    """Logical id -> ARN of every AWS::IAM::Role of the translated template that was created."""
    translated = deployment.state_dir / "translated-template.json"
    resources = json.loads(translated.read_text()).get("Resources", {})
    return {
        logical_id: deployment.attributes[logical_id]["Arn"]
        for logical_id, resource in resources.items()
        if resource.get("Type") == "AWS::IAM::Role"
        and "Arn" in deployment.attributes.get(logical_id, {})
    }


def install(deployment: Deployment, mode: str | None = None) -> Callable[[], None]:
    """Switch the check on (see the module docstring); returns the undo callable."""
    mode = mode or mode_from_environment()
    if mode == "off":
        logger.warning(
            "%s=off: every principal uses the local cloud's own credentials", IAM_MODE_ENV
        )
        return lambda: None
    principals = Principals(deployment.endpoints)
    for logical_id, arn in sorted(template_roles(deployment).items()):
        principals.issue(arn, session_name=logical_id)
    enforcer = Enforcer(principals, deployment.logs_dir, mode)
    _current.update(enforcer=enforcer, deployment=deployment)
    undo_server = _patch_server(enforcer)
    undo_clients = _patch_sfn_clients(principals)
    logger.info(
        "IAM check %s: %d roles, decisions in %s", mode, len(principals.known()), enforcer.log_path
    )

    def undo() -> None:
        undo_clients()
        undo_server()
        _current.update(enforcer=None, deployment=None)
        enforcer.close()

    return undo


def _patch_server(enforcer: Enforcer) -> Callable[[], None]:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication  # noqa: PLC0415

    original = DomainDispatcherApplication.__call__

    def __call__(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        try:
            denied = enforcer.check_environ(environ)
        except Exception:  # a bug of the check must not pass the call
            logger.exception("the IAM check failed on %s", environ.get("PATH_INFO"))
            denied = (500, {"Content-Type": "text/plain"}, b"local IAM check failed: see the log")
        if denied is None:
            return original(self, environ, start_response)
        status, headers, body = denied
        reason = {400: "Bad Request", 403: "Forbidden"}.get(status, "Error")
        start_response(f"{status} {reason}", [*headers.items(), ("Content-Length", str(len(body)))])
        return [body]

    DomainDispatcherApplication.__call__ = __call__  # type: ignore[method-assign]

    def undo() -> None:
        DomainDispatcherApplication.__call__ = original  # type: ignore[method-assign]

    return undo


def _patch_sfn_clients(principals: Principals) -> Callable[[], None]:
    """Sign the ASL engine's clients with the task's role (moto signs them with "ak")."""
    import moto.stepfunctions.parser.asl.utils.boto_client as boto_client_module  # noqa: PLC0415
    from botocore.credentials import Credentials  # noqa: PLC0415

    original = boto_client_module.boto_client_for

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        client: Any = original(region, service, state_credentials)
        role_arn = getattr(state_credentials, "role_arn", None)
        if role_arn:
            principal = principals.issue(str(role_arn))
            # botocore's signer signs every request with these (moto pinned, see the docstring)
            client._request_signer._credentials = Credentials(
                principal.access_key, principal.secret_key, principal.session_token
            )
        return client

    patched = []
    for name, module in list(sys.modules.items()):
        if (
            name.startswith("moto.stepfunctions.parser")
            and getattr(module, "boto_client_for", None) is original
        ):
            module.boto_client_for = boto_client_for  # type: ignore[attr-defined]
            patched.append(module)
    if not patched:
        raise RuntimeError("no module of moto's ASL engine imports boto_client_for: re-check")

    def undo() -> None:
        for module in patched:
            module.boto_client_for = original  # type: ignore[attr-defined]

    return undo


__all__ = [
    "IAM_MODE_ENV",
    "AccessDenied",
    "Enforcer",
    "Request",
    "authorize",
    "current",
    "denial_message",
    "function_environment",
    "install",
    "mode_from_environment",
    "role_environment",
]
