"""What of an object the erase job could not search for the subjects (`Gap`), found as the object
is matched (lethe_jobs.erase_rows.match). Erasure fails closed: each gap is reported with the
object (results, audit record, certificate) and makes the request INCOMPLETE; an object with a
gap is never a plain "unchanged".

- `unparseable_records`: records the reader rejected (a JSON Lines line that is not a JSON
  object, a CSV record with the wrong number of fields or with bytes that are not UTF-8, the
  record a truncated gzip stream cuts), and quarantine lines that are no JSON object or whose
  record is no JSON object or such a rejected record (it keeps the unparsed text under `_raw`,
  or fields beyond the header under `_extra_fields`), that the erasure did not remove. Their
  subjects cannot be read reliably: they are kept as they are, and counted;
- `missing_subject_column`: the object has rows but no field that a subject column names, by
  the one name rule the index uses (lethe_shared.datasets.field_names: exact, else the one case
  variant). Its rows are not matched: there is nothing to match them by;
- `ambiguous_subject_column`: several fields equal a subject column ignoring case and none
  exactly. Its rows (or, in JSON records, the records concerned) are not matched: never a guess.

CSV headers and Parquet schemas are checked once per object; JSON Lines and quarantine records
carry their own keys, so a column is missing there when no record has it, and ambiguous per
record. Details hold counts, line numbers and declared column names only, never a value or a
field name read from the object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lethe_jobs.erase_rows.model import Gap
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field, fold
from lethe_shared.subject_hashing.records import json_object

# Keys a rejected record's JSON keeps what the reader could not parse under (lethe_jobs.readers).
REJECTED_MARKERS = ("_raw", "_extra_fields")


def subject_heads(dataset: Dataset) -> list[str]:
    """The top-level fields the subject columns start with (`customer` of `customer.id`)."""
    return sorted({path.split(".")[0] for path in dataset.subject_columns})


def _missing(path: str, rows: int) -> Gap:
    return Gap(
        "missing_subject_column",
        rows,
        f"no field is subject column {path!r} (exactly, or as its one case variant): "
        f"{rows} row(s) could not be matched",
    )


def _ambiguous(path: str, candidates: int, rows: int, what: str = "row(s)") -> Gap:
    return Gap(
        "ambiguous_subject_column",
        rows,
        f"{candidates} fields equal subject column {path!r} ignoring case, none exactly: "
        f"{rows} {what} could not be matched",
    )


def unparseable(lines: Iterable[int], removed: Collection[int]) -> tuple[Gap, ...]:
    """The gap of the records at `lines` the reader could not parse, but those the erasure
    removed (their subject was readable and matched)."""
    kept = sorted(set(lines) - set(removed))
    if not kept:
        return ()
    return (
        Gap(
            "unparseable_records",
            len(kept),
            f"{len(kept)} record(s) that could not be parsed are kept as they are, their subjects "
            f"unread (first at line {kept[0]})",
        ),
    )


def header_fields(
    names: Iterable[str], dataset: Dataset, rows: int
) -> tuple[dict[str, str], tuple[Gap, ...]]:
    """A CSV header (or any flat list of columns): each subject head -> the column that holds
    it, and the gaps of heads no column (or several) holds. No rows: no gap."""
    available = list(names)
    fields: dict[str, str] = {}
    gaps: list[Gap] = []
    for head in subject_heads(dataset):
        try:
            found = find_field(available, head)
        except AmbiguousFieldError as exc:
            gaps.append(_ambiguous(head, len(exc.candidates), rows))
            continue
        if found is None:
            gaps.append(_missing(head, rows))
        else:
            fields[head] = found
    return fields, (tuple(gaps) if rows else ())


def parquet_fields(
    schema: Any, dataset: Dataset, rows: int, constants: Mapping[str, Any]
) -> tuple[dict[str, str], tuple[Gap, ...]]:
    """A Parquet schema: each subject head held by a column -> that column's name (heads the
    key's partition values give are not columns), and the gaps of subject paths no field (or
    several) holds, struct fields included. A field of JSON text is checked row by row by the
    matcher (a null there is nobody's). No rows: no gap."""
    names = list(schema.names)
    fields: dict[str, str] = {}
    gaps: list[Gap] = []
    for path in dataset.subject_columns:
        head, *rest = path.split(".")
        try:
            found = find_field([*names, *constants], head)
            if found is None:
                gaps.append(_missing(path, rows))
                continue
            if found in constants:
                continue
            fields[head] = found
            if not _struct_path(schema.field(found).type, rest):
                gaps.append(_missing(path, rows))
        except AmbiguousFieldError as exc:
            gaps.append(_ambiguous(path, len(exc.candidates), rows))
    return fields, (tuple(gaps) if rows else ())


def _struct_path(kind: Any, parts: list[str]) -> bool:
    """Whether the fields `parts` exist below a column of type `kind`. Raises
    AmbiguousFieldError."""
    for part in parts:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return True  # JSON text: read row by row
        if not pa.types.is_struct(kind):
            return False
        children = [kind.field(i).name for i in range(kind.num_fields)]
        found = find_field(children, part)
        if found is None:
            return False
        kind = kind.field(children.index(found)).type
    return True


@dataclass
class JsonRecords:
    """The keys of JSON records (JSON Lines lines, quarantine records), gathered as they are
    read: which fields some record has, and how many records hold several case variants of a
    subject head and none exactly (ambiguous for that record)."""

    heads: list[str]
    names: dict[str, None] = field(default_factory=dict)  # an ordered set
    records: int = 0
    ambiguous: dict[str, tuple[int, int]] = field(default_factory=dict)  # head -> (records, most)

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        self.names.update(dict.fromkeys(record))
        for head in self.heads:
            if head in record:
                continue
            variants = sum(1 for name in record if fold(name) == fold(head))
            if variants > 1:
                count, most = self.ambiguous.get(head, (0, 0))
                self.ambiguous[head] = (count + 1, max(most, variants))

    def gaps(self) -> tuple[Gap, ...]:
        """A head no record has is missing (every record is unmatched); records with several
        variants of a head are ambiguous."""
        found: list[Gap] = []
        for head in self.heads:
            if self.records and not any(fold(name) == fold(head) for name in self.names):
                found.append(_missing(head, self.records))
            elif head in self.ambiguous:
                count, most = self.ambiguous[head]
                found.append(_ambiguous(head, most, count, "record(s)"))
        return tuple(found)


def json_record_gaps(
    names: Iterable[str], rows: int, texts: Callable[[], Iterable[str | None]], dataset: Dataset
) -> tuple[Gap, ...]:
    """The column gaps of `rows` JSON Lines records: `names`, the union of their keys, shows the
    missing heads at once; only when it holds two or more case variants of a head are the
    records (`texts()`, their JSON) read one by one, to count those ambiguous (`JsonRecords`)."""
    collected = JsonRecords(subject_heads(dataset), dict.fromkeys(names))
    folded = [fold(name) for name in collected.names]
    if not any(
        folded.count(fold(head)) - (head in collected.names) > 1 for head in collected.heads
    ):
        collected.records = rows
        return collected.gaps()
    for text in texts():
        collected.add(json_object(text) or {})
    return collected.gaps()


def is_rejected_record(record: Any) -> bool:
    """A quarantine line's record the reader could not parse: not a JSON object, or a rejected
    record keeping unparsed text (`_raw`) or fields beyond the header (`_extra_fields`)."""
    document = json_object(record)
    return document is None or any(marker in document for marker in REJECTED_MARKERS)
