"""The ingest writers' entries as columns (`CountedEntries`) give what the models gave: the
accumulator adds up the same rows and hints as before (the implementation before, kept here
verbatim as the reference), its entries are the same models, the segment store writes the same
wide rows from the columns as from the models, and `wide_rows` / `subject_ids` without a Python
call per hash give what the loop gives (prefix collisions, hashes that are not lowercase, and
refused hashes included)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pytest

from lethe_jobs.ingest_tasks import HINTS_KEPT, EntryAccumulator
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.index.arrow_entries import ObjectRef, entry_pin
from lethe_shared.index.counted_entries import CountedEntries, models_like
from lethe_shared.index.maintenance import replace_many
from lethe_shared.index.segments.format import (
    HASH_BYTES,
    OBJECT_FIELDS,
    PREFIX_BYTES,
    WIDE_SCHEMA,
    subject_id,
    subject_ids,
    subject_key,
    wide_rows,
)
from lethe_shared.index.segments.index import object_write
from lethe_shared.index.subject_index import EntryBatch, IndexEntry


# ---------------------------------------------------------------- the reference (before)
class ReferenceAccumulator:
    """EntryAccumulator's add_batch and entries before the columns (d7014d0), verbatim."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.hints: dict[str, list[int]] = {}

    def add_batch(self, batch: EntryBatch, offset: int = 0) -> None:
        hints, start = batch.row_hints, 0
        for subject, end in zip(batch.subject_hashes, batch.ends, strict=True):
            kept = self.hints.get(subject)
            if kept is None:
                self.rows[subject] = end - start
                self.hints[subject] = [
                    h + offset for h in hints[start : min(end, start + HINTS_KEPT)]
                ]
            else:
                self.rows[subject] += end - start
                if len(kept) < HINTS_KEPT:
                    room = start + HINTS_KEPT - len(kept)
                    kept.extend(h + offset for h in hints[start : min(end, room)])
            start = end

    def entries(self, ref: ObjectRef, dataset: Dataset, key: bytes) -> list[IndexEntry]:
        if not self.rows:
            return []
        pin = entry_pin(dataset, key)
        template = IndexEntry(
            subject_hash="0" * 64,
            object_url=ref.object_url,
            dataset_id=dataset.dataset_id,
            zone=ref.zone,
            format=ref.format,
            rows=1,
            row_hints=(),
            version_id=ref.version_id,
            etag=ref.etag,
            matching_fingerprint=pin.matching_fingerprint,
            key_fingerprint=pin.key_fingerprint,
        )
        hints = self.hints
        return models_like(
            template,
            (
                (subject, rows, tuple(sorted(hints[subject])[:HINTS_KEPT]))
                for subject, rows in sorted(self.rows.items())
            ),
        )


def reference_wide_rows(
    hashes: Sequence[str], rows: Sequence[int], fields: dict[str, str], width: int = HASH_BYTES
) -> pa.Table:
    """segments.format.wide_rows before (d7014d0), verbatim."""
    keyed: dict[bytes, list[int]] = {}
    seen: set[str] = set()
    for h, n in zip(hashes, rows, strict=True):
        held = keyed.setdefault(subject_key(h, width), [0, 0])
        held[0] += n
        held[1] += 0 if h in seen else 1
        seen.add(h)
    count = len(keyed)
    columns: dict[str, pa.Array] = {
        "subject_hash": pa.array(list(keyed), pa.binary()),
        "rows": pa.array([v[0] for v in keyed.values()], pa.int32()),
        "subjects": pa.array([v[1] for v in keyed.values()], pa.int32()),
    }
    for name in OBJECT_FIELDS:
        columns[name] = pa.array([fields[name]] * count, pa.string())
    return pa.Table.from_pydict({n: columns[n] for n in WIDE_SCHEMA.names}, schema=WIDE_SCHEMA)


