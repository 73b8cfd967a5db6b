"""RFC 8785 JSON Canonicalization Scheme (JCS): the bytes a certificate's signature covers.

`canonicalize(value)` gives the UTF-8 bytes of the canonical JSON text of a JSON value made of
dicts (string keys), lists/tuples, strings, booleans, None, integers and floats:

- objects: members sorted by their keys' UTF-16 code units (RFC 8785 §3.2.3), no whitespace;
- strings: `"` and `\\` escaped, the controls U+0000..U+001F as `\\b \\t \\n \\f \\r` or `\\u00xx`
  (lower-case hex), everything else as is, in UTF-8 (§3.2.2.2); a lone surrogate is refused;
- numbers: ECMAScript's Number.prototype.toString of the IEEE 754 double (§3.2.2.3); NaN and the
  infinities are refused; an integer beyond ±2**53 is refused (it has no exact I-JSON value).

Written here rather than taken from a package so that the Lambda layer and the CLI need no new
dependency; tests/unit/test_jcs.py checks it against RFC 8785's own examples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_MAX_SAFE = 2**53


def canonicalize(value: Any) -> bytes:
    """The JCS bytes of `value`. Raises ValueError (NaN, infinity, lone surrogate, unsafe
    integer) or TypeError (a value JSON cannot carry)."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts).encode("utf-8")


def _scalar(value: Any) -> str | None:
    """The text of a literal, string or number; None for anything else."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        if abs(value) > _MAX_SAFE:
            raise ValueError(f"integer {value} is beyond I-JSON's exact range (2**53)")
        return str(value)
    if isinstance(value, float):
        return _number(value)
    return None


def _write(value: Any, out: list[str]) -> None:
    text = _scalar(value)
    if text is not None:
        out.append(text)
    elif isinstance(value, Mapping):
        items = []
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"object keys are strings, not {type(key).__name__}")
            items.append(key)
        items.sort(key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        out.append("{")
        for i, key in enumerate(items):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def _string(text: str) -> str:
    chars = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _SHORT:
            chars.append(_SHORT[ch])
        elif code < 0x20:
            chars.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("a lone surrogate is not a Unicode string (RFC 8785 §3.2.2.2)")
        else:
            chars.append(ch)
    chars.append('"')
    return "".join(chars)


def _number(x: float) -> str:
    """ECMAScript Number::toString for a finite double (ECMA-262, 7.1.12.1)."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and infinities have no JSON text (RFC 8785 §3.2.2.3)")
    if x == 0:
        return "0"  # -0 too
    sign = "-" if x < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript requires
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = (
        len(whole.lstrip("0")) if whole.strip("0") else -(len(fraction) - len(fraction.lstrip("0")))
    )
    point += int(exponent or 0)
    digits = digits.rstrip("0") or "0"
    k, n = len(digits), point  # value = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp = f"e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + digits[0] + ("." + digits[1:] if k > 1 else "") + exp
