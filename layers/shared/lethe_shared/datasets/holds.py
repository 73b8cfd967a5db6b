"""Legal holds (GDPR Art. 17(3)): data that must not be erased, for now, with a recorded reason.

A hold is either on a **dataset** (none of its rows is erased or expired) or on a **subject**
(that subject's rows are not erased or expired, in one named dataset or in every dataset
registered when the hold was added). A subject is never stored: only its keyed hash per dataset
(the hash its rows carry there, `subject_hashes`: `{dataset_id: hash}`), computed with the
current subject hash key, whose fingerprint the hold records (`key_fingerprint`).

Each hold records its `reason`, who added it (`held_by`) and when (`held_at`); releasing it
records `released_by`, `released_at` and `release_reason`, and keeps the item: a hold's history
is evidence too. Only holds without `released_at` are active.

Storage: items of `DatasetsTable` (the registry's table; this module owns the hold items,
lethe_shared.datasets.registry the dataset items, which it tells apart by their `document`), one
per dataset that has holds, keyed `dataset_id = "holds#<dataset_id>"` (`#` is never in a dataset
id), with `kind = "legal_holds"`, the dataset's holds (active and released) as a JSON list in
`holds`, and a `version` every change is conditional on. A hold that reaches several datasets is
written to each of their items in one transaction (all or nothing). So whoever applies holds
reads them with one GetItem per dataset (`active_for`: the erase job's role has no Scan);
listing every hold is a Scan (`all`, the CLI).

What a hold does (`HoldView`): erasure (lethe_shared.erasure.legal_holds) leaves the held rows
in place and names them as not erased, reason `legal_hold` (the request ends INCOMPLETE, never
COMPLETED for less); the retention run (lethe_shared.datasets.retention) keeps them. A subject
hold recorded under another hash key than the one in use cannot be matched to rows any more:
it then holds every dataset it names, whole (fail closed), until it is added again under the
current key and the old one is released.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError
from pydantic import ConfigDict, Field

from lethe_shared.aws.dynamo import scan_all
from lethe_shared.aws.errors import cancellation_reasons, is_action_condition_failed
from lethe_shared.errors import LetheError
from lethe_shared.models import Model

HOLD_PREFIX = "holds#"
HOLD_KIND = "legal_holds"
EVERY_DATASET = "*"


class HoldError(LetheError):
    """A hold cannot be added or released as asked (unknown, already released, duplicate)."""


class LegalHold(Model):
    model_config = ConfigDict(frozen=True)

    hold_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    dataset_id: str  # the dataset held, or "*": every dataset of `subject_hashes`
    subject_hashes: dict[str, str] = Field(default_factory=dict)  # {}: the whole dataset
    key_fingerprint: str = ""  # the key the subject hashes were computed with
    reason: str = Field(min_length=1, max_length=1000)
    held_by: str = Field(min_length=1, max_length=256)
    held_at: str
    released_at: str | None = None
    released_by: str | None = None
    release_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.released_at is None

    @property
    def on_subject(self) -> bool:
        return bool(self.subject_hashes)

    def datasets(self) -> tuple[str, ...]:
        """The datasets the hold reaches."""
        if self.on_subject:
            return tuple(sorted(self.subject_hashes))
        return (self.dataset_id,)

    def shown(self) -> dict[str, Any]:
        """The hold as the CLI and `datasets show` print it: the subject only as its hashes."""
        return self.model_dump(mode="json")


def new_hold(
    *,
    dataset_id: str,
    reason: str,
    held_by: str,
    subject_hashes: Mapping[str, str] | None = None,
    key_fingerprint: str = "",
    now: datetime | None = None,
) -> LegalHold:
    """A new active hold; its id derives from what it holds and when."""
    at = (now or datetime.now(UTC)).isoformat()
    hashes = dict(sorted((subject_hashes or {}).items()))
    seed = json.dumps([dataset_id, hashes, at], sort_keys=True).encode()
    return LegalHold(
        hold_id=hashlib.sha256(seed).hexdigest()[:16],
        dataset_id=dataset_id,
        subject_hashes=hashes,
        key_fingerprint=key_fingerprint if hashes else "",
        reason=reason.strip(),
        held_by=held_by.strip(),
        held_at=at,
    )


class HoldReader(Protocol):
    def active_for(self, dataset_ids: Iterable[str]) -> list[LegalHold]:
        """The active holds that reach any of these datasets (GetItem only)."""


class Holds(HoldReader, Protocol):
    def add(self, hold: LegalHold) -> LegalHold: ...

    def release(self, hold_id: str, *, by: str, reason: str) -> LegalHold: ...

    def all(self) -> list[LegalHold]: ...

    def active(self) -> list[LegalHold]: ...


def _same_scope(a: LegalHold, b: LegalHold) -> bool:
    return a.dataset_id == b.dataset_id and a.subject_hashes == b.subject_hashes


MAX_DATASETS_PER_HOLD = 100  # one DynamoDB transaction writes every dataset's item at once


class DynamoHolds:
    """Hold items of DatasetsTable, one per dataset that has holds (module docstring)."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def _read(self, dataset_id: str) -> tuple[list[LegalHold], int | None]:
        """The dataset's holds (active and released) and its item's version (None: no item)."""
        item = self._table.get_item(
            Key={"dataset_id": HOLD_PREFIX + dataset_id}, ConsistentRead=True
        ).get("Item")
        if not item:
            return [], None
        holds = [LegalHold.model_validate(h) for h in json.loads(str(item["holds"]))]
        return holds, int(item["version"])

    def _write(self, changes: Mapping[str, tuple[list[LegalHold], int | None]]) -> None:
        """Every dataset's new list at once, each conditional on the version read; HoldError
        when another change came between (nothing written)."""
        items = []
        for dataset_id, (holds, version) in sorted(changes.items()):
            # the resource's client: plain Python values, typed by boto3's transformation
            put: dict[str, Any] = {
                "TableName": self._table.name,
                "Item": {
                    "dataset_id": HOLD_PREFIX + dataset_id,
                    "kind": HOLD_KIND,
                    "holds": json.dumps([h.model_dump(mode="json") for h in holds], sort_keys=True),
                    "version": (version or 0) + 1,
                },
            }
            if version is None:
                put["ConditionExpression"] = "attribute_not_exists(dataset_id)"
            else:
                put["ConditionExpression"] = "#v = :v"
                put["ExpressionAttributeNames"] = {"#v": "version"}
                put["ExpressionAttributeValues"] = {":v": version}
            items.append({"Put": put})
        try:
            self._table.meta.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if reasons and any(is_action_condition_failed(r) for r in reasons):
                raise HoldError("the holds changed meanwhile: nothing written, try again") from exc
            raise

    def add(self, hold: LegalHold) -> LegalHold:
        """Store a new hold on every dataset it reaches, at once; HoldError when an active
        hold already holds the same thing."""
        datasets = hold.datasets()
        if len(datasets) > MAX_DATASETS_PER_HOLD:
            raise HoldError(
                f"a hold reaches at most {MAX_DATASETS_PER_HOLD} datasets: name one (--dataset)"
            )
        read = {d: self._read(d) for d in datasets}
        for holds, _ in read.values():
            for found in holds:
                if (
                    found.active
                    and _same_scope(found, hold)
                    and (found.key_fingerprint == hold.key_fingerprint)
                ):
                    raise HoldError(f"already held by hold {found.hold_id} (since {found.held_at})")
        self._write({d: ([*holds, hold], version) for d, (holds, version) in read.items()})
        return hold

    def release(
        self, hold_id: str, *, by: str, reason: str, now: datetime | None = None
    ) -> LegalHold:
        """Record the release of an active hold on every dataset it reaches (the hold stays,
        with who, when and why)."""
        found = self.get(hold_id)
        if found is None:
            raise HoldError(f"no hold {hold_id}: list them with `lethe hold list`")
        if not found.active:
            raise HoldError(f"hold {hold_id} was released already ({found.released_at})")
        released = found.model_copy(
            update={
                "released_at": (now or datetime.now(UTC)).isoformat(),
                "released_by": by.strip(),
                "release_reason": reason.strip(),
            }
        )
        changes = {}
        for dataset_id in found.datasets():
            holds, version = self._read(dataset_id)
            changes[dataset_id] = (
                [released if h.hold_id == hold_id else h for h in holds],
                version,
            )
        self._write(changes)
        return released

    def get(self, hold_id: str) -> LegalHold | None:
        return next((h for h in self.all() if h.hold_id == hold_id), None)

    def all(self) -> list[LegalHold]:
        """Every hold, active or released (a Scan: the CLI's)."""
        found: dict[str, LegalHold] = {}
        for item in scan_all(self._table):
            if item.get("kind") == HOLD_KIND:
                for raw in json.loads(str(item["holds"])):
                    hold = LegalHold.model_validate(raw)
                    found.setdefault(hold.hold_id, hold)
        return sorted(found.values(), key=lambda h: (h.held_at, h.hold_id))

    def active(self) -> list[LegalHold]:
        return [h for h in self.all() if h.active]

    def active_for(self, dataset_ids: Iterable[str]) -> list[LegalHold]:
        """The active holds reaching these datasets: one consistent GetItem per dataset, so
        the erase job and the report step need no Scan."""
        found: dict[str, LegalHold] = {}
        for dataset_id in sorted(set(dataset_ids)):
            for hold in self._read(dataset_id)[0]:
                if hold.active:
                    found.setdefault(hold.hold_id, hold)
        return sorted(found.values(), key=lambda h: (h.held_at, h.hold_id))


