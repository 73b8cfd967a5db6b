"""`--subject-key`: one syntax for every command that names a subject by a composite key.

Each `--subject-key` is one whole key, `COLUMN=VALUE[,COLUMN=VALUE...]` (e.g.
`tenant=acme,user_id=42`), and the flag is repeatable, one subject per flag. `erasure request`,
`erasure find` and `index lookup` take it so (docs/CLI.md). Everything after a column's first
`=` is its value; a comma or a backslash inside a value is written `\\,` or `\\\\`.

Until issue 23, `index lookup` took one `COLUMN=VALUE` per flag; given the request form, it
hashed `acme,user_id=42` as the tenant and found nothing, which reads as "the subject holds no
data". So the other form is refused, never hashed: several flags that each name one different
column (`--subject-key tenant=acme --subject-key user_id=42`) are a usage error (exit 2) whose
message shows the one-flag form. A subject of a dataset with a single subject column is
`--subject ID` (with `--dataset D` to limit where it is looked up).

Values are personal data: errors name columns at most, never a value.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Final

from lethe.errors import UsageError

METAVAR: Final = "COLUMN=VALUE[,COLUMN=VALUE...]"
HELP: Final = (
    "one composite subject key: COLUMN=VALUE[,COLUMN=VALUE...], e.g. tenant=acme,user_id=42 "
    "(repeatable, one whole key each; one COLUMN=VALUE per flag is refused). Everything after a "
    "column's first '=' is its value; write a comma or backslash inside a value as \\, or \\\\. "
    "Values are sent as strings, also those that look like numbers: they are canonicalised to "
    "the dataset's column types"
)


def parse_subject_key(text: str) -> dict[str, str]:
    """`tenant=acme,user_id=42` -> {"tenant": "acme", "user_id": "42"}; `\\,` and `\\\\` escape
    a comma and a backslash. Errors (argparse's, exit 2) name columns at most, never a value."""
    key: dict[str, str] = {}
    for part in _split_unescaped(text):
        column, sep, value = part.partition("=")
        column = column.strip()
        if not sep or not column:
            raise argparse.ArgumentTypeError(
                f"takes {METAVAR} (a comma inside a value is written \\,)"  # value not echoed
            )
        if column in key:
            raise argparse.ArgumentTypeError(f"names column {column} twice")
        key[column] = value
    if not key:
        raise argparse.ArgumentTypeError(f"takes {METAVAR}")
    return key


def _split_unescaped(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            following = next(chars, None)
            if following not in {",", "\\"}:
                raise argparse.ArgumentTypeError(r"a backslash escapes only \, and \\")
            current.append(following)
        elif char == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def add_subject_key_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--subject-key",
        action="append",
        default=[],
        type=parse_subject_key,
        metavar=METAVAR,
        help=HELP,
    )


def check_subject_keys(keys: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The keys, or UsageError when they are written one column per flag (module docstring):
    two or more flags of one column each, naming different columns."""
    singles = sorted({column for key in keys if len(key) == 1 for column in key})
    if len(singles) > 1:
        columns = ", ".join(singles)
        example = ",".join(f"{c}=..." for c in singles)
        raise UsageError(
            f"--subject-key is one whole key per flag; these flags name one column each "
            f"({columns}). If they are one subject, give them in one flag: "
            f"--subject-key {example}. A subject of a dataset with a single subject column is "
            "--subject ID (add --dataset D to look it up only there). Nothing was looked up "
            "or filed"
        )
    return list(keys)
