"""docs/CLI.md against the parser (issue 23): every command of `lethe --help` has a row in the
"Commands" tables, every row names a real command, and each row lists exactly the options of
its command's `--help` (both ways). The options every deployment command shares (`--state-file`,
`--stack-name`, `--profile`, `--region`) and `-h` are documented once, in "Global options" and
"Choosing the deployment", and are checked there."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from lethe.cli import build_parser

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "CLI.md"
SHARED = frozenset({"--state-file", "--stack-name", "--profile", "--region", "-h", "--help"})
_OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")
_COMMAND = re.compile(r"`(lethe [^`]+)`")


def _subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    return next(
        (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
        None,
    )


def parser_commands() -> dict[str, set[str]]:
    """{"erasure find": {"--subject", ...}} for every leaf command of `lethe`."""
    found: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        sub = _subparsers(parser)
        if sub is None:
            found[" ".join(path)] = {
                option
                for action in parser._actions
                for option in action.option_strings
                if action.help != argparse.SUPPRESS
            }
            return
        for name, child in sub.choices.items():
            walk(child, (*path, name))

    walk(build_parser(), ())
    return found


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def documented_commands() -> dict[str, set[str]]:
    """{"erasure find": {options}} from the first cell of each table row under "## Commands"."""
    commands = parser_commands()
    documented: dict[str, set[str]] = {}
    for line in _section(CLI_MD.read_text(), "Commands").splitlines():
        if not line.startswith("| `lethe "):
            continue
        cell = line.split(" | ", 1)[0]
        for usage in _COMMAND.findall(cell):
            documented.setdefault(_command_of(usage, commands), set()).update(
                _OPTION.findall(usage)
            )
    return documented


def _command_of(usage: str, commands: dict[str, set[str]]) -> str:
    """The longest run of the usage's first words that is a command, else the usage itself."""
    words = usage.split()[1:]
    for n in range(len(words), 0, -1):
        if " ".join(words[:n]) in commands:
            return " ".join(words[:n])
    return usage


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands, documented = parser_commands(), documented_commands()
    assert sorted(set(commands) - set(documented)) == [], "commands without a row in CLI.md"
    assert sorted(set(documented) - set(commands)) == [], "rows of CLI.md that are no command"


@pytest.mark.parametrize("command", sorted(parser_commands()))
def test_the_row_of_each_command_lists_exactly_its_options(command: str) -> None:
    options = parser_commands()[command] - SHARED
    documented = documented_commands().get(command, set()) - SHARED
    assert sorted(options - documented) == [], f"`lethe {command}` options missing in CLI.md"
    assert sorted(documented - options) == [], f"`lethe {command}` has no such options"


def test_the_shared_options_are_documented_once() -> None:
    text = CLI_MD.read_text()
    for option in ("--version", "-q", "--quiet", "--profile", "--region"):
        assert f"`{option}" in _section(text, "Global options")
    for option in ("--state-file", "--stack-name"):
        assert f"`{option}" in _section(text, "Choosing the deployment")
    top = {o for a in build_parser()._actions for o in a.option_strings}
    assert top - {"-h", "--help"} == {"--version", "-q", "--quiet", "--profile", "--region"}
