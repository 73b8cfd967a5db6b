"""Retention (GDPR Art. 5(1)(e), storage limitation): which stored objects of a dataset hold rows
past the dataset's retention period, and the rule the row-removal core applies to them
(spark_jobs/lethe_jobs/retention_rows.py).

A dataset declares `retention` (lethe_shared.datasets.processing.Retention):

- `{"column": C, "days": N}`: a row expires when its value of the date or timestamp column C is
  before the **cutoff**, the start (00:00 UTC) of the day N days before the run's day. A
  timestamp without a zone is read as UTC. A row whose C is null, or cannot be read as a date,
  never expires by this rule: it is kept and counted (`undated`), never guessed;
- `{"object_age_days": N}`: every row of an object version written before now - N days expires.

`plan_retention` turns a dataset, its stored objects (both zones, the lake's quarantine files
included) and the legal holds into a `RetentionPlan`:

- a dataset under a legal hold (lethe_shared.datasets.holds) is not planned at all: `held_by`
  names the hold, no object is touched;
- held subjects are carried as their keyed hashes (`held_hashes`): the core keeps their rows;
- by object age: the objects written before the cutoff are `expired` (every row but held ones);
  the others are left;
- by column: a lake object partitioned by C is decided by its key (`C=<value>`): before the
  cutoff it is `expired` whole, otherwise left (a null partition: left, counted `undated`); every
  other object (raw uploads, quarantine files, lake files not partitioned by C) is `scanned`:
  the core reads C in each row.

Pure: the caller lists the objects (S3) and reads the holds (DatasetsTable).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from pydantic import ConfigDict

from lethe_shared.datasets.document import Dataset, hive_partition_values
from lethe_shared.datasets.holds import HoldView
from lethe_shared.models import Model


@dataclass(frozen=True)
class StoredObject:
    """One object of the dataset as S3 lists it: its zone ("raw" or "lake"), bucket, key and
    the time its current version was written."""

    zone: str
    bucket: str
    key: str
    last_modified: datetime


@dataclass(frozen=True)
class RetentionRule:
    """What the row-removal core applies: rows whose `column` is before `cutoff` expire
    (`column` None: every row of the object expires)."""

    column: str | None
    cutoff: datetime  # UTC

    def expired(self, value: date | datetime | None) -> bool:
        """Whether a row whose retention column holds `value` expired (None: never)."""
        if self.column is None:
            return True
        if value is None:
            return False
        if isinstance(value, datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=UTC)
            return moment < self.cutoff
        return value < self.cutoff.date()


class RetentionSpec(Model):
    """A dataset's retention rule as a run's frozen report records it
    (lethe_shared.erasure.retention_run; the erase job's RetentionMatcher): the column (None: by
    object age), the cutoff, and the held subjects' keyed hashes whose rows are kept."""

    model_config = ConfigDict(frozen=True)

    dataset_id: str
    column: str | None
    cutoff: str  # ISO 8601, UTC
    held_hashes: tuple[str, ...] = ()
    # the SHA-256 of the declared rule the run applies (rule_sha256): the run's standing
    # authorisation; the erase job refuses the run when the dataset's rule is another now
    # ("": a report made before it was recorded)
    rule_sha256: str = ""

    def rule(self) -> RetentionRule:
        return RetentionRule(self.column, datetime.fromisoformat(self.cutoff))


