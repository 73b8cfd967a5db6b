"""The first deploy's dry run, decided: each prerequisite of docs/DEPLOY.md's checklist as a
`Check` with a status and what to do.

Statuses:
- ``OK``: nothing to do (the detail says why);
- ``MISSING``: something the deploy or the first erasure needs is not there (a quota too low,
  an identity not verified, the Spark artifacts not built);
- ``CONFLICT``: something is there that makes the deploy fail or harms another deployment (an
  SES identity the stack would create again, a bucket retained from an earlier stack, API
  Gateway's account role owned by another stack);
- ``UNKNOWN``: it could not be checked (the API refused or does not exist where it was asked);
  the detail gives the reason and the action says how to check by hand.

A ``MISSING`` or ``CONFLICT`` that is `required` makes `lethe deploy --dry-run` exit non-zero;
``UNKNOWN`` never does (it is printed for the operator to check). `decide` is pure: it takes the
parameters the deploy will use (`lethe.deploy_facts.resolve_parameters`) and the `Facts` read
from the account (`lethe.deploy_facts.gather`), so each rule is unit-tested without AWS.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Final, Generic, TypeVar

OK: Final = "OK"
MISSING: Final = "MISSING"
CONFLICT: Final = "CONFLICT"
UNKNOWN: Final = "UNKNOWN"

LAMBDA_CONCURRENCY_QUOTA: Final = ("lambda", "L-B99A9384")  # Concurrent executions
EMR_SERVERLESS_VCPU_QUOTA: Final = ("emr-serverless", "L-D05C8A75")  # Max concurrent vCPUs
GLUE_RUNS_QUOTA: Final = ("glue", "L-5E4153CA")  # Max concurrent job runs per account
# Lambda keeps this much of the account's concurrency unreserved (Lambda's "reserved concurrency").
LAMBDA_UNRESERVED_MINIMUM: Final = 100
# Functions that reserve ReservedConcurrency each when it is above 0 (docs/DEPLOY.md).
RESERVING_FUNCTIONS: Final = 5
BUCKET_KINDS: Final = ("logs", "raw", "lake", "reports", "artifacts")

T = TypeVar("T")


@dataclass(frozen=True)
class Probe(Generic[T]):
    """One fact read from AWS: its value, or why it could not be read."""

    value: T | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    action: str = ""
    required: bool = True

    @property
    def blocks(self) -> bool:
        return self.required and self.status in (MISSING, CONFLICT)


@dataclass
class Facts:
    """What `lethe.deploy_facts.gather` read from one account and region."""

    account: str
    region: str
    stack_name: str
    stack_status: Probe[str] = field(default_factory=Probe)  # value None: no such stack
    stack_resources: dict[str, str] = field(default_factory=dict)  # logical id -> physical id
    ses_production: Probe[bool] = field(default_factory=Probe)
    identities: dict[str, Probe[str]] = field(default_factory=dict)  # None: no such identity
    lambda_concurrency: Probe[float] = field(default_factory=Probe)
    emr_vcpu_quota: Probe[float] = field(default_factory=Probe)
    glue_runs_quota: Probe[float] = field(default_factory=Probe)
    apigateway_role: Probe[str] = field(default_factory=Probe)  # None: no role set
    buckets: dict[str, Probe[bool]] = field(default_factory=dict)  # name -> exists
    log_groups: dict[str, Probe[bool]] = field(default_factory=dict)  # name -> exists
    artifacts_built: str | None = None  # why the local build cannot be uploaded (None: ready)
    artifacts_in_bucket: Probe[list[str]] = field(default_factory=Probe)  # missing URLs


def bucket_name(kind: str, stage: str, account: str, region: str) -> str:
    return f"lethe-{stage}-{kind}-{account}-{region}"


def glue_log_groups(stage: str) -> list[str]:
    return [f"/aws-glue/jobs/lethe-{stage}/output", f"/aws-glue/jobs/lethe-{stage}/error"]


def _int(parameters: Mapping[str, str], name: str) -> int:
    try:
        return int(parameters.get(name, "0") or 0)
    except ValueError:
        return 0


def _unknown(name: str, probe: Probe[T], how: str) -> Check:
    return Check(name, UNKNOWN, f"not checked: {probe.error}", how, required=False)


def _identity_status(facts: Facts, address: str) -> tuple[bool, bool, str]:
    """(exists, verified, which identity) for an address or its domain."""
    domain = address.rpartition("@")[2]
    for identity in (address, domain):
        probe = facts.identities.get(identity, Probe())
        if probe.known and probe.value is not None:
            return True, probe.value == "SUCCESS", identity
    return False, False, address


def _identities_known(facts: Facts, address: str) -> Probe[str]:
    domain = address.rpartition("@")[2]
    for identity in (address, domain):
        probe = facts.identities.get(identity, Probe())
        if not probe.known:
            return probe
    return Probe("known")


def _stack_checks(facts: Facts) -> list[Check]:
    name = f"CloudFormation stack {facts.stack_name}"
    probe = facts.stack_status
    if not probe.known:
        return [_unknown(name, probe, f"aws cloudformation describe-stacks --stack-name {name}")]
    status = probe.value
    if status is None:
        return [Check(name, OK, f"none yet in {facts.region}: the deploy creates it")]
    if status.endswith("_IN_PROGRESS"):
        return [Check(name, CONFLICT, f"{status}: another operation runs", "wait until it ends")]
    if status in {"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED", "CREATE_FAILED"}:
        return [
            Check(
                name,
                CONFLICT,
                f"{status}: it cannot be updated",
                f"delete it (aws cloudformation delete-stack --stack-name {facts.stack_name}), "
                "keeping the retained data (docs/DEPLOY.md, 'Data that outlives the stack')",
            )
        ]
    return [Check(name, OK, f"{status}: the deploy updates it")]


def _bucket_checks(facts: Facts, stage: str) -> list[Check]:
    owned = set(facts.stack_resources.values())
    checks: list[Check] = []
    for kind in BUCKET_KINDS:
        name = bucket_name(kind, stage, facts.account, facts.region)
        probe = facts.buckets.get(name, Probe(False))
        label = f"S3 bucket {name}"
        if not probe.known:
            checks.append(_unknown(label, probe, f"aws s3api head-bucket --bucket {name}"))
        elif probe.value and name not in owned:
            checks.append(
                Check(
                    label,
                    CONFLICT,
                    "exists but is not this stack's (retained from an earlier stack of stage "
                    f"{stage}, or another account's name): creating the stack fails",
                    "deploy under another Stage, or delete the bucket after making sure its "
                    "data is no longer needed (docs/DEPLOY.md, 'Data that outlives the stack')",
                )
            )
    if not checks:
        checks.append(Check("S3 bucket names", OK, f"free or this stack's (lethe-{stage}-*)"))
    return checks


def _artifact_checks(facts: Facts, stage: str, engine: str) -> list[Check]:
    checks: list[Check] = []
    if facts.artifacts_built is None:
        checks.append(Check("Spark artifacts built", OK, "ready for `lethe deploy` to upload"))
    else:
        checks.append(
            Check(
                "Spark artifacts built",
                MISSING,
                facts.artifacts_built,
                "run `make artifacts` (lethe artifacts build --out .build/spark-artifacts)",
            )
        )
    bucket = bucket_name("artifacts", stage, facts.account, facts.region)
    label = f"Spark artifacts in s3://{bucket}/spark_jobs/"
    probe = facts.artifacts_in_bucket
    if facts.stack_status.value is None:
        checks.append(Check(label, OK, "the stack creates the bucket; `lethe deploy` fills it"))
    elif not probe.known:
        checks.append(_unknown(label, probe, f"aws s3 ls s3://{bucket}/spark_jobs/"))
    elif probe.value:
        checks.append(
            Check(
                label,
                MISSING,
                f"{engine} runs fail at their pre-flight without: {', '.join(probe.value)}",
                "`lethe deploy` uploads them (or `lethe artifacts upload --from "
                f".build/spark-artifacts --stack-name {facts.stack_name}`)",
                required=False,  # the deploy itself uploads them
            )
        )
    else:
        checks.append(Check(label, OK, f"everything a {engine} run needs"))
    return checks


def _ses_checks(facts: Facts, parameters: Mapping[str, str]) -> list[Check]:
    checks: list[Check] = []
    sender = parameters.get("SenderEmail", "")
    approvers = [a.strip() for a in parameters.get("ApproverEmails", "").split(",") if a.strip()]
    unverified = [a for a in approvers if not _identity_status(facts, a)[1]]
    production = facts.ses_production
    name = "SES production access"
    if not production.known:
        checks.append(_unknown(name, production, "aws sesv2 get-account (ProductionAccessEnabled)"))
    elif production.value:
        checks.append(Check(name, OK, "production access: SES sends to any address"))
    else:
        checks.append(
            Check(
                name,
                MISSING,
                "sandbox: SES sends only to verified addresses"
                + (f"; not verified: {', '.join(unverified)}" if unverified else ""),
                "verify every approver address (below) or request production access (SES "
                "console, Account dashboard)",
                required=bool(unverified),
            )
        )
    if not sender:
        checks.append(
            Check(
                "SES identity for SenderEmail",
                UNKNOWN,
                "SenderEmail is not set in samconfig.toml or --parameter-overrides",
                "pass it (-- --parameter-overrides SenderEmail=...) to check it",
                required=False,
            )
        )
    else:
        checks.append(_sender_check(facts, sender, parameters.get("CreateSenderIdentity", "true")))
    sandbox = production.known and production.value is False
    for address in approvers:
        label = f"SES identity for approver {address}"
        known = _identities_known(facts, address)
        exists, verified, identity = _identity_status(facts, address)
        if production.known and production.value:
            checks.append(Check(label, OK, "production access: need not be verified"))
        elif verified:
            checks.append(Check(label, OK, f"{identity} is verified"))
        elif not known.known:
            checks.append(
                _unknown(label, known, f"aws sesv2 get-email-identity --email-identity {address}")
            )
        else:
            checks.append(
                Check(
                    label,
                    MISSING,
                    f"{identity} is {'not yet verified' if exists else 'no identity'}: "
                    "in the sandbox approval emails to it are refused",
                    f"aws sesv2 create-email-identity --email-identity {address}, then open the "
                    "link SES sends (or request production access)",
                    required=sandbox,
                )
            )
    return checks


def _sender_check(facts: Facts, sender: str, create: str) -> Check:
    label = f"SES identity for SenderEmail {sender}"
    known = _identities_known(facts, sender)
    if not known.known:
        return _unknown(label, known, f"aws sesv2 get-email-identity --email-identity {sender}")
    exists, verified, identity = _identity_status(facts, sender)
    owned = "SenderIdentity" in facts.stack_resources
    if create == "true":
        if exists and not owned:
            return Check(
                label,
                CONFLICT,
                f"{identity} is already an identity here: creating it fails with AlreadyExists",
                "deploy with CreateSenderIdentity=false",
            )
        return Check(label, OK, "the stack creates it: open the verification email SES sends")
    if verified:
        return Check(label, OK, f"{identity} is verified (CreateSenderIdentity=false)")
    return Check(
        label,
        MISSING,
        f"{identity} is {'not yet verified' if exists else 'no identity'} and "
        "CreateSenderIdentity=false: approval emails cannot be sent",
        f"aws sesv2 create-email-identity --email-identity {sender} and open the link, or "
        "deploy with CreateSenderIdentity=true",
    )


def _lambda_check(facts: Facts, parameters: Mapping[str, str]) -> Check:
    label = "Lambda concurrent executions (Service Quotas lambda L-B99A9384)"
    probe = facts.lambda_concurrency
    if not probe.known or probe.value is None:
        return _unknown(
            label,
            probe,
            "aws lambda get-account-settings (AccountLimit.ConcurrentExecutions), or aws "
            "service-quotas get-service-quota --service-code lambda --quota-code L-B99A9384",
        )
    quota = int(probe.value)
    mapping = _int(parameters, "ObjectEventsMaxConcurrency") or 2
    reserved = RESERVING_FUNCTIONS * _int(parameters, "ReservedConcurrency")
    if reserved and quota - reserved < LAMBDA_UNRESERVED_MINIMUM:
        return Check(
            label,
            MISSING,
            f"{quota}: ReservedConcurrency reserves {reserved} and Lambda keeps "
            f"{LAMBDA_UNRESERVED_MINIMUM} unreserved",
            f"request at least {reserved + LAMBDA_UNRESERVED_MINIMUM} (Service Quotas), or "
            "deploy with ReservedConcurrency=0",
        )
    if mapping >= quota:
        return Check(
            label,
            MISSING,
            f"{quota}: ObjectEventsMaxConcurrency {mapping} would take all of it",
            f"request an increase (Service Quotas), or ObjectEventsMaxConcurrency below {quota}",
        )
    note = " (a new account's: request an increase before raising ObjectEventsMaxConcurrency)"
    return Check(
        label,
        OK,
        f"{quota}; the object events mapping takes at most {mapping}, reserved {reserved}"
        + (note if quota < LAMBDA_UNRESERVED_MINIMUM else ""),
    )


def _spark_checks(facts: Facts, parameters: Mapping[str, str], engine: str) -> list[Check]:
    stage = parameters.get("Stage", "dev")
    emr = "EMR Serverless max concurrent vCPUs (Service Quotas emr-serverless L-D05C8A75)"
    glue = "Glue max concurrent job runs (Service Quotas glue L-5E4153CA)"
    if engine != "EMR_SERVERLESS":
        checks = [Check(emr, OK, f"not used (SparkEngine={engine})")]
    elif not facts.emr_vcpu_quota.known or facts.emr_vcpu_quota.value is None:
        how = "aws service-quotas get-service-quota --service-code emr-serverless "
        checks = [_unknown(emr, facts.emr_vcpu_quota, how + "--quota-code L-D05C8A75")]
    else:
        quota, wanted = int(facts.emr_vcpu_quota.value), _int(parameters, "SparkMaxVcpu") or 16
        checks = [
            Check(emr, OK, f"{quota} >= SparkMaxVcpu {wanted}")
            if wanted <= quota
            else Check(
                emr,
                MISSING,
                f"{quota} < SparkMaxVcpu {wanted}: runs would wait for capacity that never comes",
                f"request at least {wanted} (Service Quotas), or deploy with SparkMaxVcpu={quota}",
            )
        ]
    if engine != "GLUE":
        return [*checks, Check(glue, OK, f"not used (SparkEngine={engine})")]
    runs = _int(parameters, "GlueMaxConcurrentRuns") or 10
    if not facts.glue_runs_quota.known or facts.glue_runs_quota.value is None:
        how = "aws service-quotas get-service-quota --service-code glue --quota-code L-5E4153CA"
        checks.append(_unknown(glue, facts.glue_runs_quota, how))
    elif int(facts.glue_runs_quota.value) < runs:
        checks.append(
            Check(
                glue,
                MISSING,
                f"{int(facts.glue_runs_quota.value)} < GlueMaxConcurrentRuns {runs}",
                "request an increase, or lower GlueMaxConcurrentRuns",
            )
        )
    else:
        checks.append(Check(glue, OK, f"{int(facts.glue_runs_quota.value)} >= {runs}"))
    owned = set(facts.stack_resources.values())
    for group in glue_log_groups(stage):
        probe = facts.log_groups.get(group, Probe(False))
        label = f"Glue log group {group}"
        if not probe.known:
            checks.append(_unknown(label, probe, "aws logs describe-log-groups"))
        elif probe.value and group not in owned:
            checks.append(
                Check(
                    label,
                    CONFLICT,
                    "exists but is not this stack's: the deploy fails with 'already exists'",
                    "export what you need, then delete it (aws logs delete-log-group)",
                )
            )
    return checks


def _apigateway_check(facts: Facts, parameters: Mapping[str, str]) -> Check:
    label = "API Gateway account CloudWatch role"
    probe = facts.apigateway_role
    if not probe.known:
        return _unknown(label, probe, "aws apigateway get-account (cloudwatchRoleArn)")
    create = parameters.get("CreateApiGatewayAccountRole", "true") == "true"
    role = probe.value
    own_role = facts.stack_resources.get("ApiGatewayCloudWatchRole")
    ours = role is not None and own_role is not None and role.endswith(f"/{own_role}")
    if create:
        if role and not ours:
            return Check(
                label,
                CONFLICT,
                f"already set to {role}: the stack would overwrite another deployment's setting",
                "deploy with CreateApiGatewayAccountRole=false",
            )
        return Check(
            label, OK, "this stack's" if ours else "none set: the stack creates and sets it"
        )
    if role:
        return Check(label, OK, f"set to {role} (CreateApiGatewayAccountRole=false)")
    return Check(
        label,
        MISSING,
        "none set and CreateApiGatewayAccountRole=false: the API stage cannot enable logging",
        "deploy with CreateApiGatewayAccountRole=true, or set the role (aws apigateway "
        "update-account)",
    )


def decide(parameters: Mapping[str, str], facts: Facts) -> list[Check]:
    """Every check of the dry run, in the order of docs/DEPLOY.md's checklist."""
    stage = parameters.get("Stage", "dev")
    engine = parameters.get("SparkEngine", "EMR_SERVERLESS")
    return [
        Check("AWS account", OK, f"{facts.account} in {facts.region}"),
        *_stack_checks(facts),
        *_ses_checks(facts, parameters),
        _lambda_check(facts, parameters),
        *_spark_checks(facts, parameters, engine),
        _apigateway_check(facts, parameters),
        *_bucket_checks(facts, stage),
        *_artifact_checks(facts, stage, engine),
    ]


def render(checks: list[Check]) -> str:
    lines: list[str] = []
    for check in checks:
        shown = check.status in (MISSING, CONFLICT) and not check.required
        lines.append(
            f"{check.status:<8} {check.name}{' (not blocking)' if shown else ''}: {check.detail}"
        )
        if check.action and check.status != OK:
            lines.append(f"         -> {check.action}")
    blocking = [c for c in checks if c.blocks]
    unknown = [c for c in checks if c.status == UNKNOWN]
    lines.append(
        f"{len(blocking)} to fix before deploying" if blocking else "nothing blocks the deploy"
    )
    if unknown:
        lines.append(f"{len(unknown)} could not be checked here: check them by hand (-> above)")
    return "\n".join(lines)


def as_json(checks: list[Check]) -> str:
    return json.dumps(
        {
            "checks": [{**asdict(c), "blocks": c.blocks} for c in checks],
            "blocking": sum(c.blocks for c in checks),
        },
        indent=2,
    )
