"""The Parquet rewrite reads each row group once (lethe_jobs.erase_rows.parquet,
`_erase_in_one_read`) and matches distinct subject values with one HMAC each
(lethe_jobs.erase_rows.groups): on randomized files it must remove exactly the rows the index
gives the subjects, count them per subject as the index does, and write byte for byte the file
the two-read path writes (match, then `_rewrite_parquet`), with the same deviations."""

from __future__ import annotations

import datetime as dt
import io
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.erase_rows import (
    EraseResult,
    RowMatches,
    SubjectMatcher,
    erase_rows,
    match_rows,
)
from lethe_jobs.erase_rows import parquet as erase_parquet
from lethe_jobs.erase_rows.match import parquet_matches
from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.indexing import StoredObject, object_entries
from lethe_jobs.objects import ObjectKind
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.subject_hashing.keys import subject_hash

KEY = b"erase-one-read-unit-test-key-0123456789"
RAW, LAKE = ObjectKind.RAW, ObjectKind.LAKE_PARQUET
TEXTS = ["u1", " u1", "u1 ", "", " ", "\t", "0", "00", "-0", "Ünïcode", "x\u0000", "u2", "u3"]
INTS = [0, 1, -1, 7, 2**40, -(2**31), 10, 11, 12]
CODECS = ["snappy", "zstd", "gzip", "none"]

# the dataset's subject columns and schema, by shape
SHAPES: dict[str, dict[str, Any]] = {
    "string": {
        "subject_columns": ["user_id"],
        "schema": [{"name": "user_id", "type": "string"}, {"name": "n", "type": "long"}],
    },
    "long": {
        "subject_columns": ["user_id"],
        "schema": [{"name": "user_id", "type": "long"}, {"name": "n", "type": "long"}],
    },
    "string_typed_int": {  # raw: a string column declared int (typed per distinct value)
        "subject_columns": ["user_id"],
        "schema": [{"name": "user_id", "type": "int"}, {"name": "n", "type": "long"}],
    },
    "composite": {
        "subject_columns": ["tenant", "user_id"],
        "schema": [
            {"name": "tenant", "type": "string"},
            {"name": "user_id", "type": "string"},
            {"name": "n", "type": "long"},
        ],
    },
    "nested": {
        "subject_columns": ["customer.id"],
        "schema": [
            {"name": "customer", "type": "struct<id:string>"},
            {"name": "n", "type": "long"},
        ],
    },
    "partition": {  # lake only: the tenant comes from the key's partition value
        "subject_columns": ["tenant", "user_id"],
        "schema": [
            {"name": "tenant", "type": "string"},
            {"name": "user_id", "type": "string"},
            {"name": "n", "type": "long"},
        ],
        "partition_by": ["tenant"],
    },
}


def _dataset(shape: str) -> Dataset:
    return parse_dataset({"dataset_id": "ds", "format": "parquet", **SHAPES[shape]})


def _draw(rng: random.Random, pool: list[Any], rows: int) -> list[Any]:
    return [None if rng.random() < 0.08 else rng.choice(pool) for _ in range(rows)]


def _table(rng: random.Random, shape: str, rows: int) -> pa.Table:
    """A table of `rows` rows of the shape, with columns of other types besides."""
    columns: dict[str, Any] = {}
    if shape == "long":
        columns["user_id"] = pa.array(_draw(rng, INTS, rows), pa.int64())
    elif shape == "string_typed_int":
        columns["user_id"] = pa.array(_draw(rng, ["1", "01", "7", " 7", "x", ""], rows))
    elif shape == "nested":
        ids = _draw(rng, TEXTS, rows)
        columns["customer"] = pa.array(
            [None if rng.random() < 0.05 else {"id": i} for i in ids],
            pa.struct([("id", pa.string())]),
        )
    else:
        if shape == "composite":
            columns["tenant"] = pa.array(_draw(rng, ["acme", "beta"], rows))
        columns["user_id"] = pa.array(_draw(rng, TEXTS, rows))
    columns["n"] = pa.array(range(rows), pa.int64())
    columns["note"] = pa.array([rng.choice(["a", "bb", None, "ccc"]) for _ in range(rows)])
    columns["at"] = pa.array(
        [
            dt.datetime(2026, 1, 1) + dt.timedelta(seconds=rng.randint(0, 10**6))
            for _ in range(rows)
        ],
        pa.timestamp("us"),
    )
    columns["tags"] = pa.array(
        [[rng.choice("xyz") for _ in range(rng.randint(0, 2))] for _ in range(rows)],
        pa.list_(pa.string()),
    )
    return pa.table(columns)


