"""What the first deploy's dry run reads: the parameters the deploy will use, and the facts of
one account and region (`lethe.deploy_checks` decides what they mean).

Parameters: template.yaml's defaults, then samconfig.toml's ``parameter_overrides`` of the
config environment (``--config-env``, default ``default``), then ``--parameter-overrides``
given to `sam deploy`: the order in which SAM applies them.

Facts: each read is one AWS call whose failure becomes an UNKNOWN with the error as reason,
never a crash: SESv2 GetAccount (``ProductionAccessEnabled``) and GetEmailIdentity, Lambda
GetAccountSettings (``AccountLimit.ConcurrentExecutions``, else Service Quotas
``lambda``/``L-B99A9384``), Service Quotas GetServiceQuota for EMR Serverless
(``emr-serverless``/``L-D05C8A75``) and Glue (``glue``/``L-5E4153CA``), API Gateway GetAccount
(``cloudwatchRoleArn``), CloudFormation DescribeStacks and ListStackResources, S3 HeadBucket and
ListObjectsV2, CloudWatch Logs DescribeLogGroups. Only reads: the dry run changes nothing.
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lethe.artifact_sync import missing_in_bucket, required_artifacts
from lethe.artifacts import ArtifactError, built_spark_artifacts
from lethe.deploy_checks import (
    BUCKET_KINDS,
    EMR_SERVERLESS_VCPU_QUOTA,
    GLUE_RUNS_QUOTA,
    LAMBDA_CONCURRENCY_QUOTA,
    Facts,
    Probe,
    bucket_name,
    glue_log_groups,
)

T = TypeVar("T")


def _reason(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code')}: {error.get('Message')}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]


def probe(read: Callable[[], T | None]) -> Probe[T]:
    """Run one read; any AWS (or local emulator) failure is the probe's error."""
    try:
        return Probe(read())
    except (ClientError, BotoCoreError, NotImplementedError) as exc:
        return Probe(error=_reason(exc))


# ------------------------------------------------------------------------------ parameters


def _template_defaults(template: Path) -> dict[str, str]:
    """Each parameter's Default, read from template.yaml's ``Parameters:`` block line by line (a
    parameter at two spaces, its ``Default:`` at four; the CLI does not depend on a YAML
    library). tests/unit/test_deploy_checks.py compares the result with the YAML parse."""
    defaults: dict[str, str] = {}
    inside, name = False, ""
    for line in template.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            inside = line.rstrip() == "Parameters:"
            continue
        if not inside:
            continue
        if line.startswith("  ") and not line.startswith("   ") and line.rstrip().endswith(":"):
            name = line.strip()[:-1]
        elif line.startswith("    Default:") and name:
            value = line.split(":", 1)[1].split(" #", 1)[0].strip()
            defaults[name] = value[1:-1] if value[:1] in "\"'" and len(value) > 1 else value
    return defaults


def parse_overrides(value: str | Sequence[str]) -> dict[str, str]:
    """``Key=Value`` items, as a string (quoted values allowed) or a list."""
    items = shlex.split(value) if isinstance(value, str) else list(value)
    pairs = (item.partition("=") for item in items)
    return {key: val for key, sep, val in pairs if sep}


