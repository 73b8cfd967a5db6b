"""Valid CSV rows packed by the read task: rows that need nothing of Spark travel through the
JVM as a few packed rows instead of one row each.

A CSV row whose every value the read task converted already (`typed`: the canonical texts) or
that Spark passes through unchanged (a string column's text; an empty or absent text of a
typed column, which Spark makes null without a reason) is valid or rejected by rules Arrow can
apply exactly: a `nullable: false` column or a subject column without a value rejects it,
nothing else can. Such a row, when no rule rejects it (a "plain" row), gets from Spark only
its lake partition path, which for dates (or no partition columns) is `layout.partition_path`
of its values, what `ingest_pipeline.sql_partition_path` renders. So the read task puts its
plain rows, per partition path, in runs of at most `TaskSettings.pack_rows` rows, each as ONE
frame row of kind PACKED_ROWS: PACKED holds the run as an Arrow IPC stream (POSITION and the
lake file's columns, of the lake file's types), INFO its partition path, POSITION its first
row's. Every other row (a text Spark must cast or check, a reader's reason, a missing value)
goes through validation as before. The writer (`write._LakeFile`) merges each run with the
other valid rows of its lake file by POSITION, so a lake file holds the same rows, in the same
order, with the same values as when every row went through Spark (tests/spark/
test_ingest_packed.py).

Which datasets (`pack_plan`): CSV; every schema column a string or of a type the read task
converts (`typed.convertible`); top-level subject columns; no partition columns, or dates
whose longest lake key fits (`dated_partitions`). Others are not packed.

Why: validation in Spark costs the JVM a copy of every row into its own format, the cache, the
checks, the sort and a copy out to Arrow for the writer (docs/INGESTION.md, "Where the time
goes"); a run of rows costs it one value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_jobs import layout
from lethe_jobs.arrow_bridge import arrow_schema
from lethe_jobs.ingest_tasks.frame import PREREASONS, TaskSettings
from lethe_jobs.ingest_tasks.typed import typed_column, typed_indexes
from lethe_jobs.validate import POSITION, schema_of
from lethe_shared.datasets.document import DataFormat, parse_type

# the Arrow batches a writer task gets while packed runs travel: about this many bytes at most
PACK_BATCH_BYTES = 32 * 1024 * 1024
ARROW_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
DEFAULT_ARROW_RECORDS = 10_000  # Spark's default


def dated_partitions(settings: TaskSettings) -> bool:
    """Whether the dataset's partition columns are all dates (or it has none) and its longest
    lake key is within S3's and the index's limits: then a row's partition path is its dates
    as ISO text (null as HIVE_DEFAULT_PARTITION) and no valid row can get a key problem."""
    from lethe_jobs.ingest_tasks.write import key_problem  # noqa: PLC0415 (write imports this)

    dataset = settings.dataset
    names = list(dataset.partition_by)
    if not names:
        return True
    types = {c.name: parse_type(c.type).name for c in dataset.schema_}
    if any(types.get(n) != "date" for n in names):
        return False
    longest = layout.lake_key(
        dataset.dataset_id,
        layout.partition_path(names, [None] * len(names)),  # HIVE_DEFAULT_PARTITION: the longest
        settings.digest(next(iter(settings.objects))),
    )
    return key_problem(settings.lake_bucket, longest) is None


@dataclass(frozen=True)
class _Column:
    name: str
    typed: str | None  # the frame column of its converted values (a typed column)
    required: bool  # `nullable: false`, or a subject column: a row without a value is rejected


@dataclass(frozen=True)
class PackPlan:
    """How a dataset's plain rows are found and packed (module docstring)."""

    columns: tuple[_Column, ...]
    partition_by: tuple[str, ...]
    schema: pa.Schema  # of a packed run: POSITION, then the lake file's columns
    rows: int  # rows of a run at most


