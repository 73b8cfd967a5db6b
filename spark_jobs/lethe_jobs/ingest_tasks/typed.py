"""CSV values converted in the read task, where Arrow's conversion provably gives what Spark's
would: the JVM then receives them typed, and its cast and checks (`validate`) run only on the
other texts.

A schema column of a CSV dataset whose declared type is an integer (byte, short, int, long),
a boolean, a date or a decimal with at most 6 fraction digits has, beside its text column in
the task frame, a typed column (`typed_column`). Per value, the read task (`split_texts`)
puts a text in the typed column, and makes its text null, only where the text is the
*canonical* rendering of a value of the declared type:

- integers: `0` or `-?[1-9][0-9]*` with at most 2 (byte), 4 (short), 9 (int), 18 (long)
  digits: always within range;
- boolean: `true` or `false`;
- date: `yyyy-MM-dd` with a year 1000-9999, a real date (Arrow's parse formats back to the same
  text);
- decimal(p, s), s <= 6: `0` or `-?[1-9][0-9]*` with at most p - s digits, then (s > 0) a point
  and exactly s digits (so never a negative zero; `-0.05` is left to Spark);
- timestamp, when the session's time zone is UTC (`UTC_ZONE`; the read task is told it):
  `yyyy-MM-dd HH:mm:ss` with a year 1000-9999 that Arrow parses and formats back to the same
  text, then optionally a point and 1-6 digits, the last not 0 (Spark renders a timestamp
  without trailing zeros in its fraction, and none when it is 0), read as a UTC time.

Such a text converts by Spark's `try_cast` to the same value, which passes every check of rule
1 (in range, never rounded), and Spark renders that value (`cast(value AS string)`, what the
quarantine writer rebuilds a rejected record's text from) as the same text again: nothing
about a row changes. Every other text (spaces, signs, leading zeros, exponents, other
spellings, empty) stays text and is converted and checked by Spark as before. In another
session time zone, timestamps are left to Spark (their reading depends on the zone).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from lethe_jobs.validate import spark_type
from lethe_shared.datasets.document import DataFormat, Dataset, parse_type
from lethe_shared.datasets.document import DataType as DdlType

TYPED_PREFIX = "_lethe_typed_"
MAX_SCALE = 6  # Java's BigDecimal.toString is plain (no exponent) for such scales
UTC_ZONE = "UTC"  # the session time zone in which timestamps are converted (the job's own)
_SECONDS = "%Y-%m-%d %H:%M:%S"
_TIMESTAMP = r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{0,5}[1-9])?$"
_INTEGER_DIGITS = {"byte": 2, "short": 4, "int": 9, "long": 18}
_ARROW_INTEGERS = {"byte": pa.int8(), "short": pa.int16(), "int": pa.int32(), "long": pa.int64()}


def typed_column(index: int) -> str:
    """The frame column holding schema column `index`'s values that the read task converted."""
    return f"{TYPED_PREFIX}{index}"


def convertible(declared: DdlType) -> bool:
    """Whether the read task converts canonical texts of this declared type (module doc)."""
    if declared.name in _INTEGER_DIGITS or declared.name in ("boolean", "date", "timestamp"):
        return True
    if declared.name == "decimal":
        precision, scale = declared.precision or 10, declared.scale or 0
        return 0 <= scale <= MAX_SCALE and scale <= precision <= 38
    return False


def typed_indexes(dataset: Dataset) -> list[int]:
    """The schema columns (by index) that have a typed column in a CSV dataset's task frame."""
    if dataset.format is not DataFormat.CSV:
        return []
    return [i for i, c in enumerate(dataset.schema_) if convertible(parse_type(c.type))]


def typed_fields(dataset: Dataset) -> list[T.StructField]:
    """The task frame's typed columns (`typed_column`), of the declared types."""
    return [
        T.StructField(typed_column(i), spark_type(parse_type(dataset.schema_[i].type)))
        for i in typed_indexes(dataset)
    ]


