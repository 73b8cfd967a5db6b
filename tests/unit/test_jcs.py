"""RFC 8785 (JCS) canonical JSON (lethe_shared.erasure.jcs) against the RFC's own examples."""

from __future__ import annotations

import math
import struct

import pytest

from lethe_shared.erasure.jcs import canonicalize

pytestmark = pytest.mark.lambda_runtime


def test_rfc8785_section_3_2_2_example() -> None:
    # RFC 8785 §3.2.2: the input, and its canonical form (§3.2.4 shows the same as bytes)
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\nA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert (
        canonicalize(value)
        == (
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ).encode()
    )


def test_rfc8785_section_3_2_3_sorting_by_utf16_code_units() -> None:
    # §3.2.3: the keys sort as UTF-16 code units (U+1F600 is the surrogates D83D DE00, before
    # U+FB33 and after U+20AC), not as code points
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(canonicalize(value).decode("utf-8")[1:-1].split('","'))
    order = [k.split('":"')[0].lstrip('"') for k in keys]
    assert order == ["\\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("bits", "text"),
    [
        # RFC 8785 Appendix B: IEEE 754 bit patterns and their ECMAScript text
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_rfc8785_appendix_b_numbers(bits: str, text: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonicalize(value) == text.encode("ascii")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "\ud800", 2**53 + 1])
def test_values_without_a_canonical_form_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"NaN|surrogate|I-JSON"):
        canonicalize({"x": value})


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        canonicalize({"x": {1, 2}})
    with pytest.raises(TypeError):
        canonicalize({1: "x"})


def test_integers_booleans_null_and_nesting() -> None:
    assert canonicalize({"b": [1, -2, 0], "a": {"d": None, "c": True}}) == (
        b'{"a":{"c":true,"d":null},"b":[1,-2,0]}'
    )
    assert canonicalize("\u007f\u2028") == '"\u007f\u2028"'.encode()
