"""Which rows of a segment are what: the one rule every reader applies (lookup, the object
reads, compaction, erasure). Pure: no AWS.

A row is (subject hash h, object O, origin_seq o): O's entry for h as written by the segment
write `o` (compaction and erasure keep `o`). The object's pointer (a manifest item) says which
write is current, from which write on older rows still count (`floor`), and whether the key's
current version is a delete marker (`deleted`):

| pointer | row | status | entry |
|---|---|---|---|
| none | any | dead | none |
| current == "" (removed) | any | dead | none |
| any | o < floor | dead (the older versions holding it are gone) | none |
| any | o > current | dead (a write not committed, or that lost to a newer one) | none |
| not deleted | o == current | current | deleted=False |
| deleted | o == current | older but live | deleted=True |
| any | floor <= o < current | older but live | deleted=True |

Several live rows of (h, O): the one with the highest origin gives the entry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class RowStatus(enum.Enum):
    CURRENT = "current"
    OLDER = "older"  # live, in older versions only: the entry is flagged deleted
    DEAD = "dead"


@dataclass(frozen=True)
class Pointer:
    """An object's pointer (manifest item `obj#<dataset>` / `<object_url>`)."""

    object_url: str
    current: str = ""
    version_id: str = ""
    etag: str = ""
    floor: str = ""
    deleted: bool = False
    entries: int = 0
    updated_at: str = ""

    @property
    def live(self) -> bool:
        """Whether the current write's rows can be live (not removed, not below the floor)."""
        return bool(self.current) and self.current >= self.floor

    @classmethod
    def of_item(cls, item: Mapping[str, Any]) -> Pointer:
        return cls(
            object_url=str(item["sk"]),
            current=str(item.get("current", "")),
            version_id=str(item.get("version_id", "")),
            etag=str(item.get("etag", "")),
            floor=str(item.get("floor", "")),
            deleted=bool(item.get("deleted", False)),
            entries=int(item.get("entries", 0)),
            updated_at=str(item.get("updated_at", "")),
        )


def row_status(origin: str, pointer: Pointer | None) -> RowStatus:
    """The rule of the module docstring for one row."""
    if pointer is None or not pointer.current:
        return RowStatus.DEAD
    if origin < pointer.floor or origin > pointer.current:
        return RowStatus.DEAD
    if origin == pointer.current and not pointer.deleted:
        return RowStatus.CURRENT
    return RowStatus.OLDER


@dataclass(frozen=True)
class Row:
    """One row of a segment, widened with its object version's fields."""

    subject_hash: str  # the key as hex: 64 digits, or 12 with prefixes (relabelled by lookups)
    object_url: str
    origin_seq: str
    rows: int
    version_id: str
    etag: str
    zone: str
    format: str
    matching_fingerprint: str
    key_fingerprint: str
    updated_at: str
    subjects: int = 1  # distinct subjects of the object version sharing the key


@dataclass(frozen=True)
class LiveEntry:
    """The entry of (h, O): the live row with the highest origin, and whether it is flagged."""

    row: Row
    deleted: bool


def live_entries(
    rows: Iterable[Row], pointers: Mapping[str, Pointer | None]
) -> dict[tuple[str, str], LiveEntry]:
    """(subject hash, object URL) -> its entry, from every row read (any segments, duplicates
    allowed: a row in two segments is the same row)."""
    best: dict[tuple[str, str], LiveEntry] = {}
    for row in rows:
        status = row_status(row.origin_seq, pointers.get(row.object_url))
        if status is RowStatus.DEAD:
            continue
        key = (row.subject_hash, row.object_url)
        held = best.get(key)
        if held is None or row.origin_seq > held.row.origin_seq:
            best[key] = LiveEntry(row, status is RowStatus.OLDER)
    return best
