"""What template.yaml must keep so that `sam build && sam deploy --guided` works on a fresh
account (docs/DEPLOY.md): each check is a function that returns the offending resources, run
against the real template, and run against a copy broken on purpose to show that it can fail.
"""

from __future__ import annotations

import copy
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lethe.localcloud.template import REPO_ROOT, TEMPLATE_PATH, load_template, translate
from tests.unit.template_rules import (
    LAMBDA_ARCHITECTURES,
    LAMBDA_RUNTIME,
    NO_VALUE,
    Template,
    every_branch,
    first_of,
    function_settings,
    properties_of,
    requirement_pins,
    resources_of,
)

pytestmark = pytest.mark.unit

LOG_RETENTION = {"Ref": "LogRetentionDays"}
AWS_MANAGED_ALIASES = ("alias/aws/sns", "alias/aws/sqs")
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
LAYER_TYPES = ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion")
# The Lambda test tier's lock: what `make lambda-tests` installs on the runtime's Python.
LAMBDA_LOCK = "requirements/lambda.lock"
STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
RETAINED_TYPES = (
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
    "AWS::DynamoDB::GlobalTable",
    "AWS::SecretsManager::Secret",
)


# ---------------------------------------------------------------------------------- helpers


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _is_true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


# ---------------------------------------------------------------------------------- checks


def roles_with_names(template: Template) -> list[str]:
    """A named IAM role needs CAPABILITY_NAMED_IAM and collides across regions and stacks."""
    return [
        lid
        for lid, resource in resources_of(template, "AWS::IAM::Role").items()
        if "RoleName" in properties_of(resource)
    ]


def aws_managed_sns_sqs_keys(template: Template) -> list[str]:
    """alias/aws/sns and alias/aws/sqs cannot be granted to CloudWatch or EventBridge."""
    return [
        lid
        for lid, resource in template.get("Resources", {}).items()
        if any(s.strip() in AWS_MANAGED_ALIASES for s in _strings(resource))
    ]


def unencrypted_queues(template: Template) -> list[str]:
    offenders = []
    for lid, resource in resources_of(template, "AWS::SQS::Queue").items():
        for truth, props in every_branch(properties_of(resource)):
            key = props.get("KmsMasterKeyId")
            customer_key = key is not None and not (
                isinstance(key, str) and key.startswith("alias/aws/")
            )
            if not (_is_true(props.get("SqsManagedSseEnabled")) or customer_key):
                offenders.append(f"{lid} (conditions {truth})")
    return offenders


def topics_without_customer_key(template: Template) -> list[str]:
    """Every topic is encrypted in every branch, never with an AWS managed key, and the key
    the template creates for it rotates and admits CloudWatch and EventBridge."""
    keys = resources_of(template, "AWS::KMS::Key")
    offenders = []
    for lid, resource in resources_of(template, "AWS::SNS::Topic").items():
        for truth, props in every_branch(properties_of(resource)):
            key = props.get("KmsMasterKeyId")
            if key is None or (isinstance(key, str) and key.startswith("alias/aws/")):
                offenders.append(f"{lid} (conditions {truth}): no customer managed key")
                continue
            target = key.get("Fn::GetAtt", [None])[0] if isinstance(key, dict) else None
            if target is None and isinstance(key, dict):
                target = key.get("Ref")
            if target in keys and not _key_serves_publishers(keys[target]):
                offenders.append(f"{lid}: key {target} lacks rotation or publisher grants")
    return offenders


