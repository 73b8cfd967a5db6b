"""Whether a request may be erased: the rule every destructive step enforces.

A request is erased only with a recorded approval: the approval page's decision
(lethe_shared.erasure.approval_flow) `approval.decision == "approve"`, with who decided
(`decided_by`, one of the approvers the request was sent to, `approval.approvers`) and when
(`decided_at`), by an approver who is not the requester (the address the request names; the
approval page also refused the IAM principal that filed it, lethe_shared.erasure.principals).

Two places hold to it, so that neither the task token alone nor the erase job alone erases:

- the workflow's Mark Erasing step (lethe_shared.erasure.workflow.mark) moves the request to
  ERASING only from APPROVED (or ERASING, a retry) with a valid recorded approval, in one
  conditional write that pins the decision it checked; anything else raises
  ErasureNotApprovedError, which the state machine routes to the end without a Spark run. A
  task token answered with SendTaskSuccess for a rejected, cancelled, expired or undecided
  request therefore erases nothing. A resumed run (lethe_shared.erasure.resume) moves a FAILED
  request to ERASING only with that same valid approval, of the same frozen report, younger than
  the approval validity (`why_not_resumable`), for the execution the resume recorded;
- the erase job (spark_jobs/erase.py, both modes) reads the request (GetItem, read-only) and
  refuses, before it reads anything of the lake, unless it is ERASING with a valid recorded
  approval and its recorded report is the manifest (URL and SHA-256) the job was handed
  (`check_erasable`): a hand-made manifest, or a job started for a request not approved,
  erases nothing.

A scheduled retention run (lethe_shared.erasure.retention_runs; id `rt-...`) is the one record
that runs without an emailed approval: its `approval` is the dataset's declared retention rule
as a standing authorisation (`standing: retention`, the rule's SHA-256), accepted by
`check_erasable` for an `rt-` record only; the erase job then refuses such a run unless its
manifest is a retention manifest without subject hashes whose rules are the ones in force
(lethe_jobs.erase_settings.check_retention_run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from lethe_shared.erasure.requests import ErasureStatus
from lethe_shared.errors import LetheError

# What Mark Erasing moves to ERASING from (ERASING itself: a retried step).
ERASABLE_FROM = frozenset({ErasureStatus.APPROVED, ErasureStatus.ERASING})
# ... and in a resumed run (`lethe erasure resume`): a FAILED request, with a valid approval.
RESUMABLE_FROM = frozenset({ErasureStatus.FAILED, ErasureStatus.ERASING})
# How long an approval lets a FAILED request be resumed, counted from the decision (the
# template's ApprovalValidityHours; its bounds: MIN/MAX_APPROVAL_VALIDITY_HOURS).
DEFAULT_APPROVAL_VALIDITY_HOURS = 168
MIN_APPROVAL_VALIDITY_HOURS = 1
MAX_APPROVAL_VALIDITY_HOURS = 720
NEW_REQUEST = "file a new request (it gets a new report and a new approval)"
RETENTION_RUN_PREFIX = "rt-"  # a scheduled retention run's record (retention_runs)
STANDING_RETENTION = "retention"  # approval.standing of such a record


class ErasureNotApprovedError(LetheError):
    """The request may not be erased (not approved, or no valid recorded approval): nothing
    was erased or changed."""


class EraseNotAuthorisedError(LetheError):
    """The erase job was started for a request that may not be erased, or with a manifest
    that is not the request's approved report: it refused before reading the lake."""


class RequestState(Protocol):
    """What the rule reads of a request: an ErasureRequest, or the erase job's RequestView."""

    @property
    def request_id(self) -> str: ...
    @property
    def status(self) -> ErasureStatus: ...
    @property
    def outcome(self) -> str: ...
    @property
    def requested_by(self) -> str: ...
    @property
    def approval(self) -> Mapping[str, Any]: ...
    @property
    def report(self) -> Mapping[str, Any]: ...


# The attributes RequestView reads: the erase job's GetItem projects these only (its IAM policy
# allows no other: dynamodb:Attributes).
VIEW_ATTRIBUTES = ("request_id", "status", "outcome", "requested_by", "approval", "report")


@dataclass(frozen=True)
class RequestView:
    """A request as the erase job reads it (VIEW_ATTRIBUTES of its item)."""

    request_id: str
    status: ErasureStatus
    outcome: str = ""
    requested_by: str = ""
    approval: Mapping[str, Any] = field(default_factory=dict)
    report: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> RequestView:
        approval, report = item.get("approval"), item.get("report")
        return cls(
            request_id=str(item["request_id"]),
            status=ErasureStatus(str(item["status"])),
            outcome=str(item.get("outcome", "")),
            requested_by=str(item.get("requested_by", "")),
            approval=approval if isinstance(approval, Mapping) else {},
            report=report if isinstance(report, Mapping) else {},
        )


@dataclass(frozen=True)
class RecordedApproval:
    decided_by: str
    decided_at: str


