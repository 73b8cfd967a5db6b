"""Authorise every request to the local cloud against the caller's role; log every decision.

`Enforcer.check_environ(environ)` runs before moto sees a request (the WSGI hook in
`__init__`). It reads the call (http_calls), finds the principal by access key (principals),
turns the call into IAM requests (s3_calls, services), decides each against the role's identity
policies (evaluate) and, in `enforce` mode, answers a denied call itself with the service's
AccessDenied error, naming role, action, resource and reason. Decisions go to
`<logs_dir>/iam-decisions.jsonl`, one JSON object a line: `time`, `mode`, `role`, `action`,
`resource`, `allowed`, `reason`, `service`, `operation` (and `caller` for checks made in
process, such as a Step Functions task starting a Spark job). `denials()` lists the denied ones.

Who is checked: every request signed with a role's credentials. Requests signed with the local
cloud's own credentials (`testing`: provisioning, the event dispatch that stands in for
EventBridge's and Lambda's own service principals, the tests and the CLI) pass unchecked, as
AWS's service-side calls are not the template's roles' calls. A request signed with any other
key, or unsigned, is denied: a role the hooks forgot to give credentials must fail loudly.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lethe.localcloud.iam.evaluate import Decision, Request, Unevaluable, evaluate
from lethe.localcloud.iam.http_calls import Call, read_call
from lethe.localcloud.iam.principals import ADMIN_ACCESS_KEYS, Principal, Principals
from lethe.localcloud.iam.s3_calls import s3_requests
from lethe.localcloud.iam.services import SERVICES

logger = logging.getLogger("lethe.localcloud.iam")

MODES = ("enforce", "off")


class AccessDenied(Exception):
    """A call the template's policies do not allow (raised by in-process checks)."""