def _key_serves_publishers(key: dict[str, Any]) -> bool:
    props = properties_of(key)
    if not _is_true(props.get("EnableKeyRotation")):
        return False
    statements = props.get("KeyPolicy", {}).get("Statement", [])
    # CloudWatch alarms under aws:SourceAccount; EventBridge without any source condition, as
    # AWS documents it for encrypted SNS targets (a condition it does not meet drops the
    # message: issue 21, tests/unit/test_deploy_defects.py::topic_key_problems).
    for service, account_condition in (
        ("cloudwatch.amazonaws.com", True),
        ("events.amazonaws.com", False),
    ):
        granted = [
            s
            for s in statements
            if s.get("Effect") == "Allow"
            and service in _as_list(s.get("Principal", {}).get("Service"))
            and ("aws:SourceAccount" in str(s.get("Condition", {}))) == account_condition
            and {"kms:GenerateDataKey*", "kms:Decrypt"} <= set(_as_list(s.get("Action")))
        ]
        if not granted:
            return False
    return True


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def unconditional_reserved_concurrency(template: Template) -> list[str]:
    """A fresh account may have too little concurrency to reserve any: reserve only on demand."""
    offenders = []
    candidates = dict(resources_of(template, *FUNCTION_TYPES))
    candidates["Globals.Function"] = {"Properties": template.get("Globals", {}).get("Function")}
    for lid, resource in candidates.items():
        value = properties_of(resource).get("ReservedConcurrentExecutions")
        if value is None:
            continue
        branches = value.get("Fn::If") if isinstance(value, dict) else None
        if not (branches and branches[0] == "HasReservedConcurrency" and branches[2] == NO_VALUE):
            offenders.append(lid)
    condition = template.get("Conditions", {}).get("HasReservedConcurrency")
    if condition != {"Fn::Not": [{"Fn::Equals": [{"Ref": "ReservedConcurrency"}, 0]}]}:
        offenders.append("Conditions.HasReservedConcurrency (must be ReservedConcurrency != 0)")
    return offenders


def mappings_above_reserved_concurrency(template: Template) -> list[str]:
    """An SQS mapping's MaximumConcurrency stays below every reserved concurrency the
    parameter allows, so Lambda never throttles a batch (a throttled batch still counts a
    receive towards the queue's maxReceiveCount)."""
    allowed = template["Parameters"].get("ReservedConcurrency", {}).get("AllowedValues", [])
    reservable = [int(v) for v in allowed if int(v) > 0]
    offenders = []
    for lid, resource in resources_of(template, "AWS::Lambda::EventSourceMapping").items():
        maximum = properties_of(resource).get("ScalingConfig", {}).get("MaximumConcurrency")
        if maximum is None:
            continue
        if isinstance(maximum, dict) and "Ref" in maximum:  # a parameter: the most it allows
            maximum = template["Parameters"].get(maximum["Ref"], {}).get("MaxValue", 10**6)
        if not reservable or int(maximum) >= min(reservable):
            offenders.append(f"{lid} (MaximumConcurrency {maximum}, reservable {reservable})")
    return offenders


def functions_off_the_lambda_runtime(template: Template) -> list[str]:
    """Every function runs on LAMBDA_RUNTIME on arm64 (its own setting or Globals.Function)."""
    offenders = []
    for lid in resources_of(template, *FUNCTION_TYPES):
        settings = function_settings(template, lid)
        if settings.get("Runtime") != LAMBDA_RUNTIME:
            offenders.append(f"{lid}: Runtime {settings.get('Runtime')!r}, not {LAMBDA_RUNTIME}")
        architectures = settings.get("Architectures")
        if architectures != LAMBDA_ARCHITECTURES:
            offenders.append(f"{lid}: Architectures {architectures!r}, not {LAMBDA_ARCHITECTURES}")
    return offenders


def layers_off_the_lambda_runtime(template: Template) -> list[str]:
    """Every layer is built for LAMBDA_RUNTIME on arm64 and declares only that runtime and
    architecture (a layer of another runtime or architecture would not load its binaries)."""
    offenders = []
    for lid, resource in resources_of(template, *LAYER_TYPES).items():
        props = properties_of(resource)
        expected: dict[str, Any] = {
            "CompatibleRuntimes": [LAMBDA_RUNTIME],
            "CompatibleArchitectures": LAMBDA_ARCHITECTURES,
        }
        if resource["Type"] == "AWS::Serverless::LayerVersion":
            metadata = resource.get("Metadata") or {}
            props = {**props, **{k: metadata.get(k) for k in ("BuildMethod", "BuildArchitecture")}}
            expected |= {
                "BuildMethod": LAMBDA_RUNTIME,
                "BuildArchitecture": LAMBDA_ARCHITECTURES[0],
            }
        for key, value in expected.items():
            if props.get(key) != value:
                offenders.append(f"{lid}: {key} {props.get(key)!r}, not {value!r}")
    return offenders