# ---------------------------------------------------------------- helpers
DATASET = parse_dataset(
    {
        "dataset_id": "ds",
        "format": "csv",
        "subject_columns": ["user_id"],
        "partition_by": [],
        "schema": [{"name": "user_id", "type": "string"}],
    }
)
KEY = b"k" * 32
REF = ObjectRef("s3://lake/ds/part-1.parquet", Zone.LAKE, "parquet", "v7", "e7")


def digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def random_batch(rng: random.Random, subjects: list[str], rows: int) -> EntryBatch:
    """An EntryBatch as `entry_batch` gives it: hashes ascending, each subject's rows
    ascending, every row of the batch one subject's."""
    owner = [rng.choice(subjects) for _ in range(rows)]
    by_subject: dict[str, list[int]] = {}
    for row, subject in enumerate(owner):
        by_subject.setdefault(subject, []).append(row)
    hashes = sorted(by_subject)
    ends, hints = [], []
    for h in hashes:
        hints.extend(by_subject[h])
        ends.append(len(hints))
    return EntryBatch(
        object_url=REF.object_url,
        dataset_id="ds",
        zone=Zone.LAKE,
        format="parquet",
        subject_hashes=hashes,
        ends=ends,
        row_hints=hints,
    )


def comparable(entries: Iterable[IndexEntry]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (e.model_dump(exclude={"updated_at"}), e.to_item() | {"updated_at": ""}) for e in entries
    ]


# ---------------------------------------------------------------- the accumulator
@pytest.mark.parametrize("seed", range(40))
def test_accumulated_entries_equal_the_reference(seed: int) -> None:
    """Batches added up with Arrow (held, merged every few batches and at the end) give the
    entries the dictionaries gave, and so do the dictionaries once read (`rows`)."""
    rng = random.Random(seed)
    subjects = [digest(rng.randrange(10_000)) for _ in range(rng.randint(1, 60))]
    new, spread, old = EntryAccumulator(), EntryAccumulator(), ReferenceAccumulator()
    offset = 0
    for _ in range(rng.choice([rng.randint(1, 5), rng.randint(9, 25)])):
        found = random_batch(rng, subjects, rng.randint(1, 400))
        at = rng.choice([0, offset])  # offsets: 0 (a raw object's lines), or rows before
        for accumulator in (new, spread, old):
            accumulator.add_batch(found, at)
        offset += found.total_rows
    assert spread.rows == old.rows
    assert spread.hints == old.hints

    built, expected = new.entries(REF, DATASET, KEY), old.entries(REF, DATASET, KEY)

    assert not new._rows  # added up with Arrow: no dictionary was built
    assert isinstance(built, CountedEntries)
    assert len(built) == len(expected)
    assert comparable(built) == comparable(expected)
    assert [e.model_fields_set for e in built] == [e.model_fields_set for e in expected]
    assert list(built.subject_hashes) == [e.subject_hash for e in expected]
    assert built.rows == [e.rows for e in expected]
    assert comparable([built[0], *built[1:]]) == comparable(expected)
    assert comparable(spread.entries(REF, DATASET, KEY)) == comparable(expected)
    assert new.rows == old.rows  # read after the merge: the dictionaries from it
    assert new.hints == old.hints


@pytest.mark.parametrize("seed", range(20))
def test_pieces_partial_entries_add_up_to_the_whole_objects(seed: int) -> None:
    """A split object: each piece's accumulator over its own lines, its `partial` table added
    to one accumulator in line order (`add_partial`, as the raw entries writer does), gives
    the entries of one accumulator over every batch; so does a table added to dictionaries."""
    rng = random.Random(seed)
    subjects = [digest(rng.randrange(10_000)) for _ in range(rng.randint(1, 40))]
    whole, pieces, offset = ReferenceAccumulator(), [], 0
    for _ in range(rng.randint(1, 4)):  # the pieces, in line order
        piece = EntryAccumulator()
        for _ in range(rng.randint(1, 12)):
            found = random_batch(rng, subjects, rng.randint(1, 300))
            piece.add_batch(found, offset)
            whole.add_batch(found, offset)
            offset += found.total_rows
        pieces.append(piece.partial())
    added, by_dictionaries = EntryAccumulator(), EntryAccumulator()
    by_dictionaries.add(digest(10_001), 1, [offset])  # dictionaries from the start
    for table in pieces:
        added.add_partial(table)
        by_dictionaries.add_partial(table)

    expected = whole.entries(REF, DATASET, KEY)

    assert comparable(added.entries(REF, DATASET, KEY)) == comparable(expected)
    with_extra = by_dictionaries.entries(REF, DATASET, KEY)
    assert comparable([e for e in with_extra if e.subject_hash != digest(10_001)]) == comparable(
        expected
    )


