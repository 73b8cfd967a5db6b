"""`lethe erasure resend ID [--approver EMAIL]`: send the approval email of a request that is
AWAITING_APPROVAL again, when it never arrived (a spam filter, a bounce, a deleted message).

The email holds a signed link whose key only the approval functions read, so the CLI does not
build it: it invokes the approval request function (`lethe-<stage>-approval-request`, the stage
from the stack output `StackStage`) with `{"action": "resend", "request_id", "approver"?}`,
which emails each approver (or the one named) **the same link** again
(lethe_shared.erasure.approval_flow.resend_approval): no new link, no later deadline, no new
task token, so the security of the approval is unchanged and a repeated command only sends the
same email again. The resend is recorded in the request's history.

It needs `lambda:InvokeFunction` on that function. Refused (exit 1, nothing sent): a request
that is not AWAITING_APPROVAL, past its deadline, or whose links an older Lethe did not record
(cancel it and file it again); an address that is not one of its approvers. No such request:
exit 3.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, Final

from lethe.commands import CommandError, NotFoundError, UsageError
from lethe.target import Target, add_target_arguments, resolve

REQUEST_ID_PATTERN: Final = r"er-[A-Za-z0-9._-]{1,125}"  # lethe.commands.erasure's


def add_resend_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    resend = commands.add_parser(
        "resend",
        help="send the approval email of a request AWAITING_APPROVAL again (the same link)",
        description="Sends each approver of a request AWAITING_APPROVAL (or only --approver) "
        "the approval email again, with the same signed link and deadline: nothing new becomes "
        "valid. Refused (exit 1) for a request in another status or past its deadline.",
    )
    resend.add_argument("request_id", metavar="ID")
    resend.add_argument(
        "--approver", metavar="EMAIL", help="only this approver (default: every approver)"
    )
    add_target_arguments(resend)
    resend.set_defaults(func=resend_approval)


def approval_function(target: Target) -> str:
    """The approval request function's name: template.yaml names it from the stage."""
    return f"lethe-{target.output('StackStage')}-approval-request"


def resend_approval(args: argparse.Namespace) -> int:
    if not re.fullmatch(REQUEST_ID_PATTERN, args.request_id):
        # not echoed: a subject id given here by mistake must not be printed
        raise UsageError("that is not a request id: request ids look like er-...")
    target = resolve(args)
    event: dict[str, Any] = {"action": "resend", "request_id": args.request_id}
    if args.approver:
        event["approver"] = args.approver
    answer = target.client("lambda").invoke(
        FunctionName=approval_function(target), Payload=json.dumps(event).encode()
    )
    payload: Any = json.loads(answer["Payload"].read() or b"{}")
    if answer.get("FunctionError") or not isinstance(payload, dict):
        error = payload.get("errorType", "error") if isinstance(payload, dict) else "error"
        raise CommandError(
            f"the approval request function failed ({error}): nothing may have been sent; "
            "its log is /aws/lambda/" + approval_function(target)
        )
    if payload.get("not_found"):
        raise NotFoundError(f"no request {args.request_id}: list them with `lethe erasure list`")
    if "refused" in payload:
        raise CommandError(f"not sent: {payload['refused']}")
    sent = [str(a) for a in payload.get("resent") or []]
    print(f"{args.request_id}: approval email sent again to {len(sent)} approver(s)")
    for address in sent:
        print(f"  {address}")
    return 0
