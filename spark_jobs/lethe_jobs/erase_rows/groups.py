"""Which rows of one Parquet row group belong to the subjects being erased (`group_match`): the
matching that `match.parquet_matches` runs on the subject columns it reads, and that
`parquet.erase_parquet` runs on the row groups it reads whole to rewrite them (one read of
each row group, not two).

**A row's subject is the subject index's own** (lethe_shared.subject_hashing): raw rows typed
as `raw_subject_rows` types them (`column_texts`), lake rows as `lake_object_entries` reads
them (`table_subjects`, with the key's partition values as constants).

**For one flat subject column of strings or integers** (the common shape), a row's subject
hash depends on its value alone, so each distinct value of the row group is handled once:
Arrow dictionary-encodes the column; the canonical text of each distinct value is computed as
the index computes it (`table_subjects`); each text is HMAC'd once with the index's HMAC
(`keys.hmac_sha256`: the key's pads hashed once per job, not per object) and its digest looked
up among the erased hashes as bytes; rows are then selected by their value's code with Arrow
`take`, never one by one in Python. A digest is turned into hex only when it is an erased one
(for `RowMatches.by_subject`). Any other shape (composite keys, nested paths, other types) is
hashed row by row by `row_subject_hashes` / `column_subject_hashes` as before. Both give the
rows `subject_hash` gives (tests/unit/test_column_subject_hashes.py compares them on
randomized columns).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.erase_rows.model import SubjectMatcher
from lethe_jobs.validate import POSITION
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.arrow import row_subject_hashes, table_subjects
from lethe_shared.subject_hashing.keys import hmac_sha256
from lethe_shared.subject_hashing.records import (
    column_subject_hashes,
    column_texts,
    distinct_safe,
)


@dataclass(frozen=True)
class GroupMatch:
    """The rows of a row group that match: `mask` (True: the row matches; no nulls), None when
    none does; `counts`: how many rows each erased subject hash matched."""

    mask: Any
    counts: Counter[str]

    def positions(self, offset: int) -> list[int]:
        """The matching rows' coordinates, ascending, for a row group starting at `offset`."""
        if self.mask is None:
            return []
        rows = pc.indices_nonzero(self.mask)
        return (pc.add(rows, offset) if offset else rows).to_pylist()  # type: ignore[no-any-return]


NO_MATCH = GroupMatch(None, Counter())


def group_match(group: Any, ref: ObjectRef, matcher: SubjectMatcher) -> GroupMatch:
    """The rows of `group` (a row group's subject columns under their declared names) that
    `matcher` selects."""
    dataset = matcher.dataset
    if ref.zone is Zone.RAW:  # as readers.parquet.read_parquet gives the rows to raw_subject_rows
        group = to_spark_compatible(group)
    distinct = _distinct_subjects(group, dataset)
    if distinct is not None:  # each distinct value hashed once, rows selected by its code
        values, codes = distinct
        return _distinct_match(values, codes, ref, matcher)
    hashes = _subject_hashes(group, ref, matcher)
    chosen = pc.fill_null(
        pc.is_in(hashes, value_set=pa.array(sorted(matcher.hashes), pa.string())), False
    )
    if not len(chosen) or not pc.any(chosen).as_py():
        return NO_MATCH
    return GroupMatch(chosen, hash_counts(hashes.filter(chosen)))


