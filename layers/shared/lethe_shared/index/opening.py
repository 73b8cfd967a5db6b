"""Which subject index Lethe runs on, and the one place that opens it (issue 20).

Every component that reads or writes the subject index (the object events handler, the indexer
Lambda, the erasure steps, the ingest, index and reconcile Spark jobs, the CLI) opens it with
`open_subject_index(location, s3=..., dynamodb=...)`; none builds an adapter itself.

`IndexLocation` says where the index is:

- `segments` (the default): `SegmentSubjectIndex`, immutable sorted Parquet segments in the
  index bucket (`INDEX_BUCKET`, unversioned) and its manifest table (`INDEX_MANIFEST_TABLE`),
  lethe_shared.index.segments;
- `dynamodb`: `DynamoSubjectIndex` on `SubjectIndexTable` (`INDEX_TABLE`), kept selectable for
  the migration (`lethe index migrate` copies it into segments and verifies entry for entry).

The store is chosen by `LETHE_INDEX_STORE` (functions: the template's `IndexStore` parameter)
or the Spark jobs' `--index-store`. A location names what its store needs; otherwise
`ConfigurationError` (at cold start, before any request).

Defaults (a new dataset; an existing one keeps its width and bits): 48-bit prefixes
(`SEGMENT_HASH_BYTES = 6`) and the partition bits its document declares
(`index_partition_bits`), else SEGMENT_PARTITION_BITS. Measured on the
benchmark lake (bench/segment_store_bench.py): full digests are 18 % of the data; prefixes
with one partition 4.7 %, with 16 partitions 6.3 % (each partition has its own object table,
which lists nearly every object). Fewer partitions cost larger level-1 files: an erasure or a
compaction rewrites a partition's level-1 segment whole.

The location is a frozen dataclass of strings: it travels to Spark executors with a task, and
each executor opens its own index. pyarrow (which the segment store needs) is imported only
when segments are opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import Field

from lethe_shared.config import Settings
from lethe_shared.datasets.document import Dataset
from lethe_shared.errors import ConfigurationError
from lethe_shared.index.subject_index import DynamoSubjectIndex, SubjectIndex

STORE_VARIABLE = "LETHE_INDEX_STORE"
TABLE_VARIABLE = "INDEX_TABLE"
BUCKET_VARIABLE = "INDEX_BUCKET"
MANIFEST_VARIABLE = "INDEX_MANIFEST_TABLE"

# A NEW segment dataset's key width and partition bits (a dataset keeps what it was first
# written with: existing full-digest datasets stay full digests). 6: 48-bit prefixes of the
# keyed hashes (the shared-prefix rule, lethe_shared.index.segments.format; callers compare
# by-object answers through lethe_shared.index.subject_ids). Partition bits: see the module
# docstring ("Defaults").
SEGMENT_HASH_BYTES = 6
SEGMENT_PARTITION_BITS = 0


class DatasetSource(Protocol):
    """What the index reads a dataset's document from (a dataset registry)."""

    def get(self, dataset_id: str) -> Dataset | None: ...


class IndexStore(StrEnum):
    SEGMENTS = "segments"
    DYNAMODB = "dynamodb"


DEFAULT_STORE = IndexStore.SEGMENTS


def parse_store(value: str | None) -> IndexStore:
    """`segments` or `dynamodb` (case and surrounding blanks ignored); empty: the default."""
    word = (value or "").strip().lower()
    if not word:
        return DEFAULT_STORE
    try:
        return IndexStore(word)
    except ValueError:
        allowed = ", ".join(s.value for s in IndexStore)
        raise ConfigurationError(f"{STORE_VARIABLE}: {word!r} is not one of {allowed}") from None