def _same(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def recorded_approval(record: RequestState) -> RecordedApproval | None:
    """The request's recorded approval, if it is valid: decided "approve", by one of the
    approvers it was sent to who is not the requester, at a recorded time. None otherwise."""
    approval = record.approval
    decided_by, decided_at = approval.get("decided_by"), approval.get("decided_at")
    asked = approval.get("approvers")
    if (
        approval.get("decision") != "approve"
        or not isinstance(decided_by, str)
        or not decided_by.strip()
        or not isinstance(decided_at, str)
        or not decided_at
        or _same(decided_by, record.requested_by)
        or not isinstance(asked, list)
        or not any(isinstance(a, str) and _same(a, decided_by) for a in asked)
    ):
        return None
    return RecordedApproval(decided_by=decided_by, decided_at=decided_at)


def standing_retention(record: RequestState) -> bool:
    """Whether the record is a retention run authorised by its dataset's declared rule (module
    docstring): an `rt-` id, approval `standing: retention` with the rule's SHA-256."""
    approval = record.approval
    rule = approval.get("rule_sha256")
    return (
        record.request_id.startswith(RETENTION_RUN_PREFIX)
        and approval.get("standing") == STANDING_RETENTION
        and approval.get("decision") == "approve"
        and isinstance(rule, str)
        and len(rule) == 64
    )


def why_not_approved(record: RequestState) -> str:
    """Why Mark Erasing refuses the request ("" when it may be erased)."""
    if record.status not in ERASABLE_FROM:
        state = record.status.value + (f" ({record.outcome})" if record.outcome else "")
        return f"request {record.request_id} is {state}, not APPROVED: nothing is erased"
    if recorded_approval(record) is None:
        return (
            f"request {record.request_id} is {record.status.value} without a recorded approval "
            "by an approver other than the requester: nothing is erased"
        )
    return ""


def approval_expires(record: RequestState, validity: timedelta) -> datetime | None:
    """When the request's recorded approval stops letting it be resumed (None: no valid
    recorded approval, or its decision time is not a time)."""
    approval = recorded_approval(record)
    if approval is None:
        return None
    try:
        decided = datetime.fromisoformat(approval.decided_at)
    except ValueError:
        return None
    return decided + validity if decided.tzinfo else None


def _resumable_state(record: RequestState, execution: str) -> str:
    rid = record.request_id
    resume = getattr(record, "resume", None)
    retried = (
        record.status is ErasureStatus.ERASING
        and bool(execution)
        and isinstance(resume, Mapping)
        and resume.get("execution") == execution
    )
    if record.status is not ErasureStatus.FAILED and not retried:
        state = record.status.value + (f" ({record.outcome})" if record.outcome else "")
        return f"request {rid} is {state}, not FAILED: only a failed erasure is resumed"
    if record.status is ErasureStatus.FAILED and record.outcome:
        return (
            f"request {rid} ended FAILED ({record.outcome}): its erasure ran to its end and was "
            f"certified; it is not resumed: {NEW_REQUEST}"
        )
    return ""


def why_not_resumable(
    record: RequestState,
    *,
    now: datetime,
    validity: timedelta,
    execution: str = "",
) -> str:
    """Why a FAILED request may not be resumed ("" when it may): it must be FAILED (or, for the
    run `execution` its resume recorded, already ERASING: a retried Mark Erasing), not certified
    INCOMPLETE (that run went to its end), have a valid recorded approval of its frozen report
    (the approval names the report's SHA-256 when it was recorded with one), and that approval
    must be younger than `validity`. The erase job checks the report's pins itself."""
    rid = record.request_id
    refusal = _resumable_state(record, execution)
    if refusal:
        return refusal
    approval = recorded_approval(record)
    if approval is None:
        return f"request {rid} has no recorded approval of its report: {NEW_REQUEST}"
    frozen = str(record.report.get("manifest_sha256") or "")
    approved = str(record.approval.get("report_sha256") or frozen)
    if not frozen or approved != frozen:
        return (
            f"request {rid}: its report ({frozen or 'none'}) is not the one approved "
            f"({approved or 'none'}): {NEW_REQUEST}"
        )
    expires = approval_expires(record, validity)
    if expires is None:
        return f"request {rid}: its approval's decision time is not a time: {NEW_REQUEST}"
    if now >= expires:
        return (
            f"request {rid}: its approval of {approval.decided_at} expired at "
            f"{expires.isoformat()} (ApprovalValidityHours {validity.total_seconds() / 3600:g}): "
            f"{NEW_REQUEST}"
        )
    return ""


def check_erasable(record: RequestState | None, *, manifest_url: str, manifest_sha256: str) -> None:
    """The erase job's own check (both modes): raise EraseNotAuthorisedError unless the request
    is ERASING with a valid recorded approval and its recorded report is this manifest."""
    if record is None:
        raise EraseNotAuthorisedError("no erasure request has this id: nothing is erased")
    rid = record.request_id
    if record.status is not ErasureStatus.ERASING:
        raise EraseNotAuthorisedError(
            f"request {rid} is {record.status.value}, not ERASING: nothing is erased"
        )
    if recorded_approval(record) is None and not standing_retention(record):
        raise EraseNotAuthorisedError(
            f"request {rid} has no recorded approval by an approver other than the requester: "
            "nothing is erased"
        )
    report = record.report
    if report.get("manifest_url") != manifest_url:
        raise EraseNotAuthorisedError(
            f"the manifest {manifest_url} is not request {rid}'s report: nothing is erased"
        )
    if report.get("manifest_sha256") != manifest_sha256:
        raise EraseNotAuthorisedError(
            f"the manifest SHA-256 {manifest_sha256} is not the one request {rid}'s approval "
            f"recorded ({report.get('manifest_sha256') or 'none'}): nothing is erased"
        )


@dataclass(frozen=True)
class DynamoRequestView:
    """The erase job's read-only view of ErasureRequestsTable: one consistent GetItem of
    VIEW_ATTRIBUTES (nothing else of the record: no subject hashes, no task token)."""

    table: Any

    def read(self, request_id: str) -> RequestView | None:
        names = {f"#a{i}": name for i, name in enumerate(VIEW_ATTRIBUTES)}
        item = self.table.get_item(
            Key={"request_id": request_id},
            ConsistentRead=True,
            ProjectionExpression=", ".join(names),
            ExpressionAttributeNames=names,
        ).get("Item")
        return RequestView.from_item(item) if item else None
