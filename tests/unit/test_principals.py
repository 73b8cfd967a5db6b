"""Binding the requester to the IAM caller (lethe_shared.erasure.principals): the principal forms an
operator may map an approver to, which callers each covers, the APPROVER_PRINCIPALS text, the
two rules, and the template parameter's AllowedPattern agreeing with the parser."""

from __future__ import annotations

import re

import pytest

from lethe.localcloud.template import load_template
from lethe_shared.erasure.principals import (
    ApproverPrincipals,
    CancelNotAllowedError,
    Principal,
    PrincipalError,
    RequesterNotCallerError,
    event_principal,
)

ACCOUNT = "123456789012"
DPO, CISO = "dpo@example.com", "ciso@example.com"
DPO_ROLE = f"arn:aws:iam::{ACCOUNT}:role/privacy/DpoRole"
DPO_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/DpoRole/dpo-laptop"
CISO_USER = f"arn:aws:iam::{ACCOUNT}:user/ciso"
MAPPING = f" {DPO.upper()} = {DPO_ROLE} , {CISO}={CISO_USER},{CISO}=arn:aws:iam::{ACCOUNT}:root"


@pytest.mark.parametrize(
    ("arn", "expected"),
    [
        (f"arn:aws:iam::{ACCOUNT}:user/ops/Alice", Principal("aws", ACCOUNT, "user", "alice")),
        (DPO_ROLE, Principal("aws", ACCOUNT, "role", "dporole")),
        (DPO_SESSION, Principal("aws", ACCOUNT, "session", "dporole", "dpo-laptop")),
        (f"arn:aws-us-gov:iam::{ACCOUNT}:root", Principal("aws-us-gov", ACCOUNT, "root")),
        (
            f"arn:aws:sts::{ACCOUNT}:federated-user/bob",
            Principal("aws", ACCOUNT, "federated", "bob"),
        ),
    ],
)
def test_principal_forms(arn: str, expected: Principal) -> None:
    assert Principal.parse(arn) == expected


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "dpo@example.com",
        f"arn:aws:s3:::{ACCOUNT}-bucket",
        f"arn:aws:iam::{ACCOUNT}:group/privacy",
        f"arn:aws:iam::{ACCOUNT}:policy/x",
        "arn:aws:iam::12345:user/short-account",
        f"arn:aws:sts::{ACCOUNT}:assumed-role/NoSession",
        f"arn:aws:iam::{ACCOUNT}:user/",
    ],
)
def test_other_arns_are_no_principal(arn: str) -> None:
    with pytest.raises(PrincipalError):
        Principal.parse(arn)


@pytest.mark.parametrize(
    ("configured", "caller", "covered"),
    [
        # a role: every session of it, whatever the session name or the role's case and path
        (DPO_ROLE, DPO_SESSION, True),
        (DPO_ROLE, f"arn:aws:sts::{ACCOUNT}:assumed-role/dporole/someone-else", True),
        (DPO_ROLE, f"arn:aws:sts::{ACCOUNT}:assumed-role/OtherRole/dpo-laptop", False),
        (DPO_ROLE, "arn:aws:sts::999999999999:assumed-role/DpoRole/dpo-laptop", False),
        (DPO_ROLE, f"arn:aws-cn:sts::{ACCOUNT}:assumed-role/DpoRole/dpo-laptop", False),
        (DPO_ROLE, f"arn:aws:iam::{ACCOUNT}:user/DpoRole", False),
        # one session name: that one only
        (DPO_SESSION, DPO_SESSION, True),
        (DPO_SESSION, f"arn:aws:sts::{ACCOUNT}:assumed-role/DpoRole/dpo-desktop", False),
        # a user, with or without its path
        (CISO_USER, f"arn:aws:iam::{ACCOUNT}:user/security/CISO", True),
        (CISO_USER, f"arn:aws:iam::{ACCOUNT}:user/ciso2", False),
        (CISO_USER, f"arn:aws:sts::{ACCOUNT}:assumed-role/ciso/ciso", False),
        (f"arn:aws:iam::{ACCOUNT}:root", f"arn:aws:iam::{ACCOUNT}:root", True),
        (f"arn:aws:iam::{ACCOUNT}:root", CISO_USER, False),
    ],
)
def test_which_callers_a_principal_covers(configured: str, caller: str, covered: bool) -> None:
    assert Principal.parse(configured).covers(Principal.parse(caller)) is covered


def test_the_mapping_text() -> None:
    principals = ApproverPrincipals.parse(MAPPING)

    assert principals.addresses() == [CISO, DPO]
    assert principals.principals[CISO] == (
        Principal("aws", ACCOUNT, "user", "ciso"),
        Principal("aws", ACCOUNT, "root"),
    )
    assert principals.unknown([DPO, "Ciso@Example.com"]) == []
    assert principals.unknown([DPO]) == [CISO]
    assert not ApproverPrincipals.parse(" , ")
    assert ApproverPrincipals.parse("") == ApproverPrincipals()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"{DPO}", "item 1: expected address=arn"),
        (f"{DPO}={DPO_ROLE},{DPO_ROLE}", "item 2: expected address=arn"),
        (f"dpo={DPO_ROLE}", "item 1: expected address=arn"),
        (f"{DPO}=arn:aws:iam::{ACCOUNT}:group/g", "item 1: an IAM principal is a user, role"),
        (f"{DPO}=arn:aws:sts::{ACCOUNT}:federated-user/d", "item 1: map the role, not a"),
    ],
)
def test_a_bad_mapping_names_the_item(text: str, problem: str) -> None:
    with pytest.raises(PrincipalError) as caught:
        ApproverPrincipals.parse(text)
    assert str(caught.value).startswith(problem)