def layer_pins_untested(template: Template, root: Path) -> list[str]:
    """Each layer's requirements.txt pins exactly what the Lambda test tier installs
    (requirements/lambda.lock, frozen from a venv of the runtime's Python), and the Makefile
    runs that tier, and sam build, with the runtime's Python: so the layer's pyarrow is a
    release with wheels for the runtime's Python, tested there."""
    problems = []
    lock_path = root / LAMBDA_LOCK
    lock = requirement_pins(lock_path.read_text()) if lock_path.exists() else {}
    if not lock:
        problems.append(f"{LAMBDA_LOCK}: missing or empty")
    for lid, resource in resources_of(template, "AWS::Serverless::LayerVersion").items():
        content = properties_of(resource).get("ContentUri")
        requirements = root / str(content) / "requirements.txt"
        if not isinstance(content, str) or not requirements.exists():
            continue
        for name, version in requirement_pins(requirements.read_text()).items():
            if lock.get(name) != version:
                problems.append(
                    f"{lid}: {content}requirements.txt pins {name}=={version},"
                    f" {LAMBDA_LOCK} has {lock.get(name)}"
                )
    makefile = (root / "Makefile").read_text()
    minor = re.search(r"^LAMBDA_PYTHON_VERSION := (\S+)$", makefile, re.MULTILINE)
    if minor is None or f"python{minor.group(1)}" != LAMBDA_RUNTIME:
        problems.append(f"Makefile: LAMBDA_PYTHON_VERSION is not {LAMBDA_RUNTIME}'s")
    machine = re.search(r"^LAMBDA_MACHINE := (\S+)$", makefile, re.MULTILINE)
    if machine is None or {"aarch64": "arm64"}.get(machine.group(1)) != LAMBDA_ARCHITECTURES[0]:
        problems.append(f"Makefile: LAMBDA_MACHINE is not that of {LAMBDA_ARCHITECTURES[0]}")
    return problems


def functions_without_log_group(template: Template) -> list[str]:
    """Every function logs (LoggingConfig.LogGroup) to a log group of this template that keeps
    LogRetentionDays, its own, never named /aws/lambda/...: Lambda creates that name itself for
    a function without LoggingConfig, so declaring it fails on a stack whose functions ran.
    JSON format, and an application log level equal to Powertools' (Lambda drops JSON lines
    below it). The roles SAM generates may write to it (AWSLambdaBasicExecutionRole)."""
    groups = resources_of(template, "AWS::Logs::LogGroup")
    globals_config = template.get("Globals", {}).get("Function", {}).get("LoggingConfig") or {}
    variables = template.get("Globals", {}).get("Function", {}).get("Environment", {})
    powertools_level = variables.get("Variables", {}).get("POWERTOOLS_LOG_LEVEL")
    translated = _translated(template)
    offenders = []
    users: dict[str, list[str]] = {}
    for lid in resources_of(template, *FUNCTION_TYPES):
        config = {
            **globals_config,
            **(properties_of(template["Resources"][lid]).get("LoggingConfig") or {}),
        }
        target = config.get("LogGroup")
        group = target.get("Ref") if isinstance(target, dict) else None
        if group not in groups:
            offenders.append(
                f"{lid}: LoggingConfig.LogGroup {target!r} is no log group of this template"
            )
            continue
        users.setdefault(group, []).append(lid)
        props = properties_of(groups[group])
        if props.get("RetentionInDays") != LOG_RETENTION:
            offenders.append(f"{lid}: its log group's RetentionInDays is not LogRetentionDays")
        if "/aws/lambda/" in "".join(_strings(props.get("LogGroupName"))):
            offenders.append(f"{lid}: its log group is named like the one Lambda creates itself")
        if (
            config.get("LogFormat") != "JSON"
            or config.get("ApplicationLogLevel") != powertools_level
        ):
            offenders.append(f"{lid}: LoggingConfig is not JSON at POWERTOOLS_LOG_LEVEL")
        role = function_settings(translated, lid).get("Role", {})
        role_id = role.get("Fn::GetAtt", [None])[0] if isinstance(role, dict) else None
        managed = str(
            properties_of(translated["Resources"].get(str(role_id), {})).get("ManagedPolicyArns")
        )
        if "AWSLambdaBasicExecutionRole" not in managed:
            offenders.append(
                f"{lid}: role {role_id} lacks AWSLambdaBasicExecutionRole (log writes)"
            )
    offenders += [
        f"{', '.join(sorted(lids))}: share log group {group}"
        for group, lids in users.items()
        if len(lids) > 1
    ]
    return offenders


