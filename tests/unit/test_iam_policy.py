"""IAM and resource policies of the SAM-TRANSLATED template, so that the roles SAM generates
(one per function) are checked with the roles the template declares (docs/SECURITY.md,
docs/RELIABILITY.md "Infrastructure review").

As in test_template_policy.py, each check returns its offenders and is run twice: against the
real template (no offender) and against a copy broken on purpose (the broken resource is named),
so that a check that cannot fail does not pass for one. A broken copy is broken in template.yaml's
own terms (a function's `Policies`, a state machine back on SAM's role) and then translated.

What these checks cannot see: the content of AWS managed policies (AWSLambdaBasicExecutionRole,
AWSXrayWriteOnlyAccess, AmazonAPIGatewayPushToCloudWatchLogs), which are AWS's; and how IAM
evaluates any of this on AWS, which has not been observed (docs/DEPLOY.md, not yet done).
"""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lethe.localcloud.template import TEMPLATE_PATH, load_template, translate
from tests.unit.template_rules import (
    NO_VALUE,
    Template,
    every_branch,
    first_of,
    properties_of,
    resources_of,
)

pytestmark = pytest.mark.unit

PARAMETERS = {"ApproverEmails": "a@example.com", "SenderEmail": "s@example.com"}

# Services whose resources hold or guard Lethe's data: no wildcard action may reach them.
DATA_SERVICES = ("s3", "dynamodb", "secretsmanager", "sqs", "sns", "kms")

# Wildcard actions that are allowed on data resources, each by (logical id, Sid, action) and
# with its reason: a new one fails the check until it is reviewed and added here.
_KEY_ADMINISTRATION = (
    "the key policy's statement for the account (principal <account>:root): it lets the "
    "account's IAM policies govern the key, as AWS's default key policy does; without it no "
    "principal could ever manage the key again. It grants nothing to a principal whose IAM "
    "policies do not allow it."
)
_SNS_PUBLISHER_KEY = (
    "kms:GenerateDataKey* with kms:Decrypt is what AWS documents for a publisher to an SNS topic "
    "encrypted with a customer managed key. It matches only the GenerateDataKey operations "
    "(with or without plaintext, single keys or pairs), on this one key, and decrypts nothing "
    "else; narrowing it would save nothing and has not been tried on AWS."
)
ALLOWED_WILDCARD_ACTIONS: dict[tuple[str, str, str], str] = {
    ("NotificationsKey", "AccountAdministers", "kms:*"): _KEY_ADMINISTRATION,
    ("ErasureCertificateKey", "AccountAdministers", "kms:*"): _KEY_ADMINISTRATION,
    ("TaskTokenKey", "AccountAdministers", "kms:*"): _KEY_ADMINISTRATION,
    ("NotificationsKey", "CloudWatchAlarmsPublish", "kms:GenerateDataKey*"): _SNS_PUBLISHER_KEY,
    ("NotificationsKey", "EventBridgePublishes", "kms:GenerateDataKey*"): _SNS_PUBLISHER_KEY,
    ("NotificationsKey", "SesEventsPublish", "kms:GenerateDataKey*"): _SNS_PUBLISHER_KEY,
    ("NotificationsKey", "BudgetsPublish", "kms:GenerateDataKey*"): _SNS_PUBLISHER_KEY,
    **{
        (f"{machine}Role", "NotifyEncrypted", "kms:GenerateDataKey*"): _SNS_PUBLISHER_KEY
        for machine in (
            "IngestionStateMachine",
            "IndexBackfillStateMachine",
            "IndexReconcileStateMachine",
            "IndexCompactionStateMachine",
            "ErasureStateMachine",
        )
    },
}

# Lambda assumes a function's execution role itself; AWS documents no aws:SourceAccount or
# aws:SourceArn for that assumption (the Lambda developer guide's execution role trust policy has
# no condition, and names aws:SourceArn only for policies whose resource is the function). A
# wrong condition would stop every function on AWS, and that cannot be tested here. A role can
# be attached to a function only with iam:PassRole in the same account: the confused deputy the
# condition guards against (another account's function using this role) cannot arise.
LAMBDA_EXEMPT_PRINCIPALS = frozenset({"lambda.amazonaws.com"})

