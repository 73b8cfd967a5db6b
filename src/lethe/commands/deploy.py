"""`lethe deploy`: the build, `sam deploy` and the Spark artifacts upload as one command.

    lethe deploy [--stack-name S] [--region R] [--profile P] [--no-build] [-- SAM DEPLOY ARGS]
    lethe deploy --dry-run [--region R] [--profile P] [-- SAM DEPLOY ARGS]

In order, each step only when the one before succeeded, with one exit status:

1. the Spark artifacts that `make artifacts` built in `.build/spark-artifacts` (`--artifacts`)
   are complete and current (entry scripts, lethe_shared.zip, requirements.txt and the EMR
   Serverless Python environment, built from this checkout's pins); otherwise it stops before
   anything changes, naming what is missing and `make artifacts`;
2. `make build` (sam build with the Lambda runtime's Python and the build checks), unless
   `--no-build`;
3. `sam deploy` with everything after ``--`` passed as is (``--guided``, ``--config-env E``,
   ``--parameter-overrides ...``), and `--stack-name`, `--region`, `--profile` when given;
4. the stack's outputs (stack name from `--stack-name`, sam's arguments or samconfig.toml,
   read again after a ``--guided`` run saved it): every artifact is uploaded to
   ``s3://<ArtifactsBucketName>/spark_jobs/`` unless the same bytes are there
   (`lethe.artifact_sync`: idempotent, each object read back), printed with its key, size and
   SHA-256;
5. the objects the state machines' pre-flight asks for (`Check Spark Artifacts`) are listed as
   they do: any missing fails the command.

Why a command and not a CloudFormation custom resource: the EMR Serverless Python environment is
built on the operator's machine (pip downloads manylinux wheels for Amazon Linux 2023, 100+
MB), which a Lambda-backed custom resource could not do without a second build pipeline; a
custom resource would also need its own code, role and timeouts, and a failed upload would roll
back the whole stack. A command can be run and re-run by the operator, says exactly what it
uploaded, and is tested here end to end against moto with a stand-in `sam`.

`--dry-run` changes nothing: it reads the account and region (`lethe.deploy_facts`) and prints
each prerequisite of docs/DEPLOY.md's checklist with OK / MISSING / CONFLICT / UNKNOWN and what
to do (`lethe.deploy_checks`); it exits 1 when something required is missing or in the way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3

from lethe.commands import CommandError, UsageError
from lethe.target import add_aws_arguments, from_stack

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_DIR = Path(".build/spark-artifacts")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="sam build, sam deploy and the Spark artifacts upload as one command "
        "(--dry-run: check the account's prerequisites first)",
        description="Build, run `sam deploy` and upload the Spark artifacts; everything after "
        "-- goes to `sam deploy` as is (e.g. `lethe deploy -- --guided`).",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing: print every prerequisite and quota of docs/DEPLOY.md's checklist "
        "for this account and region, OK / MISSING / CONFLICT / UNKNOWN; exit 1 when one "
        "required is missing",
    )
    parser.add_argument(
        "--stack-name", help="the stack (default: sam's --stack-name, else samconfig.toml's)"
    )
    parser.add_argument(
        "--artifacts",
        type=Path,
        help=f"the Spark artifacts `make artifacts` built (default: {BUILD_DIR})",
    )
    parser.add_argument(
        "--no-build", dest="build", action="store_false", help="skip `make build` (built already)"
    )
    parser.add_argument(
        "--sam", help="the sam executable (default: .venv-sam/bin/sam, else sam on PATH)"
    )
    parser.add_argument("--json", action="store_true", help="--dry-run: the checks as JSON")
    parser.add_argument("--repo-root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    add_aws_arguments(parser)
    parser.add_argument(
        "sam_args",
        nargs=argparse.REMAINDER,
        metavar="-- SAM DEPLOY ARGS",
        help="passed to `sam deploy` as is (--guided, --config-env E, --parameter-overrides ...)",
    )
    parser.set_defaults(func=deploy)


def _sam_executable(args: argparse.Namespace) -> str:
    if args.sam:
        return str(args.sam)
    local = args.repo_root / ".venv-sam" / "bin" / "sam"
    if local.exists():
        return str(local)
    found = shutil.which("sam")
    if found is None:
        raise CommandError(
            "no sam CLI: run `make tools` (creates .venv-sam), or pass --sam PATH; nothing "
            "was deployed"
        )
    return found


def _run(command: list[str], cwd: Path, what: str) -> None:
    print(f"lethe deploy: {what}: {' '.join(command)}", file=sys.stderr, flush=True)
    env = {**os.environ, "SAM_CLI_TELEMETRY": os.environ.get("SAM_CLI_TELEMETRY", "0")}
    result = subprocess.run(command, cwd=cwd, env=env, check=False)  # noqa: S603
    if result.returncode != 0:
        raise CommandError(
            f"{what} failed (exit {result.returncode}); the Spark artifacts were not uploaded. "
            "Fix what it reported and run `lethe deploy` again (every step is safe to repeat)"
        )


def _with_target_options(args: argparse.Namespace, sam_args: list[str]) -> list[str]:
    from lethe.deploy_facts import option  # noqa: PLC0415 - light, but only here

    extra: list[str] = []
    for name, value in (
        ("--stack-name", args.stack_name),
        ("--region", getattr(args, "region", None)),
        ("--profile", getattr(args, "profile", None)),
    ):
        if value and option(sam_args, name) is None:
            extra += [name, value]
    return [*extra, *sam_args]


def deploy(args: argparse.Namespace) -> int:
    from lethe.artifact_sync import (  # noqa: PLC0415 - keep `lethe --help` light
        missing_in_bucket,
        required_artifacts,
        sync_artifacts,
    )
    from lethe.artifacts import ArtifactError, built_spark_artifacts  # noqa: PLC0415
    from lethe.deploy_facts import option, resolve_parameters, samconfig_section  # noqa: PLC0415

    sam_args = list(args.sam_args)
    if sam_args[:1] == ["--"]:
        sam_args = sam_args[1:]
    repo_root: Path = args.repo_root
    samconfig = repo_root / "samconfig.toml"
    parameters, settings = resolve_parameters(repo_root / "template.yaml", samconfig, sam_args)
    region = getattr(args, "region", None) or option(sam_args, "--region") or settings.get("region")
    profile = (
        getattr(args, "profile", None) or option(sam_args, "--profile") or settings.get("profile")
    )
    stack_name = args.stack_name or option(sam_args, "--stack-name") or settings.get("stack_name")
    build_dir = args.artifacts or repo_root / BUILD_DIR
    if args.dry_run:
        session = boto3.Session(profile_name=profile, region_name=region)
        return _dry_run(args, session, parameters, stack_name or "", build_dir)

    try:  # 1. before anything changes
        built = built_spark_artifacts(repo_root, build_dir, python_env=True)
    except ArtifactError as exc:
        raise CommandError(
            f"the Spark artifacts are not ready: {exc}. Build them with `make artifacts` "
            f"(lethe artifacts build --out {build_dir}); nothing was deployed"
        ) from exc
    if args.build:  # 2.
        _run(["make", "build"], repo_root, "make build (sam build)")
    sam = _sam_executable(args)
    _run([sam, "deploy", *_with_target_options(args, sam_args)], repo_root, "sam deploy")  # 3.

    config_env = option(sam_args, "--config-env") or "default"  # 4. --guided may have saved it
    stack_name = stack_name or samconfig_section(samconfig, config_env, "deploy").get("stack_name")
    if not stack_name:
        raise UsageError(
            "sam deploy succeeded but the stack's name is unknown: run `lethe deploy --no-build "
            "--stack-name S` to upload the Spark artifacts"
        )
    target = from_stack(str(stack_name), region, profile)
    bucket = target.output("ArtifactsBucketName")
    engine = target.outputs.get("SparkEngine", parameters.get("SparkEngine", "EMR_SERVERLESS"))
    s3 = target.client("s3")
    try:
        synced = sync_artifacts(s3, bucket, built)
        missing = missing_in_bucket(s3, bucket, required_artifacts(engine))  # 5.
    except ArtifactError as exc:
        raise CommandError(f"{exc} (stack {stack_name} is deployed)") from exc
    for artifact in synced:
        print(artifact.line())
    if missing:
        raise CommandError(
            f"stack {stack_name} is deployed but its {engine} Spark runs would fail at their "
            f"pre-flight: missing {', '.join(missing)}; run `lethe deploy --no-build` again"
        )
    uploaded = sum(a.action == "uploaded" for a in synced)
    print(
        f"deployed {stack_name} ({target.region}); Spark artifacts in s3://{bucket}/spark_jobs/: "
        f"{uploaded} uploaded, {len(synced) - uploaded} unchanged"
    )
    return 0


def _dry_run(
    args: argparse.Namespace,
    session: boto3.Session,
    parameters: dict[str, str],
    stack_name: str,
    build_dir: Path,
) -> int:
    from lethe.deploy_checks import as_json, decide, render  # noqa: PLC0415
    from lethe.deploy_facts import gather  # noqa: PLC0415

    if not session.region_name:
        raise UsageError("no AWS region: pass --region R (or set AWS_REGION or the profile's)")
    stack = stack_name or f"lethe-{parameters.get('Stage', 'dev')}"
    facts = gather(
        session, parameters, stack_name=str(stack), repo_root=args.repo_root, build_dir=build_dir
    )
    checks = decide(parameters, facts)
    print(as_json(checks) if args.json else render(checks))
    return 1 if any(check.blocks for check in checks) else 0