def api_stages_without_retained_logs(template: Template) -> list[str]:
    """Each REST API stage that logs executions has its execution log group
    (API-Gateway-Execution-Logs_<api id>/<stage>) declared with LogRetentionDays and created
    before the stage (else API Gateway creates it, kept forever, and the declared one fails);
    its access logs go to a log group of this template with LogRetentionDays."""
    translated = _translated(template)
    groups = resources_of(translated, "AWS::Logs::LogGroup")
    offenders = []
    for stage, resource in resources_of(translated, "AWS::ApiGateway::Stage").items():
        props = properties_of(resource)
        api = props.get("RestApiId", {}).get("Ref")
        stage_name = props.get("StageName", {})
        stage_ref = stage_name.get("Ref") if isinstance(stage_name, dict) else None
        name = {"Fn::Sub": f"API-Gateway-Execution-Logs_${{{api}}}/${{{stage_ref}}}"}
        logging = [
            m for m in props.get("MethodSettings", []) if m.get("LoggingLevel", "OFF") != "OFF"
        ]
        execution = [g for g, r in groups.items() if properties_of(r).get("LogGroupName") == name]
        if logging and not execution:
            offenders.append(f"{stage}: no AWS::Logs::LogGroup named {name['Fn::Sub']}")
        for group in execution:
            if properties_of(groups[group]).get("RetentionInDays") != LOG_RETENTION:
                offenders.append(f"{stage}: execution log group {group} lacks LogRetentionDays")
            if group not in _dependencies(translated, stage):
                offenders.append(f"{stage}: created without waiting for {group}")
        arn = props.get("AccessLogSetting", {}).get("DestinationArn")
        access = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
        if arn is None or access not in groups:
            offenders.append(f"{stage}: access logs {arn!r} go to no log group of this template")
        elif properties_of(groups[access]).get("RetentionInDays") != LOG_RETENTION:
            offenders.append(f"{stage}: access log group {access} lacks LogRetentionDays")
    return offenders


def state_machines_without_retained_logs(template: Template) -> list[str]:
    groups = resources_of(template, "AWS::Logs::LogGroup")
    offenders = []
    for lid, resource in resources_of(template, *STATE_MACHINE_TYPES).items():
        props = properties_of(resource)
        logging = props.get("Logging") or props.get("LoggingConfiguration") or {}
        destinations = logging.get("Destinations", [])
        if not destinations:
            offenders.append(f"{lid}: no logging destination")
        for destination in destinations:
            arn = destination.get("CloudWatchLogsLogGroup", {}).get("LogGroupArn", {})
            group = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
            if group not in groups:
                offenders.append(f"{lid}: destination {arn} is not a log group of this template")
            elif properties_of(groups[group]).get("RetentionInDays") != LOG_RETENTION:
                offenders.append(f"{lid}: log group {group} does not keep LogRetentionDays")
    return offenders


def log_groups_with_fixed_retention(template: Template) -> list[str]:
    return [
        lid
        for lid, resource in resources_of(template, "AWS::Logs::LogGroup").items()
        if properties_of(resource).get("RetentionInDays") != LOG_RETENTION
    ]


def _signs(resource: dict[str, Any]) -> bool:
    """A KMS key that signs (erasure certificates): what it signed must stay verifiable."""
    return bool(properties_of(resource).get("KeyUsage") == "SIGN_VERIFY")


def data_resources_not_retained(template: Template) -> list[str]:
    keys = {
        lid: resource
        for lid, resource in resources_of(template, "AWS::KMS::Key").items()
        if _signs(resource)
    }
    return [
        f"{lid} ({resource['Type']})"
        for lid, resource in {**resources_of(template, *RETAINED_TYPES), **keys}.items()
        if resource.get("DeletionPolicy") != "Retain"
        or resource.get("UpdateReplacePolicy") != "Retain"
    ]


