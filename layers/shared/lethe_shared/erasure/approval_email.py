"""The approver's email: what the request erases and their own signed link (the only link).

Pure: lethe_shared.erasure.approval_flow.request_approval sends it through a Mailer (SES).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from lethe_shared.erasure.approval_links import utc_text
from lethe_shared.erasure.approval_pages import ApprovalSummary, DatasetCounts, counted, escaped

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _counts(d: DatasetCounts) -> str:
    return ", ".join(
        [counted(d.objects, "object"), counted(d.versions, "version"), counted(d.rows, "row")]
    )


@dataclass(frozen=True)
class ApprovalEmail:
    subject: str
    text: str
    html: str


def _header_text(value: str) -> str:
    return _CONTROL.sub(" ", value).strip()


def _not_searched_lines(summary: ApprovalSummary) -> list[str]:
    if not summary.not_searched:
        return []
    return [
        "NOT SEARCHED (raw uploads older than the request this erasure cannot reach, and "
        "datasets whose re-index is pending; the certificate names them): "
        + "; ".join(f"{g.dataset_id}: {g.versions} {g.reason}" for g in summary.not_searched)
    ]


def build_approval_email(summary: ApprovalSummary, link: str) -> ApprovalEmail:
    """One approver's email: what the request erases and their own link (the only link)."""
    parts = urlsplit(link)
    if parts.scheme not in {"https", "http"} or "/approvals/" not in parts.path:
        raise ValueError("the approval link must be an http(s) URL to /approvals/...")
    deadline = utc_text(summary.deadline)
    subject = _header_text(
        f"Approval needed: erasure request {summary.request_id} "
        f"({counted(summary.subject_count, 'data subject')})"
    )
    dataset_lines = [f"  - {d.dataset_id} ({d.zone}): {_counts(d)}" for d in summary.datasets]
    notice = (
        "The link opens a confirmation page. Opening it changes nothing: the request is decided "
        "only when you type the confirmation code shown on that page and choose Approve or "
        "Reject."
    )
    text = "\n".join(
        [
            f"{summary.requested_by} filed erasure request {summary.request_id}.",
            f"You receive this email as a configured approver ({summary.approver}).",
            "",
            f"Data subjects: {summary.subject_count}",
            f"Objects: {summary.total_objects}",
            f"Object versions: {summary.total_versions}",
            f"Rows: {summary.total_rows}",
            "Datasets:",
            *dataset_lines,
            *_not_searched_lines(summary),
            f"Report SHA-256: {summary.report_sha256}",
            f"Deadline: {deadline} (no decision by then: the request expires, nothing is erased)",
            "",
            notice,
            "",
            f"Review the request: {link}",
            "",
        ]
    )
    items = "".join(
        f"<li>{escaped(d.dataset_id)} ({escaped(d.zone)}): {escaped(_counts(d))}</li>"
        for d in summary.datasets
    )
    body = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escaped(subject)}</title></head>\n"
        '<body style="font-family:sans-serif;line-height:1.45;color:#1b1f24">\n'
        f"<p>{escaped(summary.requested_by)} filed erasure request "
        f"<strong>{escaped(summary.request_id)}</strong>. You receive this email as a configured "
        f"approver ({escaped(summary.approver)}).</p>\n"
        "<table>"
        f"<tr><th align=left>Data subjects</th><td>{summary.subject_count}</td></tr>"
        f"<tr><th align=left>Objects</th><td>{summary.total_objects}</td></tr>"
        f"<tr><th align=left>Object versions</th><td>{summary.total_versions}</td></tr>"
        f"<tr><th align=left>Rows</th><td>{summary.total_rows}</td></tr>"
        f"<tr><th align=left>Report SHA-256</th><td><code>{escaped(summary.report_sha256)}</code>"
        "</td></tr>"
        f"<tr><th align=left>Deadline</th><td>{escaped(deadline)}</td></tr>"
        "</table>\n"
        f"<p>Datasets:</p><ul>{items}</ul>\n"
        + "".join(f"<p>{escaped(line.strip())}</p>\n" for line in _not_searched_lines(summary))
        + f"<p>{escaped(notice)}</p>\n"
        f'<p><a href="{escaped(link)}">Review erasure request '
        f"{escaped(summary.request_id)}</a></p>\n"
        "</body></html>\n"
    )
    return ApprovalEmail(subject=subject, text=text, html=body)
