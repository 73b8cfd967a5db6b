"""A dataset's matching generation: which definition the subject index was built for.

The index, and erasure after it, find a subject's rows by hashing the subject columns of each
row as the dataset document declares them. A new document that reads the same files differently
(other subject columns, another type for one, another CSV delimiter, ...) makes the existing
index entries describe rows the new definition would not find, and rows it would find that no
entry names. So every registered document has a *matching fingerprint*, a hash of exactly the
parts of the document that decide which rows match which subject hash, and a *matching
generation*: 1 when the dataset is registered, one more each time a PUT changes the fingerprint,
never anything else. The registry also keeps the *indexed generation*, the generation the
subject index has been completely rebuilt for (registry.py, reindex.py).

What the fingerprint covers (`matching_view`), and why:

- `format`: the reader (CSV, JSON Lines, Parquet);
- `compression`: `auto`, `gzip` or `none` decide whether a gzip stream is opened (for every
  format: a gzip-wrapped Parquet file is read when `auto`);
- `subject_columns`, in their order (a composite key is hashed as pairs in that order) and with
  their exact spelling (the field-name rule, field_names.py, prefers the exact name);
- each subject column's type (its canonical DDL: `integer` and `int` are the same type), and
  the canonical DDL of the top-level column it lives in, which holds the types of all its parent
  structs (`customer` for `customer.id`);
- `partition_by`, as a set (a subject column may be a partition column, whose value the lake
  keeps only in the key's `<column>=<value>` segment; the order of the segments does not change
  which values are read);
- for CSV only: `delimiter`, `quote`, `escape` and `header`; and, without a header, the names of
  every schema column in order (the reader then takes the names from the schema by position, so
  adding or moving any column moves the subject column).

What it leaves out: `dataset_id` (the registry's key), `description` and any other top-level
field the contract allows (no reader looks at them), the other columns of the schema (their
names, types and order; a JSON Lines or Parquet record and a CSV file with a header are read by
name), `nullable` (a null subject value belongs to nobody whatever the flag says), and the CSV
options of a dataset that is not CSV.

`MATCHING_SCHEME` is part of the hashed text: a change of these rules changes every fingerprint,
so each dataset's next PUT re-indexes it once. Not covered here: the subject hash key, whose
rotation changes every hash (`subject_hashing.keys.key_fingerprint` names the key).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from lethe_shared.datasets.document import DataFormat, Dataset

MATCHING_SCHEME = "lethe matching v1"
FINGERPRINT_HEX = 32  # 128 bits of SHA-256


def matching_view(dataset: Dataset) -> dict[str, Any]:
    """The parts of the document that decide which rows match which subject hash (see the
    module's list), as plain JSON values. The document must be valid (parse_dataset)."""
    tops = {path.split(".", 1)[0] for path in dataset.subject_columns}
    view: dict[str, Any] = {
        "scheme": MATCHING_SCHEME,
        "format": dataset.format.value,
        "compression": dataset.compression.value,
        "subject_columns": [[path, _ddl(dataset, path)] for path in dataset.subject_columns],
        "subject_parents": {top: _ddl(dataset, top) for top in sorted(tops)},
        "partition_by": sorted(dataset.partition_by),
    }
    if dataset.format is DataFormat.CSV:
        options = dataset.csv
        view["csv"] = {
            "delimiter": options.delimiter,
            "quote": options.quote,
            "escape": options.escape,
            "header": options.header,
        }
        if not options.header:
            view["csv"]["columns"] = [column.name for column in dataset.schema_]
    return view


def _ddl(dataset: Dataset, path: str) -> str | None:
    found = dataset.column_type(path)
    return found.ddl() if found is not None else None


def matching_fingerprint(dataset: Dataset) -> str:
    """32 hex digits of SHA-256 over the canonical JSON of `matching_view`: equal for two
    documents exactly when they match rows alike (as far as the view's rules go)."""
    text = json.dumps(matching_view(dataset), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_HEX]


@dataclass(frozen=True)
class Generations:
    """A dataset's matching state: the fingerprint of its registered document, the matching
    generation (bumped only when that fingerprint changes) and the generation the subject
    index has been rebuilt for (never above the matching generation)."""

    fingerprint: str
    matching: int
    indexed: int

    @property
    def reindex_pending(self) -> bool:
        """The index was built for an older definition: a re-index has not completed yet."""
        return self.indexed < self.matching


def next_generations(previous: Generations | None, fingerprint: str) -> Generations:
    """The generations after registering a document of `fingerprint`: a new dataset is
    generation 1, indexed (it has no data yet); the same fingerprint changes nothing; another
    one is the next generation, whose index is still the previous one's."""
    if previous is None:
        return Generations(fingerprint, 1, 1)
    if previous.fingerprint == fingerprint:
        return previous
    return Generations(fingerprint, previous.matching + 1, previous.indexed)