@pytest.mark.parametrize("seed", range(20))
def test_a_single_batch_gives_its_own_columns_as_the_reference_does(seed: int) -> None:
    """One batch (most objects and files): held as it is, its entries cut from its columns;
    with an offset, and equal whether or not `rows` was read first (which adds it up)."""
    rng = random.Random(seed)
    subjects = [digest(rng.randrange(10_000)) for _ in range(rng.randint(1, 60))]
    found = random_batch(rng, subjects, rng.randint(1, 400))
    at = rng.choice([0, 17, 1_000])
    held, spread, old = EntryAccumulator(), EntryAccumulator(), ReferenceAccumulator()
    for accumulator in (held, spread, old):
        accumulator.add_batch(found, at)
    assert spread.rows == old.rows  # read: added up
    assert spread.hints == old.hints

    built, expected = held.entries(REF, DATASET, KEY), old.entries(REF, DATASET, KEY)

    assert held._held is not None  # still the batch: nothing read its dictionaries
    assert isinstance(built, CountedEntries)
    assert comparable(built) == comparable(expected)
    assert list(built.subject_hashes) == [e.subject_hash for e in expected]
    assert built.rows == [e.rows for e in expected]
    assert comparable(spread.entries(REF, DATASET, KEY)) == comparable(expected)


def test_a_single_batch_whose_hashes_do_not_ascend_is_added_up() -> None:
    ordered = random_batch(random.Random(3), [digest(i) for i in range(30)], 200)
    hashes = list(reversed(ordered.subject_hashes))
    ends: list[int] = []
    hints: list[int] = []
    starts = [0, *ordered.ends[:-1]]
    by_hash = dict(zip(ordered.subject_hashes, zip(starts, ordered.ends, strict=True), strict=True))
    for h in hashes:
        first, last = by_hash[h]
        hints.extend(ordered.row_hints[first:last])
        ends.append(len(hints))
    reversed_batch = EntryBatch(
        object_url=REF.object_url, dataset_id="ds", zone=Zone.LAKE, format="parquet",
        subject_hashes=hashes, ends=ends, row_hints=hints,
    )  # fmt: skip
    found, old = EntryAccumulator(), ReferenceAccumulator()
    found.add_batch(reversed_batch)
    old.add_batch(reversed_batch)

    built = found.entries(REF, DATASET, KEY)

    assert isinstance(built, CountedEntries)
    assert list(built.subject_hashes) == sorted(hashes)
    assert comparable(built) == comparable(old.entries(REF, DATASET, KEY))


def test_an_accumulator_without_rows_has_no_entries() -> None:
    assert EntryAccumulator().entries(REF, DATASET, KEY) == []


# ---------------------------------------------------------------- the segment store's writes
@pytest.mark.parametrize("seed", range(10))
def test_the_segment_store_writes_the_same_rows_from_columns_as_from_models(seed: int) -> None:
    rng = random.Random(seed)
    found = EntryAccumulator()
    found.add_batch(random_batch(rng, [digest(i) for i in range(300)], 2_000))
    columns = found.entries(REF, DATASET, KEY)
    models = list(columns)

    by_columns = object_write(REF.object_url, columns)
    by_models = object_write(REF.object_url, models)

    assert by_columns == by_models
    fields, _, hashes, rows = by_columns
    for width in (HASH_BYTES, PREFIX_BYTES):
        assert wide_rows(hashes, rows, fields, width).equals(
            reference_wide_rows(hashes, rows, fields, width)
        )


