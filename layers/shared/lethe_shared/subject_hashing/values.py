"""Subject column values as the ingest job's validation would type them, without Spark.

The subject index hashes a subject's canonical text (`canonical`), so one subject must reach
the hash with the same value whether it comes from a validated lake row, a raw object
read again by the index job, or a rejected row. `subject_value(value, declared)` gives what
Spark's `try_cast(value AS <declared type>)` gives (validate.py converts with it), and the raw
value (as Spark would print it) where Spark gives null, so a rejected row is still indexed
under the value it holds:

- text: surrounding ASCII control characters and spaces are trimmed as Spark does; integers
  `[+-]digits` in range (`01001` is 1001, `1001.0` is not an int); decimals rounded half up to
  the declared scale, null beyond the precision (`12.555` is 12.56 as decimal(10,2)); dates
  `yyyy`, `yyyy-[m]m`, `yyyy-[m]m-[d]d` optionally followed by ` ...` or `T...`; booleans
  t/true/y/yes/1 and f/false/n/no/0 in any case. An empty text is null for every type but
  string (CSV has no other null);
- typed values (Parquet): integers and booleans as they are, doubles and decimals truncated to
  integers, timestamps to their UTC date;
- JSON values are first turned into the text Spark's JSON functions give (`json_leaf_text`:
  integers as written, doubles as Java prints them, objects and arrays as compact JSON).

Known differences with Spark, all outside what a subject id plausibly holds: years outside
1..9999 (Python dates cannot hold them), doubles whose Java and Python shortest forms differ.
tests/spark/test_index_subject_values.py checks the agreement with Spark itself.

`subject_text` applies the one no-subject rule (`canonical.is_no_subject`): a value that is
null, empty or whitespace only, as typed, is nobody's (None), whatever the column type.

The request side (`request_text`): an erasure request gives ids as text (or, in `subject_keys`,
as JSON numbers and booleans); for each dataset, an id is turned into the canonical text a row
value of that dataset's subject column type hashes as, so `"01001"` finds an int column's 1001
and `"123.450"` a decimal(10,2) column's 123.45. The typed conversion is exact: an id that no
value of the type equals (`"abc"` or `"99999999999"` for an int, `"123.456"` for a
decimal(10,2), `"2026-11"` for a date) is None, and the erasure reports it as not looked up in
that dataset rather than erasing a neighbour value. A string column (or a type that is never
typed: double, timestamp, ...) takes the id as given.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import ROUND_DOWN, ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any

from lethe_shared.datasets.document import DataType
from lethe_shared.subject_hashing.canonical import canonical_text, is_no_subject

_CONTROL_AND_SPACE = "".join(chr(c) for c in range(0x21))
_SPARK_TRIM = _CONTROL_AND_SPACE + "\x7f"  # integers, dates, booleans (UTF8String.trimAll)
_INTEGER_BITS = {"byte": 8, "short": 16, "int": 32, "long": 64}
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE_TEXT = re.compile(r"\+?([0-9]{4})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_FULL_DATE_TEXT = re.compile(r"\+?[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")  # a request's date id
_TRUE_TEXT = frozenset({"t", "true", "y", "yes", "1"})
_FALSE_TEXT = frozenset({"f", "false", "n", "no", "0"})
_DECIMAL_CONTEXT = Context(prec=200, Emax=10_000, Emin=-10_000)


def java_double_text(value: float) -> str:
    """A double as Java's Double.toString prints it (what Spark's JSON functions and casts
    to string give): `1.5`, `100.0`, `1.0E20`, `1.0E-5`, `NaN`, `Infinity`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else f"{text}.0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    shown = "".join(str(d) for d in digits).rstrip("0") or "0"
    power = len(digits) + int(exponent) - 1
    mantissa = f"{shown[0]}.{shown[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{power}"


