"""The first real deploy's template defects (issue 21, item 2), each a check that returns the
offending resources, run against the real template and against a copy broken the way the old
template was (so that each check can fail). AWS documentation each rule follows is named in the
check's docstring.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import pytest
from packaging.requirements import Requirement

from lethe.artifact_sync import ENGINE_DEPENDENCIES
from lethe.localcloud.template import REPO_ROOT, TEMPLATE_PATH, load_template
from lethe_shared.erasure.approval_flow import SesMailer
from tests.unit.template_rules import (
    Template,
    properties_of,
    requirement_pins,
    resources_of,
)

pytestmark = pytest.mark.unit

TOPIC = {"Ref": "NotificationsTopic"}
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
# What a new account may have: Lambda concurrency 10 in all (the mapping must leave room), and a
# Glue/EMR Serverless cost ceiling a first deploy cannot run past by default.
NEW_ACCOUNT_LAMBDA_CONCURRENCY = 10
MAX_DEFAULT_GLUE_DPUS_PER_JOB = 40  # MaxConcurrentRuns x NumberOfWorkers at the defaults
MAX_DEFAULT_EMR_VCPU = 16
ALARM_METRIC_LIMIT = 10  # CloudWatch: an alarm on metric math reads at most 10 metrics
LAMBDA_LOCK = "requirements/lambda.lock"
# The Lambda runtime's environment for requirement markers (python3.13 on arm64 Linux).
LAMBDA_MARKERS = {
    "python_version": "3.13",
    "python_full_version": "3.13.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
ARN_VALUES = {"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012"}


# ---------------------------------------------------------------------------------- helpers


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _sub_text(value: Any) -> str | None:
    """The text of a !Sub (string form) or a plain string."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        return str(value["Fn::Sub"])
    return None


def _arn(value: Any, stage: str = "dev") -> str | None:
    """An ARN pattern of the template with the pseudo parameters and Stage filled in."""
    text = _sub_text(value)
    if text is None:
        return None
    for name, filled in {**ARN_VALUES, "Stage": stage}.items():
        text = text.replace("${" + name + "}", filled)
    return text


def _statements(document: Any) -> list[dict[str, Any]]:
    return [s for s in _as_list((document or {}).get("Statement")) if isinstance(s, dict)]


def _services(statement: dict[str, Any]) -> list[str]:
    principal = statement.get("Principal")
    if not isinstance(principal, dict):
        return []
    return [str(s) for s in _as_list(principal.get("Service"))]


def _references(value: Any, lid: str) -> bool:
    for node in _walk(value):
        if not isinstance(node, dict):
            continue
        if node.get("Ref") == lid:
            return True
        att = node.get("Fn::GetAtt")
        if isinstance(att, list) and att and att[0] == lid:
            return True
        if isinstance(att, str) and att.split(".")[0] == lid:
            return True
        sub = node.get("Fn::Sub")
        text = sub[0] if isinstance(sub, list) and sub else sub
        if isinstance(text, str) and re.search(r"\$\{" + re.escape(lid) + r"[.}]", text):
            return True
    return False


def _condition_parameter(template: Template, condition: str) -> str | None:
    """The parameter a condition of the form !Equals [!Ref P, "true"] tests."""
    definition = template.get("Conditions", {}).get(condition)
    if not isinstance(definition, dict) or "Fn::Equals" not in definition:
        return None
    left, right = definition["Fn::Equals"]
    if isinstance(left, dict) and "Ref" in left and right == "true":
        return str(left["Ref"])
    return None