def test_an_approver_is_recognised_by_the_principal_that_filed() -> None:
    principals = ApproverPrincipals.parse(MAPPING)

    assert principals.filed_by(DPO, DPO_SESSION)
    assert principals.filed_by("DPO@example.com ", DPO_SESSION)
    assert not principals.filed_by(CISO, DPO_SESSION)
    assert not principals.filed_by(DPO, f"arn:aws:iam::{ACCOUNT}:user/dpo")
    assert not principals.filed_by(DPO, "")  # filed by event, or before callers were recorded
    assert not principals.filed_by(DPO, "unknown caller")
    assert not ApproverPrincipals().filed_by(DPO, DPO_SESSION)


def test_only_an_approvers_principal_files_in_their_name() -> None:
    principals = ApproverPrincipals.parse(MAPPING)

    principals.check_requester(DPO, DPO_SESSION)
    principals.check_requester("privacy@example.com", CISO_USER)  # not an approver: free text
    principals.check_requester("privacy@example.com", None)
    for caller in (CISO_USER, None, "", f"arn:aws:sts::{ACCOUNT}:assumed-role/Other/dpo"):
        with pytest.raises(RequesterNotCallerError):
            principals.check_requester(" Dpo@Example.com", caller)
    ApproverPrincipals().check_requester(DPO, None)  # nothing mapped: nothing to check


def _template_pattern() -> str:
    return str(load_template()["Parameters"]["ApproverPrincipals"]["AllowedPattern"])


@pytest.mark.parametrize(
    "item",
    [
        "",
        f"{DPO}={DPO_ROLE}",
        f" {DPO} = {DPO_SESSION} ",
        f"{CISO}={CISO_USER}",
        f"{CISO}=arn:aws-cn:iam::{ACCOUNT}:root",
        f"{DPO}=arn:aws:iam::{ACCOUNT}:role/a/b/c/Role+Name=x.y@z-1",
        f"{DPO}",
        f"dpo={DPO_ROLE}",
        f"{DPO}=arn:aws:iam::{ACCOUNT}:group/g",
        f"{DPO}=arn:aws:sts::{ACCOUNT}:federated-user/d",
        f"{DPO}=arn:aws:iam::1234:user/u",
        f"{DPO}=arn:aws:s3:::bucket",
        f"{DPO}=event:{ACCOUNT}:lethe.requests",
        f"{DPO}=event:{ACCOUNT}:",
        f"{DPO}=event:1234:lethe.requests",
        f"{DPO}=event:{ACCOUNT}:lethe requests",
    ],
)
def test_the_template_parameter_accepts_what_the_functions_accept(item: str) -> None:
    """CloudFormation checks each item of ApproverPrincipals against its AllowedPattern (the
    functions check the whole value again at cold start): the two agree."""
    try:
        ApproverPrincipals.parse(item)
        parsed = True
    except PrincipalError:
        parsed = False
    assert bool(re.fullmatch(_template_pattern(), item)) is parsed


# ------------------------------------------------------------------------ event senders, cancel

EVENTS = f"event:{ACCOUNT}:lethe.requests"


def test_an_event_sender_is_a_principal_an_approver_may_be_mapped_to() -> None:
    assert event_principal(ACCOUNT, "lethe.requests") == EVENTS
    assert event_principal(None, "lethe.requests") == ""
    assert event_principal(ACCOUNT, "") == ""
    assert Principal.parse(EVENTS) == Principal("", ACCOUNT, "event", "lethe.requests")
    principals = ApproverPrincipals.parse(f"{DPO}={DPO_ROLE},{DPO}={EVENTS}")

    assert principals.filed_by(DPO, EVENTS)  # DPO is not asked to approve those requests
    assert not principals.filed_by(DPO, "event:210987654321:lethe.requests")
    assert not principals.filed_by(DPO, f"event:{ACCOUNT}:other.source")
    assert not principals.filed_by(CISO, EVENTS)
    principals.check_requester(DPO, EVENTS)  # the mapped sender may name DPO
    with pytest.raises(RequesterNotCallerError):
        ApproverPrincipals.parse(MAPPING).check_requester(DPO, EVENTS)


@pytest.mark.parametrize(
    ("mapping", "requester", "caller", "allowed"),
    [
        # the requester's own identity: the same user, another session of the same role
        (MAPPING, CISO_USER, CISO_USER, True),
        ("", DPO_SESSION, f"arn:aws:sts::{ACCOUNT}:assumed-role/DpoRole/other", True),
        ("", DPO_SESSION, f"arn:aws:sts::{ACCOUNT}:assumed-role/OtherRole/dpo-laptop", False),
        ("", CISO_USER, f"arn:aws:iam::{ACCOUNT}:user/someone", False),
        ("", CISO_USER, "arn:aws:iam::210987654321:user/ciso", False),
        ("", CISO_USER, None, False),
        # an approver's principal, whoever filed
        (MAPPING, f"arn:aws:iam::{ACCOUNT}:user/someone", DPO_SESSION, True),
        (MAPPING, EVENTS, DPO_SESSION, True),
        (MAPPING, EVENTS, f"arn:aws:iam::{ACCOUNT}:user/someone", False),
        (MAPPING, "", f"arn:aws:iam::{ACCOUNT}:user/someone", False),
        # nothing known (no IAM requester recorded, nobody mapped): IAM access is the check
        ("", "", f"arn:aws:iam::{ACCOUNT}:user/someone", True),
        ("", EVENTS, None, True),
    ],
)
def test_who_may_cancel(mapping: str, requester: str, caller: str | None, allowed: bool) -> None:
    principals = ApproverPrincipals.parse(mapping)
    if allowed:
        principals.check_canceller(requester, caller)
    else:
        with pytest.raises(CancelNotAllowedError):
            principals.check_canceller(requester, caller)