def _distinct_match(values: Any, codes: Any, ref: ObjectRef, matcher: SubjectMatcher) -> GroupMatch:
    """`group_match` through the distinct values of the subject column (`_distinct_subjects`):
    `values`, a table of them, and `codes`, each row's index into it (null: nobody's)."""
    dataset, key = matcher.dataset, matcher.key
    if not values.num_rows:
        return NO_MATCH
    constants = {} if ref.zone is Zone.RAW else ref.constants
    subjects = table_subjects(_subject_table(values, ref, dataset), dataset, constants, key)
    texts = subjects.texts.to_pylist()  # the canonical text of each subject, UTF-8 (None: nobody)
    if subjects.texts.null_count:
        hashed = iter(_hmac(key)([t for t in texts if t is not None]))
        digests = [None if t is None else next(hashed) for t in texts]
    else:
        digests = _hmac(key)(texts)
    wanted = _wanted(matcher.hashes)
    erased = {i: d.hex() for i, d in enumerate(digests) if d in wanted}  # text -> its hash
    if not erased:
        return NO_MATCH
    chosen = pa.array(list(erased), pa.int32())  # the erased texts
    if subjects.codes is not None:  # the values whose text is erased
        chosen = pc.indices_nonzero(pc.is_in(subjects.codes, value_set=chosen)).cast(pa.int32())
    mask = pc.is_in(codes, value_set=chosen.cast(codes.type))  # false for a null: no null
    counted = pc.value_counts(codes.filter(mask))  # rows per matched value
    matched = counted.field("values")
    if subjects.codes is not None:
        matched = pc.take(subjects.codes, matched)
    counts: Counter[str] = Counter()
    for text, rows in zip(matched.to_pylist(), counted.field("counts").to_pylist(), strict=True):
        counts[erased[text]] += rows
    return GroupMatch(mask, counts)


def _subject_table(values: Any, ref: ObjectRef, dataset: Dataset) -> Any:
    """The table `table_subjects` reads for the distinct values: raw values typed as
    `column_subject_hashes` types them (their texts under the subject column's name); lake
    values as `_subject_hashes` gives them to `row_subject_hashes`."""
    if ref.zone is Zone.RAW:
        (texts,) = column_texts(values, dataset)
        return pa.table({dataset.subject_columns[0]: texts})
    return _located(values)


def _located(table: Any) -> Any:
    positions = pa.array(np.arange(int(table.num_rows), dtype=np.int64))
    return pa.table([positions, *table.columns], names=[POSITION, *table.column_names])


@lru_cache(maxsize=8)
def _hmac(key: bytes) -> Any:
    """The index's HMAC under `key`, its pads hashed once per process and key."""
    return hmac_sha256(key)


@lru_cache(maxsize=64)
def _wanted(hashes: frozenset[str]) -> frozenset[bytes]:
    """The erased subject hashes as digests (SubjectMatcher checks they are 64 hex digits)."""
    return frozenset(bytes.fromhex(h) for h in hashes)


def hash_counts(hashes: Any) -> Counter[str]:
    """How often each hash occurs in an Arrow string array (also match.py's)."""
    if len(hashes) == 0:
        return Counter()
    counted = pc.value_counts(hashes)
    return Counter(
        dict(
            zip(
                counted.field("values").to_pylist(),
                counted.field("counts").to_pylist(),
                strict=True,
            )
        )
    )


def _subject_hashes(table: Any, ref: ObjectRef, matcher: SubjectMatcher) -> Any:
    """The subject hash of each row of `table` (a row group), hashed row by row: raw rows typed
    as `raw_subject_rows` types them, lake rows as `lake_object_entries` reads them (POSITION
    keeps the row count without columns)."""
    dataset, key = matcher.dataset, matcher.key
    if ref.zone is Zone.RAW:
        return column_subject_hashes(table, dataset, key=key)
    return row_subject_hashes(_located(table), dataset, ref.constants, key=key)


def _distinct_subjects(table: Any, dataset: Dataset) -> tuple[Any, Any] | None:
    """For a dataset with one flat subject column of strings or integers in `table`: a table of
    its distinct values and each row's code into it (null for a null value: nobody's). A row's
    subject hash depends on its value alone, so hashing the distinct values selects the same
    rows. None for any other shape (composite keys, nested paths, other types)."""
    if len(dataset.subject_columns) != 1:
        return None
    path = dataset.subject_columns[0]
    if "." in path or path not in table.column_names:
        return None
    column = table.column(path)
    if not distinct_safe(column.type):
        return None
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = pc.dictionary_encode(array)
    return pa.table({path: encoded.dictionary}), encoded.indices
