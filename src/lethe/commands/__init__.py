"""Command groups of the `lethe` CLI (`lethe <group> <command> ...`).

Each group is a module of this package, listed in GROUPS, with

    def add_parser(subparsers) -> None

that adds the group's parser and its commands, each with ``set_defaults(func=handler)``; a
handler takes the parsed ``argparse.Namespace`` and returns the exit status. `lethe.cli`
builds the parser from GROUPS in this order (the order of `lethe --help`).

Conventions shared by every group:
- exit status 0 ok, 1 runtime failure, 2 usage error (argparse's own errors exit 2 too);
- raise `CommandError` (or `UsageError`) with one clear line: `lethe.cli` prints
  ``lethe: error: <message>`` on stderr and exits with its status;
- keep module imports light (boto3 at most): the parser imports every group, so a heavy
  import slows down every command. Import heavy things inside the handler.
- commands that talk to a deployment take `lethe.target.add_target_arguments`.
"""

from __future__ import annotations

from typing import Final

GROUPS: Final[tuple[str, ...]] = (
    "local",
    "datasets",
    "objects",
    "index",
    "erasure",
    "artifacts",
    "demo",
)


class CommandError(Exception):
    """A user-facing failure: one line on stderr, exit status `exit_code` (1)."""

    exit_code = 1


class UsageError(CommandError):
    """The command line is wrong in a way argparse cannot see: exit status 2."""

    exit_code = 2
