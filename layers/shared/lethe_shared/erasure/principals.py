"""Who filed an erasure request, as IAM authenticated it, and which approver that is.

A request's `requested_by` is free text the caller writes. The erasure API is behind IAM
authorisation (API Gateway `AWS_IAM`): API Gateway puts the caller's ARN in the event
(`requestContext.identity.userArn`), and the caller cannot choose it. The request records that
ARN (`requester_principal`), and `ApproverPrincipals` (the `ApproverPrincipals` template
parameter, `APPROVER_PRINCIPALS`) says which IAM principals each approver calls the API as:

    dpo@example.com=arn:aws:iam::123456789012:role/dpo,ciso@example.com=arn:aws:iam::123456789012:user/ciso

With it, two rules bind the requester to the caller (docs/SECURITY.md, the approval):

1. an approver one of whose principals filed a request is not asked, and cannot decide it,
   whatever `requested_by` says (`ApproverPrincipals.filed_by`);
2. a request whose `requested_by` names a mapped approver is accepted only from one of that
   approver's principals (`ApproverPrincipals.check_requester`): nobody files under an
   approver's name, and a request filed without an authenticated caller (the `Erasure
   Requested` event) cannot name one.

A principal is one of:

- `arn:<partition>:iam::<account>:user/[<path>/]<name>`: that IAM user;
- `arn:<partition>:iam::<account>:role/[<path>/]<name>`: every session of that role (a
  session's ARN, `arn:<partition>:sts::<account>:assumed-role/<name>/<session>`, has no path);
- `arn:<partition>:sts::<account>:assumed-role/<role>/<session>`: that one session name. Only
  where the session name is not the caller's choice (IAM Identity Center sets it to the user's
  name); otherwise map the role;
- `arn:<partition>:iam::<account>:root`: the account's root user;
- `event:<account>:<source>`: an `Erasure Requested` event of that source sent from that
  account. EventBridge passes no caller identity with an event, only the account it was put
  from (set by EventBridge, not by the sender) and its `source`: a request filed by event
  records this form (`event_principal`) as its `requester_principal`, so that an approver
  mapped to it (the approver who runs or may send those events) is not asked to approve it.

User and role names are compared case-insensitively (IAM names are unique regardless of case);
session names exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import PlainValidator, WithJsonSchema

from lethe_shared.errors import LetheError

Kind = Literal["user", "role", "session", "root", "federated", "event"]

_ARN = re.compile(r"^arn:(aws[a-z-]*):(iam|sts)::([0-9]{12}):(\S+)$")
_NAME = r"[\w+=.@-]{1,128}"
_IAM_RESOURCE = re.compile(rf"^(user|role)/(?:[\w+=,.@/-]*/)?({_NAME})$")
_SESSION = re.compile(rf"^assumed-role/({_NAME})/({_NAME})$")
_FEDERATED = re.compile(rf"^federated-user/({_NAME})$")
_ADDRESS = re.compile(r"^[^@\s,=]+@[^@\s,=]+$")
_EVENT = re.compile(r"^event:([0-9]{12}):([\w.-]{1,256})$")


class PrincipalError(LetheError):
    """A configured principal (or mapping entry) is not one of the accepted forms."""


class CancelNotAllowedError(LetheError):
    """The caller is neither the request's requester nor an approver. Nothing was changed."""


class RequesterNotCallerError(LetheError):
    """`requested_by` names an approver, and the request does not come from that approver's
    IAM principal. Nothing was filed."""


@dataclass(frozen=True)
class Principal:
    partition: str
    account: str
    kind: Kind
    name: str = ""  # the user's, role's or federated user's name (no path)
    session: str = ""  # an assumed role's session name

    @classmethod
    def parse(cls, arn: str) -> Principal:
        """A principal from its ARN (configured, or a caller's), or an event sender
        (`event:<account>:<source>`). Raises PrincipalError."""
        event = _EVENT.match(arn.strip())
        if event is not None:
            return cls("", event.group(1), "event", event.group(2))
        match = _ARN.match(arn.strip())
        if match is None:
            raise PrincipalError("an IAM principal is an arn:aws...:iam:: or :sts:: ARN")
        partition, service, account, resource = match.groups()
        if service == "iam":
            if resource == "root":
                return cls(partition, account, "root")
            iam = _IAM_RESOURCE.match(resource)
            if iam is not None:
                kind: Kind = "user" if iam.group(1) == "user" else "role"
                return cls(partition, account, kind, iam.group(2).casefold())
        else:
            session = _SESSION.match(resource)
            if session is not None:
                return cls(
                    partition, account, "session", session.group(1).casefold(), session.group(2)
                )
            federated = _FEDERATED.match(resource)
            if federated is not None:
                return cls(partition, account, "federated", federated.group(1))
        raise PrincipalError("an IAM principal is a user, role, assumed-role session or root ARN")

    def covers(self, caller: Principal) -> bool:
        """Whether a caller with this identity is this configured principal."""
        if (self.partition, self.account) != (caller.partition, caller.account):
            return False
        if self.kind == "role":  # any session of the role
            return caller.kind == "session" and caller.name == self.name
        return (self.kind, self.name, self.session) == (caller.kind, caller.name, caller.session)

    def same_identity(self, other: Principal) -> bool:
        """Whether two callers are one identity: the same user, root or event sender, or
        sessions of the same role (a role's session names are often per call)."""
        if (self.partition, self.account, self.kind) != (
            other.partition,
            other.account,
            other.kind,
        ):
            return False
        return self.name == other.name and (self.kind == "session" or self.session == other.session)


