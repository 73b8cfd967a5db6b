"""Command groups of the `lethe` CLI (`lethe <group> <command> ...`).

Each group is a module of this package, listed in GROUPS, with

    def add_parser(subparsers) -> None

that adds the group's parser and its commands, each with ``set_defaults(func=handler)``; a
handler takes the parsed ``argparse.Namespace`` and returns the exit status. `lethe.cli`
builds the parser from GROUPS in this order (the order of `lethe --help`).

Conventions shared by every group:
- exit statuses are `ExitCode` (docs/CLI.md has the table): 0 ok, 1 the operation failed,
  2 usage error (argparse's own errors exit 2 too), 3 not found, 4 target unreachable or not
  configured, 5 an erasure followed with --wait ended without erasing, 130 interrupted;
- raise `CommandError` or a subclass (`UsageError`, `NotFoundError`, `UnreachableError`) with
  a message that says what to do next: `lethe.cli` prints ``lethe: error: <message>`` on stderr
  and exits with its `exit_code`;
- every read command takes `--json` and then prints JSON only on stdout (anything else goes to
  stderr); waits show progress on stderr through `lethe.progress` (off with --quiet);
- keep module imports light (boto3 at most): the parser imports every group, so a heavy
  import slows down every command. Import heavy things inside the handler.
- commands that talk to a deployment take `lethe.target.add_target_arguments`.
"""

from __future__ import annotations

import argparse
from enum import IntEnum
from typing import Final

GROUPS: Final[tuple[str, ...]] = (
    "local",
    "datasets",
    "objects",
    "index",
    "erasure",
    "dlq",
    "trace",
    "artifacts",
    "demo",
)


class ExitCode(IntEnum):
    """The exit statuses of `lethe` (docs/CLI.md, "Exit codes")."""

    OK = 0
    FAILURE = 1  # the operation failed (a refusal, a FAILED execution, a timeout)
    USAGE = 2  # the command line is wrong (argparse exits 2 too)
    NOT_FOUND = 3  # a dataset, request, object or version that does not exist
    UNREACHABLE = 4  # no local cloud running, no stack, no credentials, no connection
    NOT_ERASED = 5  # `erasure ... --wait` ended REJECTED or EXPIRED: nothing was erased
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class CommandError(Exception):
    """A user-facing failure: its message on stderr, exit status `exit_code` (1)."""

    exit_code: int = ExitCode.FAILURE


class UsageError(CommandError):
    """The command line is wrong in a way argparse cannot see: exit status 2."""

    exit_code = ExitCode.USAGE


class NotFoundError(CommandError):
    """What the command names does not exist: exit status 3."""

    exit_code = ExitCode.NOT_FOUND


class UnreachableError(CommandError):
    """The deployment cannot be found, reached or authenticated against: exit status 4."""

    exit_code = ExitCode.UNREACHABLE


def add_subject_argument(parser: argparse.ArgumentParser) -> None:
    """`--subject ID` (repeatable), as `erasure request` and `index lookup` take it."""
    parser.add_argument(
        "--subject",
        action="append",
        default=[],
        metavar="ID",
        help="a subject id, matched in every dataset with a single subject column (repeatable)",
    )
