"""The one subject-id rule (`canonical.is_no_subject`) on the row side, and a request's ids
canonicalised per subject column type (`values.request_text`).

A row whose subject value is null, empty or whitespace only is nobody's on every path that
hashes rows (the record path `values.subject_text`, the Arrow path `arrow.table_subjects`, a
partition value); a request id is turned into the text a row value of the column's type hashes
as, exactly: `"01001"` is 1001 for an int column, `"123.450"` is 123.45 for a decimal(10,2),
and an id no value of the type equals is None."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from lethe_shared.datasets.document import parse_type
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.canonical import WHITESPACE, is_no_subject
from lethe_shared.subject_hashing.keys import hash_of_id, subject_hash
from lethe_shared.subject_hashing.records import record_subject_rows
from lethe_shared.subject_hashing.values import request_text, subject_text

pytestmark = pytest.mark.lambda_runtime

KEY = b"subject-ids-unit-test-key-0123456789"


def test_whitespace_is_exactly_what_python_strips() -> None:
    python = "".join(c for c in map(chr, range(0x110000)) if c.isspace())
    assert python == WHITESPACE


@pytest.mark.parametrize(
    ("value", "nobody"),
    [
        (None, True),
        ("", True),
        (" ", True),
        ("\t\r\n", True),
        ("\u3000\u2028\xa0", True),  # ideographic space, line separator, no-break space
        ("0", False),
        (0, False),
        (False, False),
        ("a", False),
        (" a ", False),
        ("\x00", False),  # a control character is a character
        ("\u200b", False),  # a zero-width space is not whitespace to Python either
        (Decimal("0"), False),
    ],
)
def test_is_no_subject(value: Any, nobody: bool) -> None:
    assert is_no_subject(value) is nobody


# ------------------------------------------------------------------------------ row side


@pytest.mark.parametrize("ddl", [None, "string", "int", "long", "date", "boolean", "decimal(10,2)"])
@pytest.mark.parametrize("value", [None, "", " ", "\t", "\u3000"])
def test_a_row_value_naming_nobody_has_no_text_whatever_the_type(
    value: str | None, ddl: str | None
) -> None:
    assert subject_text(value, parse_type(ddl) if ddl else None) is None


def test_zero_and_padded_ids_keep_their_text() -> None:
    assert subject_text("0", parse_type("string")) == "0"
    assert subject_text(" u-1 ", parse_type("string")) == " u-1 "
    assert subject_text(" 7 ", parse_type("int")) == "7"


def _columns(*names: str) -> Any:
    return SimpleNamespace(dataset_id="ds", subject_columns=list(names))


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["a", "", None, " ", "\u2029", "a"]),
        pa.array(["a", "", None, " ", "\u2029", "a"], pa.large_string()),
        pa.array(["a", "", None, " ", "\u2029", "a"], pa.string_view()),
        pa.array(["a", "", None, " ", "\u2029", "a"]).dictionary_encode(),
        pa.chunked_array([["a", ""], [None, " ", "\u2029", "a"]]),
    ],
    ids=["string", "large_string", "string_view", "dictionary", "chunked"],
)
def test_the_arrow_path_gives_blank_values_no_subject(array: Any) -> None:
    hashes = row_subject_hashes(pa.table({"u": array}), _columns("u"), {}, key=KEY)

    a = hash_of_id(KEY, "a")
    assert hashes.to_pylist() == [a, None, None, None, None, a]


def test_the_arrow_path_and_the_rule_agree_on_random_texts() -> None:
    rng = random.Random(18)
    pool = WHITESPACE + "ab0\x00\x7f\u200b\ufeff\u00e9\U0001f600"
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 4))) for _ in range(5000)]

    hashes = row_subject_hashes(pa.table({"u": texts}), _columns("u"), {}, key=KEY).to_pylist()

    assert [h is None for h in hashes] == [is_no_subject(t) for t in texts]


def test_a_composite_key_with_a_blank_member_is_nobodys() -> None:
    table = pa.table({"t": ["acme", " ", "acme", ""], "u": pa.array([1, 1, None, 2])})

    hashes = row_subject_hashes(table, _columns("t", "u"), {}, key=KEY).to_pylist()

    assert hashes == [subject_hash(KEY, ["t", "u"], ["acme", 1]), None, None, None]


@pytest.mark.parametrize("partition", ["", "  "])
def test_a_blank_partition_value_is_no_subject(partition: str) -> None:
    table = pa.table({"n": [1, 2]})

    hashes = row_subject_hashes(table, _columns("u"), {"u": partition}, key=KEY)

    assert hashes.to_pylist() == [None, None]


def test_the_record_path_gives_blank_values_no_subject() -> None:
    dataset = SimpleNamespace(subject_columns=["u"], column_type=lambda _path: parse_type("string"))
    records = [{"u": v} for v in ["a", "", " ", None, "0"]]
    rows = record_subject_rows(dataset, records, range(1, 6))  # type: ignore[arg-type]
    assert rows.texts == [["a", None, None, None, "0"]]


# ---------------------------------------------------------------------------- request side


@pytest.mark.parametrize(
    ("subject_id", "ddl", "text"),
    [
        ("01001", "int", "1001"),
        ("+1001", "int", "1001"),
        (" 1001 ", "int", "1001"),
        ("-0", "int", "0"),
        ("01001", "long", "1001"),
        ("99999999999", "long", "99999999999"),
        (1001, "int", "1001"),  # a JSON number of subject_keys
        ("123.450", "decimal(10,2)", "123.45"),
        ("1.2345E2", "decimal(10,2)", "123.45"),
        ("0123.4", "decimal(10,2)", "123.4"),
        (123, "decimal(10,2)", "123"),
        ("2026-1-2", "date", "2026-01-02"),
        ("YES", "boolean", "true"),
        ("0", "boolean", "false"),
        ("01001", "string", "01001"),  # strings as they are
        (" u-1 ", "string", " u-1 "),
        (1001, "string", "1001"),
        (True, "string", "true"),
        ("1e3", "double", "1e3"),  # never typed on the row side either: as given
        ("01001", None, "01001"),  # no such column: as given
    ],
)
def test_request_ids_take_the_text_of_a_value_of_the_column_type(
    subject_id: Any, ddl: str | None, text: str
) -> None:
    assert request_text(subject_id, parse_type(ddl) if ddl else None) == text


@pytest.mark.parametrize(
    ("subject_id", "ddl"),
    [
        ("abc", "int"),
        ("1001.0", "int"),
        ("99999999999", "int"),  # beyond an int
        ("1e3", "long"),
        ("123.456", "decimal(10,2)"),  # would be rounded: another value
        ("123456789.1", "decimal(10,2)"),  # beyond the precision
        ("abc", "decimal(10,2)"),
        ("2026-11", "date"),  # a month is not a day
        ("2026-11-22T10:00", "date"),
        ("2026-02-30", "date"),
        (20261122, "date"),
        ("maybe", "boolean"),
        ("", "string"),
        (" ", "int"),
    ],
)
def test_request_ids_no_value_of_the_type_equals_have_no_text(subject_id: Any, ddl: str) -> None:
    assert request_text(subject_id, parse_type(ddl)) is None


@pytest.mark.parametrize(
    ("row_value", "ddl", "subject_id"),
    [
        (1001, "int", "01001"),
        ("1001", "int", "+01001"),  # a CSV text typed as validation types it
        (Decimal("123.45"), "decimal(10,2)", "123.450"),
        ("123.45", "decimal(10,2)", "1.2345e2"),
        (dt.date(2026, 1, 2), "date", "2026-01-02"),
        (True, "boolean", "true"),
        ("01001", "string", "01001"),
    ],
)
def test_a_request_id_hashes_as_the_row_value_it_names(
    row_value: Any, ddl: str, subject_id: str
) -> None:
    declared = parse_type(ddl)
    row = subject_text(row_value, declared)
    requested = request_text(subject_id, declared)

    assert requested is not None
    assert row is not None
    assert hash_of_id(KEY, requested) == hash_of_id(KEY, row)


@pytest.mark.parametrize("ddl", ["string", "int", "long", "decimal(10,2)", "date", "boolean"])
@pytest.mark.parametrize(
    "text",
    ["1001", "01001", "-7", "0", "123.450", "1e2", "2026-11-22", "2026-1-2", "yes", "F", "abc"],
)
def test_a_request_text_is_always_the_text_of_a_row_holding_the_same_text(
    text: str, ddl: str
) -> None:
    """Where a request id can be a value of the type, a row (a CSV field, say) holding the
    very same text hashes as the request: the two sides never disagree."""
    declared = parse_type(ddl)
    requested = request_text(text, declared)
    if requested is not None:
        assert requested == subject_text(text, declared)
