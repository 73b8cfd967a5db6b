"""What `lethe erasure` shows of an erasure request record, and the exit status it ends with.

A record holds keyed hashes of its subjects, never a raw id: these lines show requests by id,
status and counts, subjects by count. Server messages are shown through `redact`, which removes
the subject ids given on the command line (the API's 400 answers name fields, never values).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from lethe.commands import ExitCode
from lethe_shared.erasure.requests import TERMINAL, ErasureStatus

EXIT_NOT_ERASED: Final = ExitCode.NOT_ERASED  # --wait ended REJECTED or EXPIRED
REDACTED: Final = "<subject>"
# Shorter values are too common in ordinary text ("7", "ab") to redact from messages; the API
# refuses ids of that length in free text from this length on too (lethe_shared.erasure.requests).
REDACT_MIN_LENGTH: Final = 4


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` without any of `secrets` (longest first, case-insensitively)."""
    for secret in sorted(
        {s for s in secrets if len(s) >= REDACT_MIN_LENGTH}, key=len, reverse=True
    ):
        text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
    return text


def refusal(what: str, status: int, answer: dict[str, Any]) -> str:
    errors = answer.get("errors") or []
    lines = [f"{what} ({status}): {answer.get('message', '')}".rstrip(": ")]
    lines.extend(f"  {error}" for error in errors if isinstance(error, str))
    return "\n".join(lines)


def reached(record: dict[str, Any], until: str) -> bool:
    """The request is in `until` or has passed through it (its history says so)."""
    return record.get("status") == until or any(
        isinstance(event, dict) and event.get("status") == until
        for event in record.get("history") or []
    )


def is_terminal(record: dict[str, Any]) -> bool:
    return record.get("status") in {s.value for s in TERMINAL}


def exit_status(record: dict[str, Any]) -> int:
    """--wait's exit status: 0 COMPLETED, 5 REJECTED or EXPIRED, 1 otherwise (FAILED, with
    outcome INCOMPLETE too: a place was not fully searched)."""
    status = record.get("status")
    if status == ErasureStatus.COMPLETED:
        return 0
    if status in {ErasureStatus.REJECTED, ErasureStatus.EXPIRED}:
        return EXIT_NOT_ERASED
    return 1


def status_text(record: dict[str, Any]) -> str:
    outcome = record.get("outcome")
    return f"{record.get('status', '?')}" + (f" ({outcome})" if outcome else "")


def progress_line(record: dict[str, Any]) -> str:
    """The status with its history entry's time, actor and detail (a --wait progress line)."""
    history = [e for e in record.get("history") or [] if isinstance(e, dict)]
    last = history[-1] if history and history[-1].get("status") == record.get("status") else {}
    parts = [status_text(record), str(last.get("at", "")), str(last.get("by", ""))]
    detail = str(last.get("detail", ""))
    return "  ".join(p for p in parts if p) + (f": {detail}" if detail else "")


def status_lines(record: dict[str, Any]) -> list[str]:
    """What a person reads about one request: counts and hashes, never a raw id."""
    lines = [
        f"request       {record.get('request_id', '')}",
        f"status        {status_text(record)}",
        f"requested by  {record.get('requested_by', '')}",
    ]
    if record.get("reason"):
        lines.append(f"reason        {record['reason']}")
    lines += [
        f"created       {record.get('created_at', '')}",
        f"updated       {record.get('updated_at', '')}",
        f"subjects      {record.get('subject_count', len(record.get('subject_hashes') or []))}",
    ]
    lines += _report_lines(record.get("report") or {})
    lines += _approval_lines(record.get("approval") or {})
    lines += _result_lines(record.get("result") or {})
    certificate = record.get("certificate") or {}
    if certificate:
        lines.append(f"certificate   {certificate.get('url', '')}")
        if certificate.get("html_url"):
            lines.append(f"  page        {certificate['html_url']}")
        if certificate.get("key_id"):
            lines.append(f"  signed by   {certificate['key_id']}")
    error = record.get("error") or {}
    if error:
        lines.append(f"error         {error.get('error', '')}: {error.get('cause', '')}".rstrip())
    if record.get("execution_arn"):
        lines.append(f"execution     {record['execution_arn']}")
    lines.append("history")
    for event in record.get("history") or []:
        detail = f"  {event.get('detail')}" if event.get("detail") else ""
        lines.append(
            f"  {event.get('at', ''):32} {event.get('status', ''):17} {event.get('by', '')}{detail}"
        )
    return lines


def _report_lines(report: dict[str, Any]) -> list[str]:
    if not report:
        return []
    lines = [
        f"report        {report.get('objects', 0)} objects, {report.get('versions', 0)} "
        f"versions, {report.get('rows', 0)} rows",
        f"  manifest    {report.get('manifest_url', '')}",
        f"  sha256      {report.get('manifest_sha256', '')}",
    ]
    if report.get("summary_html_url") or report.get("summary_text_url"):
        lines.append(
            f"  summary     {report.get('summary_html_url') or report.get('summary_text_url')}"
        )
    datasets = report.get("datasets") or []
    if datasets:
        lines.append(f"  {'DATASET':24} {'ZONE':5} {'OBJECTS':>8} {'VERSIONS':>9} {'ROWS':>8}")
        lines.extend(
            f"  {d.get('dataset_id', ''):24} {d.get('zone', ''):5} {d.get('objects', 0):>8} "
            f"{d.get('versions', 0):>9} {d.get('rows', 0):>8}"
            for d in datasets
        )
    return lines


def _approval_lines(approval: dict[str, Any]) -> list[str]:
    if not approval:
        return []
    lines = [
        f"approval      deadline {approval.get('deadline', '-')}, "
        f"{approval.get('approvers', 0)} approvers"
    ]
    if approval.get("decision"):
        lines.append(
            f"  decision    {approval['decision']} by {approval.get('decided_by', '?')} "
            f"at {approval.get('decided_at', '?')}"
        )
    return lines


def _result_lines(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    lines = [
        f"result        {result.get('objects', 0)} objects ({result.get('rewritten', 0)} "
        f"rewritten, {result.get('deleted', 0)} deleted), {result.get('rows_removed', 0)} rows "
        f"removed, {result.get('versions_purged', 0)} versions purged"
    ]
    if result.get("not_searched"):
        lines.append(
            f"  INCOMPLETE  {result['not_searched']} place(s) not fully searched: "
            "`lethe erasure certificate ID` lists them"
        )
    if result.get("verification_url"):
        lines.append(f"  verified    {result['verification_url']}")
    return lines
