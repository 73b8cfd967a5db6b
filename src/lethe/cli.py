"""The `lethe` command: argparse groups from lethe.commands (see that package's docstring)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from lethe.commands import GROUPS, CommandError
from lethe.target import TargetError


def _groups() -> list[ModuleType]:
    return [importlib.import_module(f"lethe.commands.{name}") for name in GROUPS]


def build_parser(groups: list[ModuleType] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lethe",
        description="Lethe: a serverless data lake on AWS that can forget.",
    )
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
        return 2
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("lethe: interrupted", file=sys.stderr)
        return 130
    except (CommandError, TargetError) as error:
        print(f"lethe: error: {error}", file=sys.stderr)
        return int(getattr(error, "exit_code", 1))
    except Exception as error:
        if os.environ.get("LETHE_DEBUG"):
            raise
        print(
            f"lethe: error: {type(error).__name__}: {error} (LETHE_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
