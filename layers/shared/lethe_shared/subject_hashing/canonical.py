"""The canonical text of subject values: what a subject hashes as, whatever the column type.

- strings as they are (no trimming, no case folding: "" is a valid id, distinct from null);
- integers in decimal digits (`1001`, `0`), booleans `true`/`false`, dates ISO `2026-11-22`,
  decimals without exponent or trailing zeros (`12.5`);
- a composite key (several subject columns) as the JSON array of `[column, text]` pairs in the
  dataset's `subject_columns` order, so `("acme", 1001)` never collides with a single id.
A null value is no subject: rows with a null subject column are never indexed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any


def canonical_text(value: Any) -> str:
    """The text a subject column value hashes as (see the module docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        text = format(value.normalize(), "f")
        return text if text not in {"-0", "-0.0"} else "0"
    if isinstance(value, dt.datetime):
        raise TypeError("timestamps cannot be subject ids")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        return value
    raise TypeError(f"a subject id must be a string, integer, boolean, date or decimal: {value!r}")


def composite_text(columns: Sequence[str], values: Sequence[Any]) -> str:
    if len(columns) != len(values):
        raise ValueError("one value per subject column")
    if len(columns) == 1:
        return canonical_text(values[0])
    pairs = [[c, canonical_text(v)] for c, v in zip(columns, values, strict=True)]
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
