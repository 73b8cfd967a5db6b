"""The read task's conversion of canonical CSV texts (lethe_jobs.ingest_tasks.typed) against a
Python statement of the rule (Spark's reading of the same texts:
tests/spark/test_ingest_typed.py)."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from lethe_jobs.ingest_tasks.frame import frame_schema
from lethe_jobs.ingest_tasks.typed import (
    UTC_ZONE,
    convertible,
    split_texts,
    typed_column,
    typed_indexes,
)
from lethe_shared.datasets.document import parse_dataset, parse_type

_DIGITS = {"byte": 2, "short": 4, "int": 9, "long": 18}


def _timestamp_reference(text: str) -> dt.datetime | None:
    shape = r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,5}[1-9])?"
    if not re.fullmatch(shape, text):
        return None
    try:
        value = dt.datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    micros = int(text[20:].ljust(6, "0")) if len(text) > 19 else 0
    return value.replace(microsecond=micros, tzinfo=dt.UTC)


def reference(text: str, ddl: str) -> Any:  # noqa: C901 (one branch per type, as the rule)
    """The value of `text` when the rule converts it, else None (module docstring of typed)."""
    declared = parse_type(ddl)
    name = declared.name
    if name == "boolean":
        return {"true": True, "false": False}.get(text)
    if name in _DIGITS:
        if re.fullmatch(r"0|-?[1-9][0-9]*", text) and len(text.lstrip("-")) <= _DIGITS[name]:
            return int(text)
        return None
    if name == "timestamp":
        return _timestamp_reference(text)
    if name == "date":
        if not re.fullmatch(r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}", text):
            return None
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            return None
    precision, scale = declared.precision or 10, declared.scale or 0
    whole, _, fraction = text.partition(".")
    if len(fraction) != scale or (scale and "." not in text) or (not scale and "." in text):
        return None
    if not re.fullmatch(r"0|-?[1-9][0-9]*", whole) or not re.fullmatch(r"[0-9]*", fraction):
        return None
    if len(whole.lstrip("-")) > precision - scale and whole != "0":
        return None
    return Decimal(text)


def timestamp_text(rng: random.Random) -> str:
    year = rng.choice([rng.randint(1, 9999), rng.randint(1960, 2100)])
    day = f"{year:04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 31):02d}"
    time = f"{rng.randint(0, 24):02d}:{rng.randint(0, 60):02d}:{rng.randint(0, 60):02d}"
    fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 7)))
    return f"{day} {time}" + (f".{fraction}" if fraction or rng.random() < 0.1 else "")


def short_decimal_texts(rng: random.Random) -> list[str]:
    sign = rng.choice(["", "-"])
    return [
        rng.choice(["true", "false"]),
        f"{sign}{rng.randint(0, 99)}.{rng.randint(0, 999):03d}",
        f"{sign}{rng.randint(0, 99)}.{rng.randint(0, 99):02d}",
        f"0.{rng.randint(0, 99):02d}",
    ]


def _texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    fixed = ["", " ", "0", "-0", "+1", "01", "1.", ".5", "1e3", "true", "True", "false", "x"]
    fixed += ["2026-01-03", "2026-02-30", "2024-02-29", "0999-01-01", "2026-1-3", "٣", "0.00"]
    fixed += ["-0.05", "11.60", "11.6", "127", "128", "-128", "2147483647", "2147483648"]
    fixed += ["2026-01-03 04:07:00.099411", "2026-01-03 04:07:00", "2026-01-03 04:07:00.50"]
    fixed += ["2026-01-03 24:00:00", "2026-01-03T04:07:00", "1969-12-31 23:59:59.999999"]
    out = list(fixed)
    for _ in range(500):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        sign = rng.choice(["", "", "-", "+"])
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 8)))
        out += [
            sign + (digits.lstrip("0") or "0"),
            sign + digits,
            f"{sign}{digits.lstrip('0') or '0'}.{fraction}",
            f"{rng.randint(1, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}",
            timestamp_text(rng),
            *short_decimal_texts(rng),
        ]
    return out


@pytest.mark.parametrize(
    "ddl",
    [
        "byte", "short", "int", "long", "boolean", "date",
        "decimal(12,2)", "decimal(10,0)", "decimal(2,2)", "decimal(38,6)", "decimal(5,3)",
        "timestamp",
    ],
)  # fmt: skip
def test_converts_exactly_the_canonical_texts(ddl: str) -> None:
    texts = _texts(len(ddl))
    typed, rest = split_texts(pa.array(texts, pa.string()), parse_type(ddl), UTC_ZONE)
    wanted = [reference(t, ddl) for t in texts]
    assert typed.to_pylist() == wanted
    assert rest.to_pylist() == [
        t if w is None else None for t, w in zip(texts, wanted, strict=True)
    ]
    assert sum(w is not None for w in wanted) > 20


def test_timestamps_only_in_a_utc_session() -> None:
    texts = pa.array(["2026-01-03 04:07:00", "2026-01-03 04:07:00.5"], pa.string())
    for zone in ("", "Europe/Paris", "Etc/UTC"):
        typed, rest = split_texts(texts, parse_type("timestamp"), zone)
        assert typed.null_count == 2
        assert rest.to_pylist() == texts.to_pylist()
    typed, rest = split_texts(texts, parse_type("timestamp"), UTC_ZONE)
    assert typed.null_count == 0
    assert rest.null_count == 2


def test_nothing_canonical_leaves_the_texts_as_they_are() -> None:
    texts = pa.array(["x", "", " 1"], pa.string())
    typed, rest = split_texts(texts, parse_type("int"))
    assert typed.null_count == 3
    assert typed.type == pa.int32()
    assert rest.to_pylist() == ["x", "", " 1"]


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("int", True), ("long", True), ("boolean", True), ("date", True), ("decimal(12,2)", True),
        ("decimal(38,6)", True), ("decimal(10,7)", False), ("timestamp", True),
        ("string", False), ("double", False), ("array<int>", False),
    ],
)  # fmt: skip
def test_which_types_convert(ddl: str, expected: bool) -> None:
    assert convertible(parse_type(ddl)) is expected


def test_only_a_csv_frame_has_typed_columns() -> None:
    schema = [
        {"name": "id", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "at", "type": "timestamp"},
        {"name": "amount", "type": "decimal(12,2)"},
    ]
    csv = parse_dataset(
        {"dataset_id": "t", "format": "csv", "subject_columns": ["id"], "schema": schema}
    )
    assert typed_indexes(csv) == [1, 2, 3]
    names = frame_schema(csv).fieldNames()
    assert names[-3:] == [typed_column(1), typed_column(2), typed_column(3)]
    assert str(frame_schema(csv)[typed_column(3)].dataType) == "DecimalType(12,2)"
    jsonl = parse_dataset(
        {"dataset_id": "t", "format": "jsonl", "subject_columns": ["id"], "schema": schema}
    )
    assert typed_indexes(jsonl) == []
    assert not any(n.startswith("_lethe_typed_") for n in frame_schema(jsonl).fieldNames())