def unvalidated_parameters(template: Template) -> list[str]:
    offenders = []
    for name, parameter in template.get("Parameters", {}).items():
        if not str(parameter.get("Description", "")).strip():
            offenders.append(f"{name}: no Description")
        validated = "AllowedValues" in parameter or "AllowedPattern" in parameter
        if parameter.get("Type") == "Number":
            validated = "AllowedValues" in parameter or (
                "MinValue" in parameter and "MaxValue" in parameter
            )
        if not validated:
            offenders.append(f"{name}: no AllowedValues, AllowedPattern or MinValue/MaxValue")
    return offenders


def api_gateway_account_problems(template: Template) -> list[str]:
    """The account's CloudWatch role, created under CreateApiGatewayAccountRole, before the
    stage whose method settings log to CloudWatch (checked on the SAM-translated template)."""
    accounts = resources_of(template, "AWS::ApiGateway::Account")
    if not accounts:
        return ["no AWS::ApiGateway::Account"]
    problems = []
    conditions = template.get("Conditions", {})
    for lid, account in accounts.items():
        condition = account.get("Condition")
        if condition is None or "CreateApiGatewayAccountRole" not in str(conditions.get(condition)):
            problems.append(f"{lid}: not under a condition on CreateApiGatewayAccountRole")
        role_arn = properties_of(account).get("CloudWatchRoleArn", {})
        role_id = role_arn.get("Fn::GetAtt", [None])[0] if isinstance(role_arn, dict) else None
        role = template["Resources"].get(str(role_id), {})
        role_props = properties_of(role)
        if role.get("Condition") != condition:
            problems.append(f"{lid}: its role {role_id} is not under the same condition")
        managed = str(role_props.get("ManagedPolicyArns"))
        trust = str(role_props.get("AssumeRolePolicyDocument"))
        if "AmazonAPIGatewayPushToCloudWatchLogs" not in managed:
            problems.append(f"{lid}: role {role_id} lacks AmazonAPIGatewayPushToCloudWatchLogs")
        if "apigateway.amazonaws.com" not in trust:
            problems.append(f"{lid}: role {role_id} is not assumable by API Gateway")
    translated = _translated(template)
    for stage in resources_of(translated, "AWS::ApiGateway::Stage"):
        before = _dependencies(translated, stage)
        missing = sorted(set(accounts) - before)
        if missing:
            problems.append(f"{stage}: created without waiting for {', '.join(missing)}")
    return problems


def _translated(template: Template) -> Template:
    parameters = {"ApproverEmails": "a@example.com", "SenderEmail": "s@example.com"}
    return translate(template, parameters)


def _references(value: Any) -> set[str]:
    if isinstance(value, dict):
        found: set[str] = set()
        if "Ref" in value:
            found.add(str(value["Ref"]))
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            found.add(str(target[0] if isinstance(target, list) else target.split(".")[0]))
        if "Fn::Sub" in value:
            text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
            found |= {part.split("}")[0].split(".")[0] for part in text.split("${")[1:]}
        for item in value.values():
            found |= _references(item)
        return found
    if isinstance(value, list):
        return set().union(*(_references(item) for item in value)) if value else set()
    return set()


def _dependencies(template: Template, logical_id: str) -> set[str]:
    """Everything CloudFormation creates before logical_id (Ref, GetAtt, Sub, DependsOn)."""
    resources = template["Resources"]
    seen: set[str] = set()
    pending = [logical_id]
    while pending:
        resource = resources[pending.pop()]
        depends = resource.get("DependsOn", [])
        direct = _references({k: v for k, v in resource.items() if k != "DependsOn"})
        direct |= set([depends] if isinstance(depends, str) else depends)
        for name in direct & set(resources) - seen:
            seen.add(name)
            pending.append(name)
    return seen