def event_principal(account: object, source: object) -> str:
    """The requester principal of a request filed by an EventBridge event (the account it was
    put from and its source); "" when the event lacks either."""
    text = f"event:{account}:{source}"
    return (
        text if isinstance(account, str) and isinstance(source, str) and _EVENT.match(text) else ""
    )


def _person(address: str) -> str:
    return address.strip().casefold()


def caller_principal(arn: str | None) -> Principal | None:
    """A caller's identity from its ARN; None when there is none or it is of no known form."""
    if not arn:
        return None
    try:
        return Principal.parse(arn)
    except PrincipalError:
        return None


@dataclass(frozen=True)
class ApproverPrincipals:
    """Approver addresses (compared case-insensitively) and the IAM principals each calls the
    erasure API as. Empty: no approver is known by principal (only by address)."""

    principals: Mapping[str, tuple[Principal, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ApproverPrincipals:
        """`address=arn` items separated by commas (an address may appear more than once).
        Raises PrincipalError naming the item's position (never echoing the value)."""
        found: dict[str, list[Principal]] = {}
        items = [item.strip() for item in text.split(",") if item.strip()]
        for index, item in enumerate(items):
            address, sep, arn = item.partition("=")
            if not sep or not _ADDRESS.match(address.strip()):
                raise PrincipalError(f"item {index + 1}: expected address=arn")
            try:
                principal = Principal.parse(arn)
            except PrincipalError as exc:
                raise PrincipalError(f"item {index + 1}: {exc}") from None
            if principal.kind == "federated":
                raise PrincipalError(f"item {index + 1}: map the role, not a federated user")
            found.setdefault(_person(address), []).append(principal)
        return cls({address: tuple(ps) for address, ps in found.items()})

    def __bool__(self) -> bool:
        return bool(self.principals)

    def addresses(self) -> list[str]:
        return sorted(self.principals)

    def unknown(self, approvers: Iterable[str]) -> list[str]:
        """Mapped addresses that are not among `approvers` (a configuration error)."""
        known = {_person(a) for a in approvers}
        return [a for a in self.addresses() if a not in known]

    def filed_by(self, approver: str, caller_arn: str | None) -> bool:
        """Whether the caller that filed a request is one of `approver`'s principals."""
        caller = caller_principal(caller_arn)
        return caller is not None and any(
            p.covers(caller) for p in self.principals.get(_person(approver), ())
        )

    def is_approver(self, caller_arn: str | None) -> bool:
        """Whether the caller is one of any approver's principals."""
        caller = caller_principal(caller_arn)
        return caller is not None and any(
            p.covers(caller) for mapped in self.principals.values() for p in mapped
        )

    def check_canceller(self, requester_principal: str, caller_arn: str | None) -> None:
        """Raise CancelNotAllowedError unless the caller may cancel the request: its
        requester (the IAM identity recorded when it was filed: the same user or root, or a
        session of the same role) or any approver's principal. When neither is known (no IAM
        requester recorded, nobody mapped), IAM access to the API is the only check."""
        requester = caller_principal(requester_principal)
        if requester is not None and requester.kind == "event":
            requester = None  # no API caller is an event sender
        if requester is None and not self:
            return
        caller = caller_principal(caller_arn)
        if caller is not None and (
            (requester is not None and requester.same_identity(caller))
            or self.is_approver(caller_arn)
        ):
            return
        raise CancelNotAllowedError(
            "only the IAM principal that filed this request or an approver's may cancel it"
        )

    def check_requester(self, requested_by: str, caller_arn: str | None) -> None:
        """Raise RequesterNotCallerError when `requested_by` names a mapped approver and the
        caller (None: not authenticated) is none of that approver's principals."""
        if _person(requested_by) in self.principals and not self.filed_by(requested_by, caller_arn):
            raise RequesterNotCallerError(
                "requested_by names an approver: only that approver's own IAM principal may "
                "file a request in their name"
            )


def _setting(value: object) -> ApproverPrincipals:
    if isinstance(value, ApproverPrincipals):
        return value
    if not isinstance(value, str):
        raise ValueError("expected address=arn items separated by commas")
    try:
        return ApproverPrincipals.parse(value)
    except PrincipalError as exc:
        raise ValueError(str(exc)) from None


#: A settings field for APPROVER_PRINCIPALS (declared for every function that needs it; empty
#: means no approver is known by principal).
ApproverPrincipalsSetting = Annotated[
    ApproverPrincipals, PlainValidator(_setting), WithJsonSchema({"type": "string"})
]
