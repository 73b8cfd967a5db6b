"""DynamoDB item sizes, write request units and stored bytes, by AWS's published rules.

Item size (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html,
"DynamoDB item sizes and formats"): the sum over attributes of the UTF-8 length of the name plus
the size of the value, where
- a string is its UTF-8 bytes; a binary value its raw bytes;
- a number is about 1 byte per two significant digits (leading and trailing zeros trimmed)
  plus 1 byte;
- a Boolean or a null is 1 byte;
- a List or Map is 3 bytes plus, per element, the element's size plus 1 byte of overhead
  (a Map element's size includes its name).
Writes: on-demand tables charge one write request unit (WRU) per 1 KB (1,024 bytes) of the item
written, rounded up, for a put and for a delete; each global secondary index the write changes
costs WRUs for its own index entry on top
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html, "Provisioned
throughput considerations for Global Secondary Indexes" and "Storage considerations for Global
Secondary Indexes").
Storage: every item is billed with 100 bytes of overhead; a GSI entry is the table's primary key,
the index key attributes and the projected attributes, plus 100 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

KB = 1024
ITEM_OVERHEAD_BYTES = 100  # storage only, per table item and per GSI entry


def number_size(value: int | float | Decimal) -> int:
    """1 byte per two significant digits (zeros trimmed at both ends), plus 1."""
    exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    digits = format(exact.copy_abs(), "f").replace(".", "").strip("0")
    return (len(digits) + 1) // 2 + 1


def value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float | Decimal):
        return number_size(value)
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Mapping):
        return 3 + sum(1 + len(str(k).encode("utf-8")) + value_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 3 + sum(1 + value_size(v) for v in value)
    raise TypeError(f"no DynamoDB size rule for {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """The size DynamoDB bills an item at (bytes, without the storage overhead)."""
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


def write_units(size: int) -> int:
    """WRUs of a standard (non-transactional) put or delete of an item of `size` bytes."""
    return max(1, math.ceil(size / KB))


@dataclass(frozen=True)
class Gsi:
    name: str
    attributes: tuple[str, ...]  # table key + index key + projected attributes, each once


@dataclass(frozen=True)
class TableShape:
    """The attributes a table's items and its GSI entries hold (from template.yaml)."""

    gsis: Sequence[Gsi] = ()

    def costs(self, item: Mapping[str, Any]) -> tuple[int, int, int, int]:
        """(item bytes, WRUs table only, WRUs with GSIs, stored bytes with GSIs and overheads)
        of writing `item` once."""
        size = item_size(item)
        wru_table = write_units(size)
        wru_all = wru_table
        stored = size + ITEM_OVERHEAD_BYTES
        for gsi in self.gsis:
            if not all(a in item for a in gsi.attributes[:2]):
                continue  # an item without the index's key attributes is not in the index
            entry = item_size({a: item[a] for a in gsi.attributes if a in item})
            wru_all += write_units(entry)
            stored += entry + ITEM_OVERHEAD_BYTES
        return size, wru_table, wru_all, stored


# SubjectIndexTable in template.yaml: key (subject_hash, object_url); by_object keys only;
# by_dataset (dataset_id, object_url) including rows and deleted. Key attributes come first.
SUBJECT_INDEX = TableShape(
    gsis=(
        Gsi("by_object", ("object_url", "subject_hash")),
        Gsi("by_dataset", ("dataset_id", "object_url", "subject_hash", "rows", "deleted")),
    )
)
NO_INDEXES = TableShape()
