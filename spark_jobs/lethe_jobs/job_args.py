"""Arguments the Spark jobs share: those of every job over one dataset's objects (index,
reconcile) and the argparse helpers every job uses (required `--key value` arguments, Glue's
flags given with a value)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.index.opening import DEFAULT_STORE, IndexLocation, parse_store

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
    # where the subject index is (lethe_shared.index.opening): optional arguments, add_index
    index_store: str
    index_bucket: str
    manifest_table: str

    @property
    def buckets(self) -> Buckets:
        return Buckets(raw=self.raw_bucket, lake=self.lake_bucket)

    @property
    def index_location(self) -> IndexLocation:
        return index_location(self.index_store, self.index_table, self.index_bucket,
                              self.manifest_table)  # fmt: skip


# The subject index's location beyond --index-table: `--index-store segments|dynamodb` (default
# segments), `--index-bucket` and `--manifest-table` (the segment store's bucket and manifest).
INDEX_ARGUMENTS = ("index_store", "index_bucket", "manifest_table")
DATASET_JOB_ARGUMENTS = tuple(
    f for f in DatasetJobArgs.__dataclass_fields__ if f not in INDEX_ARGUMENTS
)


def add_index(parser: argparse.ArgumentParser) -> None:
    """The optional index location arguments (INDEX_ARGUMENTS)."""
    parser.add_argument("--index-store", dest="index_store", default=DEFAULT_STORE.value)
    parser.add_argument("--index-bucket", dest="index_bucket", default="")
    parser.add_argument("--manifest-table", dest="manifest_table", default="")


def index_location(store: str, table: str, bucket: str, manifest_table: str) -> IndexLocation:
    """The index location of a job's arguments; ConfigurationError when incomplete."""
    return IndexLocation(parse_store(store), table, bucket, manifest_table)


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
