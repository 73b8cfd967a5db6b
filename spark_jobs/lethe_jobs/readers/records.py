"""What the readers give: records with their source coordinates (`RawRecords`), the records a
reader rejected, the slice of an object a reader reads, and the limits they share."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lethe_jobs.errors import UnreadableFileError
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field, fold

CSV_FIELD_LIMIT = 64 * 1024 * 1024


BOM = "\ufeff"


RESERVED_PREFIX = "_lethe_"  # the ingest frame's own columns start so (validate.POSITION, ...)


MAX_JSON_DEPTH = 500  # JSON Lines: deeper lines are rejected (_parse_object)


UNDECODED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8 (surrogateescape)


TRUNCATED = "truncated gzip stream"


TRUNCATED_TAIL = (
    f"{TRUNCATED}: the record at the cut may be incomplete (only the fields before the cut"
    " are read; its text is kept under _raw)"
)


@dataclass(frozen=True)
class RejectedRecord:
    """A record the reader rejected before validation."""

    position: int
    reasons: tuple[str, ...]
    record_json: str  # the record as read, a JSON object


@dataclass(frozen=True)
class RawRecords:
    """What a reader found in one raw file."""

    table: Any  # pa.Table: POSITION (int64) first, then data columns (or RECORD for JSON Lines)
    coordinate: str  # "line" or "row"
    columns: list[str]  # data column names found in the file, in file order
    rejected: list[RejectedRecord] = field(default_factory=list)
    json_text: bool = False  # True when RECORD holds each record's JSON text (JSON Lines)
    # JSON Lines: by position, the text of each record whose field names differ from the
    # dataset's (a case variant), with the dataset's names (readers.json_names)
    named: dict[int, str] = field(default_factory=dict)

    @property
    def rows_read(self) -> int:
        return int(self.table.num_rows) + len(self.rejected)


@dataclass(frozen=True)
class Slice:
    """The part of an object a reader reads: all of it, or one piece of a large object
    (lethe_jobs.pieces). Coordinates stay those of the whole object."""

    first_line: int = 1  # text: the number, in the whole object, of the slice's first line
    header: tuple[str, ...] | None = None  # CSV: the columns, for a slice without the header
    row_groups: tuple[int, int] | None = None  # Parquet: row groups [start, end) only
    first_row: int = 0  # Parquet: the index, in the whole object, of the slice's first row

    @property
    def whole(self) -> bool:
        return self.first_line == 1 and self.row_groups is None


WHOLE = Slice()


BATCH_ROWS = 65_536  # records a reader yields at a time: what one batch costs in memory


def is_blank_row(row: list[str]) -> bool:
    """A CSV row with no field that holds more than whitespace: never a header."""
    return not any(value.strip() for value in row)


def escaped(text: str) -> str:
    """Text decoded with surrogateescape, its undecodable bytes written as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def concat_records(parts: list[RawRecords]) -> RawRecords:
    """Batches of one reader as one RawRecords (columns in order of first appearance)."""
    first = parts[0]
    columns = list(dict.fromkeys(c for p in parts for c in p.columns))
    return RawRecords(
        pa.concat_tables([p.table for p in parts]) if len(parts) > 1 else first.table,
        first.coordinate,
        columns,
        [r for p in parts for r in p.rejected],
        first.json_text,
        {position: text for p in parts for position, text in p.named.items()},
    )


class HeldBack:
    """Holds back the last item of an iteration (the record a cut may fall in)."""

    def __init__(self) -> None:
        self.item: Any = None

    def held_back(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            if self.item is not None:
                yield self.item
            self.item = item


def declared_names(names: list[str], dataset: Dataset, where: str) -> dict[str, str]:
    """Each schema column the file has -> the file's column (a CSV header's, a Parquet file's),
    found by the field-name rule (lethe_shared.datasets.field_names: the exact name, else the
    one case variant). Raises UnreadableFileError when a schema column's name is ambiguous
    among them (several case variants, none exact): which one it means cannot be told for any
    row, as for a name the file repeats."""
    found: dict[str, str] = {}
    for column in dataset.schema_:
        try:
            name = find_field(names, column.name)
        except AmbiguousFieldError as exc:
            raise UnreadableFileError(
                f"the {where} has columns {', '.join(exc.candidates)}, which differ only in"
                f" case: which one column {column.name} means cannot be told"
            ) from exc
        if name is not None:
            found[column.name] = name
    return found


def case_collisions(names: list[str]) -> list[list[str]]:
    """Groups of names that are equal ignoring case (lethe_shared.datasets.field_names.fold)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(fold(name), []).append(name)
    return [group for group in groups.values() if len(set(group)) > 1]