def _timestamp_text(value: dt.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    text = value.isoformat(sep=" ")
    return text.rstrip("0") if "." in text else text


def _boolean_text(value: bool) -> str:
    return "true" if value else "false"


def _date_text(value: dt.date) -> str:
    return value.isoformat()


def _bytes_text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


# Checked in order: bool before int, datetime before date (subclasses).
_TEXT_OF_TYPE: tuple[tuple[type, Callable[[Any], str]], ...] = (
    (str, str),
    (bool, _boolean_text),
    (int, str),
    (float, java_double_text),
    (Decimal, lambda value: format(value, "f")),
    (dt.datetime, _timestamp_text),
    (dt.date, _date_text),
    (bytes, _bytes_text),
)


def spark_text(value: Any) -> str | None:
    """`CAST(value AS STRING)` as Spark prints a typed value."""
    if value is None:
        return None
    for kind, text in _TEXT_OF_TYPE:
        if isinstance(value, kind):
            return text(value)
    return _complex_text(value)


def _complex_text(value: Any) -> str:
    """Spark's text of a struct (`{a, 1}`) or an array (`[a, b]`); nulls print as `null`."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(spark_text(v) or "null" for v in value.values()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(spark_text(v) or "null" for v in value) + "]"
    return str(value)


def json_leaf_text(value: Any) -> str | None:
    """The text Spark's JSON functions (json_tuple, from_json into a string) give a parsed
    JSON value: strings as they are, numbers and booleans as text, objects and arrays as
    compact JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return spark_text(value)


def _integer(value: Any, declared: DataType) -> int | None:
    bits = _INTEGER_BITS[declared.name]
    number: int | None = None
    if isinstance(value, bool | int):
        return int(value)  # out of range it stays rejected, and prints the same digits
    if isinstance(value, float) and math.isfinite(value):
        number = int(value)  # truncated toward zero, as Spark casts
    elif isinstance(value, Decimal) and value.is_finite():
        number = int(value.to_integral_value(rounding=ROUND_DOWN))
    elif isinstance(value, str):
        text = value.strip(_SPARK_TRIM)
        number = int(text) if _INTEGER_TEXT.fullmatch(text) else None
    if number is None or not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        return None
    return number


def _decimal_of(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, int | Decimal):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(java_double_text(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip(_CONTROL_AND_SPACE)
        return Decimal(text) if _DECIMAL_TEXT.fullmatch(text) else None
    return None


def _decimal(value: Any, declared: DataType) -> Decimal | None:
    precision, scale = declared.precision or 10, declared.scale or 0
    with localcontext(_DECIMAL_CONTEXT):
        number = _decimal_of(value)
        if number is None or not number.is_finite():
            return None
        try:
            rounded = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            return None
    if rounded.is_zero():
        rounded = rounded.copy_abs()  # Spark has no negative zero
    return rounded if len(rounded.as_tuple().digits) <= precision else None


def _date(value: Any, _declared: DataType) -> dt.date | None:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).date() if value.tzinfo is not None else value.date()
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str):
        return None
    match = _DATE_TEXT.fullmatch(value.strip(_SPARK_TRIM))
    if match is None:
        return None
    year, month, day = (int(part) if part else 1 for part in match.groups())
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _boolean(value: Any, _declared: DataType) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return bool(value != 0)
    if isinstance(value, str):
        text = value.strip(_SPARK_TRIM).lower()
        if text in _TRUE_TEXT or text in _FALSE_TEXT:
            return text in _TRUE_TEXT
    return None


def _string(value: Any, _declared: DataType) -> str | None:
    return spark_text(value)


_CONVERTERS: dict[str, Callable[[Any, DataType], Any]] = {
    "string": _string,
    "byte": _integer,
    "short": _integer,
    "int": _integer,
    "long": _integer,
    "decimal": _decimal,
    "date": _date,
    "boolean": _boolean,
}


def subject_value(value: Any, declared: DataType | None) -> Any:
    """The value a subject column holds once typed as `declared` (module docstring); None
    for no subject. Never a type canonical_text refuses."""
    if value is None:
        return None
    if declared is None or declared.name not in _CONVERTERS:
        return spark_text(value)
    if value == "" and declared.name != "string":
        return None  # an empty text is a null for every other type (validate.py)
    converted = _CONVERTERS[declared.name](value, declared)
    return converted if converted is not None else spark_text(value)


def subject_text(value: Any, declared: DataType | None) -> str | None:
    """The canonical text a subject column value hashes as, None for no subject (a null, or a
    value that is empty or whitespace only: `canonical.is_no_subject`)."""
    typed = subject_value(value, declared)
    return None if is_no_subject(typed) else canonical_text(typed)


def _exact_decimal(value: Any, declared: DataType) -> Decimal | None:
    """The decimal(p,s) value equal to `value`, None when the type holds no such value (more
    fraction digits than the scale: rounding would give another value; more digits than the
    precision)."""
    with localcontext(_DECIMAL_CONTEXT):
        number = _decimal_of(value)
    typed = _decimal(value, declared)
    if number is None or typed is None or typed != number:
        return None
    return typed


def _exact_date(value: Any, declared: DataType) -> dt.date | None:
    """A date given as a whole `yyyy-[m]m-[d]d` (no partial date, no time of day)."""
    if not isinstance(value, str) or not _FULL_DATE_TEXT.fullmatch(value.strip(_SPARK_TRIM)):
        return None
    return _date(value, declared)


_REQUEST_CONVERTERS: dict[str, Callable[[Any, DataType], Any]] = {
    **_CONVERTERS,
    "decimal": _exact_decimal,
    "date": _exact_date,
}


def request_text(subject_id: str | int | bool, declared: DataType | None) -> str | None:
    """The canonical text of a request's subject id for a subject column typed `declared` (the
    module docstring): what a row value equal to it hashes as; None when no value of that type
    equals it (or when the id names nobody: `canonical.is_no_subject`)."""
    if is_no_subject(subject_id):
        return None
    if declared is None or declared.name == "string" or declared.name not in _CONVERTERS:
        return canonical_text(subject_id)
    typed = _REQUEST_CONVERTERS[declared.name](subject_id, declared)
    return None if typed is None else canonical_text(typed)
