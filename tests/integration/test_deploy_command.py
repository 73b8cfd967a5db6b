"""`lethe deploy` against moto: `sam deploy` (a stand-in executable that records its arguments
and exits as told), then the Spark artifacts uploaded to the stack's ArtifactsBucketName, once
(a second deploy uploads nothing, a changed file only itself), each read back with its size and
SHA-256; a failed `sam deploy` or an unbuilt EMR environment stops it with one exit status and a
message that says what to do. And `lethe deploy --dry-run` reading moto's account: what moto
implements is decided (a conflicting SES identity, a retained bucket, API Gateway's account
role), what it does not (SESv2 GetAccount, Lambda GetAccountSettings, Service Quotas for Lambda
and EMR Serverless) is UNKNOWN with moto's reason.
"""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe import cli
from lethe.artifacts import (
    PYTHON_ENV_ARCHIVE,
    PYTHON_ENV_MANIFEST,
    REQUIREMENTS_SOURCE,
    build_spark_artifacts,
    write_reproducible_tar_gz,
)
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
ACCOUNT = "123456789012"
STACK = "lethe-dev"
BUCKET = f"lethe-dev-artifacts-{ACCOUNT}-{REGION}"
ARTIFACTS = [
    "compact.py",  # the index compaction job
    "erase.py",
    "index.py",
    "ingest.py",
    "reconcile.py",
    "lethe_shared.zip",
    "requirements.txt",
    PYTHON_ENV_ARCHIVE,
]
FAKE_SAM = """#!/bin/sh
printf '%s\\n' "$@" > "{record}"
exit "${{FAKE_SAM_EXIT:-0}}"
"""


