"""Erasure requests: the request record and its life cycle (docs/ERASURE.md).

A request names data subjects by id or composite key, in the datasets of its scope; the body,
its checks and the hashing of its subjects per dataset are `lethe_shared.erasure.subjects`
(re-exported here). Raw ids are personal data: `file_request` hashes them with the deployment's
key as soon as they arrive, and the record holds only the keyed hashes (each dataset's:
`hash_groups`, `hashes_for`), the count, the scope, the subjects not looked up in a dataset
(counts), who asked, why, and what happened since.

`DynamoErasureRequests` is the one reader and writer of `ErasureRequestsTable`; every change of
status goes through `transition`, a conditional update that appends to the history, so two
writers can never both move a request out of the same state. `DynamoApprovals` is the one owner
of `ApprovalsTable` (one item per emailed approval link).

Statuses (the REST API contract): RECEIVED -> REPORTED -> AWAITING_APPROVAL -> APPROVED ->
ERASING -> COMPLETED, or REJECTED, EXPIRED, FAILED. A request cancelled before it started
erasing ends REJECTED with `outcome: CANCELLED` (the contract's status set has no separate
value; docs/ERASURE.md).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from botocore.exceptions import ClientError
from pydantic import ConfigDict, Field

from lethe_shared.aws.dynamo import batch_get_all, query_all
from lethe_shared.aws.errors import is_condition_failed

# re-exported: what intake callers import from here
from lethe_shared.erasure.subjects import MAX_SUBJECTS as MAX_SUBJECTS  # noqa: PLC0414
from lethe_shared.erasure.subjects import ErasureRequestBody as ErasureRequestBody  # noqa: PLC0414
from lethe_shared.erasure.subjects import ErasureRequestError as ErasureRequestError  # noqa: PLC0414
from lethe_shared.erasure.subjects import HashGroup, NotLookedUp, hashes_in
from lethe_shared.erasure.subjects import SubjectSet as SubjectSet  # noqa: PLC0414
from lethe_shared.erasure.subjects import hash_subjects as hash_subjects  # noqa: PLC0414
from lethe_shared.erasure.subjects import parse_request_body as parse_request_body  # noqa: PLC0414
from lethe_shared.errors import LetheError
from lethe_shared.models import Model

REQUEST_ID_PREFIX = "er-"


class ErasureStatus(StrEnum):
    RECEIVED = "RECEIVED"
    REPORTED = "REPORTED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    ERASING = "ERASING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


TERMINAL = frozenset(
    {ErasureStatus.REJECTED, ErasureStatus.EXPIRED, ErasureStatus.COMPLETED, ErasureStatus.FAILED}
)
# What a request may be cancelled in: it has not started erasing.
CANCELLABLE = frozenset(
    {ErasureStatus.RECEIVED, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL}
)
# Where each status may be entered from (the workflow's edges; FAILED from any open state).
ALLOWED_FROM: Mapping[ErasureStatus, frozenset[ErasureStatus]] = {
    ErasureStatus.REPORTED: frozenset({ErasureStatus.RECEIVED, ErasureStatus.REPORTED}),
    ErasureStatus.AWAITING_APPROVAL: frozenset({ErasureStatus.REPORTED}),
    ErasureStatus.APPROVED: frozenset({ErasureStatus.AWAITING_APPROVAL}),
    ErasureStatus.REJECTED: CANCELLABLE,
    ErasureStatus.EXPIRED: frozenset({ErasureStatus.AWAITING_APPROVAL}),
    ErasureStatus.ERASING: frozenset({ErasureStatus.APPROVED, ErasureStatus.ERASING}),
    ErasureStatus.COMPLETED: frozenset({ErasureStatus.ERASING}),
    ErasureStatus.FAILED: frozenset(set(ErasureStatus) - TERMINAL),
}


class RequestClosedError(LetheError):
    """The request was cancelled (or ended) while the workflow ran: the step does nothing."""


class RequestNotFoundError(LetheError):
    """No erasure request has that id."""


class InvalidTransitionError(LetheError):
    """The request is not in a state the change may start from (a concurrent change won)."""

    def __init__(self, request_id: str, target: ErasureStatus, current: str | None) -> None:
        self.current = current
        super().__init__(
            f"request {request_id} cannot become {target.value} from {current or 'nothing'}"
        )


class IdempotencyConflictError(LetheError):
    """An Idempotency-Key was used before with a different request body."""


# ------------------------------------------------------------------------------ intake


def new_request_id(now: datetime | None = None) -> str:
    """`er-<UTC time to the second>-<8 random hex digits>`: sortable and unguessable enough."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{REQUEST_ID_PREFIX}{stamp}-{secrets.token_hex(4)}"