def alert_subscription_problems(template: Template) -> list[str]:
    parameter = template.get("Parameters", {}).get("AlertEmail")
    if parameter is None or parameter.get("Default") != "":
        return ["Parameters.AlertEmail: missing or not empty by default"]
    problems = []
    subscriptions = [
        (lid, resource)
        for lid, resource in resources_of(template, "AWS::SNS::Subscription").items()
        if properties_of(resource).get("Endpoint") == {"Ref": "AlertEmail"}
    ]
    if not subscriptions:
        problems.append("no AWS::SNS::Subscription to Ref AlertEmail")
    for lid, resource in subscriptions:
        if properties_of(resource).get("Protocol") != "email" or "Condition" not in resource:
            problems.append(f"{lid}: not an email subscription under a condition")
    policies = resources_of(template, "AWS::SNS::TopicPolicy").values()
    statements = [s for p in policies for s in properties_of(p)["PolicyDocument"]["Statement"]]
    for service in ("cloudwatch.amazonaws.com", "events.amazonaws.com"):
        allowed = [
            s
            for s in statements
            if s.get("Effect") == "Allow"
            and service in _as_list(s.get("Principal", {}).get("Service"))
            and "sns:Publish" in _as_list(s.get("Action"))
            and "aws:SourceAccount" in str(s.get("Condition"))
            and "aws:SourceArn" in str(s.get("Condition"))
        ]
        if not allowed:
            problems.append(f"no topic policy lets {service} publish (SourceAccount, SourceArn)")
    return problems


def samconfig_problems(template: Template, path: Path) -> list[str]:
    if not path.exists():
        return [f"{path.name}: missing"]
    config = tomllib.loads(path.read_text())
    problems = []
    deploy = config.get("default", {}).get("deploy", {}).get("parameters", {})
    if _as_list(deploy.get("capabilities")) != ["CAPABILITY_IAM"]:
        problems.append(f"{path.name}: deploy capabilities {deploy.get('capabilities')!r}")
    if deploy.get("resolve_s3") is not True:
        problems.append(f"{path.name}: deploy resolve_s3 is not true")
    overrides = deploy.get("parameter_overrides", "")
    items = overrides if isinstance(overrides, list) else shlex.split(overrides)
    for item in items:
        name = item.split("=", 1)[0]
        if name not in template.get("Parameters", {}):
            problems.append(f"{path.name}: parameter_overrides names unknown parameter {name}")
    return problems


CHECKS: dict[str, Callable[[Template], list[str]]] = {
    "roles_with_names": roles_with_names,
    "aws_managed_sns_sqs_keys": aws_managed_sns_sqs_keys,
    "unencrypted_queues": unencrypted_queues,
    "topics_without_customer_key": topics_without_customer_key,
    "unconditional_reserved_concurrency": unconditional_reserved_concurrency,
    "mappings_above_reserved_concurrency": mappings_above_reserved_concurrency,
    "functions_off_the_lambda_runtime": functions_off_the_lambda_runtime,
    "layers_off_the_lambda_runtime": layers_off_the_lambda_runtime,
    "functions_without_log_group": functions_without_log_group,
    "api_stages_without_retained_logs": api_stages_without_retained_logs,
    "state_machines_without_retained_logs": state_machines_without_retained_logs,
    "log_groups_with_fixed_retention": log_groups_with_fixed_retention,
    "data_resources_not_retained": data_resources_not_retained,
    "unvalidated_parameters": unvalidated_parameters,
    "api_gateway_account_problems": api_gateway_account_problems,
    "alert_subscription_problems": alert_subscription_problems,
}


# ---------------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE_PATH)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_template_keeps_the_deploy_policy(template: Template, check: str) -> None:
    offenders = CHECKS[check](template)
    assert offenders == [], f"{check}: {offenders}"


def test_layers_pin_what_the_lambda_tier_tests(template: Template) -> None:
    problems = layer_pins_untested(template, REPO_ROOT)
    assert problems == [], problems


def test_samconfig_deploys_with_capability_iam(template: Template) -> None:
    problems = samconfig_problems(template, REPO_ROOT / "samconfig.toml")
    assert problems == [], problems


# Each check must be able to fail: break a copy of the template the way the old one was.


def _set(template: Template, lid: str, **props: Any) -> None:
    template["Resources"][lid]["Properties"].update(props)


def _break_roles(t: Template) -> str:
    lid = first_of(t, "AWS::IAM::Role")
    _set(t, lid, RoleName="fixed")
    return lid