def _parquet(rng: random.Random, table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=rng.choice([3, 16, 50, 1000]),
        compression=rng.choice(CODECS),
        use_dictionary=rng.random() < 0.7,
        write_statistics=rng.random() < 0.8,
        version=rng.choice(["2.6", "2.4", "1.0"]),
    )
    return sink.getvalue()


def _index(kind: ObjectKind, key: str, dataset: Dataset, path: Path, work: Path) -> dict[str, Any]:
    """subject hash -> its row hints, as the index computes them."""
    stored = StoredObject("bucket", key, "v1", "etag", path)
    return {
        e.subject_hash: e.row_hints
        for e in object_entries(kind, stored, dataset, key=KEY, workdir=work)
    }


def _two_reads(source: Path, out: Path, key: str, matcher: SubjectMatcher, raw: bool) -> Any:
    """The two-read path: match the subject columns, then rewrite."""
    matches = parquet_matches(source, key, matcher, raw=raw)
    written = 0 < matches.matched < matches.rows
    deviations = erase_parquet._rewrite_parquet(source, out, matches.positions) if written else ()
    return EraseResult.of(matches, written=written, deviations=deviations)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        ("string", RAW),
        ("string", LAKE),
        ("long", RAW),
        ("long", LAKE),
        ("string_typed_int", RAW),
        ("composite", RAW),
        ("composite", LAKE),
        ("nested", RAW),
        ("nested", LAKE),
        ("partition", LAKE),
    ],
)
def test_one_read_erases_the_index_rows_and_writes_the_two_read_bytes(
    tmp_path: Path, seed: int, shape: str, kind: ObjectKind
) -> None:
    rng = random.Random(f"{seed}-{shape}-{kind.value}")
    dataset = _dataset(shape)
    table = _table(rng, shape, rng.choice([0, 1, 5, 60, 150]))
    key = "ds/tenant=acme/part-0.parquet" if shape == "partition" else "ds/obj.parquet"
    source = tmp_path / "source.parquet"
    source.write_bytes(_parquet(rng, table))
    index = _index(kind, key, dataset, source, tmp_path)
    subjects = sorted(index)
    for pick in (0, 2, len(subjects)):  # nothing, some, everyone
        chosen = rng.sample(subjects, k=min(pick, len(subjects)))
        unknown = [f"{rng.getrandbits(256):064x}"]  # a subject the object does not hold
        matcher = SubjectMatcher(dataset, frozenset([*chosen, *unknown]), KEY)
        expected = tuple(sorted(h for c in chosen for h in index[c]))
        target, reference = tmp_path / f"one-{pick}.parquet", tmp_path / f"two-{pick}.parquet"

        result = erase_rows(kind, source, target, key, matcher, workdir=tmp_path)
        before = _two_reads(source, reference, key, matcher, raw=kind is RAW)

        assert result.positions == expected == before.positions
        assert result.rows_before == table.num_rows == before.rows_before
        assert dict(result.by_subject) == {c: len(index[c]) for c in chosen if index[c]}
        assert result.by_subject == before.by_subject
        assert result.gaps == before.gaps == ()
        assert result.written == (0 < len(expected) < table.num_rows) == before.written
        assert result.deviations == before.deviations
        assert target.exists() == result.written
        if result.written:
            assert target.read_bytes() == reference.read_bytes()
        matches = match_rows(kind, source, key, matcher, workdir=tmp_path)
        assert matches == RowMatches(table.num_rows, expected)
        assert matches.by_subject == result.by_subject


