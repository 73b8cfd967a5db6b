"""A lake file being written (`ingest_tasks.write._LakeFile`), without S3: its rows in source
order whatever mix of packed runs and single rows they arrive in, and its index entries,
computed every INDEX_ROWS rows, equal to the entries of the whole file at once, also when the
subject is a partition column (its value from the path)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.ingest_tasks import HINTS_KEPT, PACKED, BatchObject, TaskSettings, write
from lethe_jobs.ingest_tasks.packed import ipc_bytes
from lethe_jobs.validate import POSITION
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.arrow_entries import entry_batch
from lethe_shared.index.opening import IndexLocation, IndexStore

KEY = b"k" * 32


def _settings(subject: str) -> TaskSettings:
    dataset = parse_dataset(
        {
            "dataset_id": "ds",
            "format": "csv",
            "subject_columns": [subject],
            "partition_by": ["user_id"],
            "schema": [
                {"name": "user_id", "type": "string"},
                {"name": "buyer", "type": "string"},
                {"name": "n", "type": "int"},
            ],
        }
    )
    obj = BatchObject(0, "ds", "ds/a.csv", "v", "e", 1, "s3://raw/ds/a.csv")
    return TaskSettings(
        dataset=dataset, raw_bucket="raw", lake_bucket="lake",
        index=IndexLocation(IndexStore.DYNAMODB, table="index"), correlation_id="c",
        now="2026-01-01T00:00:00+00:00", objects={0: obj}, hash_key=KEY,
    )  # fmt: skip


def _rows(rng: random.Random, count: int) -> pa.Table:
    positions = sorted(rng.sample(range(1, 10 * count), count))
    return pa.table(
        {
            POSITION: pa.array(positions, pa.int64()),
            "buyer": pa.array([f"b{rng.randrange(40)}" for _ in positions]),
            "n": pa.array([rng.randrange(100) for _ in positions], pa.int32()),
        }
    )


def _arrivals(rng: random.Random, rows: pa.Table, runs: int) -> list[pa.Table]:
    """The rows as the writer gets them: sorted by position, some in packed runs (one input
    row each, POSITION its first row's), the others one by one, in slices of any size."""
    out: list[dict[str, Any]] = []
    at = 0
    while at < rows.num_rows:
        size = rng.randint(1, 9)
        if rng.random() < 0.5:  # a packed run: its rows and, interleaved, single rows
            run = rows.slice(at, size)
            out.append({POSITION: run[POSITION][0].as_py(), "buyer": None, "n": None,
                        PACKED: ipc_bytes(run)})  # fmt: skip
        else:
            for row in rows.slice(at, size).to_pylist():
                out.append({**row, PACKED: None})
        at += size
    # a run sorts by its first position: rows between its first and last come after it
    out.sort(key=lambda r: r[POSITION])
    table = pa.Table.from_pylist(
        out,
        schema=pa.schema([*rows.schema, pa.field(PACKED, pa.binary())]),
    )
    cuts = sorted(rng.sample(range(1, table.num_rows), min(runs, table.num_rows - 1)))
    return [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows], strict=True)]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("subject", ["buyer", "user_id"])
def test_a_lake_file_holds_its_rows_in_order_and_their_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, subject: str
) -> None:
    monkeypatch.setattr(write, "ROW_GROUP_ROWS", 7)
    monkeypatch.setattr(write, "INDEX_ROWS", 20)
    rng = random.Random(seed)
    settings = _settings(subject)
    rows = _rows(rng, rng.randint(1, 120))
    lake = write._LakeFile(settings, 0, "user_id=u1", tmp_path)

    for table in _arrivals(rng, rows, rng.randint(1, 6)):
        lake.add(table)
    lake._close_window()
    lake._flush()
    lake._index()
    lake.writer.close()

    written = pq.read_table(lake.path)
    assert written.to_pylist() == rows.select(["buyer", "n"]).to_pylist()  # in source order
    found = lake.entries.entries(lake.ref, settings.dataset, KEY)
    whole = entry_batch(written, settings.dataset, lake.ref, key=KEY)
    assert [(e.subject_hash, e.rows) for e in found] == [(e.subject_hash, e.rows) for e in whole]
    assert [e.row_hints for e in found] == [e.row_hints[:HINTS_KEPT] for e in whole]
    assert sum(e.rows for e in found) == rows.num_rows  # every row is someone's