def _break_aws_keys(t: Template) -> str:
    lid = first_of(t, "AWS::SNS::Topic")
    _set(t, lid, KmsMasterKeyId={"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, "alias/aws/sns"]})
    return lid


def _break_queues(t: Template) -> str:
    lid = first_of(t, "AWS::SQS::Queue")
    t["Resources"][lid]["Properties"].pop("SqsManagedSseEnabled", None)
    return lid


def _break_topics(t: Template) -> str:
    lid = first_of(t, "AWS::SNS::Topic")
    _set(t, lid, KmsMasterKeyId={"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, NO_VALUE]})
    return lid


def _break_reserved(t: Template) -> str:
    lid = first_of(t, *FUNCTION_TYPES)
    _set(t, lid, ReservedConcurrentExecutions=50)
    return lid


def _break_mappings(t: Template) -> str:
    lid = first_of(t, "AWS::Lambda::EventSourceMapping")
    _set(t, lid, ScalingConfig={"MaximumConcurrency": 1000})
    return lid


def _break_runtime(t: Template) -> str:
    t["Globals"]["Function"]["Runtime"] = "python3.11"
    return first_of(t, *FUNCTION_TYPES)


def _break_layers(t: Template) -> str:
    lid = first_of(t, *LAYER_TYPES)
    _set(t, lid, CompatibleRuntimes=["python3.11"])
    return lid


def _break_function_logs(t: Template) -> str:
    lid = first_of(t, *FUNCTION_TYPES)
    t["Resources"][lid]["Properties"].pop("LoggingConfig")
    return lid


def _break_api_logs(t: Template) -> str:
    t["Resources"]["LetheApi"]["Properties"].pop("Tags")  # the stage no longer waits for it
    return "ApiExecutionLogGroup"


def _break_state_machine_logs(t: Template) -> str:
    lid = first_of(t, *STATE_MACHINE_TYPES)
    arn = t["Resources"][lid]["Properties"]["Logging"]["Destinations"][0]
    group = arn["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    _set(t, group, RetentionInDays=365)
    return lid


def _break_log_groups(t: Template) -> str:
    lid = first_of(t, "AWS::Logs::LogGroup")
    _set(t, lid, RetentionInDays=365)
    return lid


def _break_retention(t: Template) -> str:
    lid = first_of(t, "AWS::SecretsManager::Secret")
    del t["Resources"][lid]["UpdateReplacePolicy"]
    return lid


def _break_parameters(t: Template) -> str:
    t["Parameters"]["IgnoredObjectRetentionDays"].pop("MaxValue", None)
    return "IgnoredObjectRetentionDays"


def _break_api_account(t: Template) -> str:
    for lid in resources_of(t, "AWS::ApiGateway::Account"):
        t["Resources"][lid].pop("Condition", None)
    return "ApiGatewayAccount"


def _break_alerts(t: Template) -> str:
    for lid in resources_of(t, "AWS::SNS::TopicPolicy"):
        for statement in t["Resources"][lid]["Properties"]["PolicyDocument"]["Statement"]:
            statement.pop("Condition", None)
    return "events.amazonaws.com"


BREAKERS: dict[str, Callable[[Template], str]] = {
    "roles_with_names": _break_roles,
    "aws_managed_sns_sqs_keys": _break_aws_keys,
    "unencrypted_queues": _break_queues,
    "topics_without_customer_key": _break_topics,
    "unconditional_reserved_concurrency": _break_reserved,
    "mappings_above_reserved_concurrency": _break_mappings,
    "functions_off_the_lambda_runtime": _break_runtime,
    "layers_off_the_lambda_runtime": _break_layers,
    "functions_without_log_group": _break_function_logs,
    "api_stages_without_retained_logs": _break_api_logs,
    "state_machines_without_retained_logs": _break_state_machine_logs,
    "log_groups_with_fixed_retention": _break_log_groups,
    "data_resources_not_retained": _break_retention,
    "unvalidated_parameters": _break_parameters,
    "api_gateway_account_problems": _break_api_account,
    "alert_subscription_problems": _break_alerts,
}


def test_every_check_has_a_breaker() -> None:
    assert sorted(BREAKERS) == sorted(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_names_the_resource_a_broken_template_breaks(template: Template, check: str) -> None:
    broken = copy.deepcopy(template)
    culprit = BREAKERS[check](broken)
    offenders = CHECKS[check](broken)
    assert any(culprit in offender for offender in offenders), (check, culprit, offenders)


def test_samconfig_check_names_unknown_parameters(template: Template, tmp_path: Path) -> None:
    path = tmp_path / "samconfig.toml"
    path.write_text(
        'version = 0.1\n[default.deploy.parameters]\ncapabilities = "CAPABILITY_NAMED_IAM"\n'
        'parameter_overrides = "Stage=dev NoSuchParameter=1"\n'
    )
    problems = samconfig_problems(template, path)
    assert any("NoSuchParameter" in p for p in problems), problems
    assert any("capabilities" in p for p in problems), problems
    assert any("resolve_s3" in p for p in problems), problems


def test_a_function_back_on_x86_64_or_its_own_runtime_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    first, second = sorted(resources_of(broken, *FUNCTION_TYPES))[:2]
    _set(broken, first, Architectures=["x86_64"])
    _set(broken, second, Runtime="python3.12")
    assert sorted(functions_off_the_lambda_runtime(broken)) == [
        f"{first}: Architectures ['x86_64'], not ['arm64']",
        f"{second}: Runtime 'python3.12', not python3.13",
    ]


def test_a_layer_built_for_x86_64_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    lid = first_of(broken, "AWS::Serverless::LayerVersion")
    broken["Resources"][lid]["Metadata"].pop("BuildArchitecture")
    assert layers_off_the_lambda_runtime(broken) == [f"{lid}: BuildArchitecture None, not 'arm64'"]


def test_a_function_logging_to_lambdas_own_group_or_below_powertools_is_named(
    template: Template,
) -> None:
    broken = copy.deepcopy(template)
    first, second, third = sorted(resources_of(broken, *FUNCTION_TYPES))[:3]
    group = broken["Resources"][first]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    _set(broken, group, LogGroupName={"Fn::Sub": f"/aws/lambda/${{{first}}}"})
    broken["Resources"][second]["Properties"]["LoggingConfig"]["ApplicationLogLevel"] = "WARN"
    broken["Resources"][third]["Properties"]["LoggingConfig"]["LogGroup"] = {"Ref": group}
    assert sorted(functions_without_log_group(broken)) == sorted(
        [
            f"{first}: its log group is named like the one Lambda creates itself",
            f"{third}: its log group is named like the one Lambda creates itself",
            f"{second}: LoggingConfig is not JSON at POWERTOOLS_LOG_LEVEL",
            f"{first}, {third}: share log group {group}",
        ]
    )


def test_an_api_stage_without_its_execution_log_group_is_named(template: Template) -> None:
    broken = copy.deepcopy(template)
    del broken["Resources"]["ApiExecutionLogGroup"]
    broken["Resources"]["LetheApi"]["Properties"].pop("Tags")
    (problem,) = api_stages_without_retained_logs(broken)
    assert problem.startswith("LetheApiStage: no AWS::Logs::LogGroup named API-Gateway-Execution")


def _repo_copy(root: Path) -> Path:
    for name in ("Makefile", LAMBDA_LOCK, "layers/arrow/requirements.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text((REPO_ROOT / name).read_text())
    return root


def test_a_layer_pin_the_tier_does_not_test_is_named(template: Template, tmp_path: Path) -> None:
    root = _repo_copy(tmp_path)
    assert layer_pins_untested(template, root) == []
    requirements = root / "layers/arrow/requirements.txt"
    requirements.write_text(re.sub(r"pyarrow==\S+", "pyarrow==20.0.0", requirements.read_text()))
    makefile = root / "Makefile"
    makefile.write_text(
        makefile.read_text().replace(
            "LAMBDA_PYTHON_VERSION := 3.13", "LAMBDA_PYTHON_VERSION := 3.11"
        )
    )
    problems = layer_pins_untested(template, root)
    assert any(
        p.startswith("ArrowLayer: layers/arrow/requirements.txt pins pyarrow==20.0.0")
        for p in problems
    ), problems
    assert "Makefile: LAMBDA_PYTHON_VERSION is not python3.13's" in problems


def test_a_certificate_signing_key_must_be_retained(template: Template) -> None:
    broken = copy.deepcopy(template)
    (signing,) = [lid for lid, r in resources_of(broken, "AWS::KMS::Key").items() if _signs(r)]
    del broken["Resources"][signing]["DeletionPolicy"]

    assert data_resources_not_retained(template) == []
    assert data_resources_not_retained(broken) == [f"{signing} (AWS::KMS::Key)"]
