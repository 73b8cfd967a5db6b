"""The subjects of rows as the Spark jobs' readers give them: each row's location and the
canonical text of each subject column (`SubjectRows`, hashed by lethe_shared.subject_hashing).
Ingestion, indexing and erasure read a raw object's or a quarantine file's subjects here, so a
row has the same subject whichever job reads it.

- raw objects (`raw_subject_rows`): every record the readers give (rejected ones too), typed as
  the ingest validation types them (`subject_hashing.values`); located by line (CSV, JSON
  Lines) or row (Parquet);
- the ingest job's typed values (`with_typed_subjects`): Spark's value where it is not null;
- quarantine files (`quarantine_subject_rows`): each line's `record`, located by its line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.readers import RawRecords
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets.document import Dataset
from lethe_shared.subject_hashing.records import (
    SubjectRows,
    column_texts,
    json_object,
    record_heads,
    record_texts,
)


def raw_subject_rows(records: RawRecords, dataset: Dataset) -> SubjectRows:
    """Every record of a raw object (those the reader rejected too) with its subject values as
    read, typed as validation would type them."""
    table = records.table
    positions = [int(p) for p in table.column(POSITION).to_pylist()]
    if records.json_text:
        documents = [json_object(t) or {} for t in table.column(RECORD).to_pylist()]
        texts = record_texts(dataset, record_heads(dataset, documents), len(positions), True)
    else:
        texts = [column.to_pylist() for column in column_texts(table, dataset)]
    rejected = [json_object(r.record_json) or {} for r in records.rejected]
    rejected_texts = record_texts(dataset, record_heads(dataset, rejected), len(rejected), True)
    return SubjectRows(
        positions + [r.position for r in records.rejected],
        [a + b for a, b in zip(texts, rejected_texts, strict=True)],
    ).sorted()


def with_typed_subjects(rows: SubjectRows, typed: Any, dataset: Dataset) -> SubjectRows:
    """`rows` with the subject values Spark typed (an Arrow table: POSITION and the subject
    columns as validation converted them) wherever Spark's value is not null."""
    index = {position: i for i, position in enumerate(rows.coordinates)}
    positions = [int(p) for p in typed.column(POSITION).to_pylist()]
    columns = [list(c) for c in rows.texts]
    typed_texts = record_texts(
        dataset,
        {n: typed.column(n).to_pylist() for n in typed.column_names if n != POSITION},
        len(positions),
        False,
    )
    for column, values in zip(columns, typed_texts, strict=True):
        for position, text in zip(positions, values, strict=True):
            if text is not None and position in index:
                column[index[position]] = text
    return SubjectRows(rows.coordinates, columns)


def quarantine_subject_rows(lines: Iterable[str], dataset: Dataset) -> SubjectRows:
    """The rows of a quarantine JSON Lines file: each line's `record` (an object; for JSON
    Lines rows the original line), located by its line. Raises UnreadableObjectError."""
    coordinates: list[int] = []
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        document = json_object(line)
        if document is None:
            raise UnreadableObjectError(f"line {number} is not a JSON object")
        coordinates.append(number)
        records.append(json_object(document.get("record")) or {})
    return SubjectRows(
        coordinates, record_texts(dataset, record_heads(dataset, records), len(records), True)
    )