def option(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` among sam's arguments."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _overrides_in(args: Sequence[str]) -> list[str]:
    """What follows ``--parameter-overrides`` up to the next option."""
    found: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--parameter-overrides":
            for value in args[i + 1 :]:
                if value.startswith("--"):
                    break
                found.extend(shlex.split(value))
        elif arg.startswith("--parameter-overrides="):
            found.extend(shlex.split(arg.split("=", 1)[1]))
    return found


def samconfig_section(samconfig: Path, config_env: str, command: str) -> dict[str, Any]:
    """samconfig.toml's ``[<env>.global.parameters]`` overlaid with ``[<env>.<command>...]``."""
    if not samconfig.is_file():
        return {}
    document = tomllib.loads(samconfig.read_text(encoding="utf-8"))
    env = document.get(config_env, {})
    return {
        **env.get("global", {}).get("parameters", {}),
        **env.get(command, {}).get("parameters", {}),
    }


def resolve_parameters(
    template: Path, samconfig: Path, sam_args: Sequence[str]
) -> tuple[dict[str, str], dict[str, Any]]:
    """(the template parameters the deploy will use, samconfig's deploy settings)."""
    config_env = option(sam_args, "--config-env") or "default"
    config_file = Path(option(sam_args, "--config-file") or samconfig)
    settings = samconfig_section(config_file, config_env, "deploy")
    parameters = _template_defaults(template)
    parameters.update(parse_overrides(settings.get("parameter_overrides", "")))
    parameters.update(parse_overrides(_overrides_in(sam_args)))
    return parameters, settings


# ----------------------------------------------------------------------------------- facts


def _stack(cfn: Any, name: str) -> tuple[Probe[str], dict[str, str]]:
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc.response.get("Error", {}).get("Message", "")):
            return Probe(None), {}
        return Probe(error=_reason(exc)), {}
    except (BotoCoreError, NotImplementedError) as exc:
        return Probe(error=_reason(exc)), {}
    resources: dict[str, str] = {}
    try:
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=name):
            for resource in page.get("StackResourceSummaries", []):
                physical = resource.get("PhysicalResourceId")
                if physical:
                    resources[resource["LogicalResourceId"]] = physical
    except (ClientError, BotoCoreError, NotImplementedError):
        pass  # ownership unknown: existing resources are then reported as conflicts
    return Probe(str(stacks[0]["StackStatus"])), resources


def _identity(sesv2: Any, identity: str) -> Probe[str]:
    try:
        found = sesv2.get_email_identity(EmailIdentity=identity)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NotFoundException":
            return Probe(None)
        return Probe(error=_reason(exc))
    except (BotoCoreError, NotImplementedError) as exc:
        return Probe(error=_reason(exc))
    if found.get("VerifiedForSendingStatus") is True:
        return Probe("SUCCESS")
    return Probe(str(found.get("VerificationStatus", "PENDING")))


def _quota(quotas: Any, service: str, code: str) -> float:
    return float(quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])


def _lambda_concurrency(session: Any) -> Probe[float]:
    settings = probe(lambda: session.client("lambda").get_account_settings())
    if settings.known and settings.value:
        return Probe(float(settings.value["AccountLimit"]["ConcurrentExecutions"]))
    quota = probe(lambda: _quota(session.client("service-quotas"), *LAMBDA_CONCURRENCY_QUOTA))
    if quota.known:
        return quota
    return Probe(error=f"GetAccountSettings: {settings.error}; GetServiceQuota: {quota.error}")


def _bucket_exists(s3: Any, name: str) -> bool:
    try:
        s3.head_bucket(Bucket=name)
        return True
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchBucket", "NotFound"}:
            return False
        if exc.response.get("Error", {}).get("Code") in {"403", "AccessDenied"}:
            return True  # someone else's bucket of that name
        raise


def _log_group_exists(logs: Any, name: str) -> bool:
    groups = logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    return any(group["logGroupName"] == name for group in groups)


def _addresses(parameters: dict[str, str]) -> list[str]:
    approvers = [a.strip() for a in parameters.get("ApproverEmails", "").split(",")]
    found = [a for a in [parameters.get("SenderEmail", ""), *approvers] if "@" in a]
    identities: list[str] = []
    for address in found:
        for identity in (address, address.rpartition("@")[2]):
            if identity not in identities:
                identities.append(identity)
    return identities


def _artifacts_built(repo_root: Path, build_dir: Path) -> str | None:
    try:
        built_spark_artifacts(repo_root, build_dir, python_env=True)
    except ArtifactError as exc:
        return str(exc)
    return None


def gather(
    session: Any,
    parameters: dict[str, str],
    *,
    stack_name: str,
    repo_root: Path,
    build_dir: Path,
) -> Facts:
    """Read every fact the dry run decides on (reads only)."""
    account = str(session.client("sts").get_caller_identity()["Account"])
    region = str(session.region_name)
    stage = parameters.get("Stage", "dev")
    engine = parameters.get("SparkEngine", "EMR_SERVERLESS")
    status, resources = _stack(session.client("cloudformation"), stack_name)
    sesv2, s3 = session.client("sesv2"), session.client("s3")
    quotas, logs = session.client("service-quotas"), session.client("logs")
    facts = Facts(account=account, region=region, stack_name=stack_name)
    facts.stack_status, facts.stack_resources = status, resources
    facts.ses_production = probe(lambda: bool(sesv2.get_account()["ProductionAccessEnabled"]))
    facts.identities = {identity: _identity(sesv2, identity) for identity in _addresses(parameters)}
    facts.lambda_concurrency = _lambda_concurrency(session)
    if engine == "EMR_SERVERLESS":
        facts.emr_vcpu_quota = probe(lambda: _quota(quotas, *EMR_SERVERLESS_VCPU_QUOTA))
    if engine == "GLUE":
        facts.glue_runs_quota = probe(lambda: _quota(quotas, *GLUE_RUNS_QUOTA))
        facts.log_groups = {
            group: probe(lambda group=group: _log_group_exists(logs, group))  # type: ignore[misc]
            for group in glue_log_groups(stage)
        }
    facts.apigateway_role = probe(
        lambda: session.client("apigateway").get_account().get("cloudwatchRoleArn")
    )
    names = [bucket_name(kind, stage, account, region) for kind in BUCKET_KINDS]
    facts.buckets = {name: probe(lambda name=name: _bucket_exists(s3, name)) for name in names}  # type: ignore[misc]
    facts.artifacts_built = _artifacts_built(repo_root, build_dir)
    artifacts = bucket_name("artifacts", stage, account, region)
    if status.value is not None and facts.buckets[artifacts].value:
        wanted = required_artifacts(engine) if engine in ("GLUE", "EMR_SERVERLESS") else []
        facts.artifacts_in_bucket = probe(lambda: missing_in_bucket(s3, artifacts, wanted))
    return facts