def test_an_object_of_columns_is_refused_under_another_url() -> None:
    found = EntryAccumulator()
    found.add(digest(1), 2, [0, 1])
    with pytest.raises(ValueError, match="every entry must belong"):
        object_write("s3://lake/ds/other.parquet", found.entries(REF, DATASET, KEY))


class _Replacer:
    def __init__(self) -> None:
        self.written: list[tuple[str, Sequence[IndexEntry]]] = []

    def replace_objects(
        self, batches: Sequence[tuple[str, Sequence[IndexEntry]]]
    ) -> dict[str, int]:
        self.written.extend(batches)
        return {}


def test_replace_many_passes_columns_on_as_columns() -> None:
    found = EntryAccumulator()
    found.add(digest(1), 2, [0, 1])
    columns = found.entries(REF, DATASET, KEY)
    models = list(columns)
    index = _Replacer()

    replace_many(index, None, [("lake", "ds/part-1.parquet", columns), ("lake", "ds/b", models)])  # type: ignore[arg-type]

    assert index.written[0] == (REF.object_url, columns)
    assert index.written[0][1] is columns
    assert index.written[1] == ("s3://lake/ds/b", models)


# ---------------------------------------------------------------- wide rows and ids
FIELDS = {name: f"<{name}>" for name in OBJECT_FIELDS}


def hash_cases() -> list[tuple[str, list[str]]]:
    rng = random.Random(7)
    full = [digest(i) for i in range(500)]
    collide = [digest(1)[:12] + digest(i)[12:] for i in range(5)]  # one 6-byte prefix
    return [
        ("empty", []),
        ("full", full),
        ("shuffled", rng.sample(full, len(full))),
        ("repeated", [*full[:10], full[3], full[3]]),
        ("prefix collisions", [*full[:20], *collide]),
        ("upper case", [full[0].upper(), full[0], *full[1:4]]),
        ("prefixes", [h[:12] for h in full[:30]]),
        ("mixed lengths", [full[0], full[1][:12]]),
    ]


@pytest.mark.parametrize(("name", "hashes"), hash_cases())
@pytest.mark.parametrize("width", [HASH_BYTES, PREFIX_BYTES])
def test_wide_rows_and_ids_equal_the_loop(name: str, hashes: list[str], width: int) -> None:
    rows = [(i % 7) + 1 for i in range(len(hashes))]
    try:
        expected: Any = reference_wide_rows(hashes, rows, FIELDS, width)
    except ValueError as exc:
        expected = type(exc)
    try:
        ids: Any = [subject_id(h, width) for h in hashes]
    except ValueError as exc:
        ids = type(exc)
    if isinstance(expected, type):
        with pytest.raises(expected):
            wide_rows(hashes, rows, FIELDS, width)
    else:
        assert wide_rows(hashes, rows, FIELDS, width).equals(expected)
    if isinstance(ids, type):
        with pytest.raises(ids):
            subject_ids(hashes, width)
    else:
        assert subject_ids(hashes, width) == ids


@pytest.mark.parametrize("bad", ["g" * 64, "0" * 63, "0" * 65, " " + "0" * 63, "é" * 64])
def test_a_refused_hash_is_refused_by_both(bad: str) -> None:
    hashes = [digest(1), bad]
    refused = r"64 hex digits|fromhex"
    for width in (HASH_BYTES, PREFIX_BYTES):
        with pytest.raises(ValueError, match=refused):
            reference_wide_rows(hashes, [1, 1], FIELDS, width)
        with pytest.raises(ValueError, match=refused):
            wide_rows(hashes, [1, 1], FIELDS, width)
        with pytest.raises(ValueError, match=refused):
            subject_ids(hashes, width)


def test_wide_rows_refuses_a_row_count_missing() -> None:
    with pytest.raises(ValueError, match="one row count per hash"):
        wide_rows([digest(1), digest(2)], [1], FIELDS)