# Trust policies AWS documents without a condition (issue 21): API Gateway's account-wide
# CloudWatch role (API Gateway developer guide, "Set up CloudWatch logging") and Glue's service
# role (Glue developer guide, "Create an IAM role for AWS Glue"). A condition AWS's own examples
# do not use may not hold for every assumption, and a role that cannot be assumed stops API
# logging or every Glue run; the roles are passed only with iam:PassRole in this account.
DOCUMENTED_UNCONDITIONED_TRUST = frozenset({"apigateway.amazonaws.com", "glue.amazonaws.com"})

# Key policy statements for services that publish to the encrypted notifications topic through
# SNS (SNS calls KMS for them): AWS's key policies for these publishers carry no source
# condition, and one the call does not meet drops the message (issue 21: Spark-failure notices
# from EventBridge). The topic policy binds each of them to this account or stack.
TOPIC_KEY_PUBLISHERS = frozenset(
    {
        ("NotificationsKey", "EventBridgePublishes"),
        ("NotificationsKey", "SesEventsPublish"),
        ("NotificationsKey", "BudgetsPublish"),
    }
)

# Every checkov skip in template.yaml, by (logical id, check id): a new skip fails
# checkov_skips_unreviewed until it is added here, with its comment in the template and its row
# in docs/SECURITY.md. The CKV2_* ones are dormant with the pinned checkov (only its Terraform
# scanner has them) and kept for the decision they record.
_FUNCTIONS = (
    "ApprovalPageFunction",
    "ApprovalRequestFunction",
    "DatasetsApiFunction",
    "ErasureApiFunction",
    "ErasureMetricsFunction",
    "ErasureStepsFunction",
    "IndexObjectFunction",
    "IngestionStepsFunction",
    "ObjectEventsFunction",
    "RetentionStepsFunction",
)
_LOG_GROUPS = (
    "ApiAccessLogGroup",
    "ApiExecutionLogGroup",
    "ErasureLogGroup",
    "IndexBackfillLogGroup",
    "IndexReconcileLogGroup",
    "IndexCompactionLogGroup",
    "IngestionLogGroup",
    "RetentionLogGroup",
    "SparkLogGroup",
    "GlueOutputLogGroup",
    "GlueErrorLogGroup",
    *(f"{function}LogGroup" for function in _FUNCTIONS),
)
EXPECTED_CHECKOV_SKIPS: frozenset[tuple[str, str]] = frozenset(
    {
        ("AccessLogsBucket", "CKV_AWS_18"),
        # unversioned on purpose: a replaced or deleted index segment keeps no older version
        # holding an erased subject hash (docs/INDEX.md)
        ("IndexBucket", "CKV_AWS_21"),
        ("ReportsBucket", "CKV_AWS_18"),
        ("SubjectHashKeySecret", "CKV2_AWS_57"),
        ("ApprovalSigningKeySecret", "CKV2_AWS_57"),
        ("ErasureCertificateKey", "CKV_AWS_7"),
        ("LetheApi", "CKV_AWS_120"),
        ("LetheApi", "CKV2_AWS_29"),
        ("LetheApi", "CKV2_AWS_51"),
        *((function, "CKV_AWS_116") for function in _FUNCTIONS),
        *((function, "CKV_AWS_117") for function in _FUNCTIONS),
        *((function, "CKV_AWS_173") for function in _FUNCTIONS),
        *(
            (function, "CKV_AWS_115")
            for function in (
                "ErasureStepsFunction",
                "ApprovalRequestFunction",
                "ErasureMetricsFunction",
                "IngestionStepsFunction",
                "RetentionStepsFunction",
            )
        ),
        *((group, "CKV_AWS_158") for group in _LOG_GROUPS),
    }
)

IDENTITY_POLICY_TYPES = ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
# Resource policies: the property that holds the document, by type.
RESOURCE_POLICY_PROPERTIES = {
    "AWS::S3::BucketPolicy": "PolicyDocument",
    "AWS::SQS::QueuePolicy": "PolicyDocument",
    "AWS::SNS::TopicPolicy": "PolicyDocument",
    "AWS::KMS::Key": "KeyPolicy",
    "AWS::SecretsManager::ResourcePolicy": "ResourcePolicy",
    "AWS::Logs::ResourcePolicy": "PolicyDocument",
    "AWS::Events::EventBusPolicy": "Statement",
}
SOURCE_KEYS = ("aws:sourceaccount", "aws:sourcearn")
STATES_ARN_PREFIX = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}"


