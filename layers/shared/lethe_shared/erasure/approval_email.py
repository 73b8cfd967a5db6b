"""The approver's email: what the request erases and their own signed link (the only link).

Pure: lethe_shared.erasure.approval_flow.request_approval sends it through a Mailer (SES).

What the requester wrote never comes before the link. `requested_by` (free text, checked at
intake: lethe_shared.erasure.requester) is shown after the link only, labelled as the
requester's own words: in the text part on its own line, prefixed with `> ` under the label
REQUESTED_BY_LABEL, with any control or format character replaced (`display_text`, for values
stored before intake checked them); in the HTML part escaped, after the link. The IAM caller
that filed the request (`requester_principal`, authenticated by API Gateway) follows it when
known. Everything before the link is Lethe's own: the request id, the approver's configured
address, counts, registered dataset ids, the report hash and the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from lethe_shared.erasure.approval_links import utc_text
from lethe_shared.erasure.approval_pages import ApprovalSummary, DatasetCounts, counted, escaped
from lethe_shared.erasure.requester import display_text

REQUESTED_BY_LABEL = "Requested by (as given by the requester):"
PRINCIPAL_LABEL = "Filed by the IAM caller (as AWS authenticated it):"


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
    # one rule for user text on one line (requester.display_text): every control or format
    # character, not only ASCII's, so no header can be split or disguised
    return display_text(value)


def _not_searched_lines(summary: ApprovalSummary) -> list[str]:
    if not summary.not_searched:
        return []
    return [
        "NOT SEARCHED (raw uploads older than the request this erasure cannot reach, and "
        "datasets whose re-index is pending; the certificate names them): "
        + "; ".join(f"{g.dataset_id}: {g.versions} {g.reason}" for g in summary.not_searched)
    ]


def _requester_lines(summary: ApprovalSummary) -> list[str]:
    """The requester's own words (quoted, one line) and the authenticated caller, for the
    text part after the link."""
    lines = [REQUESTED_BY_LABEL, f"> {display_text(summary.requested_by)}"]
    if summary.requester_principal:
        lines += [PRINCIPAL_LABEL, f"> {display_text(summary.requester_principal)}"]
    return lines


def _requester_html(summary: ApprovalSummary) -> str:
    html = (
        f"<p>{escaped(REQUESTED_BY_LABEL)}<br>\n"
        f'<q id="requested-by">{escaped(display_text(summary.requested_by))}</q></p>\n'
    )
    if summary.requester_principal:
        html += (
            f"<p>{escaped(PRINCIPAL_LABEL)}<br>\n"
            f'<code id="requester-principal">{escaped(summary.requester_principal)}</code></p>\n'
        )
    return html


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
            f"Erasure request {summary.request_id} awaits your decision.",
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
            *_requester_lines(summary),
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
        f"<p>Erasure request <strong>{escaped(summary.request_id)}</strong> awaits your "
        f"decision. You receive this email as a configured approver "
        f"({escaped(summary.approver)}).</p>\n"
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
        f"{escaped(summary.request_id)}</a></p>\n" + _requester_html(summary) + "</body></html>\n"
    )
    return ApprovalEmail(subject=subject, text=text, html=body)
