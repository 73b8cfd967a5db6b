"""The canonical text of subject values: what a subject hashes as, whatever the column type,
and the one rule of what is no subject at all.

- strings as they are (no trimming, no case folding: " u-1" and "u-1" are two ids);
- integers in decimal digits (`1001`, `0`), booleans `true`/`false`, dates ISO `2026-11-22`,
  decimals without exponent or trailing zeros (`12.5`);
- a composite key (several subject columns) as the JSON array of `[column, text]` pairs in the
  dataset's `subject_columns` order, so `("acme", 1001)` never collides with a single id.

**No subject** (`is_no_subject`): a null, an empty text or a text of whitespace only
(`WHITESPACE`, Python's `str.isspace` characters) names nobody. Everything that hashes
subjects applies it: a row whose subject column holds one is nobody's, never indexed and never
matched by an erasure (`values.subject_text`, `arrow.table_subjects`; of a composite key, one
such column makes the row nobody's), and an erasure request that gives one, in `subject_ids` or
as a value of `subject_keys`, is refused (lethe_shared.erasure.subjects). `0` is an id.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

# The characters `str.isspace` holds true for (and `str.strip()` removes), spelled out so that the
# Arrow path (`arrow.py`, `pyarrow.compute.utf8_ltrim`) applies exactly the same set;
# tests/unit/test_subject_ids.py checks it against Python's.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def is_no_subject(value: Any) -> bool:
    """Whether a subject value (a row's, or a request's) names nobody: null, an empty text or a
    text of whitespace only (the module docstring)."""
    return value is None or (isinstance(value, str) and not value.strip(WHITESPACE))


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