# ---------------------------------------------------------------------------------- helpers


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _branches(value: Any) -> Iterator[Any]:
    """value under every combination of the conditions it uses (one resource: a few)."""
    return (decided for _, decided in every_branch(value))


def _statements(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, str):
        document = json.loads(document)
    if isinstance(document, list):  # AWS::Events::EventBusPolicy's Statement
        return [s for s in document if isinstance(s, dict)]
    if not isinstance(document, dict):
        return []
    return [s for s in _as_list(document.get("Statement")) if isinstance(s, dict)]


def identity_statements(translated: Template) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(logical id, policy name, statement) of every identity policy, in every branch."""
    seen: set[str] = set()
    for lid, resource in resources_of(translated, *IDENTITY_POLICY_TYPES).items():
        for props in _branches(properties_of(resource)):
            documents = [
                (p.get("PolicyName", "?"), p.get("PolicyDocument"))
                for p in props.get("Policies", [])
            ]
            if "PolicyDocument" in props:
                documents.append((props.get("PolicyName", lid), props["PolicyDocument"]))
            for name, document in documents:
                for statement in _statements(document):
                    key = json.dumps([lid, name, statement], sort_keys=True)
                    if key not in seen:
                        seen.add(key)
                        yield lid, name, statement


def resource_statements(translated: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id, statement) of every resource policy, in every branch."""
    seen: set[str] = set()
    for lid, resource in resources_of(translated, *RESOURCE_POLICY_PROPERTIES).items():
        prop = RESOURCE_POLICY_PROPERTIES[resource["Type"]]
        for props in _branches(properties_of(resource)):
            for statement in _statements(props.get(prop)):
                key = json.dumps([lid, statement], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    yield lid, statement


def trust_statements(translated: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    for lid, resource in resources_of(translated, "AWS::IAM::Role").items():
        for props in _branches(properties_of(resource)):
            for statement in _statements(props.get("AssumeRolePolicyDocument")):
                yield lid, statement


def _is_wildcard(action: Any) -> bool:
    return isinstance(action, str) and ("*" in action or "?" in action)


def _reaches_data(action: str) -> bool:
    return action.strip() == "*" or action.split(":", 1)[0].lower() in DATA_SERVICES


def _services(statement: dict[str, Any]) -> set[str]:
    principal = statement.get("Principal")
    if not isinstance(principal, dict):
        return set()
    return {str(s) for s in _as_list(principal.get("Service"))}


def _source_values(condition: Any) -> list[Any]:
    """The values of aws:SourceAccount and aws:SourceArn under any operator."""
    values: list[Any] = []
    for operator in (condition or {}).values():
        if isinstance(operator, dict):
            for key, value in operator.items():
                if key.lower() in SOURCE_KEYS:
                    values += _as_list(value)
    return values


def _this_account(value: Any, resources: set[str]) -> bool:
    """A source condition value that names this account (AWS::AccountId, in a Ref or an ARN
    built with Fn::Sub) or a resource of this stack (Ref, Fn::GetAtt)."""
    if not isinstance(value, dict):
        return False
    if "Ref" in value:
        return value["Ref"] == "AWS::AccountId" or value["Ref"] in resources
    if "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return str(target[0] if isinstance(target, list) else target.split(".")[0]) in resources
    if "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        return "${AWS::AccountId}" in str(text)
    return False


def _source_bound(statement: dict[str, Any], resources: set[str]) -> bool:
    values = _source_values(statement.get("Condition"))
    return bool(values) and all(_this_account(v, resources) for v in values)


def _translated(template: Template) -> Template:
    return translate(template, PARAMETERS)


# ---------------------------------------------------------------------------------- checks


def wildcard_actions_on_data(sam: Template, translated: Template) -> list[str]:
    """No Allow statement, in a role (SAM's included) or a resource policy, has a wildcard
    action ("*", "svc:*", "svc:Get*") or NotAction for S3, DynamoDB, Secrets Manager, SQS, SNS
    or KMS, unless ALLOWED_WILDCARD_ACTIONS lists it with a reason. An allowed
    kms:GenerateDataKey* in a role must name its key (not Resource "*")."""
    offenders = []
    found = [(lid, s) for lid, _, s in identity_statements(translated)]
    found += list(resource_statements(translated))
    identity = set(resources_of(translated, *IDENTITY_POLICY_TYPES))
    for lid, statement in found:
        if statement.get("Effect") != "Allow":
            continue
        sid = str(statement.get("Sid", ""))
        if "NotAction" in statement:
            offenders.append(f"{lid} {sid or '(no Sid)'}: Allow with NotAction")
        actions = [str(a) for a in _as_list(statement.get("Action"))]
        offenders += [
            f"{lid} {sid or '(no Sid)'}: {action}"
            for action in actions
            if _is_wildcard(action)
            and _reaches_data(action)
            and (lid, sid, action) not in ALLOWED_WILDCARD_ACTIONS
        ]
        data = [a for a in actions if _reaches_data(a)]
        if lid in identity and data and "*" in _as_list(statement.get("Resource")):
            offenders.append(f"{lid} {sid or '(no Sid)'}: {', '.join(data)} on Resource '*'")
    return sorted(set(offenders))


def pass_role_unscoped(sam: Template, translated: Template) -> list[str]:
    """Every statement that allows iam:PassRole (by name or by a wildcard) names its roles
    (no '*' in a resource) and limits the services with iam:PassedToService."""
    offenders = []
    for lid, _, statement in identity_statements(translated):
        if statement.get("Effect") != "Allow":
            continue
        actions = [str(a).lower() for a in _as_list(statement.get("Action"))]
        if not any(fnmatch.fnmatchcase("iam:passrole", action) for action in actions):
            continue
        sid = statement.get("Sid", "(no Sid)")
        resources = _as_list(statement.get("Resource"))
        if not resources or any(isinstance(r, str) and "*" in r for r in resources):
            offenders.append(f"{lid} {sid}: iam:PassRole on {resources!r}")
        keys = {k.lower() for op in (statement.get("Condition") or {}).values() for k in op}
        if "iam:passedtoservice" not in keys:
            offenders.append(f"{lid} {sid}: iam:PassRole without iam:PassedToService")
    return sorted(set(offenders))


def service_principals_unbound(sam: Template, translated: Template) -> list[str]:
    """Every trust policy and resource-policy statement that allows an AWS service principal
    has aws:SourceAccount or aws:SourceArn naming this account or this stack's resources
    (Lambda execution roles excepted: LAMBDA_EXEMPT_PRINCIPALS; the trusts AWS documents without
    a condition: DOCUMENTED_UNCONDITIONED_TRUST; the topic key's publishers: TOPIC_KEY_PUBLISHERS);
    every AWS::Lambda::Permission for a service has SourceArn or SourceAccount."""
    offenders = []
    found = [(lid, s, "trust") for lid, s in trust_statements(translated)]
    found += [(lid, s, "policy") for lid, s in resource_statements(translated)]
    for lid, statement, kind in found:
        services = _services(statement)
        if statement.get("Effect") != "Allow" or not services:
            continue
        if kind == "trust" and services <= LAMBDA_EXEMPT_PRINCIPALS:
            continue
        if kind == "trust" and services <= DOCUMENTED_UNCONDITIONED_TRUST:
            continue
        if kind == "policy" and (lid, statement.get("Sid")) in TOPIC_KEY_PUBLISHERS:
            continue
        if not _source_bound(statement, set(translated["Resources"])):
            sid = statement.get("Sid", "(no Sid)")
            offenders.append(
                f"{lid} {kind} {sid}: {sorted(services)} without SourceAccount/SourceArn"
            )
    for lid, resource in resources_of(translated, "AWS::Lambda::Permission").items():
        props = properties_of(resource)
        principal = str(props.get("Principal", ""))
        if principal.endswith(".amazonaws.com") and not (
            props.get("SourceArn") or props.get("SourceAccount")
        ):
            offenders.append(f"{lid}: permission for {principal} without SourceArn/SourceAccount")
    return sorted(set(offenders))


def state_machine_roles_not_their_own(sam: Template, translated: Template) -> list[str]:
    """Each state machine runs as a role of this template (not SAM's, whose trust policy has no
    condition) that no other state machine shares, whose trust admits Step Functions only for
    this state machine's own name (aws:SourceArn) in this account (aws:SourceAccount), and that
    attaches X-Ray writing when the state machine traces."""
    offenders = []
    users: dict[str, list[str]] = {}
    for lid, resource in resources_of(sam, "AWS::Serverless::StateMachine").items():
        props = properties_of(resource)
        role = props.get("Role")
        role_id = role.get("Fn::GetAtt", [None])[0] if isinstance(role, dict) else None
        declared = sam["Resources"].get(str(role_id), {})
        if declared.get("Type") != "AWS::IAM::Role":
            offenders.append(f"{lid}: Role {role!r} is not an AWS::IAM::Role of template.yaml")
            continue
        users.setdefault(str(role_id), []).append(lid)
        name = props.get("Name", {}).get("Fn::Sub") if isinstance(props.get("Name"), dict) else None
        expected = f"{STATES_ARN_PREFIX}:stateMachine:{name}"
        role_props = properties_of(translated["Resources"][str(role_id)])
        for statement in _statements(role_props.get("AssumeRolePolicyDocument")):
            condition = statement.get("Condition") or {}
            arns = _as_list(condition.get("ArnLike", {}).get("aws:SourceArn"))
            arns += _as_list(condition.get("ArnEquals", {}).get("aws:SourceArn"))
            subs = {a.get("Fn::Sub") if isinstance(a, dict) else a for a in arns}
            account = condition.get("StringEquals", {}).get("aws:SourceAccount")
            if _services(statement) != {"states.amazonaws.com"}:
                offenders.append(
                    f"{role_id}: trusts {sorted(_services(statement))}, not Step Functions"
                )
            # itself, its versions and aliases (:*), its Distributed Map children (/<label>)
            allowed = {expected, f"{expected}:*", f"{expected}/*"}
            if name is None or not subs or not subs <= allowed:
                offenders.append(
                    f"{role_id}: aws:SourceArn {sorted(map(str, subs))} is not {lid}'s"
                )
            if account != {"Ref": "AWS::AccountId"}:
                offenders.append(f"{role_id}: aws:SourceAccount {account!r} is not this account")
        tracing = props.get("Tracing", {}).get("Enabled")
        if tracing and "AWSXrayWriteOnlyAccess" not in json.dumps(
            role_props.get("ManagedPolicyArns")
        ):
            offenders.append(f"{role_id}: {lid} traces but its role lacks AWSXrayWriteOnlyAccess")
    offenders += [
        f"{role}: shared by {', '.join(sorted(lids))}"
        for role, lids in users.items()
        if len(lids) > 1
    ]
    return sorted(set(offenders))


def checkov_skips_unreviewed(sam: Template, translated: Template) -> list[str]:
    """Every checkov skip in template.yaml has a comment, and the skips are exactly
    EXPECTED_CHECKOV_SKIPS (a new one needs a review here and a row in docs/SECURITY.md)."""
    offenders = []
    found = set()
    for lid, resource in sam.get("Resources", {}).items():
        skips = ((resource.get("Metadata") or {}).get("checkov") or {}).get("skip") or []
        for skip in skips:
            check = str(skip.get("id", ""))
            found.add((lid, check))
            if not str(skip.get("comment") or "").strip():
                offenders.append(f"{lid} {check}: skipped without a comment")
    offenders += [
        f"{lid} {check}: skip not in EXPECTED_CHECKOV_SKIPS"
        for lid, check in sorted(found - EXPECTED_CHECKOV_SKIPS)
    ]
    offenders += [
        f"{lid} {check}: expected skip is gone (update EXPECTED_CHECKOV_SKIPS and docs)"
        for lid, check in sorted(EXPECTED_CHECKOV_SKIPS - found)
    ]
    return offenders


CHECKS: dict[str, Callable[[Template, Template], list[str]]] = {
    "wildcard_actions_on_data": wildcard_actions_on_data,
    "pass_role_unscoped": pass_role_unscoped,
    "service_principals_unbound": service_principals_unbound,
    "state_machine_roles_not_their_own": state_machine_roles_not_their_own,
    "checkov_skips_unreviewed": checkov_skips_unreviewed,
}


# ---------------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def translated(template: Template) -> Template:
    return _translated(template)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_template_keeps_the_iam_policy(
    template: Template, translated: Template, check: str
) -> None:
    offenders = CHECKS[check](template, translated)
    assert offenders == [], f"{check}: {offenders}"


def test_the_checks_see_the_roles_sam_generates(translated: Template) -> None:
    """The translated template is what is checked: every function's SAM role is in it."""
    roles = set(resources_of(translated, "AWS::IAM::Role"))
    assert {f"{function}Role" for function in _FUNCTIONS} <= roles
    lambda_trusts = {
        lid for lid, s in trust_statements(translated) if _services(s) <= LAMBDA_EXEMPT_PRINCIPALS
    }
    assert lambda_trusts == {f"{function}Role" for function in _FUNCTIONS}


# Each check must be able to fail: break a copy of template.yaml, translate it, name the culprit.


def _function_policies(t: Template) -> tuple[str, list[Any]]:
    lid = first_of(t, "AWS::Serverless::Function")
    return lid, t["Resources"][lid]["Properties"].setdefault("Policies", [])


def _break_wildcards(t: Template) -> str:
    lid, policies = _function_policies(t)
    policies.append(
        {
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "dynamodb:*",
                    "Resource": {"Fn::GetAtt": ["DatasetsTable", "Arn"]},
                }
            ]
        }
    )
    return f"{lid}Role"


