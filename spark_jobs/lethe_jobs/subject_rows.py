"""The subjects of rows as the Spark jobs' readers give them: each row's location and the
canonical text of each subject column (`SubjectRows`, hashed by lethe_shared.subject_hashing).
Ingestion, indexing and erasure read a raw object's or a quarantine file's subjects here, so a
row has the same subject whichever job reads it.

- raw objects (`raw_subject_rows`): every record the readers give (rejected ones too), typed as
  the ingest validation types them (`subject_hashing.values`); located by line (CSV, JSON
  Lines) or row (Parquet);
- the ingest job's typed values (`with_typed_subjects`): Spark's value where it is not null;
- quarantine files (`quarantine_subject_rows`): each line's `record`, located by its line.

Every subject column is found by the field-name rule (`lethe_shared.datasets.field_names`, as
ingestion conforms the file): the exact name, else the one case variant, never by position; a
row whose subject field is ambiguous is held once per reading (`SubjectRows.ambiguous`:
indexed under each, never matched by erasure on a guess).
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
    record_subject_rows,
    typed_subject_rows,
)


def raw_subject_rows(records: RawRecords, dataset: Dataset) -> SubjectRows:
    """Every record of a raw object (those the reader rejected too) with its subject values as
    read, typed as validation would type them."""
    table = records.table
    positions = [int(p) for p in table.column(POSITION).to_pylist()]
    if records.json_text:
        documents = [json_object(t) or {} for t in table.column(RECORD).to_pylist()]
        read = record_subject_rows(dataset, documents, positions)
    else:
        read = typed_subject_rows(table, dataset, positions)
    if not records.rejected:
        return read.sorted()
    rejected = record_subject_rows(
        dataset,
        [json_object(r.record_json) or {} for r in records.rejected],
        [r.position for r in records.rejected],
    )
    ambiguity = read.ambiguity or rejected.ambiguity
    return SubjectRows(
        read.coordinates + rejected.coordinates,
        [a + b for a, b in zip(read.texts, rejected.texts, strict=True)],
        read.ambiguous + rejected.ambiguous,
        ambiguity,
    ).sorted()


def with_typed_subjects(rows: SubjectRows, typed: Any, dataset: Dataset) -> SubjectRows:
    """`rows` with the subject values Spark typed (an Arrow table: POSITION and the subject
    columns as validation converted them, under their declared names) wherever Spark's value
    is not null (a row Spark typed was valid: its subject was never ambiguous)."""
    index = {position: i for i, position in enumerate(rows.coordinates)}
    positions = [int(p) for p in typed.column(POSITION).to_pylist()]
    columns = [list(c) for c in rows.texts]
    typed_texts = [c.to_pylist() for c in column_texts(typed, dataset)]
    for column, values in zip(columns, typed_texts, strict=True):
        for position, text in zip(positions, values, strict=True):
            if text is not None and position in index:
                column[index[position]] = text
    return SubjectRows(rows.coordinates, columns, rows.ambiguous, rows.ambiguity)


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
    return record_subject_rows(dataset, records, coordinates)