@dataclass(frozen=True)
class IndexLocation:
    """Where the subject index is (module docstring)."""

    store: IndexStore = DEFAULT_STORE
    table: str = ""  # SubjectIndexTable (dynamodb)
    bucket: str = ""  # the index bucket (segments)
    manifest_table: str = ""  # the segments' manifest table (segments)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", parse_store(str(self.store)))
        if self.store is IndexStore.SEGMENTS:
            missing = [
                name
                for name, value in (
                    (BUCKET_VARIABLE, self.bucket),
                    (MANIFEST_VARIABLE, self.manifest_table),
                )
                if not value
            ]
            if missing:
                raise ConfigurationError(
                    f"the segment subject index needs {' and '.join(missing)}"
                    f" ({STORE_VARIABLE}=dynamodb selects the DynamoDB index)"
                )
        elif not self.table:
            raise ConfigurationError(f"the DynamoDB subject index needs {TABLE_VARIABLE}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> IndexLocation:
        """From a function's environment (`LETHE_INDEX_STORE`, `INDEX_TABLE`, `INDEX_BUCKET`,
        `INDEX_MANIFEST_TABLE`)."""
        return cls(
            store=parse_store(environ.get(STORE_VARIABLE)),
            table=environ.get(TABLE_VARIABLE, ""),
            bucket=environ.get(BUCKET_VARIABLE, ""),
            manifest_table=environ.get(MANIFEST_VARIABLE, ""),
        )

    @property
    def segments(self) -> bool:
        return self.store is IndexStore.SEGMENTS


class IndexSettings(Settings):
    """A handler's index variables (a base of its settings model): validated at cold start."""

    index_store: str = Field(alias=STORE_VARIABLE, default=DEFAULT_STORE.value)
    index_table: str = Field(alias=TABLE_VARIABLE, default="")
    index_bucket: str = Field(alias=BUCKET_VARIABLE, default="")
    index_manifest_table: str = Field(alias=MANIFEST_VARIABLE, default="")

    def model_post_init(self, context: Any, /) -> None:
        self.index_location  # noqa: B018 - raises ConfigurationError for an incomplete location

    @property
    def index_location(self) -> IndexLocation:
        return IndexLocation(
            parse_store(self.index_store), self.index_table, self.index_bucket,
            self.index_manifest_table,
        )  # fmt: skip


def declared_bits(datasets: DatasetSource | Dataset) -> Callable[[str], int | None]:
    """A dataset's declared partition bits (`index_partition_bits`), read when its first index
    write records them: from a registry (`get(dataset_id)`), or from the one dataset a writer
    holds (another dataset: none declared)."""
    if isinstance(datasets, Dataset):
        one = datasets
        return lambda dataset_id: one.index_partition_bits if dataset_id == one.dataset_id else None
    registry = datasets

    def of(dataset_id: str) -> int | None:
        found = registry.get(dataset_id)
        return found.index_partition_bits if found is not None else None

    return of


def open_subject_index(
    location: IndexLocation,
    *,
    s3: Any,
    dynamodb: Any,
    datasets: DatasetSource | Dataset | None = None,
) -> SubjectIndex:
    """The subject index at `location`. `s3`: a boto3 S3 client; `dynamodb`: a boto3 DynamoDB
    resource, or a callable name -> Table (lethe_shared.aws.wiring.Aws.table). `datasets`:
    where a writer finds a dataset's declared partition bits (a registry, or the one dataset
    it writes); every component that can make a dataset's first index write passes it
    (docs/DATASETS.md, "Index partitions")."""
    table = dynamodb.Table if hasattr(dynamodb, "Table") else dynamodb
    if location.store is IndexStore.DYNAMODB:
        return DynamoSubjectIndex(table(location.table))
    from lethe_shared.index.segments import SegmentSubjectIndex  # noqa: PLC0415 - pyarrow

    return SegmentSubjectIndex(
        s3, location.bucket, table(location.manifest_table),
        hash_bytes=SEGMENT_HASH_BYTES, partition_bits=SEGMENT_PARTITION_BITS,
        declared_bits=declared_bits(datasets) if datasets is not None else None,
    )  # fmt: skip