def _break_pass_role(t: Template) -> str:
    lid, policies = _function_policies(t)
    policies.append({"Statement": [{"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]})
    return f"{lid}Role"


def _back_on_sams_role(t: Template, machine: str) -> str:
    """The state machine as it was before: its role's statements as SAM `Policies`."""
    props = t["Resources"][machine]["Properties"]
    role = props.pop("Role")["Fn::GetAtt"][0]
    declared = t["Resources"].pop(role)["Properties"]["Policies"]
    props["Policies"] = [_sam_policy(p) for p in declared]
    return str(role)


def _sam_policy(policy: Any) -> Any:
    if isinstance(policy, dict) and "Fn::If" in policy:
        condition, when_true, when_false = policy["Fn::If"]
        return {"Fn::If": [condition, _sam_policy(when_true), _sam_policy(when_false)]}
    if policy == NO_VALUE:
        return policy
    return policy["PolicyDocument"]


def _break_service_principals(t: Template) -> str:
    return _back_on_sams_role(t, first_of(t, "AWS::Serverless::StateMachine"))


def _break_state_machine_roles(t: Template) -> str:
    first, second = sorted(resources_of(t, "AWS::Serverless::StateMachine"))[:2]
    t["Resources"][second]["Properties"]["Role"] = t["Resources"][first]["Properties"]["Role"]
    return f"{first}Role: shared by"


def _break_checkov_skips(t: Template) -> str:
    lid = first_of(t, "AWS::Serverless::Function")
    t["Resources"][lid]["Metadata"]["checkov"]["skip"][0]["comment"] = " "
    return lid


BREAKERS: dict[str, Callable[[Template], str]] = {
    "wildcard_actions_on_data": _break_wildcards,
    "pass_role_unscoped": _break_pass_role,
    "service_principals_unbound": _break_service_principals,
    "state_machine_roles_not_their_own": _break_state_machine_roles,
    "checkov_skips_unreviewed": _break_checkov_skips,
}


def test_every_check_has_a_breaker() -> None:
    assert sorted(BREAKERS) == sorted(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_names_the_resource_a_broken_template_breaks(template: Template, check: str) -> None:
    broken = copy.deepcopy(template)
    culprit = BREAKERS[check](broken)
    offenders = CHECKS[check](broken, _translated(broken))
    assert any(culprit in offender for offender in offenders), (check, culprit, offenders)


def test_unbound_resource_policies_and_permissions_are_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    broken["Resources"]["ObjectEventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"][
        0
    ].pop("Condition")
    spark_trust = broken["Resources"]["SparkJobRole"]["Properties"]["AssumeRolePolicyDocument"]
    emr = next(  # Glue's statement has no condition (DOCUMENTED_UNCONDITIONED_TRUST)
        s for s in spark_trust["Statement"] if "emr-serverless" in str(s["Principal"])
    )
    emr["Condition"] = {"StringEquals": {"aws:SourceAccount": "*"}}
    broken["Resources"]["UploadPermission"] = {
        "Type": "AWS::Lambda::Permission",
        "Properties": {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Ref": "ObjectEventsFunction"},
            "Principal": "s3.amazonaws.com",
        },
    }
    offenders = service_principals_unbound(broken, _translated(broken))
    for culprit in ("ObjectEventsQueuePolicy policy", "SparkJobRole trust", "UploadPermission:"):
        assert any(o.startswith(culprit) for o in offenders), (culprit, offenders)


def test_a_wildcard_on_a_resource_policy_or_an_unlisted_kms_wildcard_is_named(
    template: Template,
) -> None:
    broken = copy.deepcopy(template)
    statement = broken["Resources"]["ObjectEventsQueuePolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ][0]
    statement["Action"] = "sqs:*"
    key = broken["Resources"]["NotificationsKey"]["Properties"]["KeyPolicy"]["Statement"]
    key.append(
        {
            "Sid": "Reader",
            "Effect": "Allow",
            "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
            "Action": "kms:Decrypt*",
            "Resource": "*",
        }
    )
    offenders = wildcard_actions_on_data(broken, _translated(broken))
    assert any(o.startswith("ObjectEventsQueuePolicy") and "sqs:*" in o for o in offenders), (
        offenders
    )
    assert "NotificationsKey Reader: kms:Decrypt*" in offenders


def test_a_new_checkov_skip_needs_a_review(template: Template, translated: Template) -> None:
    broken = copy.deepcopy(template)
    metadata = broken["Resources"]["RawBucket"].setdefault("Metadata", {})
    metadata["checkov"] = {"skip": [{"id": "CKV_AWS_21", "comment": "Versioning is for others."}]}
    assert checkov_skips_unreviewed(broken, translated) == [
        "RawBucket CKV_AWS_21: skip not in EXPECTED_CHECKOV_SKIPS"
    ]


def test_state_machine_roles_grant_what_sam_generated(
    template: Template, translated: Template
) -> None:
    """Each explicit state machine role grants exactly what SAM generates from the same
    statements as `Policies`: the same inline policies (names included) and managed policies,
    the same trust but for its condition; the state machine itself translates identically.
    (Run once against the template before the roles were explicit: the same result.)"""
    machines = sorted(resources_of(template, "AWS::Serverless::StateMachine"))
    assert machines
    for machine in machines:
        sams = copy.deepcopy(template)
        role = _back_on_sams_role(sams, machine)
        generated = _translated(sams)["Resources"]
        ours, theirs = properties_of(translated["Resources"][role]), properties_of(generated[role])
        assert ours["Policies"] == theirs["Policies"], role
        xray = {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AWSXrayWriteOnlyAccess"}
        managed = [
            "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess" if m == xray else m
            for m in ours["ManagedPolicyArns"]
        ]
        assert managed == theirs["ManagedPolicyArns"], role  # us-east-1: partition aws
        (trust,) = _statements(ours["AssumeRolePolicyDocument"])
        (sam_trust,) = _statements(theirs["AssumeRolePolicyDocument"])
        assert "Condition" not in sam_trust
        assert _services(trust) == _services(sam_trust) == {"states.amazonaws.com"}
        assert _as_list(trust["Action"]) == _as_list(sam_trust["Action"]) == ["sts:AssumeRole"]
        assert set(ours) - {"Tags"} == set(theirs) - {"Tags"}, role
        assert generated[machine] == translated["Resources"][machine], machine


def test_a_data_action_on_any_resource_or_a_pass_role_by_wildcard_is_named(
    template: Template,
) -> None:
    broken = copy.deepcopy(template)
    lid, policies = _function_policies(broken)
    policies.append(
        {
            "Statement": [
                {"Sid": "ReadAll", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"},
                {
                    "Sid": "PassAny",
                    "Effect": "Allow",
                    "Action": "iam:Pass*",
                    "Resource": {"Fn::GetAtt": ["SparkJobRole", "Arn"]},
                },
            ]
        }
    )
    translated = _translated(broken)
    assert f"{lid}Role ReadAll: s3:GetObject on Resource '*'" in wildcard_actions_on_data(
        broken, translated
    )
    assert pass_role_unscoped(broken, translated) == [
        f"{lid}Role PassAny: iam:PassRole without iam:PassedToService"
    ]