def test_row_groups_before_the_first_match_are_copied(tmp_path: Path) -> None:
    """The writer opens at the first row group with a match: the ones before are read again
    and written as they were."""
    dataset = _dataset("string")
    ids = ["a"] * 10 + ["b"] * 10 + ["c", "victim"] * 5 + ["d"] * 10
    table = pa.table({"user_id": ids, "n": pa.array(range(len(ids)), pa.int64())})
    source = tmp_path / "source.parquet"
    pq.write_table(table, source, row_group_size=10)
    index = _index(RAW, "ds/obj.parquet", dataset, source, tmp_path)
    victim = next(h for h, hints in index.items() if hints == (21, 23, 25, 27, 29))
    matcher = SubjectMatcher(dataset, frozenset([victim]), KEY)

    result = erase_rows(RAW, source, tmp_path / "out.parquet", "ds/obj.parquet", matcher,
                        workdir=tmp_path)  # fmt: skip
    before = _two_reads(source, tmp_path / "ref.parquet", "ds/obj.parquet", matcher, raw=True)

    assert result.positions == (21, 23, 25, 27, 29)
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    assert before.positions == result.positions
    after = pq.ParquetFile(tmp_path / "out.parquet")
    assert [after.metadata.row_group(i).num_rows for i in range(4)] == [10, 10, 5, 10]


def test_int96_read_at_microseconds_takes_the_two_reads(tmp_path: Path) -> None:
    """INT96 timestamps outside what nanoseconds hold are read at microseconds by the rewrite:
    such a file is matched on its subject columns first, as before, and comes out the same."""
    dataset = _dataset("string")
    table = pa.table(
        {
            "user_id": ["u1", "u2", "u1", "u3"],
            "at": pa.array(
                [dt.datetime(1, 1, 1), dt.datetime(2026, 1, 1), None, dt.datetime(9999, 1, 1)],
                pa.timestamp("us"),
            ),
        }
    )
    source = tmp_path / "source.parquet"
    pq.write_table(table, source, use_deprecated_int96_timestamps=True, row_group_size=2)
    index = _index(RAW, "ds/obj.parquet", dataset, source, tmp_path)
    victim = next(h for h, hints in index.items() if hints == (0, 2))
    matcher = SubjectMatcher(dataset, frozenset([victim]), KEY)
    assert erase_parquet._plan(source, pq.ParquetFile(source)).int96_unit == "us"

    result = erase_rows(RAW, source, tmp_path / "out.parquet", "ds/obj.parquet", matcher,
                        workdir=tmp_path)  # fmt: skip
    before = _two_reads(source, tmp_path / "ref.parquet", "ds/obj.parquet", matcher, raw=True)

    assert result.positions == before.positions == (0, 2)
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    written = pq.read_table(tmp_path / "out.parquet", coerce_int96_timestamp_unit="us")
    assert written.column("at").to_pylist() == [
        dt.datetime(2026, 1, 1),
        dt.datetime(9999, 1, 1),
    ]


def _corrupt_column(path: Path, column: str) -> None:
    """Overwrite the middle of `column`'s chunk in the first row group with other bytes."""
    chunk = next(
        c
        for c in (pq.ParquetFile(path).metadata.row_group(0).column(j) for j in range(3))
        if c.path_in_schema == column
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(start + 2, start + chunk.total_compressed_size - 2):
        data[i] = 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("erased", ["u1", "nobody"])
def test_a_column_that_cannot_be_read_behaves_as_with_two_reads(
    tmp_path: Path, erased: str
) -> None:
    """A row group that cannot be read whole (another column's chunk is corrupt): matched on
    its subject columns alone, as before; with a match the rewrite fails, without one the
    object is left as it is."""
    dataset = _dataset("string")
    table = pa.table(
        {"user_id": ["u1", "u2", "u3"] * 20, "n": pa.array(range(60), pa.int64()),
         "note": [f"note {i}" * 5 for i in range(60)]}
    )  # fmt: skip
    source = tmp_path / "source.parquet"
    pq.write_table(table, source, compression="snappy", use_dictionary=False)
    _corrupt_column(source, "note")
    with pytest.raises((OSError, pa.ArrowException)):
        pq.read_table(source)
    victim = subject_hash(KEY, dataset.subject_columns, [erased])
    matcher = SubjectMatcher(dataset, frozenset([victim]), KEY)
    target = tmp_path / "out.parquet"

    if erased == "nobody":
        result = erase_rows(LAKE, source, target, "ds/obj.parquet", matcher, workdir=tmp_path)
        assert (result.rows_before, result.positions, result.written) == (60, (), False)
        assert not target.exists()
        return
    with pytest.raises((OSError, pa.ArrowException)) as raised:
        erase_rows(LAKE, source, target, "ds/obj.parquet", matcher, workdir=tmp_path)
    assert not isinstance(raised.value, UnreadableObjectError)  # as the rewrite always failed
    assert not target.exists()
