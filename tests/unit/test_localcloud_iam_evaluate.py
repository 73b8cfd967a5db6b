"""The local IAM check's policy evaluation (lethe.localcloud.iam.evaluate) and request mapping."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lethe.localcloud.iam.evaluate import Request, Unevaluable, evaluate
from lethe.localcloud.iam.http_calls import Call
from lethe.localcloud.iam.s3_calls import s3_requests
from lethe.localcloud.iam_log import statement_coverage

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/catalog"
DDB = frozenset({"dynamodb:leadingkeys", "dynamodb:attributes", "dynamodb:select"})


def policy(*statements: dict[str, Any]) -> dict[str, str]:
    return {"p": json.dumps({"Version": "2012-10-17", "Statement": list(statements)})}


def test_allow_needs_action_and_resource_to_match() -> None:
    policies = policy({"Effect": "Allow", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/x/*"})
    assert evaluate(policies, Request("s3:GetObject", "arn:aws:s3:::b/x/k")).allowed
    assert evaluate(policies, Request("S3:getobjectVERSION", "arn:aws:s3:::b/x/k")).allowed
    assert not evaluate(policies, Request("s3:PutObject", "arn:aws:s3:::b/x/k")).allowed
    denied = evaluate(policies, Request("s3:GetObject", "arn:aws:s3:::b/y/k"))
    assert not denied.allowed
    assert denied.reason == "no identity-based policy allows it"


def test_explicit_deny_wins_and_is_named() -> None:
    policies = policy(
        {"Effect": "Allow", "Action": "dynamodb:*", "Resource": TABLE},
        {
            "Sid": "NoLedger",
            "Effect": "Deny",
            "Action": "dynamodb:PutItem",
            "Resource": TABLE,
            "Condition": {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["ledger#*"]}},
        },
    )
    ledger = Request("dynamodb:PutItem", TABLE, {"dynamodb:leadingkeys": ["ledger#1"]}, DDB)
    other = Request("dynamodb:PutItem", TABLE, {"dynamodb:leadingkeys": ["object#1"]}, DDB)
    decision = evaluate(policies, ledger)
    assert not decision.allowed
    assert decision.reason == "explicitly denied by p/NoLedger"
    assert evaluate(policies, other).allowed


def test_not_action_and_not_resource() -> None:
    policies = policy(
        {"Effect": "Allow", "NotAction": "s3:Delete*", "NotResource": "arn:aws:s3:::locked/*"}
    )
    assert evaluate(policies, Request("s3:GetObject", "arn:aws:s3:::open/k")).allowed
    assert not evaluate(policies, Request("s3:DeleteObject", "arn:aws:s3:::open/k")).allowed
    assert not evaluate(policies, Request("s3:GetObject", "arn:aws:s3:::locked/k")).allowed


def test_condition_semantics_for_absent_keys_and_sets() -> None:
    allow_ledger_only = policy(
        {
            "Effect": "Allow",
            "Action": "dynamodb:GetItem",
            "Resource": TABLE,
            "Condition": {
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["ledger#*"]},
                "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
            },
        }
    )
    ok = Request("dynamodb:GetItem", TABLE, {"dynamodb:leadingkeys": ["ledger#a"]}, DDB)
    wrong = Request("dynamodb:GetItem", TABLE, {"dynamodb:leadingkeys": ["object#a"]}, DDB)
    select_all = Request(
        "dynamodb:GetItem",
        TABLE,
        {"dynamodb:leadingkeys": ["ledger#a"], "dynamodb:select": ["ALL_ATTRIBUTES"]},
        DDB,
    )
    assert evaluate(allow_ledger_only, ok).allowed
    assert not evaluate(allow_ledger_only, wrong).allowed
    assert not evaluate(allow_ledger_only, select_all).allowed
    kms = policy(
        {
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": "*",
            "Condition": {"StringEquals": {"kms:EncryptionContext:lethe:purpose": "t"}},
        }
    )
    modelled = frozenset({"kms:encryptioncontext:lethe:purpose"})
    assert evaluate(
        kms, Request("kms:Decrypt", "k", {"kms:encryptioncontext:lethe:purpose": ["t"]}, modelled)
    ).allowed
    assert not evaluate(kms, Request("kms:Decrypt", "k", {}, modelled)).allowed  # absent: false


def test_unmodelled_condition_keys_and_operators_refuse_to_guess() -> None:
    deny = policy(
        {
            "Effect": "Deny",
            "Action": "s3:*",
            "Resource": "*",
            "Condition": {"StringEquals": {"s3:x-amz-acl": "public-read"}},
        }
    )
    with pytest.raises(Unevaluable, match="s3:x-amz-acl"):
        evaluate(deny, Request("s3:PutObject", "arn:aws:s3:::b/k"))
    dates = policy(
        {
            "Effect": "Allow",
            "Action": "s3:*",
            "Resource": "*",
            "Condition": {"DateLessThan": {"aws:CurrentTime": "2030-01-01"}},
        }
    )
    with pytest.raises(Unevaluable):
        evaluate(dates, Request("s3:GetObject", "arn:aws:s3:::b/k"))


def _call(
    method: str,
    path: str,
    query: dict[str, list[str]] | None = None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> Call:
    return Call("AKIA", "s3", "us-east-1", method, path, query or {}, headers or {}, body=body)


def test_s3_calls_map_to_the_actions_aws_authorises() -> None:
    def actions(call: Call) -> list[tuple[str, str]]:
        result = s3_requests(call)
        assert not isinstance(result, str), result
        return [(r.action, r.resource) for r in result]

    assert actions(_call("HEAD", "/b/k")) == [("s3:GetObject", "arn:aws:s3:::b/k")]
    assert actions(_call("GET", "/b/k", {"versionId": ["v1"]})) == [
        ("s3:GetObjectVersion", "arn:aws:s3:::b/k")
    ]
    assert actions(_call("DELETE", "/b/k", {"versionId": ["v1"]})) == [
        ("s3:DeleteObjectVersion", "arn:aws:s3:::b/k")
    ]
    assert actions(_call("GET", "/b", {"list-type": ["2"], "prefix": ["p/"]})) == [
        ("s3:ListBucket", "arn:aws:s3:::b")
    ]
    assert actions(_call("GET", "/b", {"versions": [""]})) == [
        ("s3:ListBucketVersions", "arn:aws:s3:::b")
    ]
    assert actions(
        _call(
            "PUT",
            "/b/k",
            headers={
                "x-amz-copy-source": "/src/a?versionId=v2",
                "x-amz-object-lock-mode": "GOVERNANCE",
            },
        )
    ) == [
        ("s3:PutObject", "arn:aws:s3:::b/k"),
        ("s3:GetObjectVersion", "arn:aws:s3:::src/a"),
        ("s3:PutObjectRetention", "arn:aws:s3:::b/k"),
    ]
    body = (
        b"<Delete><Object><Key>a</Key></Object>"
        b"<Object><Key>b</Key><VersionId>1</VersionId></Object></Delete>"
    )
    assert actions(_call("POST", "/b", {"delete": [""]}, body=body)) == [
        ("s3:DeleteObject", "arn:aws:s3:::b/a"),
        ("s3:DeleteObjectVersion", "arn:aws:s3:::b/b"),
    ]
    assert isinstance(s3_requests(_call("GET", "/b/k", {"torrent": [""]})), str)  # unknown: refused


def test_statement_coverage_tells_sole_shared_unused_and_deny() -> None:
    template = {
        "Resources": {
            "FnRole": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "Policies": [
                        {
                            "PolicyName": "P0",
                            "PolicyDocument": {
                                "Statement": [
                                    {"Sid": "A", "Effect": "Allow"},
                                    {"Sid": "B", "Effect": "Allow"},
                                    {"Effect": "Allow"},
                                    {"Sid": "D", "Effect": "Deny"},
                                ]
                            },
                        },
                        {"Fn::If": ["Cond", {}, {"Ref": "AWS::NoValue"}]},
                    ]
                },
            }
        }
    }
    decisions = [
        {"allowed": True, "reason": "allowed by P0/A"},
        {"allowed": True, "reason": "allowed by P0/B", "allowed_by": ["P0/B", "P0/#2"]},
        {"allowed": False, "reason": "no identity-based policy allows it"},
    ]
    assert statement_coverage(decisions, template) == {
        "FnRole": {"P0/A": "sole", "P0/B": "shared", "P0/#2": "shared", "P0/D": "deny"}
    }