def split_texts(texts: Any, declared: DdlType, time_zone: str = "") -> tuple[Any, Any]:
    """`texts` (an Arrow string array) as (the typed values of its canonical texts, null
    elsewhere; the other texts, null where converted). `time_zone`: the Spark session's (a
    timestamp's text is converted only in `UTC_ZONE`)."""
    typed_type = _arrow_type(declared)
    if declared.name == "timestamp" and time_zone != UTC_ZONE:
        return pa.nulls(len(texts), typed_type), texts
    canonical = _canonical(texts, declared)
    if not pc.any(canonical).as_py():
        return pa.nulls(len(texts), typed_type), texts
    chosen = pc.if_else(canonical, texts, pa.scalar(None, pa.string()))
    if declared.name == "boolean":
        typed = pc.equal(chosen, "true")
    elif declared.name == "date":
        typed = pc.cast(_dates(chosen), pa.date32())
    elif declared.name == "timestamp":
        typed = _timestamps(chosen)
    else:
        typed = pc.cast(chosen, typed_type)
    rest = pc.if_else(canonical, pa.scalar(None, pa.string()), texts)
    return typed, rest


def _arrow_type(declared: DdlType) -> Any:
    if declared.name in _ARROW_INTEGERS:
        return _ARROW_INTEGERS[declared.name]
    if declared.name == "boolean":
        return pa.bool_()
    if declared.name == "date":
        return pa.date32()
    if declared.name == "timestamp":
        return pa.timestamp("us", tz=UTC_ZONE)
    return pa.decimal128(declared.precision or 10, declared.scale or 0)


def _integer_pattern(digits: int) -> str:
    if digits <= 0:
        return "0"
    return f"0|-?[1-9][0-9]{{0,{digits - 1}}}"


def _dates(texts: Any) -> Any:
    return pc.strptime(texts, format="%Y-%m-%d", unit="s", error_is_null=True)


def _shown(seconds: Any, length: int) -> Any:
    """Parsed times (timestamp[s]) as Arrow writes them, `yyyy-MM-dd HH:mm:ss`, cut to
    `length` characters: a text that gives its own parse back names a real date and time
    (Arrow's parse carries an impossible day over into the next month). Arrow's cast, not
    `strftime`, which cost ten times as much."""
    return pc.utf8_slice_codeunits(pc.cast(seconds, pa.string()), 0, length)


def _seconds(texts: Any) -> Any:
    """The whole seconds of timestamp texts (`_TIMESTAMP`'s shape), as parsed (or null)."""
    return pc.strptime(pc.utf8_slice_codeunits(texts, 0, 19), format=_SECONDS, unit="s",
                       error_is_null=True)  # fmt: skip


def _timestamps(texts: Any) -> Any:
    """Canonical timestamp texts as UTC microseconds: the whole seconds, plus the fraction's
    digits padded to 6."""
    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(texts, 20, 26), width=6, padding="0")
    micros = pc.multiply(pc.cast(pc.cast(_seconds(texts), pa.int64()), pa.int64()), 1_000_000)
    total = pc.add(micros, pc.cast(fraction, pa.int64()))
    return pc.cast(total, pa.timestamp("us", tz=UTC_ZONE))


def _canonical(texts: Any, declared: DdlType) -> Any:
    """A boolean array, never null: which texts are canonical (module docstring)."""
    name = declared.name
    if name == "boolean":
        found = pc.or_(pc.equal(texts, "true"), pc.equal(texts, "false"))
    elif name in _INTEGER_DIGITS:
        found = pc.match_substring_regex(texts, f"^(?:{_integer_pattern(_INTEGER_DIGITS[name])})$")
    elif name == "date":
        shaped = pc.match_substring_regex(texts, r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}$")
        chosen = pc.if_else(shaped, texts, pa.scalar(None, pa.string()))
        found = pc.equal(_shown(_dates(chosen), 10), texts)
    elif name == "timestamp":
        shaped = pc.match_substring_regex(texts, _TIMESTAMP)
        chosen = pc.if_else(shaped, texts, pa.scalar(None, pa.string()))
        found = pc.equal(_shown(_seconds(chosen), 19), pc.utf8_slice_codeunits(texts, 0, 19))
    else:
        precision, scale = declared.precision or 10, declared.scale or 0
        whole = _integer_pattern(precision - scale)
        fraction = f"\\.[0-9]{{{scale}}}" if scale else ""
        found = pc.match_substring_regex(texts, f"^(?:{whole}){fraction}$")
    return pc.fill_null(found, False)
