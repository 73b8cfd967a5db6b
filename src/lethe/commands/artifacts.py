"""`lethe artifacts build | upload`: the Spark job scripts and their Python dependencies.

`build --out DIR` writes every artifact (docs/SPARK.md): the entry scripts, lethe_shared.zip, the
pinned requirements file Glue installs and the EMR Serverless Python environment archive
(pyspark_env.tar.gz, built from the same pins; `--no-python-env` skips it). `upload --from DIR`
sends such a build under spark_jobs/ in the artifacts bucket, after checking that it matches this
checkout; without `--from` it builds in a temporary folder first. `make deploy-artifacts` is
build then upload; `lethe local up` uploads all but the archive (its Spark runs use the local
venv).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import boto3

from lethe.artifacts import (
    ARCHITECTURES,
    ArtifactError,
    build_spark_artifacts,
    built_spark_artifacts,
    upload_artifacts,
    upload_spark_artifacts,
)
from lethe.commands import CommandError, UsageError
from lethe.target import add_target_arguments, resolve

REPO_ROOT = Path(__file__).resolve().parents[3]


def _add_python_env_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-python-env",
        dest="python_env",
        action="store_false",
        help="leave out the EMR Serverless Python environment archive (pyspark_env.tar.gz)",
    )
    parser.add_argument(
        "--arch",
        choices=sorted(ARCHITECTURES),
        default="x86_64",
        help="architecture of the archive's wheels: the EMR Serverless application's "
        "(template.yaml SparkApplication: X86_64) (default: x86_64)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        dest="wheels_dir",
        help="build the archive offline from the wheels in this folder (default: the package "
        "index pip is configured with)",
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("artifacts", help="package and upload the Spark job artifacts")
    commands = parser.add_subparsers(dest="artifacts_command", metavar="COMMAND", required=True)

    build = commands.add_parser(
        "build", help="write the artifacts, EMR Serverless Python environment included, to a folder"
    )
    build.add_argument("--out", type=Path, required=True, help="output folder")
    _add_python_env_arguments(build)
    build.add_argument("--repo-root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    build.set_defaults(func=build_artifacts)

    upload = commands.add_parser(
        "upload", help="upload them under spark_jobs/ in the artifacts bucket"
    )
    upload.add_argument(
        "--bucket",
        help="the artifacts bucket (default: the deployment's ArtifactsBucketName output)",
    )
    upload.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        help="upload what `lethe artifacts build --out DIR` wrote (default: build them now)",
    )
    _add_python_env_arguments(upload)
    upload.add_argument("--repo-root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    add_target_arguments(upload)
    upload.set_defaults(func=upload_artifacts_command)


def build_artifacts(args: argparse.Namespace) -> int:
    try:
        built = build_spark_artifacts(
            args.repo_root,
            args.out,
            python_env=args.python_env,
            arch=args.arch,
            wheels_dir=args.wheels_dir,
        )
    except ArtifactError as exc:
        raise CommandError(str(exc)) from exc
    for path in built:
        print(path)
    return 0


def upload_artifacts_command(args: argparse.Namespace) -> int:
    if args.state_file or args.stack_name:
        target = resolve(args)
        bucket = args.bucket or target.output("ArtifactsBucketName")
        s3 = target.client("s3")
    elif args.bucket:
        bucket = args.bucket
        s3 = boto3.session.Session(
            profile_name=getattr(args, "profile", None), region_name=getattr(args, "region", None)
        ).client("s3")
    else:
        raise UsageError("say where: --bucket B, or --state-file F / --stack-name S")
    try:
        if args.from_dir is not None:
            built = built_spark_artifacts(args.repo_root, args.from_dir, python_env=args.python_env)
            uris = upload_artifacts(s3, bucket, built)
        else:
            uris = upload_spark_artifacts(
                s3,
                bucket,
                args.repo_root,
                python_env=args.python_env,
                arch=args.arch,
                wheels_dir=args.wheels_dir,
            )
    except ArtifactError as exc:
        raise CommandError(str(exc)) from exc
    for uri in uris:
        print(uri)
    return 0
