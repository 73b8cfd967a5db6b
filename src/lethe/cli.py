"""The `lethe` command: argparse groups from lethe.commands (see that package's docstring).

Exit statuses are `lethe.commands.ExitCode` (docs/CLI.md): errors that are not a
`CommandError` are mapped here, so that a missing credential or an unreachable endpoint exits 4
with a message that says what to do, whichever command met it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from types import ModuleType

from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from requests.exceptions import ConnectionError as HttpConnectionError

import lethe
from lethe.commands import GROUPS, CommandError, ExitCode
from lethe.target import CREDENTIALS_CHAIN, LOCAL_HINT, add_aws_arguments
from lethe_shared.aws.errors import is_credentials_refused


def version() -> str:
    """The installed distribution's version; the package's own when run from source."""
    try:
        return distribution_version("lethe")
    except PackageNotFoundError:
        return lethe.__version__


def _groups() -> list[ModuleType]:
    return [importlib.import_module(f"lethe.commands.{name}") for name in GROUPS]


def build_parser(groups: list[ModuleType] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lethe",
        description="Lethe: a serverless data lake on AWS that can forget.",
        epilog="Exit statuses: 0 ok, 1 failed, 2 usage, 3 not found, 4 target unreachable or "
        "not configured, 5 erasure not done (--wait), 130 interrupted (docs/CLI.md).",
    )
    parser.add_argument("--version", action="version", version=f"lethe {version()}")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress output on stderr (progress is off anyway when stderr is no terminal)",
    )
    add_aws_arguments(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for module in groups if groups is not None else _groups():
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    groups = _groups()
    parser = build_parser(groups)
    args = parser.parse_args(argv)
    handler = getattr(args, "func", None)
    if handler is None:  # a group without a command
        parser.parse_args([*(argv if argv is not None else sys.argv[1:]), "--help"])
        return ExitCode.USAGE
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("lethe: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except CommandError as error:  # TargetError is one (exit 4)
        print(f"lethe: error: {error}", file=sys.stderr)
        return int(error.exit_code)
    except Exception as error:
        if os.environ.get("LETHE_DEBUG"):
            raise
        code, message = explain(error)
        print(f"lethe: error: {message}", file=sys.stderr)
        return code


def explain(error: Exception) -> tuple[int, str]:
    """Exit status and message for an error no command turned into a CommandError."""
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return ExitCode.UNREACHABLE, f"no usable AWS credentials ({error}): set them up in " + (
            CREDENTIALS_CHAIN
        )
    if isinstance(error, ProfileNotFound):
        return ExitCode.UNREACHABLE, f"{error}: configure it (`aws configure --profile NAME`)"
    if isinstance(error, NoRegionError):
        return ExitCode.UNREACHABLE, "no AWS region: pass --region R or set AWS_REGION"
    if isinstance(error, EndpointConnectionError | HttpConnectionError):
        return ExitCode.UNREACHABLE, f"cannot reach the deployment ({error}): {LOCAL_HINT}"
    if isinstance(error, ClientError) and is_credentials_refused(error):
        return ExitCode.UNREACHABLE, f"AWS refused the credentials ({error}): renew them " + (
            f"in {CREDENTIALS_CHAIN}"
        )
    return (
        ExitCode.FAILURE,
        f"{type(error).__name__}: {error} (LETHE_DEBUG=1 shows the traceback)",
    )


if __name__ == "__main__":
    sys.exit(main())
