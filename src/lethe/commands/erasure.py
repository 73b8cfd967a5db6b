"""`lethe erasure request | status | list | cancel | resume | find | resend | certificate`:
erasure requests through the REST API (docs/ERASURE.md); `resume` is
lethe.commands.erasure_resume, `find` lethe.commands.erasure_find, `resend`
lethe.commands.erasure_resend.

This module holds the group's parser and its handlers, and follows a request with --wait; what
is shown of a record (and the exit status it ends with) is `lethe.commands.erasure_records`,
the certificate's summary, page and verification `lethe.commands.erasure_certificate`.

Every call that changes something carries an Idempotency-Key (`--idempotency-key`, else a fresh
random one) and is retried on a time-out, a lost connection, 429 or 5xx with the same key and
body (lethe.api_retry). A filing that gets no usable answer says whether it may have been filed
and prints the key to repeat it with; a cancel whose answer was lost and whose retry finds the
request cancelled reports it cancelled (the API does not key cancels: cancelling is idempotent
in effect, REJECTED with outcome CANCELLED once).

Subject ids are personal data. This module sends them to the API and nowhere else: it never
prints or logs a raw id, not in errors either (the API's 400 answers name fields, never values,
and every server message is redacted of the ids given before it is shown). Requests are shown
by id, status and counts; subjects by count (the record holds keyed hashes only).

Exit statuses (`ExitCode`, docs/CLI.md): 0 ok, 1 runtime failure, 2 usage error, 3 no such
request, 4 deployment unreachable. With `--wait`, the outcome decides: 0 COMPLETED (or the
`--until` status reached), 5 REJECTED or EXPIRED (nothing was erased, cancelled requests
included), 1 FAILED (outcome INCOMPLETE too: a place was not fully searched) or the wait
timed out (the request goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from lethe.api_retry import IDEMPOTENCY_HEADER, ApiUnavailableError, Attempt
from lethe.commands import CommandError, NotFoundError, UsageError, add_subject_argument
from lethe.commands import erasure_certificate as certificates
from lethe.commands.erasure_find import add_find_parser
from lethe.commands.erasure_records import (
    exit_status,
    is_terminal,
    progress_line,
    reached,
    redact,
    refusal,
    status_lines,
    status_text,
)
from lethe.commands.erasure_resend import add_resend_parser
from lethe.commands.erasure_resume import add_resume_parser
from lethe.commands.subject_keys import add_subject_key_argument, check_subject_keys
from lethe.progress import Waiting, waiting
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.erasure.requests import ErasureStatus

WAIT_TIMEOUT_SECONDS: Final = 6 * 3600.0
POLL_FIRST_SECONDS: Final = 1.0
POLL_MAX_SECONDS: Final = 10.0  # the poll interval grows to this and stays there
REQUEST_ID_PATTERN: Final = r"er-[A-Za-z0-9._-]{1,125}"
# `status` and `certificate` also read a retention run's record (rt-..., docs/RUNBOOK.md)
RECORD_ID_PATTERN: Final = r"(?:er|rt)-[A-Za-z0-9._-]{1,125}"
STATUSES: Final = tuple(s.value for s in ErasureStatus)

# Seams for tests: the wait loop's clock and sleep.
_sleep: Callable[[float], None] = time.sleep
_clock: Callable[[], float] = time.monotonic


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "erasure", help="erasure requests: file, follow, cancel, resume, certificates"
    )
    commands = parser.add_subparsers(dest="erasure_command", metavar="COMMAND", required=True)
    wait_epilog = (
        "With --wait the exit status is 0 for COMPLETED, 5 for REJECTED or EXPIRED (nothing "
        "erased; a cancelled request ends REJECTED), 1 for FAILED (outcome INCOMPLETE "
        "included: a place was not fully searched) or when --timeout runs out (the request "
        "goes on)."
    )

    request = commands.add_parser(
        "request",
        help="file an erasure request; prints its id",
        description="Files an erasure request and prints its id (one line on stdout). "
        "Raw subject ids are sent to the API only, never printed.",
        epilog=wait_epilog,
    )
    add_subject_argument(request)
    add_subject_key_argument(request)
    request.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="ID",
        help="look the subjects up in this dataset only (repeatable; default: every registered "
        "dataset). An id is matched in each dataset as a value of its subject column's type",
    )
    # An id typed without --subject would be echoed by argparse ("unrecognized arguments"):
    # collect stray words here and refuse them without printing them.
    request.add_argument("stray", nargs="*", help=argparse.SUPPRESS)
    request.add_argument("--reason", default="", help="why (stored and shown as written)")
    _requested_by_argument(request)
    request.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="sent as the Idempotency-Key header: a retry with the same key and body names the "
        "same request (default: a fresh random key; a failure that may have filed the request "
        "prints it, to repeat the command with)",
    )
    request.add_argument(
        "--wait", action="store_true", help="follow the request until it ends (see below)"
    )
    _timeout_argument(request)
    request.add_argument(
        "--json",
        action="store_true",
        help="print the API's answer as JSON (with --wait: the final request record)",
    )
    add_target_arguments(request)
    request.set_defaults(func=file_request)

    status = commands.add_parser(
        "status",
        help="a request's status, report, approval, result and history",
        epilog=wait_epilog + " With --until STATUS it also stops, with exit status 0, when the "
        "request is in STATUS or has passed it and is still open.",
    )
    status.add_argument("request_id", metavar="ID")
    status.add_argument(
        "--json", action="store_true", help="print the request record as the API returned it"
    )
    status.add_argument(
        "--wait", action="store_true", help="wait until the request ends (or --until)"
    )
    status.add_argument(
        "--until",
        choices=STATUSES,
        metavar="STATUS",
        help="with --wait: stop when the request reaches this status (or any final one)",
    )
    _timeout_argument(status)
    add_target_arguments(status)
    status.set_defaults(func=show_status)

    listing = commands.add_parser("list", help="erasure requests, newest first")
    listing.add_argument("--status", choices=STATUSES, metavar="STATUS", help="only this status")
    listing.add_argument("--json", action="store_true", help="print the JSON list")
    add_target_arguments(listing)
    listing.set_defaults(func=list_requests)

    cancel = commands.add_parser(
        "cancel",
        help="cancel a request that has not started erasing (it ends REJECTED)",
    )
    cancel.add_argument("request_id", metavar="ID")
    _requested_by_argument(cancel)
    add_target_arguments(cancel)
    cancel.set_defaults(func=cancel_request)
    add_resume_parser(commands)
    add_find_parser(commands)
    add_resend_parser(commands)

    certificate = commands.add_parser(
        "certificate",
        help="a completed (or INCOMPLETE) request's signed erasure certificate",
        description="Reads the certificate envelope of a COMPLETED request, or of a FAILED one "
        "with outcome INCOMPLETE (complete: false, with every place not fully searched), from "
        "S3 and prints a summary. --verify checks its signature: exit 1 if it does not "
        "verify, and exit 1 too when it verifies but certifies an INCOMPLETE erasure "
        "(complete: false: the request did not complete).",
    )
    certificate.add_argument("request_id", metavar="ID")
    certificate.add_argument(
        "--verify",
        action="store_true",
        help="check the signature with the stack's certificate key (KMS Verify), re-hash every "
        "document it names from the reports bucket and match the request record",
    )
    certificate.add_argument(
        "--verify-chain",
        action="store_true",
        help="with --verify: also walk the deployment's certificate chain (each link signed, "
        "each naming the one before, none missing)",
    )
    certificate.add_argument(
        "--key-id",
        metavar="ARN",
        help="with --verify: the key to pin (default: the stack output ErasureCertificateKeyArn)",
    )
    certificate.add_argument(
        "--offline",
        action="store_true",
        help="with --verify: check it locally with the key's public key (KMS GetPublicKey, or "
        "--public-key FILE); documents from --documents DIR, else not checked",
    )
    certificate.add_argument(
        "--public-key", type=Path, metavar="FILE", help="with --offline: the key's public key (PEM)"
    )
    certificate.add_argument(
        "--documents",
        type=Path,
        metavar="DIR",
        help="with --verify: read the certified documents (manifest.json, results.json, ...) "
        "from DIR instead of the reports bucket",
    )
    certificate.add_argument("--json", action="store_true", help="print the envelope JSON")
    certificate.add_argument(
        "--html", type=Path, metavar="FILE", help="write the certificate as an HTML page"
    )
    add_target_arguments(certificate)
    certificate.set_defaults(func=show_certificate)


def _requested_by_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requested-by",
        metavar="WHO",
        help="who asks (default: $LETHE_REQUESTED_BY, else the caller's AWS identity ARN)",
    )


def _timeout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        metavar="S",
        help="with --wait: seconds to wait (default 6 h)",
    )


# ------------------------------------------------------------------------------------ request


def file_request(args: argparse.Namespace) -> int:
    if args.stray:  # not echoed: they may be subject ids
        raise UsageError(
            f"{len(args.stray)} unexpected argument(s): give each subject as --subject ID"
        )
    if not args.subject and not args.subject_key:
        raise UsageError("give --subject ID (repeatable) or --subject-key COLUMN=VALUE,...")
    check_subject_keys(args.subject_key)
    secrets = [*args.subject, *(v for key in args.subject_key for v in key.values())]
    target = resolve(args)
    body = {
        "subject_ids": list(args.subject),
        "subject_keys": list(args.subject_key),
        "reason": args.reason,
        "requested_by": _requested_by(target, args.requested_by),
    }
    if args.dataset:
        body["datasets"] = list(dict.fromkeys(args.dataset))
    answer = _file(target, body, args.idempotency_key, secrets)
    request_id = str(answer["request_id"])
    if answer.get("duplicate"):
        print(
            f"{request_id}: filed once, by an earlier attempt of this command whose answer was "
            "lost; nothing new was filed"
            if not args.idempotency_key
            else f"{request_id}: this Idempotency-Key filed it before; nothing new was filed",
            file=sys.stderr,
        )
    if not args.wait:
        print(json.dumps(answer, indent=2, sort_keys=True) if args.json else request_id)
        return 0
    if not args.json:
        print(request_id, flush=True)
    with waiting(args, request_id) as shown:
        record = wait_for_request(target, request_id, timeout=args.timeout, waiting=shown)
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
    else:
        print(f"{request_id}: {status_text(record)}", file=sys.stderr)
    return exit_status(record)


def _file(
    target: Target, body: dict[str, Any], given_key: str | None, secrets: list[str]
) -> dict[str, Any]:
    """POST the request under `given_key` or a new random one; the API's answer, or
    CommandError that says whether it may have been filed and how to repeat it safely."""
    key = given_key or new_idempotency_key()
    tries: list[Attempt] = []
    try:
        status, answer = target.call_api(
            "POST", "/erasure-requests", body, headers={IDEMPOTENCY_HEADER: key}, attempts=tries
        )
    except ApiUnavailableError as error:
        failed = CommandError(redact(_unfiled_message(error, key, given=bool(given_key)), secrets))
        failed.exit_code = error.exit_code  # 4 when it cannot have been filed, else 1
        raise failed from None
    except KeyboardInterrupt:
        print(f"lethe: interrupted while filing: {_retry_advice(key)}", file=sys.stderr)
        raise
    if status >= 400:
        message = refusal("request refused", status, answer)
        if any(t.maybe_delivered for t in tries[:-1]):  # an earlier attempt may have filed it
            message += f"\nan earlier attempt may have filed it: {_retry_advice(key)}"
        raise CommandError(redact(message, secrets))
    return answer


def new_idempotency_key() -> str:
    """A fresh random Idempotency-Key (144 bits from `secrets`): unguessable, and never derived
    from the subjects, so it says nothing about them and may be shown."""
    return "lethe-" + secrets.token_urlsafe(18)


def _retry_advice(key: str) -> str:
    return (
        f"its Idempotency-Key is {key}. To finish safely, run the same command again with "
        f"`--idempotency-key {key}` (the same subjects, datasets, reason and requester): "
        "the API then files it at most once and prints its id, whether an earlier attempt "
        "filed it or not. Filing it again without that key may file it twice"
    )


def _unfiled_message(error: ApiUnavailableError, key: str, *, given: bool) -> str:
    """What a filing that got no usable answer says: whether it may have been filed, the key,
    and how to repeat it safely."""
    if error.maybe_delivered:
        return f"{error.summary()}.\nThe erasure request MAY HAVE BEEN FILED: {_retry_advice(key)}"
    return (
        f"{error}.\nThe erasure request was NOT filed (no attempt reached the API): "
        f"run the command again once the API is reachable"
        + (f" (with `--idempotency-key {key}`, as given)" if given else "")
    )


def _requested_by(target: Target, given: str | None) -> str:
    who = given or os.environ.get("LETHE_REQUESTED_BY", "")
    if who:
        return who
    try:
        return str(target.client("sts").get_caller_identity()["Arn"])
    except (BotoCoreError, ClientError) as exc:
        raise CommandError(
            f"cannot tell who asks ({exc}): give --requested-by WHO or set LETHE_REQUESTED_BY"
        ) from None


# --------------------------------------------------------------------------------- status


def show_status(args: argparse.Namespace) -> int:
    request_id = _check_request_id(args.request_id, runs=True)
    if args.until and not args.wait:
        raise UsageError("--until needs --wait")
    target = resolve(args)
    if args.wait:
        with waiting(args, request_id) as shown:
            record = wait_for_request(
                target, request_id, timeout=args.timeout, until=args.until, waiting=shown
            )
    else:
        record = get_request(target, request_id)
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
    else:
        for line in status_lines(record):
            print(line)
    if not args.wait:
        return 0
    if args.until and (record.get("status") == args.until or not is_terminal(record)):
        return 0
    return exit_status(record)


def get_request(target: Target, request_id: str) -> dict[str, Any]:
    status, record = target.call_api("GET", f"/erasure-requests/{request_id}")
    if status >= 400:
        raise _read_error(request_id, status, record)
    return record


def _read_error(request_id: str, status: int, answer: dict[str, Any]) -> CommandError:
    if status == 404:
        return NotFoundError(
            refusal(f"no request {request_id}", status, answer)
            + "\nlist them with `lethe erasure list`"
        )
    return CommandError(refusal(f"cannot read request {request_id}", status, answer))


def wait_for_request(
    target: Target,
    request_id: str,
    *,
    timeout: float,
    until: str | None = None,
    waiting: Waiting | None = None,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """GET the request until its status is final, or is (or has passed through) `until`.
    Each new status goes to `waiting` (stderr) with its history entry. The interval grows from
    1 s to 10 s; 429 and 5xx answers are retried. After `timeout` s it raises CommandError (the
    request goes on)."""
    sleep = sleep or _sleep
    clock = clock or _clock
    progress = waiting if waiting is not None else Waiting(request_id)
    deadline = clock() + timeout
    interval = POLL_FIRST_SECONDS
    shown = ""
    record: dict[str, Any] = {}
    while True:
        try:
            status, answer = target.call_api("GET", f"/erasure-requests/{request_id}")
        except ApiUnavailableError as error:
            if not error.answered:  # no connection: say so (the request goes on)
                raise
            status, answer = error.last.status or 503, {}  # 429/5xx: keep polling
        if status < 400:
            record = answer
            current = str(record.get("status", ""))
            if current != shown:
                progress.update(progress_line(record))
                shown = current
            else:
                progress.tick()
            if is_terminal(record) or (until is not None and reached(record, until)):
                return record
        elif status != 429 and status < 500:
            raise _read_error(request_id, status, answer)
        if clock() + interval > deadline:
            raise CommandError(
                f"request {request_id} is still {shown or 'unknown'} after {timeout:.0f} s; "
                "it goes on"
            )
        sleep(interval)
        interval = min(interval * 1.5, POLL_MAX_SECONDS)


# ----------------------------------------------------------------------------------- list


def list_requests(args: argparse.Namespace) -> int:
    query = {"status": args.status} if args.status else None
    status, answer = resolve(args).call_api("GET", "/erasure-requests", query=query)
    if status >= 400:
        raise CommandError(refusal("cannot list requests", status, answer))
    requests: list[dict[str, Any]] = list(answer.get("requests") or [])
    if args.json:
        print(json.dumps(requests, indent=2, sort_keys=True))
        return 0
    if not requests:
        print("no erasure requests" + (f" with status {args.status}" if args.status else ""))
        return 0
    print(f"{'REQUEST':36} {'STATUS':28} {'CREATED':32} {'SUBJECTS':>8} {'ROWS':>8}")
    for record in requests:
        report = record.get("report") or {}
        rows = report.get("rows", "-") if report else "-"
        print(
            f"{record.get('request_id', ''):36} {status_text(record):28} "
            f"{record.get('created_at', ''):32} {record.get('subject_count', 0):>8} {rows:>8}"
        )
    return 0


# --------------------------------------------------------------------------------- cancel


def cancel_request(args: argparse.Namespace) -> int:
    request_id = _check_request_id(args.request_id)
    target = resolve(args)
    body = {"requested_by": _requested_by(target, args.requested_by)}
    tries: list[Attempt] = []
    status, answer = target.call_api(
        "POST",
        f"/erasure-requests/{request_id}/cancel",
        body,
        headers={IDEMPOTENCY_HEADER: new_idempotency_key()},
        attempts=tries,
    )
    if status == 409 and any(t.maybe_delivered for t in tries[:-1]):
        # an earlier attempt may have cancelled it, and this one found it cancelled
        record = get_request(target, request_id)
        if (
            record.get("status") == ErasureStatus.REJECTED.value
            and record.get("outcome") == "CANCELLED"
        ):
            print(
                f"{request_id}: cancelled (an earlier attempt of this command, whose answer was "
                "lost, or someone else cancelled it)",
                file=sys.stderr,
            )
            status, answer = 200, record
    if status == 404:
        raise _read_error(request_id, status, answer)
    if status == 409:
        raise CommandError(
            str(answer.get("message") or f"request {request_id} cannot be cancelled")
        )
    if status >= 400:
        raise CommandError(refusal(f"cannot cancel request {request_id}", status, answer))
    print(f"{request_id}: {status_text(answer)}")
    return 0


# ---------------------------------------------------------------------------- certificate


def show_certificate(args: argparse.Namespace) -> int:
    request_id = _check_request_id(args.request_id, runs=True)
    if args.offline and not args.verify:
        raise UsageError("--offline needs --verify")
    for flag in ("verify_chain", "key_id", "public_key", "documents"):
        if getattr(args, flag) and not args.verify:
            raise UsageError(f"--{flag.replace('_', '-')} needs --verify")
    if args.public_key and not args.offline:
        raise UsageError("--public-key needs --offline")
    target = resolve(args)
    certificates.show_certificate(
        target,
        request_id,
        get_request(target, request_id),
        as_json=args.json,
        html=args.html,
        verify=args.verify,
        options=certificates.VerifyOptions(
            offline=args.offline,
            key_id=args.key_id,
            public_key=args.public_key,
            documents=args.documents,
            chain=args.verify_chain,
        ),
    )
    return 0


# -------------------------------------------------------------------------------- helpers


def _check_request_id(request_id: str, *, runs: bool = False) -> str:
    """`request_id` when it is a request id (`runs`: or a retention run's, rt-...)."""
    if not re.fullmatch(RECORD_ID_PATTERN if runs else REQUEST_ID_PATTERN, request_id):
        # not echoed: a subject id given here by mistake must not be printed
        raise UsageError(
            "that is not a request id: request ids look like er-..."
            + (" (retention runs rt-...)" if runs else "")
        )
    return request_id
