"""What a dataset is processed for: the optional record-of-processing fields of the dataset
document (GDPR Art. 30(1)) and its retention period (Art. 5(1)(e), storage limitation).

All of them are optional and additive (the dataset document is a contract, docs/ARCHITECTURE.md
"Contracts": more fields are allowed). A document without them reads as before; none of them
takes part in the matching fingerprint (lethe_shared.datasets.matching), so adding or changing
them never starts a re-index.

- `purpose`: free text, why the data is processed (Art. 30(1)(b));
- `legal_basis`: one of the six lawful bases of Art. 6(1) (`LegalBasis`);
- `data_categories`: the categories of personal data (Art. 30(1)(c)), e.g. `["contact",
  "purchase history"]`;
- `recipients`: the categories of recipients the data is disclosed to (Art. 30(1)(d));
- `retention`: how long rows are kept (Art. 30(1)(f)): either `{"column": C, "days": N}` (a row
  expires N days after the date in its column C, a top-level `date` or `timestamp` column) or
  `{"object_age_days": N}` (every row of an object expires N days after the object was
  written). Expired rows are removed by the retention run (lethe_shared.datasets.retention).

`processing_record` turns a dataset into its Art. 30 record (what `lethe datasets records`
prints); `missing` names the record fields the document does not declare, so an incomplete
record is visible rather than silently empty.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, model_validator

from lethe_shared.models import Model

if TYPE_CHECKING:  # the document imports this module; only the record needs the Dataset type
    from lethe_shared.datasets.document import Dataset

MAX_RETENTION_DAYS = 36_500  # 100 years: anything longer is a typo, not a period
RETENTION_COLUMN_TYPES = frozenset({"date", "timestamp", "timestamp_ntz"})
RECORD_FIELDS = ("purpose", "legal_basis", "data_categories", "recipients", "retention")


class LegalBasis(StrEnum):
    """The six lawful bases of GDPR Art. 6(1), points (a) to (f)."""

    CONSENT = "consent"
    CONTRACT = "contract"
    LEGAL_OBLIGATION = "legal_obligation"
    VITAL_INTERESTS = "vital_interests"
    PUBLIC_TASK = "public_task"
    LEGITIMATE_INTERESTS = "legitimate_interests"

    @property
    def article(self) -> str:
        """Where the basis is written: `Art. 6(1)(a)` for consent, and so on."""
        return f"Art. 6(1)({'abcdef'[list(LegalBasis).index(self)]})"


class Retention(Model):
    """How long a dataset's rows are kept: by a date column, or by the object's age."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    column: str | None = Field(default=None, min_length=1, max_length=255)
    days: int | None = Field(default=None, ge=1, le=MAX_RETENTION_DAYS)
    object_age_days: int | None = Field(default=None, ge=1, le=MAX_RETENTION_DAYS)

    @model_validator(mode="after")
    def _one_rule(self) -> Retention:
        by_column = self.column is not None or self.days is not None
        if by_column and self.object_age_days is not None:
            raise ValueError("give either column and days, or object_age_days, not both")
        if by_column and (self.column is None or self.days is None):
            raise ValueError("a retention by column needs both column and days")
        if not by_column and self.object_age_days is None:
            raise ValueError("give column and days, or object_age_days")
        return self

    @property
    def period_days(self) -> int:
        return int(self.days if self.days is not None else self.object_age_days or 0)

    def text(self) -> str:
        """The rule in words, as the record and `lethe datasets show` print it."""
        if self.column is not None:
            return f"rows expire {self.days} day(s) after their {self.column}"
        return f"rows expire {self.object_age_days} day(s) after their object was written"

    def document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def retention_problems(dataset: Dataset) -> list[str]:
    """A retention column must be a top-level date or timestamp column of the schema."""
    retention = dataset.retention
    if retention is None or retention.column is None:
        return []
    column = retention.column
    if "." in column:
        return [f"retention.column: {column!r}: the retention column must be top level"]
    found = dataset.column_type(column)
    if found is None:
        return [f"retention.column: {column!r} is not a column of the schema"]
    if found.name not in RETENTION_COLUMN_TYPES:
        return [
            f"retention.column: {column!r} has type {found.ddl()}; a retention column must be "
            "date or timestamp"
        ]
    return []


def processing_record(dataset: Dataset) -> dict[str, Any]:
    """The dataset's record of processing (Art. 30(1)): the declared fields, its subjects and
    what is missing. Holds no subject id or value: the document has none."""
    basis = dataset.legal_basis
    record: dict[str, Any] = {
        "dataset_id": dataset.dataset_id,
        "description": dataset.description,
        "purpose": dataset.purpose,
        "legal_basis": basis.value if basis is not None else None,
        "legal_basis_article": basis.article if basis is not None else None,
        "data_categories": list(dataset.data_categories or []),
        "recipients": list(dataset.recipients or []),
        "data_subjects_identified_by": list(dataset.subject_columns),
        "retention": dataset.retention.document() if dataset.retention else None,
        "retention_text": dataset.retention.text() if dataset.retention else "not declared",
        "missing": [f for f in RECORD_FIELDS if getattr(dataset, f) in (None, [], "")],
    }
    return record


def record_lines(records: list[dict[str, Any]]) -> list[str]:
    """The records as a readable table, one block per dataset."""
    lines: list[str] = []
    for record in records:
        basis = record["legal_basis"]
        lines += [
            f"{record['dataset_id']}",
            f"  purpose:          {record['purpose'] or '-'}",
            "  legal basis:      "
            + (f"{basis} ({record['legal_basis_article']})" if basis else "-"),
            f"  data categories:  {', '.join(record['data_categories']) or '-'}",
            f"  recipients:       {', '.join(record['recipients']) or '-'}",
            f"  subjects by:      {', '.join(record['data_subjects_identified_by'])}",
            f"  retention:        {record['retention_text']}",
        ]
        if record["missing"]:
            lines.append(f"  not declared:     {', '.join(record['missing'])}")
    return lines
