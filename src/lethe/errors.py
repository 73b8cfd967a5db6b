"""The exit statuses of `lethe` and the user-facing errors that carry them.

Lower than `lethe.commands` and `lethe.target`, which both raise them; `lethe.commands`
re-exports every name here (the conventions are in its docstring).
"""

from __future__ import annotations

from enum import IntEnum


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
