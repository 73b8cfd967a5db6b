"""IAM identity-policy evaluation for the local cloud (what AWS decides for one request).

`evaluate(policies, request)` decides one (action, resource, context) request against a
principal's identity policies as AWS's policy evaluation logic does within one account with no
resource policy, SCP or permissions boundary in play: an explicit Deny in any statement wins,
else an Allow in any statement allows, else the request is implicitly denied.

A statement applies when its `Action` (or `NotAction`) matches the action (case-insensitive,
`*` and `?` wildcards), its `Resource` (or `NotResource`) matches the resource ARN
(case-sensitive, wildcards) and every condition holds. Conditions: the String*, Arn*, Bool,
Null and Numeric* operators, their `IfExists` forms and the `ForAllValues:` / `ForAnyValue:`
set operators, with AWS's rules for a key absent from the request (false, except `IfExists`,
`Null`, negated operators and `ForAllValues`, which hold). Keys compare case-insensitively.

What is refused rather than guessed (raises `Unevaluable`, which the enforcer turns into a
denial naming the reason): `Principal`/`NotPrincipal` in an identity policy, policy variables
(`${...}`), Date and IP address operators, and a condition key the request context does not
model for that action (`request.modelled`): a Deny that silently did not apply, or an Allow
that silently did, would make the check pass where AWS may decide otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

#: Condition keys every request carries locally (lower case).
GLOBAL_KEYS: Final = frozenset(
    {
        "aws:principalarn",
        "aws:principalaccount",
        "aws:principaltype",
        "aws:requestedregion",
        "aws:securetransport",
        "aws:userid",
        "aws:username",
    }
)


class Unevaluable(Exception):
    """A policy element this evaluator does not evaluate; the request must not pass silently."""


@dataclass(frozen=True)
class Request:
    """One authorisation question: may the principal do `action` on `resource`?"""

    action: str  # "s3:GetObject"
    resource: str  # an ARN, or "*" for actions that take no resource
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)  # lower-case keys
    modelled: frozenset[str] = frozenset()  # service condition keys the context models (lower)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # "allowed by <policy>/<sid>", "explicitly denied by ...", "no policy allows"
    policy: str = ""
    sid: str = ""
    allowed_by: tuple[str, ...] = ()  # every allowing statement, "<policy>/<sid>"


def evaluate(policies: Mapping[str, Any], request: Request) -> Decision:
    """Decide `request` against `policies` (name -> policy document, dict or JSON text)."""
    allows: list[tuple[str, str]] = []
    for name, document in policies.items():
        for index, statement in enumerate(_statements(document)):
            if not _applies(statement, request):
                continue
            sid = str(statement.get("Sid") or f"#{index}")
            if statement.get("Effect") == "Deny":
                return Decision(False, f"explicitly denied by {name}/{sid}", name, sid)
            allows.append((name, sid))
    if allows:
        name, sid = allows[0]
        return Decision(
            True, f"allowed by {name}/{sid}", name, sid, tuple(f"{n}/{s}" for n, s in allows)
        )
    return Decision(False, "no identity-based policy allows it")


def _statements(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, str):
        document = _parse(document)
    statements = document.get("Statement", [])
    return [statements] if isinstance(statements, dict) else list(statements)


@lru_cache(maxsize=512)
def _parse(text: str) -> Any:
    return json.loads(text)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    if "Principal" in statement or "NotPrincipal" in statement:
        raise Unevaluable("an identity policy statement names a Principal")
    if "Action" in statement:
        if not any(_glob(p, request.action, fold=True) for p in _as_list(statement["Action"])):
            return False
    elif "NotAction" in statement:
        if any(_glob(p, request.action, fold=True) for p in _as_list(statement["NotAction"])):
            return False
    else:
        raise Unevaluable("a statement without Action or NotAction")
    if "Resource" in statement:
        if not any(_resource_matches(p, request.resource) for p in _as_list(statement["Resource"])):
            return False
    elif "NotResource" in statement:
        if any(_resource_matches(p, request.resource) for p in _as_list(statement["NotResource"])):
            return False
    else:
        raise Unevaluable("a statement without Resource or NotResource")
    return all(
        _condition_holds(operator, key, values, request)
        for operator, tests in (statement.get("Condition") or {}).items()
        for key, values in tests.items()
    )


def _resource_matches(pattern: str, resource: str) -> bool:
    _no_variables(pattern)
    return _glob(pattern, resource, fold=False)


@lru_cache(maxsize=4096)
def _compiled(pattern: str, fold: bool) -> re.Pattern[str]:
    # IAM wildcards are * and ? only: everything else is literal.
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile(f"^{regex}$", re.IGNORECASE | re.DOTALL if fold else re.DOTALL)


def _glob(pattern: str, value: str, *, fold: bool) -> bool:
    return bool(_compiled(str(pattern), fold).match(value))


def _no_variables(text: str) -> None:
    if "${" in str(text):
        raise Unevaluable(f"policy variable in {text!r} (not evaluated locally)")


_NEGATED: Final = {
    "stringnotequals",
    "stringnotequalsignorecase",
    "stringnotlike",
    "arnnotequals",
    "arnnotlike",
    "numericnotequals",
}


def _condition_holds(operator: str, key: str, expected: Any, request: Request) -> bool:
    lowered_key = key.lower()
    prefix, _, base = operator.rpartition(":")
    prefix = prefix.lower()
    base_lower = base.lower()
    if_exists = base_lower.endswith("ifexists")
    if if_exists:
        base_lower = base_lower[: -len("ifexists")]
    if lowered_key not in GLOBAL_KEYS and lowered_key not in request.modelled:
        raise Unevaluable(f"condition key {key} is not modelled locally for {request.action}")
    if prefix not in {"", "forallvalues", "foranyvalue"}:
        raise Unevaluable(f"condition set operator {prefix} is not known")
    policy_values = [str(v) for v in _as_list(expected)]
    for value in policy_values:
        _no_variables(value)
    present = lowered_key in request.context
    values = [str(v) for v in request.context.get(lowered_key, ())]
    if base_lower == "null":
        wants_absent = policy_values[0].lower() == "true"
        return wants_absent != (present and bool(values))
    negated = base_lower in _NEGATED
    if not present:
        return {"forallvalues": True, "foranyvalue": False}.get(prefix, if_exists or negated)
    test = _operator(base_lower)
    results = [test(value, policy_values) for value in values]
    # ForAllValues, and a negated operator (no value may match): every value must pass
    return all(results) if prefix == "forallvalues" or (negated and not prefix) else any(results)


def _operator(name: str) -> Any:
    """`test(request_value, policy_values) -> bool` for the operator `name` (lower case)."""
    simple: dict[str, Any] = {
        "stringequals": lambda v, ps: v in ps,
        "stringnotequals": lambda v, ps: v not in ps,
        "stringequalsignorecase": lambda v, ps: v.lower() in {p.lower() for p in ps},
        "stringnotequalsignorecase": lambda v, ps: v.lower() not in {p.lower() for p in ps},
        "stringlike": lambda v, ps: any(_glob(p, v, fold=False) for p in ps),
        "stringnotlike": lambda v, ps: not any(_glob(p, v, fold=False) for p in ps),
        "arnequals": lambda v, ps: any(_arn_like(p, v) for p in ps),
        "arnlike": lambda v, ps: any(_arn_like(p, v) for p in ps),
        "arnnotequals": lambda v, ps: not any(_arn_like(p, v) for p in ps),
        "arnnotlike": lambda v, ps: not any(_arn_like(p, v) for p in ps),
        "bool": lambda v, ps: v.lower() in {p.lower() for p in ps},
        "numericequals": lambda v, ps: _num(v) in {_num(p) for p in ps},
        "numericnotequals": lambda v, ps: _num(v) not in {_num(p) for p in ps},
        "numericlessthan": lambda v, ps: any(_num(v) < _num(p) for p in ps),
        "numericlessthanequals": lambda v, ps: any(_num(v) <= _num(p) for p in ps),
        "numericgreaterthan": lambda v, ps: any(_num(v) > _num(p) for p in ps),
        "numericgreaterthanequals": lambda v, ps: any(_num(v) >= _num(p) for p in ps),
    }
    if name not in simple:
        raise Unevaluable(f"condition operator {name} is not evaluated locally")
    return simple[name]


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Unevaluable(f"{text!r} is not a number") from None


def _arn_like(pattern: str, arn: str) -> bool:
    """ArnLike: the six colon-separated parts match one by one (the last may hold colons)."""
    p_parts = pattern.split(":", 5)
    a_parts = arn.split(":", 5)
    if len(p_parts) != 6 or len(a_parts) != 6:
        return _glob(pattern, arn, fold=False)
    return all(_glob(p, a, fold=False) for p, a in zip(p_parts, a_parts, strict=True))


def matching_statements(policies: Mapping[str, Any], action: str) -> Iterable[tuple[str, str]]:
    """(policy, sid) of every statement whose Action names `action` (diagnostics, tests)."""
    for name, document in policies.items():
        for index, statement in enumerate(_statements(document)):
            if any(_glob(p, action, fold=True) for p in _as_list(statement.get("Action"))):
                yield name, str(statement.get("Sid") or f"#{index}")


__all__ = ["Decision", "Request", "Unevaluable", "evaluate", "matching_statements"]
