"""`lethe deploy --dry-run`'s decisions (lethe.deploy_checks.decide), rule by rule, on facts
made up here; the facts themselves are read from moto in tests/integration/test_deploy_command.py.
Also the parameter resolution (template defaults, samconfig.toml, --parameter-overrides) and
the pre-flight's list of artifacts (lethe.artifact_sync.required_artifacts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.artifact_sync import required_artifacts
from lethe.artifacts import ArtifactError
from lethe.deploy_checks import (
    CONFLICT,
    MISSING,
    OK,
    UNKNOWN,
    Check,
    Facts,
    Probe,
    bucket_name,
    decide,
    glue_log_groups,
    render,
)
from lethe.deploy_facts import option, parse_overrides, resolve_parameters

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
ACCOUNT, REGION = "123456789012", "eu-west-1"
SENDER, APPROVER = "lethe@example.com", "dpo@example.org"
PARAMETERS = {
    "Stage": "dev",
    "SparkEngine": "EMR_SERVERLESS",
    "SenderEmail": SENDER,
    "ApproverEmails": APPROVER,
    "CreateSenderIdentity": "true",
    "CreateApiGatewayAccountRole": "true",
    "ObjectEventsMaxConcurrency": "2",
    "ReservedConcurrency": "0",
    "SparkMaxVcpu": "16",
    "GlueMaxConcurrentRuns": "10",
}


def ready() -> Facts:
    """A fresh account where nothing blocks a first deploy with the defaults."""
    return Facts(
        account=ACCOUNT,
        region=REGION,
        stack_name="lethe-dev",
        stack_status=Probe(None),
        ses_production=Probe(True),
        identities={
            SENDER: Probe(None),
            "example.com": Probe(None),
            APPROVER: Probe(None),
            "example.org": Probe(None),
        },
        lambda_concurrency=Probe(1000.0),
        emr_vcpu_quota=Probe(16.0),
        glue_runs_quota=Probe(200.0),
        apigateway_role=Probe(None),
    )


def by_name(checks: list[Check], prefix: str) -> Check:
    (found,) = [c for c in checks if c.name.startswith(prefix)]
    return found


def test_a_fresh_account_with_the_defaults_has_nothing_blocking() -> None:
    checks = decide(PARAMETERS, ready())
    assert [c for c in checks if c.status != OK] == []
    assert not any(c.blocks for c in checks)
    assert render(checks).endswith("nothing blocks the deploy")


def test_every_checklist_item_is_checked() -> None:
    names = " | ".join(c.name for c in decide(PARAMETERS, ready()))
    for item in (
        "CloudFormation stack",
        "SES production access",
        "SES identity for SenderEmail",
        "SES identity for approver",
        "Lambda concurrent executions",
        "EMR Serverless max concurrent vCPUs",
        "Glue max concurrent job runs",
        "API Gateway account CloudWatch role",
        "S3 bucket",
        "Spark artifacts built",
        "Spark artifacts in s3://",
    ):
        assert item in names, item


def test_the_sandbox_blocks_only_while_an_approver_is_unverified() -> None:
    facts = ready()
    facts.ses_production = Probe(False)
    checks = decide(PARAMETERS, facts)
    sandbox = by_name(checks, "SES production access")
    approver = by_name(checks, "SES identity for approver")
    assert (sandbox.status, sandbox.blocks) == (MISSING, True)
    assert (approver.status, approver.blocks) == (MISSING, True)
    assert APPROVER in sandbox.detail
    assert f"create-email-identity --email-identity {APPROVER}" in approver.action

    facts.identities["example.org"] = Probe("SUCCESS")  # the approver's domain is verified
    checks = decide(PARAMETERS, facts)
    assert by_name(checks, "SES production access").blocks is False
    assert by_name(checks, "SES identity for approver").status == OK


def test_a_sender_identity_that_exists_conflicts_unless_the_stack_does_not_create_it() -> None:
    facts = ready()
    facts.identities[SENDER] = Probe("SUCCESS")
    sender = by_name(decide(PARAMETERS, facts), "SES identity for SenderEmail")
    assert (sender.status, sender.blocks) == (CONFLICT, True)
    assert "CreateSenderIdentity=false" in sender.action

    keep = {**PARAMETERS, "CreateSenderIdentity": "false"}
    assert by_name(decide(keep, facts), "SES identity for SenderEmail").status == OK
    facts.identities[SENDER] = Probe(None)  # false, and no identity: mails cannot go out
    assert by_name(decide(keep, facts), "SES identity for SenderEmail").status == MISSING
    facts.stack_resources = {"SenderIdentity": SENDER}  # the stack's own identity: an update
    facts.identities[SENDER] = Probe("SUCCESS")
    assert by_name(decide(PARAMETERS, facts), "SES identity for SenderEmail").status == OK


def test_lambda_concurrency_rules() -> None:
    facts = ready()
    facts.lambda_concurrency = Probe(10.0)  # a new account's
    check = by_name(decide(PARAMETERS, facts), "Lambda")
    assert check.status == OK
    assert "request an increase" in check.detail
    reserving = {**PARAMETERS, "ReservedConcurrency": "20"}  # 5 functions x 20
    check = by_name(decide(reserving, facts), "Lambda")
    assert (check.status, check.blocks) == (MISSING, True)
    assert "at least 200" in check.action
    facts.lambda_concurrency = Probe(1000.0)
    assert by_name(decide(reserving, facts), "Lambda").status == OK
    facts.lambda_concurrency = Probe(2.0)
    assert by_name(decide(PARAMETERS, facts), "Lambda").status == MISSING


def test_emr_serverless_vcpu_quota_against_spark_max_vcpu() -> None:
    facts = ready()
    facts.emr_vcpu_quota = Probe(8.0)
    check = by_name(decide(PARAMETERS, facts), "EMR Serverless")
    assert (check.status, check.blocks) == (MISSING, True)
    assert "SparkMaxVcpu=8" in check.action
    glue = {**PARAMETERS, "SparkEngine": "GLUE"}
    assert by_name(decide(glue, facts), "EMR Serverless").status == OK  # not used


def test_glue_quota_and_log_groups_only_on_glue() -> None:
    facts = ready()
    glue = {**PARAMETERS, "SparkEngine": "GLUE"}
    facts.glue_runs_quota = Probe(5.0)
    facts.log_groups = {glue_log_groups("dev")[0]: Probe(True)}
    checks = decide(glue, facts)
    assert by_name(checks, "Glue max").status == MISSING
    group = by_name(checks, "Glue log group")
    assert (group.status, group.blocks) == (CONFLICT, True)
    assert by_name(decide(PARAMETERS, facts), "Glue max").status == OK  # EMR: not used


def test_api_gateway_role_owned_elsewhere_conflicts() -> None:
    facts = ready()
    facts.apigateway_role = Probe("arn:aws:iam::123456789012:role/someone-elses")
    check = by_name(decide(PARAMETERS, facts), "API Gateway")
    assert (check.status, check.blocks) == (CONFLICT, True)
    assert "CreateApiGatewayAccountRole=false" in check.action
    keep = {**PARAMETERS, "CreateApiGatewayAccountRole": "false"}
    assert by_name(decide(keep, facts), "API Gateway").status == OK
    facts.apigateway_role = Probe(None)
    assert by_name(decide(keep, facts), "API Gateway").status == MISSING
    facts.apigateway_role = Probe("arn:aws:iam::123456789012:role/lethe-dev-ApiRole-1")
    facts.stack_resources = {"ApiGatewayCloudWatchRole": "lethe-dev-ApiRole-1"}
    assert by_name(decide(PARAMETERS, facts), "API Gateway").status == OK


def test_a_retained_bucket_conflicts_with_a_new_stack() -> None:
    facts = ready()
    raw = bucket_name("raw", "dev", ACCOUNT, REGION)
    facts.buckets = {raw: Probe(True)}
    check = by_name(decide(PARAMETERS, facts), f"S3 bucket {raw}")
    assert (check.status, check.blocks) == (CONFLICT, True)
    facts.stack_resources = {"RawBucket": raw}  # the stack's own: an update
    assert by_name(decide(PARAMETERS, facts), "S3 bucket names").status == OK


def test_artifacts_not_built_block_and_missing_in_the_bucket_do_not() -> None:
    facts = ready()
    facts.artifacts_built = ".build/spark-artifacts lacks pyspark_env.tar.gz"
    checks = decide(PARAMETERS, facts)
    built = by_name(checks, "Spark artifacts built")
    assert (built.status, built.blocks) == (MISSING, True)
    assert "make artifacts" in built.action
    facts.stack_status = Probe("UPDATE_COMPLETE")
    facts.artifacts_in_bucket = Probe(["s3://b/spark_jobs/erase.py"])
    in_bucket = by_name(decide(PARAMETERS, facts), "Spark artifacts in")
    assert (in_bucket.status, in_bucket.blocks) == (MISSING, False)  # lethe deploy uploads them
    assert "erase.py" in in_bucket.detail


def test_a_stack_that_cannot_be_updated_conflicts() -> None:
    facts = ready()
    facts.stack_status = Probe("ROLLBACK_COMPLETE")
    check = by_name(decide(PARAMETERS, facts), "CloudFormation stack")
    assert (check.status, check.blocks) == (CONFLICT, True)
    assert "delete-stack" in check.action


def test_what_cannot_be_read_is_unknown_with_the_reason_and_never_blocks() -> None:
    facts = ready()
    reason = "NotImplementedError: The get_account action has not been implemented"
    facts.ses_production = Probe(error=reason)
    facts.lambda_concurrency = Probe(error="404: Not yet implemented")
    facts.emr_vcpu_quota = Probe(error="NoSuchResourceException: not available")
    facts.apigateway_role = Probe(error="AccessDenied")
    checks = decide(PARAMETERS, facts)
    for prefix in ("SES production", "Lambda", "EMR Serverless", "API Gateway"):
        check = by_name(checks, prefix)
        assert check.status == UNKNOWN, prefix
        assert not check.blocks
        assert check.action  # how to check it by hand
    assert reason in by_name(checks, "SES production").detail
    assert "4 could not be checked here" in render(checks)


def test_parameters_come_from_the_template_then_samconfig_then_the_command_line(
    tmp_path: Path,
) -> None:
    samconfig = tmp_path / "samconfig.toml"
    samconfig.write_text(
        "version = 0.1\n[prod.global.parameters]\nstack_name = 'lethe-prod'\n"
        '[prod.deploy.parameters]\nparameter_overrides = "Stage=prod SparkMaxVcpu=32"\n'
    )
    args = ["--config-env", "prod", "--parameter-overrides", "SparkMaxVcpu=64 AlertEmail='a@b.c'"]
    parameters, settings = resolve_parameters(REPO_ROOT / "template.yaml", samconfig, args)
    assert parameters["Stage"] == "prod"  # samconfig
    assert parameters["SparkMaxVcpu"] == "64"  # the command line wins
    assert parameters["AlertEmail"] == "a@b.c"
    assert parameters["ObjectEventsMaxConcurrency"] == "2"  # template.yaml's default
    assert settings["stack_name"] == "lethe-prod"
    assert option(["--region=eu-west-1"], "--region") == "eu-west-1"
    assert parse_overrides(["A=1", "B=x y"]) == {"A": "1", "B": "x y"}


def test_the_template_defaults_are_read_as_yaml_reads_them() -> None:
    from lethe.deploy_facts import _template_defaults  # noqa: PLC0415
    from lethe.localcloud.template import load_template  # noqa: PLC0415

    declared = load_template()["Parameters"]
    expected = {name: str(p["Default"]) for name, p in declared.items() if "Default" in p}
    assert _template_defaults(REPO_ROOT / "template.yaml") == expected
    assert expected["CreateSenderIdentity"] == "true"  # quoted in the YAML


def test_the_preflight_list_per_engine() -> None:
    scripts = ["compact.py", "erase.py", "index.py", "ingest.py", "reconcile.py"]
    assert required_artifacts("GLUE") == [*scripts, "lethe_shared.zip", "requirements.txt"]
    assert required_artifacts("EMR_SERVERLESS") == [
        *scripts,
        "lethe_shared.zip",
        "pyspark_env.tar.gz",
    ]
    with pytest.raises(ArtifactError, match="unknown SparkEngine"):
        required_artifacts("SPARK")


def test_the_local_clouds_stand_in_archive_is_refused_for_a_real_upload(tmp_path: Path) -> None:
    from lethe.artifacts import (  # noqa: PLC0415
        PYTHON_ENV_ARCHIVE,
        build_spark_artifacts,
        built_spark_artifacts,
        read_python_env_manifest,
        write_python_env_stand_in,
    )

    build_spark_artifacts(REPO_ROOT, tmp_path, python_env=False)
    write_python_env_stand_in(tmp_path / PYTHON_ENV_ARCHIVE)
    assert read_python_env_manifest(tmp_path / PYTHON_ENV_ARCHIVE)["local_stand_in"] is True
    with pytest.raises(ArtifactError, match="was built from other pins"):
        built_spark_artifacts(REPO_ROOT, tmp_path, python_env=True)