def is_hold_item(item: Mapping[str, Any]) -> bool:
    """Whether a DatasetsTable item holds legal holds (the registry skips them)."""
    return item.get("kind") == HOLD_KIND or str(item.get("dataset_id", "")).startswith(HOLD_PREFIX)


@dataclass(frozen=True)
class HoldView:
    """The active holds as erasure and retention apply them, under the key in use
    (`key_fingerprint`: a subject hold of another key holds its datasets whole)."""

    holds: tuple[LegalHold, ...]
    key_fingerprint: str

    @classmethod
    def of(cls, holds: Iterable[LegalHold], key_fingerprint: str) -> HoldView:
        return cls(tuple(h for h in holds if h.active), key_fingerprint)

    def dataset_hold(self, dataset_id: str) -> LegalHold | None:
        """The hold that holds the whole dataset: a dataset hold, or a subject hold of another
        key than the one in use that names the dataset (fail closed)."""
        for hold in self.holds:
            if not hold.on_subject and hold.dataset_id == dataset_id:
                return hold
            if (
                hold.on_subject
                and dataset_id in hold.subject_hashes
                and hold.key_fingerprint != self.key_fingerprint
            ):
                return hold
        return None

    def subject_holds(self, dataset_id: str) -> dict[str, LegalHold]:
        """The held subject hashes of a dataset under the key in use, each with its hold."""
        found: dict[str, LegalHold] = {}
        for hold in self.holds:
            if hold.key_fingerprint == self.key_fingerprint and dataset_id in hold.subject_hashes:
                found.setdefault(hold.subject_hashes[dataset_id], hold)
        return found

    def datasets(self) -> set[str]:
        return {d for h in self.holds for d in h.datasets()}


def hold_line(hold: LegalHold) -> str:
    """One hold in words: what it holds, who, when and why (hashes only, never an id)."""
    if hold.on_subject:
        where = (
            ", ".join(sorted(hold.subject_hashes))
            if hold.dataset_id == EVERY_DATASET
            else hold.dataset_id
        )
        what = f"subject {next(iter(hold.subject_hashes.values()))[:16]}… in {where}"
    else:
        what = f"dataset {hold.dataset_id}"
    state = "active" if hold.active else f"released {hold.released_at} by {hold.released_by}"
    return f"{hold.hold_id}  {what}  by {hold.held_by} at {hold.held_at}: {hold.reason} [{state}]"