@pytest.fixture
def account(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `make artifacts` writes; the EMR environment is a stand-in with the right pins (its
    real build needs the wheels of Amazon Linux: tests/integration/test_python_env_archive.py)."""
    out = tmp_path_factory.mktemp("spark-artifacts")
    build_spark_artifacts(REPO_ROOT, out, python_env=False)
    env = tmp_path_factory.mktemp("env")
    pins = hashlib.sha256((REPO_ROOT / REQUIREMENTS_SOURCE).read_bytes()).hexdigest()
    (env / PYTHON_ENV_MANIFEST).write_text(json.dumps({"requirements_sha256": pins}))
    write_reproducible_tar_gz(env, out / PYTHON_ENV_ARCHIVE, first=(PYTHON_ENV_MANIFEST,))
    return out


@pytest.fixture
def sam(tmp_path: Path) -> tuple[Path, Path]:
    record = tmp_path / "sam-args.txt"
    executable = tmp_path / "sam"
    executable.write_text(FAKE_SAM.format(record=record))
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    return executable, record


def deployed_stack() -> None:
    """What `sam deploy` leaves behind, as far as the upload needs it."""
    template = {
        "Resources": {
            "ArtifactsBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": BUCKET}}
        },
        "Outputs": {
            "ArtifactsBucketName": {"Value": {"Ref": "ArtifactsBucket"}},
            "SparkEngine": {"Value": "EMR_SERVERLESS"},
        },
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=STACK, TemplateBody=json.dumps(template)
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def deploy(capsys: pytest.CaptureFixture[str], sam: Path, built: Path, *extra: str) -> Any:
    return run(
        capsys, "deploy", "--no-build", "--sam", str(sam), "--artifacts", str(built),
        "--region", REGION, "--stack-name", STACK, *extra,
    )  # fmt: skip


def test_deploy_runs_sam_with_the_operators_arguments_then_uploads_every_artifact(
    account: None, capsys: pytest.CaptureFixture[str], sam: tuple[Path, Path], built: Path
) -> None:
    deployed_stack()
    executable, record = sam

    code, out, err = deploy(capsys, executable, built, "--", "--guided", "--config-env", "dev")

    assert code == 0, err
    assert record.read_text().split() == [
        "deploy", "--stack-name", STACK, "--region", REGION, "--guided", "--config-env", "dev",
    ]  # fmt: skip
    s3 = boto3.client("s3", region_name=REGION)
    lines = out.splitlines()
    for name in ARTIFACTS:
        path = built / name
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        head = s3.head_object(Bucket=BUCKET, Key=f"spark_jobs/{name}")
        assert (head["ContentLength"], head["Metadata"]["sha256"]) == (path.stat().st_size, digest)
        url = f"s3://{BUCKET}/spark_jobs/{name}"
        assert f"uploaded  {url}  {path.stat().st_size} bytes  sha256 {digest}" in lines
    assert lines[-1] == (
        f"deployed {STACK} ({REGION}); Spark artifacts in s3://{BUCKET}/spark_jobs/: "
        "8 uploaded, 0 unchanged"
    )

    # Again: nothing to upload (the same bytes are there)
    code, out, err = deploy(capsys, executable, built)
    assert code == 0, err
    assert out.splitlines()[-1].endswith("0 uploaded, 8 unchanged")
    versions = s3.list_object_versions(Bucket=BUCKET, Prefix="spark_jobs/erase.py")["Versions"]
    assert len(versions) == 1


def test_a_changed_artifact_is_uploaded_again_and_only_it(
    account: None,
    capsys: pytest.CaptureFixture[str],
    sam: tuple[Path, Path],
    built: Path,
    tmp_path: Path,
) -> None:
    deployed_stack()
    changed = tmp_path / "build"
    changed.mkdir()
    for name in ARTIFACTS:
        (changed / name).write_bytes((built / name).read_bytes())
    assert deploy(capsys, sam[0], changed)[0] == 0
    (changed / "erase.py").write_bytes(b"# a new release\n" + (built / "erase.py").read_bytes())

    code, out, err = deploy(capsys, sam[0], changed)

    assert code == 0, err
    uploaded = [line.split()[1] for line in out.splitlines() if line.startswith("uploaded")]
    assert uploaded == [f"s3://{BUCKET}/spark_jobs/erase.py"]


def test_a_failed_sam_deploy_uploads_nothing(
    account: None,
    capsys: pytest.CaptureFixture[str],
    sam: tuple[Path, Path],
    built: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployed_stack()
    monkeypatch.setenv("FAKE_SAM_EXIT", "1")

    code, _, err = deploy(capsys, sam[0], built)

    assert code == 1
    assert "sam deploy failed (exit 1); the Spark artifacts were not uploaded" in err
    objects = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET)
    assert objects.get("KeyCount") == 0


def test_an_unbuilt_emr_environment_stops_before_sam_naming_make_artifacts(
    account: None,
    capsys: pytest.CaptureFixture[str],
    sam: tuple[Path, Path],
    built: Path,
    tmp_path: Path,
) -> None:
    partial = tmp_path / "build"
    partial.mkdir()
    for name in ARTIFACTS[:-1]:  # everything but pyspark_env.tar.gz
        (partial / name).write_bytes((built / name).read_bytes())

    code, _, err = deploy(capsys, sam[0], partial)

    assert code == 1
    assert f"lacks {PYTHON_ENV_ARCHIVE}" in err
    assert "make artifacts" in err
    assert "nothing was deployed" in err
    assert not sam[1].exists()  # sam never ran


def test_a_stack_without_the_artifacts_bucket_output_is_named(
    account: None, capsys: pytest.CaptureFixture[str], sam: tuple[Path, Path], built: Path
) -> None:
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=STACK,
        TemplateBody=json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket"}}}),
    )

    code, _, err = deploy(capsys, sam[0], built)

    assert code == 4
    assert "no output 'ArtifactsBucketName'" in err


# ------------------------------------------------------------------------------ --dry-run

OVERRIDES = "SenderEmail=lethe@example.com ApproverEmails=dpo@example.org"


def dry_run(capsys: pytest.CaptureFixture[str], built: Path, *extra: str) -> Any:
    return run(
        capsys, "deploy", "--dry-run", "--region", REGION, "--artifacts", str(built), *extra,
        "--", "--parameter-overrides", OVERRIDES,
    )  # fmt: skip


def test_dry_run_on_a_fresh_account_blocks_on_nothing_and_says_what_it_could_not_check(
    account: None, capsys: pytest.CaptureFixture[str], built: Path
) -> None:
    code, out, err = dry_run(capsys, built, "--json")

    assert code == 0, err
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["AWS account"]["detail"] == f"{ACCOUNT} in {REGION}"
    assert checks[f"CloudFormation stack {STACK}"]["status"] == "OK"
    assert checks["SES identity for SenderEmail lethe@example.com"]["status"] == "OK"
    assert checks["API Gateway account CloudWatch role"]["detail"].startswith("none set")
    assert checks["S3 bucket names"]["status"] == "OK"
    assert checks["Spark artifacts built"]["status"] == "OK"
    # moto 5.2.5 implements none of these: UNKNOWN, with its reason and how to check by hand
    unknown = {
        "SES production access": "get_account action has not been implemented",
        "Lambda concurrent executions (Service Quotas lambda L-B99A9384)": "Not yet implemented",
        "EMR Serverless max concurrent vCPUs (Service Quotas emr-serverless L-D05C8A75)": (
            "NoSuchResourceException"
        ),
    }
    for name, reason in unknown.items():
        assert checks[name]["status"] == "UNKNOWN", name
        assert reason in checks[name]["detail"], checks[name]
        assert checks[name]["action"]
        assert checks[name]["blocks"] is False
    # in a sandbox that could not be checked, an unverified approver is shown, not blocking
    approver = checks["SES identity for approver dpo@example.org"]
    assert (approver["status"], approver["blocks"]) == ("MISSING", False)


def test_dry_run_names_what_blocks_and_exits_1(
    account: None, capsys: pytest.CaptureFixture[str], built: Path, tmp_path: Path
) -> None:
    boto3.client("ses", region_name=REGION).verify_email_identity(
        EmailAddress="lethe@example.com"  # verified by hand: the stack would create it again
    )
    retained = f"lethe-dev-raw-{ACCOUNT}-{REGION}"  # left by a deleted stack (Retain)
    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket=retained, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    boto3.client("apigateway", region_name=REGION).update_account(
        patchOperations=[
            {
                "op": "replace",
                "path": "/cloudwatchRoleArn",
                "value": f"arn:aws:iam::{ACCOUNT}:role/another-stacks-role",
            }
        ]
    )
    unbuilt = tmp_path / "empty"
    unbuilt.mkdir()

    code, out, err = dry_run(capsys, unbuilt)

    assert code == 1, err
    lines = out.splitlines()
    assert (
        "CONFLICT SES identity for SenderEmail lethe@example.com: lethe@example.com is already "
        "an identity here: creating it fails with AlreadyExists"
    ) in lines
    assert "         -> deploy with CreateSenderIdentity=false" in lines
    assert any(line.startswith(f"CONFLICT S3 bucket {retained}: exists") for line in lines)
    assert any(
        line.startswith("CONFLICT API Gateway account CloudWatch role: already set to")
        for line in lines
    )
    assert any(line.startswith("MISSING  Spark artifacts built:") for line in lines)
    assert any("make artifacts" in line for line in lines)
    assert lines[-2] == "4 to fix before deploying"
    assert lines[-1].startswith("3 could not be checked here")
