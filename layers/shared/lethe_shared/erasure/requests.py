"""Erasure requests: intake, the request record and its life cycle (docs/ERASURE.md).

A request names data subjects by id (`subject_ids`, matched in every dataset with a single
subject column) or by composite key (`subject_keys`, `{column: value}`, matched in the datasets
whose subject columns are exactly those). Raw ids are personal data: `file_request` hashes them
with the deployment's key as soon as they arrive, and the record holds only the keyed hashes,
the count, who asked, why, and what happened since.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError
from pydantic import ConfigDict, Field, ValidationError, field_validator

from lethe_shared.aws.dynamo import query_all
from lethe_shared.aws.errors import is_condition_failed
from lethe_shared.errors import LetheError
from lethe_shared.models import Model
from lethe_shared.subject_hashing.canonical import canonical_text
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys

if TYPE_CHECKING:
    from lethe_shared.datasets.document import Dataset

MAX_SUBJECTS = 100  # subjects per request (docs/LIMITS.md: report time and manifest size)
MAX_SUBJECT_ID_LENGTH = 512
MAX_REASON_LENGTH = 1000
# A subject id this long or longer must not appear in the free-text fields (reason,
# requested_by): they are stored and shown as they are. Shorter ids ("7", "ab") are too common
# in ordinary words and numbers to look for without refusing harmless requests.
ID_SEARCH_MIN_LENGTH = 4
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


class ErasureRequestError(LetheError):
    """A request body is unusable; `problems` names each one (never a subject id)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid erasure request: " + "; ".join(problems))


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


SubjectKey = dict[str, str | int | bool]


