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

The pointer is DERIVED (`effective`), not written by ingestion: a level-0 segment's manifest
item records which objects it describes (`described`: 8-byte digests of their URLs,
`segments.described`), and committing it (the item going `active`) is the whole commit. From
the override item of O (the manifest item `obj#<dataset>` / `<object_url>`, written only by
flag_deleted, prune_flagged and remove_object; absent for most objects) and the describing
origins: those of the `active` level-0 segments describing O and O's carried origin (the
highest origin of the retired level-0 segments that described it, `segments.carried`):

| from | rule |
|---|---|
| current | the highest of the override's `current` and of each describing origin >= floor |
| floor | the override's (only ever raised) |
| deleted | the override's `deleted`, and only while the override's `current` is the current one |
| no override, no describing segment | no pointer |

This is what the conditional pointer update of ingestion computed ("highest seq wins, never
below the floor, a newer write clears `deleted`"), computed at read time instead.

Races, and why each ends as some order of the operations would:
- two writers of O in two segments: both commit (one write each, no shared item); the higher
  origin is current whatever the order of the commits, the other's rows are older (flagged):
  an out-of-order older writer never wins (max).
- a write racing flag/prune/remove: the override write is conditional on the override item as
  read (`rev`, retried on a change) and names the current it judged (`current`); a write that
  committed meanwhile has a higher origin, so it is current and unflagged, above the floor: the
  same as the write landing just after the flag/removal.
- a write racing compaction: compaction retires level-0 segments only after committing the
  carried file that holds their origins; a newer write's origin is higher and still wins. The
  carried item sorts after the level-0 items in the ONE listing Query, and readers list before
  reading overrides: a reader that sees a level-0 item gone (or `retired`) reads the carried
  item later and finds the new file, which holds it.
- an erasure rewrite keeps the old item's `described` (and `origin_seq`): the derivation is
  unchanged by it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any


class RowStatus(enum.Enum):
    CURRENT = "current"
    OLDER = "older"  # live, in older versions only: the entry is flagged deleted
    DEAD = "dead"


@dataclass(frozen=True)
class Pointer:
    """An object's pointer: its override item (`obj#<dataset>` / `<object_url>`), or the pointer
    derived from it and the segments describing the object (`effective`). `rev`: the override
    item's revision (0: no item), the condition of every override write."""

    object_url: str
    current: str = ""
    version_id: str = ""
    etag: str = ""
    floor: str = ""
    deleted: bool = False
    entries: int = 0
    updated_at: str = ""
    rev: int = 0

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
            rev=int(item.get("rev", 0)),
        )


def effective(object_url: str, override: Pointer | None, origins: Iterable[str]) -> Pointer | None:
    """The object's pointer from its override item (None: none) and the origins of the active
    level-0 segments describing it (module docstring)."""
    floor = override.floor if override else ""
    top = max((o for o in origins if o >= floor), default="")
    if override is not None and override.current >= top:
        return override
    if not top:
        return None
    if override is None:
        return Pointer(object_url, current=top)
    return replace(override, current=top, deleted=False, version_id="", etag="", entries=0)


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