class Enforcer:
    def __init__(self, principals: Principals, logs_dir: Path, mode: str = "enforce") -> None:
        if mode not in MODES:
            raise ValueError(f"LETHE_LOCAL_IAM={mode!r}: expected one of {', '.join(MODES)}")
        self.principals = principals
        self.mode = mode
        self.account = principals.endpoints.account_id
        self.log_path = logs_dir / "iam-decisions.jsonl"
        self._log = self.log_path.open("a", buffering=1)
        self._lock = threading.Lock()
        self._denials: list[dict[str, Any]] = []

    def close(self) -> None:
        with self._lock:
            self._log.close()

    def denials(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._denials)

    # -- HTTP requests

    def check_environ(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """None to let moto answer; else the (status, headers, body) of an AccessDenied."""
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith("/moto-api"):
            return None
        call = read_call(environ)
        if call.access_key in ADMIN_ACCESS_KEYS:
            return None
        principal = self.principals.role_for(call.access_key)
        if principal is None:
            who = f"access key {call.access_key!r}" if call.access_key else "an unsigned request"
            return self._deny_unknown(call, f"{who} belongs to no role of the template")
        requests = self._requests(call)
        if isinstance(requests, str):
            decision = Decision(False, requests)
            self._record(
                principal, Request(f"{call.service}:{call.operation or '?'}", "?"), decision, call
            )
            return self._response(
                call, principal, f"{call.service}:{call.operation or '?'}", "?", requests
            )
        for request in requests:
            decision = self.decide(principal, request)
            self._record(principal, request, decision, call)
            if not decision.allowed and self.mode == "enforce":
                return self._response(
                    call, principal, request.action, request.resource, decision.reason
                )
        return None

    def _requests(self, call: Call) -> list[Request] | str:
        if call.service == "s3":
            return s3_requests(call)
        mapper = SERVICES.get(call.service)
        if mapper is None:
            return f"service {call.service or '?'} is not mapped to IAM locally"
        if not call.operation:
            return f"{call.method} {call.path} is no known {call.service} operation"
        try:
            return mapper(call, self.account)
        except Exception as error:  # a mapping bug must deny, not pass
            logger.exception("IAM mapping of %s:%s failed", call.service, call.operation)
            return f"mapping {call.service}:{call.operation} failed: {error}"

    # -- decisions

    def decide(self, principal: Principal, request: Request) -> Decision:
        try:
            return evaluate(self.principals.policies(principal.role_name), request)
        except (Unevaluable, NotImplementedError) as error:
            return Decision(False, f"not evaluable locally: {error}")

    def authorize(self, role_arn: str, requests: Sequence[Request], caller: str) -> None:
        """In-process check (no HTTP request): raise AccessDenied in enforce mode."""
        principal = self.principals.issue(role_arn)
        for request in requests:
            decision = self.decide(principal, request)
            self._record(principal, request, decision, None, caller=caller)
            if not decision.allowed and self.mode == "enforce":
                raise AccessDenied(
                    denial_message(principal, request.action, request.resource, decision.reason)
                )

    def _record(
        self,
        principal: Principal | None,
        request: Request,
        decision: Decision,
        call: Call | None,
        caller: str = "",
    ) -> None:
        entry = {
            "time": round(time.time(), 3),
            "mode": self.mode,
            "role": principal.role_name if principal else "",
            "action": request.action,
            "resource": request.resource,
            "allowed": decision.allowed,
            "reason": decision.reason,
        }
        if len(decision.allowed_by) > 1:  # more than one statement allows it (coverage)
            entry["allowed_by"] = list(decision.allowed_by)
        if not decision.allowed and request.context:
            entry["context"] = _loggable(request.context)
        if call is not None:
            entry["service"] = call.service
            entry["operation"] = (
                call.operation
                or f"{call.method} {call.path.split('/', 2)[1] if '/' in call.path else ''}"
            )
        if caller:
            entry["caller"] = caller
        line = json.dumps(entry, sort_keys=True)
        with self._lock:
            if not self._log.closed:
                self._log.write(line + "\n")
            if not decision.allowed:
                self._denials.append(entry)
        if not decision.allowed:
            logger.warning("IAM %s: %s", "DENIED" if self.mode == "enforce" else "would deny", line)

    def _deny_unknown(self, call: Call, reason: str) -> tuple[int, dict[str, str], bytes] | None:
        decision = Decision(False, reason)
        self._record(
            None, Request(f"{call.service}:{call.operation or '?'}", call.path), decision, call
        )
        if self.mode != "enforce":
            return None
        return _error_response(
            call,
            f"{reason}: {call.method} {call.path} ({call.service}) refused by the local IAM check",
        )

    def _response(
        self, call: Call, principal: Principal, action: str, resource: str, reason: str
    ) -> tuple[int, dict[str, str], bytes] | None:
        if self.mode != "enforce":
            return None
        return _error_response(call, denial_message(principal, action, resource, reason))


def _loggable(context: Any) -> dict[str, list[str]]:
    """The request context of a denial, for the log; partition key values only up to their
    first `#` (a subject index key is a keyed hash, but no key value needs to be kept)."""
    shown = {}
    for key, values in context.items():
        if key == "dynamodb:leadingkeys":
            shown[key] = [v.split("#", 1)[0] + "#..." if "#" in v else "..." for v in values]
        else:
            shown[key] = list(values)
    return shown


def denial_message(principal: Principal, action: str, resource: str, reason: str) -> str:
    return (
        f"User: {principal.session_arn} is not authorized to perform: {action} on resource: "
        f"{resource} because {reason} (role {principal.role_name}; local IAM check)"
    )


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _error_response(call: Call, message: str) -> tuple[int, dict[str, str], bytes]:
    """AccessDenied in the wire shape of the call's protocol (botocore raises ClientError)."""
    if call.service == "s3":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
            f"<Message>{_xml_escape(message)}</Message><RequestId>local-iam</RequestId></Error>"
        )
        return 403, {"Content-Type": "application/xml"}, body.encode()
    if call.headers.get("x-amz-target"):
        document = {"__type": "AccessDeniedException", "message": message, "Message": message}
        return (
            400,
            {
                "Content-Type": "application/x-amz-json-1.0",
                "x-amzn-query-error": "AccessDenied;Sender",
            },
            json.dumps(document).encode(),
        )
    if "Action" in call.params or call.service in {"sns", "ses", "email", "sts", "monitoring"}:
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
            f"<Message>{_xml_escape(message)}</Message></Error><RequestId>local-iam</RequestId>"
            "</ErrorResponse>"
        )
        return 403, {"Content-Type": "text/xml"}, body.encode()
    document = {"Message": message, "message": message}
    return (
        403,
        {"Content-Type": "application/json", "x-amzn-ErrorType": "AccessDeniedException"},
        json.dumps(document).encode(),
    )