class ErasureRequestBody(Model):
    """`POST /erasure-requests` (and the `Erasure Requested` event's detail)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject_ids: list[str] = Field(default_factory=list)
    subject_keys: list[SubjectKey] = Field(default_factory=list)
    reason: str = Field(default="", max_length=MAX_REASON_LENGTH)
    requested_by: str = Field(min_length=1, max_length=256)

    @field_validator("subject_ids")
    @classmethod
    def _ids(cls, ids: list[str]) -> list[str]:
        for index, subject in enumerate(ids):
            if not 1 <= len(subject) <= MAX_SUBJECT_ID_LENGTH:
                raise ValueError(
                    f"subject_ids[{index}] must have 1 to {MAX_SUBJECT_ID_LENGTH} characters"
                )
        return ids

    @field_validator("subject_keys")
    @classmethod
    def _keys(cls, keys: list[SubjectKey]) -> list[SubjectKey]:
        for index, key in enumerate(keys):
            if not key:
                raise ValueError(f"subject_keys[{index}] names no column")
        return keys


def parse_request_body(document: Any) -> ErasureRequestBody:
    """Validate a request body. Raises ErasureRequestError naming every problem by field;
    values are never echoed (they may be subject ids)."""
    if not isinstance(document, dict):
        raise ErasureRequestError(["body: must be a JSON object"])
    try:
        return ErasureRequestBody.model_validate(document)
    except ValidationError as exc:
        raise ErasureRequestError(
            [
                f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                for err in exc.errors(include_input=False)
            ]
        ) from None


def _folded_keys(keys: Iterable[SubjectKey]) -> list[SubjectKey]:
    """Distinct composite keys by their canonical texts: {"id": 1001} and {"id": "1001"} hash
    alike, so they are one subject."""
    seen: dict[str, SubjectKey] = {}
    for key in keys:
        canonical = {column: canonical_text(value) for column, value in key.items()}
        seen.setdefault(json.dumps(canonical, sort_keys=True), key)
    return list(seen.values())


def _mentions(text: str, subject_ids: Iterable[str]) -> bool:
    folded = text.casefold()
    return any(
        len(subject) >= ID_SEARCH_MIN_LENGTH and subject.casefold() in folded
        for subject in subject_ids
    )


class SubjectSet(Model):
    """The subjects of one request, as keyed hashes only."""

    model_config = ConfigDict(frozen=True)

    hashes: tuple[str, ...]  # sorted, distinct: what the index is queried with
    count: int  # distinct subjects asked for (ids plus composite keys)


def hash_subjects(body: ErasureRequestBody, key: bytes, datasets: Sequence[Dataset]) -> SubjectSet:
    """Fold duplicates, check the limits and the free-text fields, and hash every subject.

    A subject id is hashed once (it matches in every dataset with one subject column). A
    composite key is hashed for every dataset whose subject columns are exactly its columns,
    in that dataset's column order. Raises ErasureRequestError."""
    ids = list(dict.fromkeys(body.subject_ids))
    keys = _folded_keys(body.subject_keys)
    problems: list[str] = []
    total = len(ids) + len(keys)
    if total == 0:
        problems.append("subject_ids: give at least one subject id (or subject_keys)")
    if total > MAX_SUBJECTS:
        problems.append(
            f"{total} distinct subjects: at most {MAX_SUBJECTS} per request; split the request"
        )
    texts = [*ids, *(str(v) for k in keys for v in k.values())]
    for name in ("reason", "requested_by"):
        if _mentions(getattr(body, name), texts):
            problems.append(f"{name}: must not contain a subject id (it is stored as written)")
    hashes = {hash_of_id(key, subject) for subject in ids}
    for index, composite in enumerate(keys):
        matching = [d for d in datasets if set(d.subject_columns) == set(composite)]
        if not matching:
            problems.append(
                f"subject_keys[{index}]: no registered dataset has exactly the subject columns "
                + ", ".join(sorted(composite))
            )
        hashes.update(hash_of_keys(key, d.subject_columns, composite) for d in matching)
    if problems:
        raise ErasureRequestError(problems)
    return SubjectSet(hashes=tuple(sorted(hashes)), count=total)


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
    """What makes two bodies the same request (for Idempotency-Key reuse): hashes only."""
    text = json.dumps(
        {"hashes": subjects.hashes, "reason": body.reason, "by": body.requested_by},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------ the record


class HistoryEvent(Model):
    model_config = ConfigDict(frozen=True)

    status: ErasureStatus
    at: str
    by: str = ""  # a person or component (an approver's address, "workflow", the requester)
    detail: str = ""


class ErasureRequest(Model):
    """One request as stored. `task_token` and `fingerprint` never leave the server."""

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
    subject_hashes: tuple[str, ...]
    subject_count: int
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
    ) -> ErasureRequest:
        """Move the request to `target` if its status is one `target` may be entered from
        (ALLOWED_FROM, or `allowed_from`), set `updates`, append to the history; returns the
        new record. Raises RequestNotFoundError or InvalidTransitionError."""

    def update(self, request_id: str, updates: Mapping[str, Any]) -> ErasureRequest:
        """Set attributes without changing the status (report details, results)."""

    def clear_task_token(self, request_id: str, token: str) -> bool:
        """Remove the task token if it is still `token` (the token a decision was handed to);
        False when the record holds another one or none."""


class DynamoErasureRequests:
    """ErasureRequests on `ErasureRequestsTable`: request_id (HASH); GSI by_status (status
    HASH, created_at RANGE) for listing and for the age of open requests."""

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
        statuses = [status] if status is not None else list(ErasureStatus)
        found: list[ErasureRequest] = []
        for one in statuses:
            items = query_all(
                self._table,
                IndexName="by_status",
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":s": one.value},
                ScanIndexForward=False,
            )
            found.extend(ErasureRequest.from_item(i) for i in items)
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
        try:
            answer = self._table.update_item(
                Key={"request_id": request_id},
                UpdateExpression=expression,
                ConditionExpression=f"#status IN ({', '.join(allowed)})",
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
) -> ErasureRequest:
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
        history=(
            HistoryEvent(
                status=ErasureStatus.RECEIVED,
                at=at,
                by=body.requested_by,
                detail=f"{subjects.count} subject(s), {len(subjects.hashes)} hash(es), via {via}",
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
