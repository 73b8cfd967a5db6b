"""`lethe erasure resume ID`: run a FAILED request's approved, frozen report again, without a
new approval, while its approval is valid (POST /erasure-requests/{id}/resume;
lethe_shared.erasure.resume).

The call carries an Idempotency-Key (`--idempotency-key`, else a fresh random one) and is
retried on a time-out, a lost connection, 429 or 5xx with the same key (lethe.api_retry): a
retry whose first attempt did resume the request gets that resume back, never a second run.
A refusal (409: the request is not FAILED, was never approved, its report changed, its approval
expired, or a resumed run is still going) is printed as the API words it, with what to do
(often: file a new request), and exits 1. Follow the resumed run with
`lethe erasure status ID --wait`.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from typing import Any, Final

from lethe.api_retry import IDEMPOTENCY_HEADER, Attempt
from lethe.commands import CommandError, NotFoundError, UsageError
from lethe.commands.erasure_records import refusal, status_text
from lethe.target import add_target_arguments, resolve

REQUEST_ID_PATTERN: Final = r"er-[A-Za-z0-9._-]{1,125}"  # lethe.commands.erasure's


def add_resume_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    resume = commands.add_parser(
        "resume",
        help="run a FAILED request's approved report again (while its approval is valid)",
        description="Resumes a FAILED erasure request: its approved, frozen report is erased "
        "again by a new run of the workflow, without a new approval, while the approval is "
        "valid (the stack's ApprovalValidityHours, counted from the decision). Refused (exit "
        "1) for a request that is not FAILED, was never approved, whose report changed, whose "
        "approval expired, or whose resumed run is still going: file a new request then. "
        "Follow it with `lethe erasure status ID --wait`.",
    )
    resume.add_argument("request_id", metavar="ID")
    resume.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="sent as the Idempotency-Key header: a retry with the same key gets the same "
        "resume back (default: a fresh random key)",
    )
    add_target_arguments(resume)
    resume.set_defaults(func=resume_request)


def resume_request(args: argparse.Namespace) -> int:
    if not re.fullmatch(REQUEST_ID_PATTERN, args.request_id):
        # not echoed: a subject id given here by mistake must not be printed
        raise UsageError("that is not a request id: request ids look like er-...")
    request_id = args.request_id
    key = args.idempotency_key or "lethe-" + secrets.token_urlsafe(18)  # as `erasure request`
    target = resolve(args)
    tries: list[Attempt] = []
    status, answer = target.call_api(
        "POST",
        f"/erasure-requests/{request_id}/resume",
        {},
        headers={IDEMPOTENCY_HEADER: key},
        attempts=tries,
    )
    if status == 404:
        raise NotFoundError(
            refusal(f"no request {request_id}", status, answer)
            + "\nlist them with `lethe erasure list`"
        )
    if status == 409:
        raise CommandError(str(answer.get("message") or f"request {request_id} cannot be resumed"))
    if status >= 400:
        raise CommandError(refusal(f"cannot resume request {request_id}", status, answer))
    found = answer.get("resumed")
    resumed: dict[str, Any] = found if isinstance(found, dict) else {}
    print(
        f"{request_id}: resumed: run {resumed.get('run', '?')}, execution "
        f"{resumed.get('execution_arn', '?')} ({status_text(answer)})"
    )
    if resumed.get("repeated"):
        print(
            f"{request_id}: this Idempotency-Key resumed it before; no second run was started",
            file=sys.stderr,
        )
    return 0