@dataclass(frozen=True)
class RetentionPlan:
    dataset_id: str
    rule: RetentionRule | None  # None: the dataset declares no retention
    run_at: datetime
    expired: tuple[StoredObject, ...] = ()  # every row past the period (held rows kept)
    scanned: tuple[StoredObject, ...] = ()  # rows decided one by one by the core
    left: int = 0  # objects with no expired row, decided from their key or age
    undated: int = 0  # lake objects whose partition value of the column is null
    held_by: str | None = None  # a hold of the whole dataset: nothing is planned
    held_hashes: frozenset[str] = field(default_factory=frozenset)
    rule_sha256: str = ""  # the declared rule's (rule_sha256)

    @property
    def objects(self) -> tuple[StoredObject, ...]:
        """What the run rewrites or deletes: expired and scanned objects."""
        return (*self.expired, *self.scanned)

    def spec(self) -> RetentionSpec | None:
        """The rule as a run's report records it (None: nothing to apply)."""
        if self.rule is None or self.held_by is not None:
            return None
        return RetentionSpec(
            dataset_id=self.dataset_id, column=self.rule.column,
            cutoff=self.rule.cutoff.isoformat(), held_hashes=tuple(sorted(self.held_hashes)),
            rule_sha256=self.rule_sha256,
        )  # fmt: skip

    def summary(self) -> dict[str, object]:
        """Counts, the rule and the hold: what `lethe datasets show` and the run's record say."""
        return {
            "dataset_id": self.dataset_id,
            "run_at": self.run_at.isoformat(),
            "column": self.rule.column if self.rule else None,
            "cutoff": self.rule.cutoff.isoformat() if self.rule else None,
            "expired_objects": len(self.expired),
            "scanned_objects": len(self.scanned),
            "left_objects": self.left,
            "undated_objects": self.undated,
            "held_by": self.held_by,
            "held_subjects": len(self.held_hashes),
        }


def rule_sha256(dataset: Dataset) -> str:
    """The SHA-256 of the dataset's declared retention (its id and the `retention` field as
    canonical JSON; "" without one): what a scheduled run records as its standing authorisation
    and what the erase job compares with the rule in force when it starts."""
    if dataset.retention is None:
        return ""
    document = {"dataset_id": dataset.dataset_id, "retention": dataset.retention.document()}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def retention_rule(dataset: Dataset, now: datetime) -> RetentionRule | None:
    """The dataset's rule at `now` (module docstring), or None without a retention."""
    retention = dataset.retention
    if retention is None:
        return None
    if retention.column is not None:
        day = now.astimezone(UTC).date() - timedelta(days=retention.period_days)
        return RetentionRule(retention.column, datetime.combine(day, time(), tzinfo=UTC))
    return RetentionRule(None, now.astimezone(UTC) - timedelta(days=retention.period_days))


def _partition_date(value: str) -> date | None:
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def plan_retention(
    dataset: Dataset, objects: Iterable[StoredObject], now: datetime, holds: HoldView
) -> RetentionPlan:
    """The retention plan of `dataset` at `now` (module docstring)."""
    rule = retention_rule(dataset, now)
    if rule is None:
        return RetentionPlan(dataset.dataset_id, None, now)
    hold = holds.dataset_hold(dataset.dataset_id)
    if hold is not None:
        return RetentionPlan(
            dataset.dataset_id, rule, now, held_by=hold.hold_id, rule_sha256=rule_sha256(dataset)
        )
    expired: list[StoredObject] = []
    scanned: list[StoredObject] = []
    left = undated = 0
    partitioned = rule.column is not None and rule.column in dataset.partition_by
    for item in sorted(objects, key=lambda o: (o.zone, o.key)):
        if rule.column is None:
            if item.last_modified < rule.cutoff:
                expired.append(item)
            else:
                left += 1
            continue
        values = hive_partition_values(item.key, dataset) if item.zone == "lake" else {}
        if partitioned and rule.column in values:
            text = values[rule.column]
            day = _partition_date(text) if text is not None else None
            if day is None:
                undated += 1
            elif rule.expired(day):
                expired.append(item)
            else:
                left += 1
            continue
        scanned.append(item)
    return RetentionPlan(
        dataset.dataset_id, rule, now, tuple(expired), tuple(scanned), left, undated,
        held_hashes=frozenset(holds.subject_holds(dataset.dataset_id)),
        rule_sha256=rule_sha256(dataset),
    )  # fmt: skip
