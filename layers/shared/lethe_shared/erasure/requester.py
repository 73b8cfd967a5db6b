"""`requested_by`: who says they ask, as the requester writes it, checked at intake.

`requested_by` is the one free-text field of an erasure request that approvers read next to
their approval link (the email, the confirmation page). It is not proof of anything (the
request records the IAM caller API Gateway authenticated, `requester_principal`:
lethe_shared.erasure.principals), so intake keeps it to forms that cannot pass for
instructions, links or extra lines (`requested_by_problem`):

- 1 to 256 characters, with no control or format character anywhere (Unicode categories Cc,
  Cf, Zl, Zp: no CR, LF, TAB, NUL, no zero-width or bidirectional marks, no line or paragraph
  separator);
- surrounding spaces aside, exactly one of:
  - an e-mail address: `local@domain`, the local part dot-separated runs of ASCII letters,
    digits and ``!#$%&'*+=?^_{|}~-`` (no `/`, `:` or quotes; at most 64 characters), the
    domain two or more dot-separated labels of ASCII letters, digits and inner hyphens, the
    last starting with a letter (`xn--` labels of international domains included);
  - an IAM principal ARN, what `aws sts get-caller-identity` prints and API Gateway records:
    `arn:<partition>:iam::<12 digits>:` or `arn:<partition>:sts::<12 digits>:` followed by
    `root`, or `user/`, `role/`, `assumed-role/`, `federated-user/` and IAM name characters
    (ASCII letters, digits, `+=,.@_-` and `/` for paths and session names).

A URL (`https://...`), a sentence, or anything on several lines is refused: the problem names
the field and what is expected, never the value. `display_text` is the second layer, for
values stored before this check: it replaces every control or format character before a value
is shown.
"""

from __future__ import annotations

import re
import unicodedata

#: Unicode categories refused in `requested_by` (and replaced by `display_text`).
CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
MAX_REQUESTED_BY_LENGTH = 256

_ATOM = r"[A-Za-z0-9!#$%&'*+=?^_{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"(?=[^@]{{1,64}}@)(?:{_ATOM})(?:\.{_ATOM})*@(?:{_LABEL}\.)+{_TOP_LABEL}")
_PRINCIPAL_ARN = re.compile(
    r"arn:aws(?:-[a-z]+)*:(?:iam|sts)::[0-9]{12}:"
    r"(?:root|(?:user|role|assumed-role|federated-user)/[A-Za-z0-9+=,.@_/-]{1,200})"
)

REQUESTED_BY_FORMS = (
    "an e-mail address (name@example.com) or an IAM principal ARN "
    "(arn:aws:iam::123456789012:user/name, arn:aws:sts::123456789012:assumed-role/role/session)"
)


def is_control(character: str) -> bool:
    """A control or format character (Cc, Cf, Zl, Zp): CR, LF, TAB, zero-width, bidi marks."""
    return unicodedata.category(character) in CONTROL_CATEGORIES


def requested_by_problem(value: str) -> str | None:
    """Why `value` is not an acceptable `requested_by` (a sentence without the value), or None.
    The module docstring lists the accepted forms."""
    if not 1 <= len(value) <= MAX_REQUESTED_BY_LENGTH:
        return f"requested_by must have 1 to {MAX_REQUESTED_BY_LENGTH} characters"
    if any(is_control(c) for c in value):
        return (
            "requested_by must not contain control or format characters (line breaks, tabs, "
            "invisible characters)"
        )
    text = value.strip()
    if _EMAIL.fullmatch(text) or _PRINCIPAL_ARN.fullmatch(text):
        return None
    return f"requested_by must be {REQUESTED_BY_FORMS}"


def display_text(value: str) -> str:
    """`value` on one line for people to read: each run of control or format characters becomes
    one space (a value stored before intake checked it cannot add lines to an email)."""
    shown: list[str] = []
    for character in value:
        if is_control(character):
            if shown and shown[-1] != " ":
                shown.append(" ")
        else:
            shown.append(character)
    return "".join(shown).strip()