def pack_plan(settings: TaskSettings) -> PackPlan | None:
    """The plan of a dataset whose plain rows are packed, or None (module docstring)."""
    dataset = settings.dataset
    if settings.pack_rows < 1 or dataset.format is not DataFormat.CSV:
        return None
    if any("." in path for path in dataset.subject_columns):
        return None
    typed = set(typed_indexes(dataset))
    for index, column in enumerate(dataset.schema_):
        if index not in typed and parse_type(column.type).name != "string":
            return None
    if not dated_partitions(settings):
        return None
    subjects = set(dataset.subject_columns)
    columns = tuple(
        _Column(
            c.name,
            typed_column(i) if i in typed else None,
            not c.nullable or c.name in subjects,
        )
        for i, c in enumerate(dataset.schema_)
    )
    lake = [f for f in arrow_schema(schema_of(dataset)) if f.name not in dataset.partition_by]
    schema = pa.schema([pa.field(POSITION, pa.int64()), *lake])
    return PackPlan(columns, tuple(dataset.partition_by), schema, settings.pack_rows)


def _plain_rows(columns: dict[str, Any], plan: PackPlan) -> tuple[Any, dict[str, Any]]:
    """Which rows of a read batch are plain (a boolean array, never null), and each schema
    column's values as Spark would give them to a plain row."""
    plain = pc.equal(pc.list_value_length(columns[PREREASONS]), 0)
    values: dict[str, Any] = {}
    for column in plan.columns:
        text = columns[column.name]
        value, fits = text, None
        if column.typed is not None:
            value = columns[column.typed]
            empty = pc.or_kleene(pc.is_null(text), pc.equal(text, ""))
            fits = pc.or_kleene(pc.is_valid(value), empty)
        if column.required:
            fits = pc.is_valid(value) if fits is None else pc.and_kleene(fits, pc.is_valid(value))
        if fits is not None:
            plain = pc.and_kleene(plain, fits)
        values[column.name] = value
    return pc.fill_null(plain, False), values


@dataclass(frozen=True)
class PackedRun:
    """One packed run: its partition path, its first row's position, the Arrow IPC stream."""

    part: str
    position: int
    rows: int
    data: bytes


def pack_rows(columns: dict[str, Any], plan: PackPlan) -> tuple[Any, list[PackedRun]]:
    """The rows of a read batch (the frame's columns, `read._row_batches`) that are NOT plain
    (a boolean array), and the plain ones packed in runs (per partition path, in row order)."""
    plain, values = _plain_rows(columns, plan)
    if not pc.any(plain).as_py():
        return pc.invert(plain), []
    chosen = {name: pc.filter(array, plain) for name, array in values.items()}
    positions = pc.filter(columns[POSITION], plain)
    lake = [positions] + [chosen[f.name] for f in list(plan.schema)[1:]]
    table = pa.Table.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(lake, plan.schema, strict=True)],
        schema=plan.schema,
    )
    runs: list[PackedRun] = []
    for part, rows in _by_path(table, chosen, plan):
        for start in range(0, rows.num_rows, plan.rows):
            run = rows.slice(start, plan.rows)
            first = int(run.column(0)[0].as_py())
            runs.append(PackedRun(part, first, run.num_rows, ipc_bytes(run)))
    return pc.invert(plain), runs


def _by_path(table: pa.Table, values: dict[str, Any], plan: PackPlan) -> Iterator[tuple[str, Any]]:
    if not plan.partition_by:
        yield "", table
        return
    from lethe_jobs.ingest_tasks.write import partition_paths  # noqa: PLC0415

    dates = pa.RecordBatch.from_arrays(
        [values[n] for n in plan.partition_by], names=list(plan.partition_by)
    )
    (rendered,) = partition_paths([dates], list(plan.partition_by))
    paths = rendered.column(rendered.num_columns - 1)
    for path in pc.unique(paths).to_pylist():
        yield path, table.filter(pc.equal(paths, path))


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def ipc_bytes(table: pa.Table) -> bytes:
    """A table as an Arrow IPC stream, its buffers LZ4-compressed (what `unpack` reads): the
    JVM caches, shuffles and hands over these bytes, a third of the rows' size or less."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def unpack(data: Any) -> pa.Table:
    """A packed run's rows (POSITION and the lake file's columns)."""
    return pa.ipc.open_stream(data).read_all()


def arrow_records(biggest_run: int) -> int:
    """The Arrow batch size (rows) for the writer tasks while packed runs of up to
    `biggest_run` bytes travel: about PACK_BATCH_BYTES per batch, at least 16 rows."""
    if biggest_run <= 0:
        return DEFAULT_ARROW_RECORDS
    return max(16, min(DEFAULT_ARROW_RECORDS, PACK_BATCH_BYTES // biggest_run))
