"""Arguments the Spark jobs share: those of every job over one dataset's objects (index,
reconcile) and the argparse helpers every job uses (required `--key value` arguments, Glue's
flags given with a value)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from lethe_shared.catalog.object_catalog import Buckets

TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0"})


@dataclass(frozen=True)
class DatasetJobArgs:
    """Arguments every job over one dataset's objects takes (index, reconcile, erase)."""

    dataset_id: str
    raw_bucket: str
    lake_bucket: str
    datasets_table: str
    index_table: str
    hash_key_secret: str
    correlation_id: str

    @property
    def buckets(self) -> Buckets:
        return Buckets(raw=self.raw_bucket, lake=self.lake_bucket)


DATASET_JOB_ARGUMENTS = tuple(DatasetJobArgs.__dataclass_fields__)


def _flag(value: str) -> bool:
    """`--force` alone, or with a value (Glue passes every argument as a key and a value)."""
    word = value.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise argparse.ArgumentTypeError(f"expected true or false, found {value!r}")
    return word in TRUE_WORDS


def add_flag(parser: argparse.ArgumentParser, name: str, help_text: str) -> None:
    parser.add_argument(
        f"--{name}", type=_flag, nargs="?", const=True, default=False, help=help_text
    )


def add_required(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    for name in names:
        parser.add_argument(f"--{name.replace('_', '-')}", f"--{name}", dest=name, required=True)
