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
from typing import Final

from lethe.errors import CommandError as CommandError
from lethe.errors import ExitCode as ExitCode
from lethe.errors import NotFoundError as NotFoundError
from lethe.errors import UnreachableError as UnreachableError
from lethe.errors import UsageError as UsageError

GROUPS: Final[tuple[str, ...]] = (
    "local",
    "datasets",
    "objects",
    "index",
    "erasure",
    "key",
    "hold",
    "dlq",
    "trace",
    "artifacts",
    "deploy",
    "demo",
)


def add_subject_argument(parser: argparse.ArgumentParser) -> None:
    """`--subject ID` (repeatable), as `erasure request` and `index lookup` take it."""
    parser.add_argument(
        "--subject",
        action="append",
        default=[],
        metavar="ID",
        help="a subject id, matched in every dataset with a single subject column (repeatable)",
    )