def _parameter(template: Template, value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and "Ref" in value:
        found = template.get("Parameters", {}).get(value["Ref"])
        return found if isinstance(found, dict) else None
    return None


def _number(template: Template, value: Any, key: str = "Default") -> float | None:
    """A literal number, or the Default (or another key) of the parameter it references."""
    parameter = _parameter(template, value)
    raw = parameter.get(key) if parameter is not None else value
    try:
        return float(str(raw))
    except (TypeError, ValueError):
        return None


def _key_statements(template: Template) -> list[tuple[str, dict[str, Any]]]:
    return [
        (lid, statement)
        for lid, key in resources_of(template, "AWS::KMS::Key").items()
        for statement in _statements(properties_of(key).get("KeyPolicy"))
    ]


def _topic_publishers(template: Template) -> dict[str, dict[str, Any]]:
    """Service principal -> its sns:Publish statement in the notifications topic's policy."""
    found = {}
    for policy in resources_of(template, "AWS::SNS::TopicPolicy").values():
        props = properties_of(policy)
        if TOPIC not in _as_list(props.get("Topics")):
            continue
        for statement in _statements(props.get("PolicyDocument")):
            actions = [str(a).lower() for a in _as_list(statement.get("Action"))]
            if statement.get("Effect") == "Allow" and "sns:publish" in actions:
                for service in _services(statement):
                    found[service] = statement
    return found


# ---------------------------------------------------------------------------------- checks


def sender_identity_problems(template: Template) -> list[str]:
    """An SES identity is optional (a true/false parameter, "true" by default so that a fresh
    account gets one), retained on delete and replacement, and nothing depends on it unless
    under its own condition: AWS::SES::EmailIdentity fails with AlreadyExists for an identity
    that exists (CloudFormation template reference, AWS::SES::EmailIdentity; SES developer
    guide, "Creating and verifying identities")."""
    offenders = []
    resources = template.get("Resources", {})
    for lid, resource in resources_of(template, "AWS::SES::EmailIdentity").items():
        condition = resource.get("Condition")
        parameter = _condition_parameter(template, str(condition)) if condition else None
        spec = template.get("Parameters", {}).get(parameter or "", {})
        if spec.get("AllowedValues") != ["true", "false"] or spec.get("Default") != "true":
            offenders.append(f"{lid} (not optional by a true/false parameter, default true)")
        for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
            if resource.get(policy) != "Retain":
                offenders.append(f"{lid} ({policy} is not Retain)")
        for other, body in resources.items():
            if other == lid:
                continue
            if body.get("Condition") == condition and condition is not None:
                continue
            if lid in _as_list(body.get("DependsOn")) or _references(body, lid):
                offenders.append(f"{lid} (referenced by {other} without its condition)")
        if _references(template.get("Outputs", {}), lid):
            offenders.append(f"{lid} (referenced by an output)")
    return offenders


def trust_policy_problems(template: Template) -> list[str]:
    """Trust policies as AWS documents them: API Gateway's CloudWatch role (API Gateway
    developer guide, "Set up CloudWatch logging for REST APIs") and Glue's service role (Glue
    developer guide, "Step 2: Create an IAM role for AWS Glue") with no condition; a state
    machine's role trusted for its own ARN, its versions and aliases and, when its definition
    has a Distributed Map, its child workflows, which run as stateMachine:<name>/<map label>
    (Step Functions API reference, StartExecution: "a qualified state machine ARN can refer to
    a Distributed Map state")."""
    offenders = []
    roles = resources_of(template, "AWS::IAM::Role")
    for lid, role in roles.items():
        for statement in _statements(properties_of(role).get("AssumeRolePolicyDocument")):
            offenders += [
                f"{lid} ({service} trusted only under a condition)"
                for service in ("apigateway.amazonaws.com", "glue.amazonaws.com")
                if service in _services(statement) and "Condition" in statement
            ]
    for lid, machine in resources_of(template, *STATE_MACHINE_TYPES).items():
        offenders += _state_machine_trust_problems(lid, properties_of(machine), roles)
    return offenders


def _state_machine_trust_problems(
    lid: str, props: dict[str, Any], roles: dict[str, dict[str, Any]]
) -> list[str]:
    role_ref = props.get("Role") or props.get("RoleArn")
    att = role_ref.get("Fn::GetAtt") if isinstance(role_ref, dict) else None
    role_id = (att[0] if isinstance(att, list) else str(att).split(".")[0]) if att else None
    name = _arn({"Fn::Sub": _sub_text(props.get("Name")) or ""})
    if role_id not in roles or not name:
        return [f"{lid} (no named state machine with a role of this template)"]
    machine_arn = f"arn:aws:states:eu-west-1:123456789012:stateMachine:{name}"
    callers = [machine_arn, f"{machine_arn}:live"]
    definition_uri = props.get("DefinitionUri")
    if isinstance(definition_uri, str):
        definition = json.loads((REPO_ROOT / definition_uri).read_text())
        callers += [f"{machine_arn}/{label}" for label in _distributed_maps(definition)]
    patterns = [
        _arn(pattern)
        for statement in _statements(properties_of(roles[role_id])["AssumeRolePolicyDocument"])
        if "states.amazonaws.com" in _services(statement)
        for pattern in _as_list(
            statement.get("Condition", {}).get("ArnLike", {}).get("aws:SourceArn")
        )
    ]
    return [
        f"{role_id} (does not trust {caller.split(':', 5)[5]} of {lid})"
        for caller in callers
        if not any(p and fnmatch.fnmatchcase(caller, p) for p in patterns)
    ]


def _distributed_maps(definition: Any) -> Iterator[str]:
    for node in _walk(definition):
        if not isinstance(node, dict) or not isinstance(node.get("States"), dict):
            continue
        for label, state in node["States"].items():
            processor = state.get("ItemProcessor", {}) if isinstance(state, dict) else {}
            if state.get("Type") == "Map" and (
                processor.get("ProcessorConfig", {}).get("Mode") == "DISTRIBUTED"
            ):
                yield str(label)


def mapping_concurrency_problems(template: Template) -> list[str]:
    """An SQS mapping's MaximumConcurrency is a parameter (at least 2, Lambda's minimum) whose
    default leaves most of a new account's concurrency (10) to the other functions, and the
    deploy checklist names the quota (Lambda developer guide, "Configuring maximum concurrency
    for Amazon SQS event sources"; "Lambda quotas")."""
    offenders = []
    deploy = (REPO_ROOT / "docs/DEPLOY.md").read_text()
    for lid, resource in resources_of(template, "AWS::Lambda::EventSourceMapping").items():
        value = properties_of(resource).get("ScalingConfig", {}).get("MaximumConcurrency")
        if value is None:
            continue
        parameter = _parameter(template, value)
        default = _number(template, value)
        if parameter is None or parameter.get("Type") != "Number":
            offenders.append(f"{lid} (MaximumConcurrency {value!r} is not a Number parameter)")
            continue
        if _number(template, value, "MinValue") != 2:
            offenders.append(f"{lid} (its parameter's MinValue is not 2, Lambda's minimum)")
        if default is None or default > NEW_ACCOUNT_LAMBDA_CONCURRENCY / 2:
            offenders.append(f"{lid} (default MaximumConcurrency {default} on a new account)")
        if value["Ref"] not in deploy or "Concurrent executions" not in deploy:
            offenders.append(f"{lid} (docs/DEPLOY.md names neither the parameter nor the quota)")
    return offenders


def dashboards_without_region(template: Template) -> list[str]:
    """Dashboards are global: a name without the region collides across regions."""
    return [
        lid
        for lid, resource in resources_of(template, "AWS::CloudWatch::Dashboard").items()
        if "${AWS::Region}" not in (_sub_text(properties_of(resource).get("DashboardName")) or "")
    ]


def topic_key_problems(template: Template) -> list[str]:
    """Every service that publishes to the encrypted notifications topic other than CloudWatch
    alarms may use the topic's key, with no aws:SourceAccount/SourceArn condition: EventBridge
    user guide, "Amazon SNS permissions" (a KMS-encrypted topic's key policy admits
    events.amazonaws.com kms:Decrypt and kms:GenerateDataKey, no condition); SES developer guide
    (event destinations to encrypted topics); Budgets user guide (SNS topic for budget
    notifications). The topic policy says which rules, senders and budgets may publish."""
    offenders: list[str] = []
    statements = _key_statements(template)
    if not statements:
        return offenders
    for service in sorted(_topic_publishers(template)):
        if service == "cloudwatch.amazonaws.com":
            continue
        granted = [
            (lid, s)
            for lid, s in statements
            if service in _services(s)
            and {"kms:generatedatakey*", "kms:decrypt"}
            <= {str(a).lower() for a in _as_list(s.get("Action"))}
        ]
        if not granted:
            offenders.append(f"NotificationsKey ({service} may publish but not use the key)")
        for lid, statement in granted:
            condition = json.dumps(statement.get("Condition", {}))
            if "aws:Source" in condition:
                offenders.append(f"{lid} {statement.get('Sid')} ({service} under {condition})")
    return offenders


def missing_error_alarms(template: Template) -> list[str]:
    """Alarms to the topic on every function's Errors and Throttles (AWS/Lambda, FunctionName)
    and on the API's 5XXError (AWS/ApiGateway, ApiName and Stage); no alarm reads more than the
    10 metrics CloudWatch allows (CloudWatch user guide, "Create a CloudWatch alarm based on a
    metric math expression")."""
    offenders = []
    watched: dict[str, set[str]] = {"Errors": set(), "Throttles": set()}
    api_watched = set()
    for lid, alarm in resources_of(template, "AWS::CloudWatch::Alarm").items():
        props = properties_of(alarm)
        metrics = [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]
        if "MetricName" in props:
            metrics.append({k: props.get(k) for k in ("Namespace", "MetricName", "Dimensions")})
        if len(metrics) > ALARM_METRIC_LIMIT:
            offenders.append(f"{lid} (reads {len(metrics)} metrics, over {ALARM_METRIC_LIMIT})")
        if props.get("AlarmActions") != [TOPIC]:
            continue
        for metric in metrics:
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions") or []}
            kind = (metric.get("Namespace"), metric.get("MetricName"))
            ref = dims.get("FunctionName")
            if kind[0] == "AWS/Lambda" and kind[1] in watched and isinstance(ref, dict):
                watched[str(kind[1])].add(str(ref.get("Ref")))
            if kind == ("AWS/ApiGateway", "5XXError"):
                api_watched.add(json.dumps(dims, sort_keys=True))
    every_function = set(resources_of(template, *FUNCTION_TYPES))
    offenders += [
        f"{lid} (no alarm on its {name})"
        for name, functions in watched.items()
        for lid in sorted(every_function - functions)
    ]
    apis = resources_of(template, "AWS::Serverless::Api")
    wanted = {
        lid: {
            "ApiName": properties_of(api).get("Name"),
            "Stage": properties_of(api).get("StageName"),
        }
        for lid, api in apis.items()
    }
    offenders += [
        f"{lid} (no alarm on its 5XXError)"
        for lid, dims in wanted.items()
        if json.dumps(dims, sort_keys=True) not in api_watched
    ]
    return offenders


def cost_guard_problems(template: Template) -> list[str]:
    """Glue jobs and the EMR Serverless application are bounded by parameters with safe
    defaults, and an optional AWS::Budgets::Budget notifies the topic, which admits
    budgets.amazonaws.com (Budgets user guide, "Creating an Amazon SNS topic for budget
    notifications")."""
    offenders = _glue_capacity_problems(template) + _emr_capacity_problems(template)
    budgets = resources_of(template, "AWS::Budgets::Budget")
    if not budgets:
        offenders.append("AWS::Budgets::Budget (none)")
    for lid, budget in budgets.items():
        if not budget.get("Condition"):
            offenders.append(f"{lid} (not optional)")
        subscribers = [
            s
            for n in properties_of(budget).get("NotificationsWithSubscribers", [])
            for s in n.get("Subscribers", [])
        ]
        if {"SubscriptionType": "SNS", "Address": TOPIC} not in subscribers:
            offenders.append(f"{lid} (does not notify the notifications topic)")
    publisher = _topic_publishers(template).get("budgets.amazonaws.com")
    if budgets and publisher is None:
        offenders.append("NotificationsTopicPolicy (budgets.amazonaws.com may not publish)")
    return offenders


def _glue_capacity_problems(template: Template) -> list[str]:
    offenders = []
    for lid, job in resources_of(template, "AWS::Glue::Job").items():
        props = properties_of(job)
        runs = props.get("ExecutionProperty", {}).get("MaxConcurrentRuns")
        workers = props.get("NumberOfWorkers", props.get("MaxCapacity"))
        if _parameter(template, runs) is None:
            offenders.append(f"{lid} (MaxConcurrentRuns {runs!r} is not a parameter)")
        runs_default, workers_default = _number(template, runs), _number(template, workers)
        if runs_default is None or workers_default is None:
            offenders.append(f"{lid} (no capacity bound)")
        elif runs_default * workers_default > MAX_DEFAULT_GLUE_DPUS_PER_JOB:
            offenders.append(f"{lid} ({runs_default:g} runs x {workers_default:g} workers)")
    return offenders


def _emr_capacity_problems(template: Template) -> list[str]:
    offenders = []
    for lid, app in resources_of(template, "AWS::EMRServerless::Application").items():
        capacity = properties_of(app).get("MaximumCapacity", {})
        cpu = _sub_text(capacity.get("Cpu")) or ""
        found = re.fullmatch(r"\$\{(\w+)\} vCPU", cpu)
        default = _number(template, {"Ref": found.group(1)}) if found else None
        memory = _sub_text(capacity.get("Memory")) or ""
        if (
            default is None
            or default > MAX_DEFAULT_EMR_VCPU
            or not re.fullmatch(r"\$\{\w+\} GB", memory)
        ):
            offenders.append(f"{lid} (MaximumCapacity {capacity!r} is not a bounded parameter)")
    return offenders


def glue_logs_kept_forever(template: Template) -> list[str]:
    """Glue 5.0 writes to <--custom-logGroup-prefix>/output and /error (Glue developer guide,
    "Logging for AWS Glue jobs"; the default /aws-glue/jobs/output and /error are the account's
    and never expire): every job names the stage's prefix, and the stack declares both groups,
    under the jobs' condition, with LogRetentionDays."""
    offenders = []
    groups = {
        _sub_text(properties_of(g).get("LogGroupName")): (lid, g)
        for lid, g in resources_of(template, "AWS::Logs::LogGroup").items()
    }
    for lid, job in resources_of(template, "AWS::Glue::Job").items():
        prefix = _sub_text(
            properties_of(job).get("DefaultArguments", {}).get("--custom-logGroup-prefix")
        )
        if not prefix:
            offenders.append(f"{lid} (no --custom-logGroup-prefix: logs go to /aws-glue/jobs/*)")
            continue
        for suffix in ("output", "error"):
            found = groups.get(f"{prefix}/{suffix}")
            if found is None:
                offenders.append(f"{lid} (no log group {prefix}/{suffix})")
                continue
            group_lid, group = found
            if properties_of(group).get("RetentionInDays") != {"Ref": "LogRetentionDays"}:
                offenders.append(f"{group_lid} (retention)")
            if group.get("Condition") != job.get("Condition"):
                offenders.append(f"{group_lid} (condition differs from {lid}'s)")
    return offenders


def ses_feedback_problems(template: Template) -> list[str]:
    """Approval emails go out with a configuration set whose event destination sends bounces
    and complaints to the topic (SES developer guide, "Set up an Amazon SNS event destination
    for event publishing"); the sender's ses:SendRawEmail grant covers the configuration set
    (SES: a send with a configuration set is authorised on it too), and the topic admits SES."""
    offenders = []
    sets = resources_of(template, "AWS::SES::ConfigurationSet")
    if not sets:
        return ["AWS::SES::ConfigurationSet (none)"]
    destinations = resources_of(template, "AWS::SES::ConfigurationSetEventDestination")
    for set_lid in sets:
        good = [
            d
            for d in destinations.values()
            if properties_of(d).get("ConfigurationSetName") == {"Ref": set_lid}
            and {"bounce", "complaint"}
            <= set(properties_of(d)["EventDestination"].get("MatchingEventTypes", []))
            and properties_of(d)["EventDestination"].get("Enabled") is True
            and properties_of(d)["EventDestination"].get("SnsDestination", {}).get("TopicARN")
            == TOPIC
        ]
        if not good:
            offenders.append(
                f"{set_lid} (no enabled bounce and complaint destination to the topic)"
            )
        for lid, function in resources_of(template, *FUNCTION_TYPES).items():
            props = properties_of(function)
            variables = props.get("Environment", {}).get("Variables", {})
            if "SENDER_EMAIL" not in variables:
                continue
            if variables.get("SES_CONFIGURATION_SET") != {"Ref": set_lid}:
                offenders.append(f"{lid} (sends without SES_CONFIGURATION_SET)")
            grants = [
                s
                for policy in props.get("Policies", [])
                if isinstance(policy, dict)
                for s in _statements(policy)
                if "ses:SendRawEmail" in _as_list(s.get("Action"))
            ]
            resources = [_sub_text(r) or "" for s in grants for r in _as_list(s.get("Resource"))]
            if not any(f"configuration-set/${{{set_lid}}}" in r for r in resources):
                offenders.append(f"{lid} (ses:SendRawEmail not granted on {set_lid})")
    if "ses.amazonaws.com" not in _topic_publishers(template):
        offenders.append("NotificationsTopicPolicy (ses.amazonaws.com may not publish)")
    return offenders


# The Spark artifacts' pre-flight (statemachines/*.asl.json "Check Spark Artifacts"): a Spark run
# is reached only through one listing of spark_jobs/ whose required list is
# lethe.artifact_sync's, a missing artifact goes to the failure handling of the Spark tasks, and
# the role may list exactly that prefix (Step Functions' AWS SDK integrations: "Learning to use
# AWS service SDK integrations", arn:aws:states:::aws-sdk:s3:listObjectsV2; S3's ListBucket
# with the s3:prefix condition key).
PREFLIGHT = "Check Spark Artifacts"
PREFLIGHT_CHOICE = "Spark Artifacts Found"
SPARK_RESOURCES = (
    "arn:aws:states:::glue:startJobRun",
    "arn:aws:states:::emr-serverless:startJobRun",
)


def _definition(template: Template, lid: str) -> dict[str, Any] | None:
    props = properties_of(template["Resources"][lid])
    if isinstance(props.get("Definition"), dict):
        return dict(props["Definition"])
    uri = props.get("DefinitionUri")
    return json.loads((REPO_ROOT / uri).read_text()) if isinstance(uri, str) else None


def _spark_states(states: dict[str, Any]) -> set[str]:
    """Top-level states that run Spark: a Spark task, or a Map whose iterations run one."""
    found = set()
    for name, state in states.items():
        inner = (state.get("ItemProcessor") or state.get("Iterator") or {}).get("States", {})
        if str(state.get("Resource", "")).startswith(SPARK_RESOURCES) or _spark_states(inner):
            found.add(name)
    return found


def _next_states(state: dict[str, Any]) -> list[str]:
    targets = [state.get("Next"), state.get("Default")]
    targets += [c.get("Next") for c in state.get("Choices", []) + state.get("Catch", [])]
    return [t for t in targets if isinstance(t, str)]


def _reachable(states: dict[str, Any], start: str, avoid: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name == avoid or name not in states:
            continue
        seen.add(name)
        todo.extend(_next_states(states[name]))
    return seen


def _grants_artifact_listing(template: Template, role: Any) -> bool:
    att = role.get("Fn::GetAtt") if isinstance(role, dict) else None
    lid = (att[0] if isinstance(att, list) else str(att).split(".")[0]) if att else None
    if lid not in template["Resources"]:
        return False
    for policy in properties_of(template["Resources"][lid]).get("Policies", []):
        for statement in _statements((policy or {}).get("PolicyDocument")):
            if (
                statement.get("Effect") == "Allow"
                and _as_list(statement.get("Action")) == ["s3:ListBucket"]
                and _as_list(statement.get("Resource"))
                == [{"Fn::GetAtt": ["ArtifactsBucket", "Arn"]}]
                and statement.get("Condition") == {"StringEquals": {"s3:prefix": "spark_jobs/"}}
            ):
                return True
    return False


def spark_preflight_problems(template: Template) -> list[str]:
    offenders = []
    for lid in sorted(resources_of(template, *STATE_MACHINE_TYPES)):
        definition = _definition(template, lid)
        states = (definition or {}).get("States", {})
        spark = _spark_states(states)
        if not spark:
            continue
        if PREFLIGHT not in states:
            offenders.append(f"{lid} (no {PREFLIGHT!r} state)")
            continue
        unchecked = spark & _reachable(states, definition["StartAt"], avoid=PREFLIGHT)  # type: ignore[index]
        if unchecked:
            offenders.append(
                f"{lid} ({', '.join(sorted(unchecked))} reachable without {PREFLIGHT})"
            )
        check = states[PREFLIGHT]
        if check.get("Resource") != "arn:aws:states:::aws-sdk:s3:listObjectsV2" or check.get(
            "Arguments"
        ) != {"Bucket": "${ArtifactsBucket}", "Prefix": "spark_jobs/"}:
            offenders.append(f"{lid} ({PREFLIGHT} is not one listing of spark_jobs/)")
        expression = json.dumps(check.get("Assign", {}))
        scripts = {
            m.group(1)
            for s in states.values()
            for m in [re.search(r"/spark_jobs/(\w+\.py)", json.dumps(s.get("Arguments", {})))]
            if m and str(s.get("Resource", "")).startswith(SPARK_RESOURCES)
        }
        named = set(re.findall(r"'([\w.]+\.(?:py|zip|txt|tar\.gz))'", expression))
        for engine in ENGINE_DEPENDENCIES:
            wanted = scripts | set(ENGINE_DEPENDENCIES[engine])
            if not wanted <= named or f"'${{SparkEngine}}' = '{engine}'" not in expression:
                offenders.append(
                    f"{lid} ({PREFLIGHT} does not ask for {sorted(wanted - named)} on {engine})"
                )
        failure = {c["Next"] for s in spark & set(states) for c in states[s].get("Catch", [])}
        choice = states.get(PREFLIGHT_CHOICE, {})
        on_missing = [
            c.get("Next") for c in choice.get("Choices", []) if "missing_artifacts" in str(c)
        ]
        on_error = [c.get("Next") for c in check.get("Catch", [])]
        if not on_missing or not on_error or not set(on_missing + on_error) <= failure:
            offenders.append(
                f"{lid} (a missing artifact does not reach the failure handling {sorted(failure)})"
            )
        if not _grants_artifact_listing(
            template, properties_of(template["Resources"][lid]).get("Role")
        ):
            offenders.append(f"{lid} (its role may not list s3://<ArtifactsBucket>/spark_jobs/)")
    return offenders


CHECKS: dict[str, Callable[[Template], list[str]]] = {
    "sender_identity_problems": sender_identity_problems,
    "trust_policy_problems": trust_policy_problems,
    "mapping_concurrency_problems": mapping_concurrency_problems,
    "dashboards_without_region": dashboards_without_region,
    "topic_key_problems": topic_key_problems,
    "missing_error_alarms": missing_error_alarms,
    "cost_guard_problems": cost_guard_problems,
    "glue_logs_kept_forever": glue_logs_kept_forever,
    "ses_feedback_problems": ses_feedback_problems,
    "spark_preflight_problems": spark_preflight_problems,
}


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE_PATH)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_template_has_no_first_deploy_defect(template: Template, check: str) -> None:
    offenders = CHECKS[check](template)
    assert offenders == [], f"{check}: {offenders}"


# Each check must be able to fail: break a copy of the template the way the old one was.


def _props(t: Template, lid: str) -> dict[str, Any]:
    props: dict[str, Any] = t["Resources"][lid]["Properties"]
    return props


def _break_identity(t: Template) -> str:
    t["Resources"]["SenderIdentity"].pop("Condition")
    t["Resources"]["SenderIdentity"].pop("DeletionPolicy")
    return "SenderIdentity"


def _break_trust(t: Template) -> str:
    statements = _props(t, "IndexBackfillStateMachineRole")["AssumeRolePolicyDocument"]["Statement"]
    arns = statements[0]["Condition"]["ArnLike"]["aws:SourceArn"]
    statements[0]["Condition"]["ArnLike"]["aws:SourceArn"] = [
        a
        for a in arns
        if not _sub_text(a).endswith("/*")  # type: ignore[union-attr]
    ]
    return "IndexBackfillStateMachineRole"


def _break_mapping(t: Template) -> str:
    _props(t, "ObjectEventsSourceMapping")["ScalingConfig"] = {"MaximumConcurrency": 10}
    return "ObjectEventsSourceMapping"


def _break_dashboard(t: Template) -> str:
    _props(t, "OperationsDashboard")["DashboardName"] = {"Fn::Sub": "lethe-${Stage}"}
    return "OperationsDashboard"


def _break_key(t: Template) -> str:
    for statement in _props(t, "NotificationsKey")["KeyPolicy"]["Statement"]:
        if statement.get("Sid") == "EventBridgePublishes":
            statement["Condition"] = {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
            }
    return "EventBridgePublishes"


def _break_alarms(t: Template) -> str:
    metrics = _props(t, "LambdaErrorsAlarm")["Metrics"]
    victim = next(q for q in metrics if "MetricStat" in q)
    metrics.remove(victim)
    dims = victim["MetricStat"]["Metric"]["Dimensions"]
    return str(dims[0]["Value"]["Ref"])


def _break_cost(t: Template) -> str:
    _props(t, "IngestGlueJob")["ExecutionProperty"] = {"MaxConcurrentRuns": 50}
    _props(t, "IngestGlueJob")["NumberOfWorkers"] = 10
    return "IngestGlueJob"


def _break_glue_logs(t: Template) -> str:
    _props(t, "EraseGlueJob")["DefaultArguments"].pop("--custom-logGroup-prefix")
    return "EraseGlueJob"


def _break_ses(t: Template) -> str:
    _props(t, "ApprovalRequestFunction")["Environment"]["Variables"].pop("SES_CONFIGURATION_SET")
    return "ApprovalRequestFunction"


def _break_preflight(t: Template) -> str:
    props = _props(t, "IngestionStateMachine")
    definition = json.loads((REPO_ROOT / props.pop("DefinitionUri")).read_text())
    definition["States"]["Select Spark Engine"]["Next"] = "Which Spark Engine"
    del definition["States"][PREFLIGHT], definition["States"][PREFLIGHT_CHOICE]
    props["Definition"] = definition
    return "IngestionStateMachine"


BREAKERS: dict[str, Callable[[Template], str]] = {
    "sender_identity_problems": _break_identity,
    "trust_policy_problems": _break_trust,
    "mapping_concurrency_problems": _break_mapping,
    "dashboards_without_region": _break_dashboard,
    "topic_key_problems": _break_key,
    "missing_error_alarms": _break_alarms,
    "cost_guard_problems": _break_cost,
    "glue_logs_kept_forever": _break_glue_logs,
    "ses_feedback_problems": _break_ses,
    "spark_preflight_problems": _break_preflight,
}


def test_every_check_has_a_breaker() -> None:
    assert sorted(BREAKERS) == sorted(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_names_the_resource_a_broken_template_breaks(template: Template, check: str) -> None:
    broken = copy.deepcopy(template)
    culprit = BREAKERS[check](broken)
    offenders = CHECKS[check](broken)
    assert any(culprit in offender for offender in offenders), (check, culprit, offenders)


def test_an_identity_referenced_outside_its_condition_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    variables = _props(broken, "ApprovalRequestFunction")["Environment"]["Variables"]
    variables["SENDER_IDENTITY"] = {"Ref": "SenderIdentity"}
    offenders = sender_identity_problems(broken)
    assert any("ApprovalRequestFunction" in o for o in offenders), offenders


def test_a_condition_on_the_glue_or_api_gateway_trust_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    condition = {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    for lid in ("SparkJobRole", "ApiGatewayCloudWatchRole"):
        for statement in _props(broken, lid)["AssumeRolePolicyDocument"]["Statement"]:
            statement["Condition"] = condition
    offenders = trust_policy_problems(broken)
    assert any("SparkJobRole (glue" in o for o in offenders), offenders
    assert any("ApiGatewayCloudWatchRole (apigateway" in o for o in offenders), offenders


def test_an_alarm_over_ten_metrics_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    metrics = _props(broken, "LambdaThrottlesAlarm")["Metrics"]
    extra = copy.deepcopy(next(q for q in metrics if "MetricStat" in q))
    for n in range(3):
        metrics.insert(0, {**copy.deepcopy(extra), "Id": f"extra{n}"})
    offenders = missing_error_alarms(broken)
    assert any("LambdaThrottlesAlarm (reads" in o for o in offenders), offenders


def test_a_spark_run_that_bypasses_the_preflight_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    props = _props(broken, "ErasureStateMachine")
    definition = json.loads((REPO_ROOT / props.pop("DefinitionUri")).read_text())
    definition["States"]["Select Spark Engine"]["Next"] = "Which Spark Engine"  # skips the check
    props["Definition"] = definition
    offenders = spark_preflight_problems(broken)
    assert any("ErasureStateMachine (Run Erase Job On" in o for o in offenders), offenders


def test_a_preflight_that_forgets_the_emr_environment_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    props = _props(broken, "IndexReconcileStateMachine")
    text = (REPO_ROOT / props.pop("DefinitionUri")).read_text()
    props["Definition"] = json.loads(text.replace("'pyspark_env.tar.gz'", "'x'"))
    offenders = spark_preflight_problems(broken)
    assert any("['pyspark_env.tar.gz'] on EMR_SERVERLESS" in o for o in offenders), offenders


def test_a_role_without_the_artifact_listing_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    for policy in _props(broken, "IndexBackfillStateMachineRole")["Policies"]:
        document = (policy or {}).get("PolicyDocument", {})
        document["Statement"] = [
            s for s in _statements(document) if s.get("Sid") != "CheckSparkArtifacts"
        ]
    offenders = spark_preflight_problems(broken)
    assert any("IndexBackfillStateMachine (its role" in o for o in offenders), offenders


# ------------------------------------------------------------------ the shared layer's pins


def _closure(direct: dict[str, set[str]]) -> dict[str, str]:
    """name -> installed version of every package pip installs for `direct` (name -> extras),
    read from the installed distributions' metadata with the Lambda runtime's markers."""
    found: dict[str, set[str]] = {}
    todo = list(direct.items())
    while todo:
        name, extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found and extras <= found[key]:
            continue
        found[key] = found.get(key, set()) | extras
        for line in metadata.distribution(key).requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            wanted = marker is None or any(
                marker.evaluate({**LAMBDA_MARKERS, "extra": extra}) for extra in found[key] | {""}
            )
            if wanted:
                todo.append((requirement.name, set(requirement.extras)))
    return {key: metadata.version(key) for key in found}


def layer_pin_problems(requirements_text: str, lock_text: str) -> list[str]:
    """The shared layer's requirements pin every package of their closure, each at the lock's
    version: `sam build` then installs exactly what the Lambda tier tests."""
    pins = requirement_pins(requirements_text)
    lock = requirement_pins(lock_text)
    direct: dict[str, set[str]] = {}
    for line in requirements_text.splitlines():
        text = line.split("#", 1)[0].strip()
        if text and not line.startswith("# ") and "==" in text:
            requirement = Requirement(text)
            direct[requirement.name] = set(requirement.extras)
    problems = []
    for name, version in pins.items():
        if lock.get(name) != version:
            problems.append(f"{name}=={version}: {LAMBDA_LOCK} has {lock.get(name)}")
    closure = _closure({name: extras for name, extras in direct.items()})
    for name, installed in sorted(closure.items()):
        if name not in pins:
            problems.append(f"{name} (installed with the layer, not pinned)")
        elif installed != pins[name]:
            problems.append(f"{name}: metadata read from {installed}, pinned {pins[name]}")
    return problems


def test_the_shared_layer_pins_its_whole_closure_from_the_lock() -> None:
    text = (REPO_ROOT / "layers/shared/requirements.txt").read_text()
    problems = layer_pin_problems(text, (REPO_ROOT / LAMBDA_LOCK).read_text())
    assert problems == [], problems


def test_a_transitive_package_left_unpinned_is_named() -> None:
    text = (REPO_ROOT / "layers/shared/requirements.txt").read_text()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("urllib3=="))
    problems = layer_pin_problems(without, (REPO_ROOT / LAMBDA_LOCK).read_text())
    assert any(p.startswith("urllib3 (") for p in problems), problems


# ------------------------------------------------------------------ the sending side, the docs


class _RecordingSes:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def send_raw_email(self, **kwargs: Any) -> dict[str, str]:
        self.calls.append(kwargs)
        return {"MessageId": "m-1"}


def test_the_mailer_sends_with_the_configuration_set() -> None:
    client = _RecordingSes()
    SesMailer(client, "lethe@example.com", "lethe-dev").send(
        "approver@example.com", "subject", "text", "<p>html</p>"
    )
    assert client.calls[0]["ConfigurationSetName"] == "lethe-dev"
    assert client.calls[0]["Destinations"] == ["approver@example.com"]


def test_the_mailer_without_a_configuration_set_sends_without_one() -> None:
    client = _RecordingSes()
    SesMailer(client, "lethe@example.com").send("a@example.com", "s", "t", "<p>h</p>")
    assert "ConfigurationSetName" not in client.calls[0]


def test_limits_no_longer_says_api_execution_logs_are_kept_forever(template: Template) -> None:
    groups = [
        _sub_text(properties_of(g).get("LogGroupName")) or ""
        for g in resources_of(template, "AWS::Logs::LogGroup").values()
    ]
    assert any(g.startswith("API-Gateway-Execution-Logs_") for g in groups)
    limits = (REPO_ROOT / "docs/LIMITS.md").read_text()
    for line in limits.splitlines():
        assert not ("execution log" in line.lower() and "forever" in line.lower()), line


def test_the_deploy_checklist_names_the_quotas_and_parameters() -> None:
    deploy = (REPO_ROOT / "docs/DEPLOY.md").read_text()
    for needed in (
        "Concurrent executions",
        "ObjectEventsMaxConcurrency",
        "CreateSenderIdentity",
        "SparkMaxVcpu",
        "GlueMaxConcurrentRuns",
        "MonthlyBudgetUsd",
    ):
        assert needed in deploy, needed
