"""`lethe artifacts build | upload`: the Spark job scripts and their Python dependencies.

`upload` is what a real deployment runs after `sam deploy` (make deploy-artifacts) and what
`lethe local up` does after provisioning: the Glue jobs and EMR Serverless runs of template.yaml
read s3://<ArtifactsBucket>/spark_jobs/<job>.py and .../spark_jobs/lethe_shared.zip.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import boto3

from lethe.artifacts import build_spark_artifacts, upload_spark_artifacts
from lethe.commands import UsageError
from lethe.target import add_target_arguments, resolve

REPO_ROOT = Path(__file__).resolve().parents[3]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("artifacts", help="package and upload the Spark job artifacts")
    commands = parser.add_subparsers(dest="artifacts_command", metavar="COMMAND", required=True)

    build = commands.add_parser("build", help="write the artifacts to a folder")
    build.add_argument("--out", type=Path, required=True, help="output folder")
    build.add_argument("--repo-root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    build.set_defaults(func=build_artifacts)

    upload = commands.add_parser(
        "upload", help="upload them under spark_jobs/ in the artifacts bucket"
    )
    upload.add_argument(
        "--bucket",
        help="the artifacts bucket (default: the deployment's ArtifactsBucketName output)",
    )
    upload.add_argument("--repo-root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    add_target_arguments(upload)
    upload.set_defaults(func=upload_artifacts)


def build_artifacts(args: argparse.Namespace) -> int:
    for path in build_spark_artifacts(args.repo_root, args.out):
        print(path)
    return 0


def upload_artifacts(args: argparse.Namespace) -> int:
    if args.state_file or args.stack_name:
        target = resolve(args)
        bucket = args.bucket or target.output("ArtifactsBucketName")
        s3 = target.client("s3")
    elif args.bucket:
        bucket = args.bucket
        s3 = boto3.session.Session(region_name=args.region).client("s3")
    else:
        raise UsageError("say where: --bucket B, or --state-file F / --stack-name S")
    for uri in upload_spark_artifacts(s3, bucket, args.repo_root):
        print(uri)
    return 0