def idempotent_request_id(idempotency_key: str, requested_by: str) -> str:
    """The request id an `Idempotency-Key` stands for: a retry with the same key (from the same
    requester) names the same request."""
    pair = json.dumps([requested_by, idempotency_key])  # unambiguous, whatever either holds
    digest = hashlib.sha256(pair.encode()).hexdigest()[:20]
    return f"{REQUEST_ID_PREFIX}idem-{digest}"


def body_fingerprint(subjects: SubjectSet, body: ErasureRequestBody) -> str:
    """What makes two bodies the same request (for Idempotency-Key reuse): hashes and scope
    only (an unscoped body's fingerprint is the one it had before requests had a scope)."""
    document: dict[str, Any] = {
        "hashes": subjects.hashes,
        "reason": body.reason,
        "by": body.requested_by,
    }
    if subjects.scope:
        document["datasets"] = sorted(subjects.scope)
    text = json.dumps(document, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------ the record


class HistoryEvent(Model):
    model_config = ConfigDict(frozen=True)

    status: ErasureStatus
    at: str
    by: str = ""  # a person or component (an approver's address, "workflow", the requester)
    detail: str = ""


class ErasureRequest(Model):
    """One request as stored. `task_token` and `fingerprint` never leave the server; the task
    token is stored sealed with the task token key (lethe_shared.erasure.task_tokens)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    request_id: str
    status: ErasureStatus
    created_at: str
    updated_at: str
    requested_by: str
    # the IAM caller's ARN as API Gateway authenticated it ("" when filed by event, or before
    # it was recorded); lethe_shared.erasure.principals binds approvers to it
    requester_principal: str = ""
    reason: str = ""
    subject_hashes: tuple[str, ...]  # every dataset's (sorted): the index is queried with them
    subject_count: int
    # each dataset looked up in, with the hashes its rows are matched with (hashes_for); none on
    # a request filed before hashes were per dataset: its hashes match in every dataset
    hash_groups: tuple[HashGroup, ...] = ()
    scope: tuple[str, ...] = ()  # the datasets the body named; (): every registered dataset
    not_looked_up: tuple[NotLookedUp, ...] = ()  # subjects no value of a dataset's type equals
    # the fingerprint of the subject hash key the ids were hashed with (keys.key_fingerprint);
    # "" on a request filed before it was recorded: its report is unpinned (erasure.pins)
    key_fingerprint: str = ""
    history: tuple[HistoryEvent, ...] = ()
    outcome: str = ""  # CANCELLED for a cancelled request (status REJECTED)
    report: dict[str, Any] = Field(default_factory=dict)
    approval: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)
    certificate: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] = Field(default_factory=dict)
    execution_arn: str = ""
    task_token: str = ""
    fingerprint: str = ""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def hashes_for(self, dataset_id: str) -> tuple[str, ...]:
        """The hashes the rows of `dataset_id` are matched with (none outside the request's
        datasets)."""
        return hashes_in(self.hash_groups, self.subject_hashes, dataset_id)

    def public(self) -> dict[str, Any]:
        """What the API and the CLI show: everything but the task token and fingerprint."""
        document = self.model_dump(mode="json", exclude={"task_token", "fingerprint"})
        document["approval"] = {
            k: v for k, v in self.approval.items() if k not in {"approvers", "links"}
        } | ({"approvers": len(self.approval["approvers"])} if "approvers" in self.approval else {})
        return document

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ErasureRequest:
        return cls.model_validate(_plain(dict(item)))


def _plain(value: Any) -> Any:
    """DynamoDB's Decimals as ints or floats, sets as sorted lists."""
    from decimal import Decimal  # noqa: PLC0415 - only here

    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ErasureRequests(Protocol):
    """Storage port of erasure requests (DynamoErasureRequests; tests/fakes.py in memory)."""

    def create(self, request: ErasureRequest) -> tuple[ErasureRequest, bool]:
        """Store a new request; when the id exists, the stored one and False."""

    def get(self, request_id: str) -> ErasureRequest | None: ...

    def list(self, status: ErasureStatus | None = None) -> Iterator[ErasureRequest]:
        """Requests, newest first (of one status, or all)."""

    def transition(
        self,
        request_id: str,
        target: ErasureStatus,
        *,
        by: str,
        detail: str = "",
        allowed_from: frozenset[ErasureStatus] | None = None,
        updates: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
        require: Mapping[str, str] | None = None,
    ) -> ErasureRequest:
        """Move the request to `target` if its status is one `target` may be entered from
        (ALLOWED_FROM, or `allowed_from`) and each attribute of `require` (a dotted path, e.g.
        "approval.decision") holds the given string, in the same conditional write; set
        `updates`, append to the history; returns the new record. Raises RequestNotFoundError
        or InvalidTransitionError."""

    def update(self, request_id: str, updates: Mapping[str, Any]) -> ErasureRequest:
        """Set attributes without changing the status (report details, results)."""

    def clear_task_token(self, request_id: str, token: str) -> bool:
        """Remove the task token if it is still `token` (the token a decision was handed to);
        False when the record holds another one or none."""


class DynamoErasureRequests:
    """ErasureRequests on `ErasureRequestsTable`: request_id (HASH); GSI by_status (status
    HASH, created_at RANGE; keys only) for listing and for the age of open requests."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def create(self, request: ErasureRequest) -> tuple[ErasureRequest, bool]:
        item = request.model_dump(mode="json", exclude_defaults=False)
        try:
            self._table.put_item(Item=item, ConditionExpression="attribute_not_exists(request_id)")
        except ClientError as exc:
            if not is_condition_failed(exc):
                raise
            stored = self.get(request.request_id)
            if stored is None:  # deleted in between: cannot happen to an append-only table
                raise
            return stored, False
        return request, True

    def get(self, request_id: str) -> ErasureRequest | None:
        item = self._table.get_item(Key={"request_id": request_id}, ConsistentRead=True).get("Item")
        return ErasureRequest.from_item(item) if item else None

    def list(self, status: ErasureStatus | None = None) -> Iterator[ErasureRequest]:
        """The index projects keys only (the record's task token stays out of every index):
        the ids it lists are read from the table (BatchGetItem, consistent)."""
        statuses = [status] if status is not None else list(ErasureStatus)
        ids: list[str] = []
        for one in statuses:
            items = query_all(
                self._table,
                IndexName="by_status",
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":s": one.value},
                ScanIndexForward=False,
            )
            ids.extend(str(i["request_id"]) for i in items)
        keys = [{"request_id": rid} for rid in dict.fromkeys(ids)]
        found = [
            ErasureRequest.from_item(item)
            for item in batch_get_all(self._table, keys, ConsistentRead=True)
        ]
        if status is not None:  # it may have moved on since the index listed it
            found = [r for r in found if r.status is status]
        return iter(sorted(found, key=lambda r: r.created_at, reverse=True))

    def transition(
        self,
        request_id: str,
        target: ErasureStatus,
        *,
        by: str,
        detail: str = "",
        allowed_from: frozenset[ErasureStatus] | None = None,
        updates: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
        require: Mapping[str, str] | None = None,
    ) -> ErasureRequest:
        sources = ALLOWED_FROM[target] if allowed_from is None else allowed_from
        now = _now()
        event = HistoryEvent(status=target, at=now, by=by, detail=detail)
        names = {"#status": "status", "#history": "history", "#updated": "updated_at"}
        values: dict[str, Any] = {
            ":target": target.value,
            ":event": [event.model_dump(mode="json")],
            ":now": now,
        }
        sets = ["#status = :target", "#history = list_append(#history, :event)", "#updated = :now"]
        for index, (name, value) in enumerate((updates or {}).items()):
            names[f"#u{index}"] = name
            values[f":u{index}"] = value
            sets.append(f"#u{index} = :u{index}")
        allowed = [f":from{i}" for i in range(len(sources))]
        values.update({f":from{i}": s.value for i, s in enumerate(sorted(sources))})
        expression = "SET " + ", ".join(sets)
        if remove:
            names.update({f"#r{i}": name for i, name in enumerate(remove)})
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(remove)))
        condition = f"#status IN ({', '.join(allowed)})"
        for index, (path, expected) in enumerate((require or {}).items()):
            parts = path.split(".")
            names.update({f"#q{index}_{i}": part for i, part in enumerate(parts)})
            values[f":q{index}"] = expected
            dotted = ".".join(f"#q{index}_{i}" for i in range(len(parts)))
            condition += f" AND {dotted} = :q{index}"
        try:
            answer = self._table.update_item(
                Key={"request_id": request_id},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if not is_condition_failed(exc):
                raise
            stored = self.get(request_id)
            if stored is None:
                raise RequestNotFoundError(f"no erasure request {request_id}") from None
            raise InvalidTransitionError(request_id, target, stored.status.value) from None
        return ErasureRequest.from_item(answer["Attributes"])

    def clear_task_token(self, request_id: str, token: str) -> bool:
        try:
            self._table.update_item(
                Key={"request_id": request_id},
                UpdateExpression="REMOVE task_token SET #updated = :now",
                ConditionExpression="task_token = :token",
                ExpressionAttributeNames={"#updated": "updated_at"},
                ExpressionAttributeValues={":token": token, ":now": _now()},
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    def update(self, request_id: str, updates: Mapping[str, Any]) -> ErasureRequest:
        names = {f"#u{i}": name for i, name in enumerate(updates)} | {"#updated": "updated_at"}
        values = {f":u{i}": value for i, value in enumerate(updates.values())} | {":now": _now()}
        sets = [f"#u{i} = :u{i}" for i in range(len(updates))] + ["#updated = :now"]
        try:
            answer = self._table.update_item(
                Key={"request_id": request_id},
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="attribute_exists(request_id)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                raise RequestNotFoundError(f"no erasure request {request_id}") from None
            raise
        return ErasureRequest.from_item(answer["Attributes"])


def new_request(
    request_id: str,
    body: ErasureRequestBody,
    subjects: SubjectSet,
    *,
    now: datetime | None = None,
    via: str = "api",
    principal: str = "",
    key_fingerprint: str = "",
) -> ErasureRequest:
    """A RECEIVED request; `key_fingerprint`: the fingerprint of the key `subjects` were hashed
    with (keys.key_fingerprint), to which its report is pinned ("": unpinned, erasure.pins)."""
    at = (now or datetime.now(UTC)).isoformat()
    return ErasureRequest(
        request_id=request_id,
        status=ErasureStatus.RECEIVED,
        created_at=at,
        updated_at=at,
        requested_by=body.requested_by,
        requester_principal=principal,
        reason=body.reason,
        subject_hashes=subjects.hashes,
        subject_count=subjects.count,
        hash_groups=subjects.groups,
        scope=subjects.scope,
        not_looked_up=subjects.not_looked_up,
        key_fingerprint=key_fingerprint,
        history=(
            HistoryEvent(
                status=ErasureStatus.RECEIVED,
                at=at,
                by=body.requested_by,
                detail=f"{subjects.count} subject(s), {len(subjects.hashes)} hash(es), via {via}"
                + (f", datasets {', '.join(subjects.scope)}" if subjects.scope else ""),
            ),
        ),
        fingerprint=body_fingerprint(subjects, body),
    )


# ------------------------------------------------------------------------------ approvals


class ApprovalLink(Model):
    """One emailed approval link's record (ApprovalsTable)."""

    model_config = ConfigDict(frozen=True)

    approval_id: str
    request_id: str
    approver: str
    deadline: int  # epoch seconds: the link's expiry and the task's timeout
    created_at: str
    expires_at: int  # DynamoDB TTL: the record goes some time after the deadline


class Approvals(Protocol):
    """Storage port of approval links (DynamoApprovals; tests/fakes.py in memory)."""

    def put(self, link: ApprovalLink) -> None: ...

    def get(self, approval_id: str) -> ApprovalLink | None: ...


class DynamoApprovals:
    def __init__(self, table: Any) -> None:
        self._table = table

    def put(self, link: ApprovalLink) -> None:
        self._table.put_item(Item=link.model_dump(mode="json"))

    def get(self, approval_id: str) -> ApprovalLink | None:
        item = self._table.get_item(Key={"approval_id": approval_id}, ConsistentRead=True).get(
            "Item"
        )
        return ApprovalLink.model_validate(_plain(dict(item))) if item else None
