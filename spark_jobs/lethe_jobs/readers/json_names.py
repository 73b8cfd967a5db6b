"""JSON values conformed to the dataset's field names, by name: what the ingest job's JSON text
(a JSON Lines record, a CSV cell holding a struct as JSON) holds under each declared name.

Spark's JSON functions (`json_tuple`, `from_json`) look a key up by its exact name. The dataset's
rule is wider (`lethe_shared.datasets.field_names`, shared by ingestion, the index and erasure):
the exact name, else the one case variant, never by position; several case variants and no
exact name make the name ambiguous. `JsonNames` applies that rule to a parsed value, at the top
level and in every struct the schema declares (also inside arrays and map values), and says
per value:

- nothing, when every declared name that is present is present exactly (the common case: the
  text goes to Spark as it is);
- the value's text with the declared names (`renamed`), when some field is present only as a
  case variant: members under their declared names, in the value's own order; members the
  schema does not declare are left out (validation drops them anyway); numbers keep the text
  they were written with, so Spark reads the renamed text exactly as it reads the line;
- the reasons, when a name is ambiguous: the record is rejected (quarantined with the reason;
  `validate.ambiguous_field_reason`), never read on a guess.

A declared field that a JSON object lacks is null there, as a missing top-level key is: JSON
has no schema for a file to lack a field in (a Parquet struct that lacks one is another matter,
`validate`). Values that are not objects where a struct is declared are left to validation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lethe_jobs.struct_names import ambiguous_field_reason
from lethe_shared.datasets.document import Dataset, DataType, parse_type
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field


class _Number(str):
    """A JSON number as written (`1.50`, `1e3`, `-0`), kept as its text."""

    __slots__ = ()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_keeping_numbers(text: str) -> Any:
    return json.loads(text, parse_float=_Number, parse_int=_Number, parse_constant=_reject_constant)


def dump(value: Any) -> str:
    """Compact JSON text of a value parsed by `_parse_keeping_numbers` (numbers as written)."""
    if isinstance(value, _Number):
        return str.__str__(value)
    if isinstance(value, dict):
        members = (f"{json.dumps(k)}:{dump(v)}" for k, v in value.items())
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)  # strings (ASCII escapes: any code point survives), booleans, null


def _has_struct(declared: DataType) -> bool:
    if declared.name == "struct":
        return True
    if declared.name in ("array", "map") and declared.element is not None:
        return _has_struct(declared.element)
    return False


@dataclass
class _Walk:
    reasons: list[str]
    changed: bool = False
    build: bool = False  # False: only look (most values need no new text)


_Conform = Callable[[Any, _Walk], Any]


def _conformer(declared: DataType, path: str) -> _Conform | None:
    """How a value of `declared` at `path` is conformed; None when no struct is below it."""
    if not _has_struct(declared):
        return None
    if declared.name == "struct":
        return _struct_conformer(declared.fields, path)
    array = declared.name == "array"
    inner = (
        _conformer(declared.element, path + ("[]" if array else "{}")) if declared.element else None
    )
    if inner is None:
        return None
    if array:
        return lambda value, walk: (
            [inner(v, walk) for v in value] if isinstance(value, list) else value
        )
    return lambda value, walk: (
        {k: inner(v, walk) for k, v in value.items()} if isinstance(value, dict) else value
    )


def _struct_conformer(fields: tuple[tuple[str, DataType], ...], path: str) -> _Conform:
    """A JSON object's members under the declared field names (module docstring)."""
    paths = [(name, kind, f"{path}.{name}" if path else name) for name, kind in fields]
    inner = [(name, where, _conformer(kind, where)) for name, kind, where in paths]

    def conform(value: Any, walk: _Walk) -> Any:
        if not isinstance(value, dict):
            return value
        members: dict[str, Any] = {}
        for name, where, below in inner:
            key: str | None = name
            if name not in value:  # the exact name wins; else the one case variant
                try:
                    key = find_field(value, name)
                except AmbiguousFieldError as exc:
                    walk.reasons.append(ambiguous_field_reason(where, exc.candidates))
                    continue
                if key is None:
                    continue  # absent: null
                walk.changed = True
            if below is not None:
                members[name] = below(value[key], walk)
            elif walk.build:
                members[name] = value[key]
        return members if walk.build else value

    return conform


_Check = Callable[[Any], bool]


def _exact(declared: DataType) -> _Check | None:
    """A quick test that every declared field below a value of `declared` is there under its
    exact name (then nothing is conformed); None when no struct is below it. A value that is
    not what is declared passes: validation rejects it."""
    if declared.name == "struct":
        return _exact_struct(declared.fields)
    inner = _exact(declared.element) if declared.element is not None else None
    if inner is None or not _has_struct(declared):
        return None
    if declared.name == "array":
        return lambda value: not isinstance(value, list) or all(inner(v) for v in value)
    return lambda value: not isinstance(value, dict) or all(inner(v) for v in value.values())


def _exact_struct(fields: tuple[tuple[str, DataType], ...]) -> _Check:
    names = frozenset(name for name, _ in fields)
    below = [(name, inner) for name, kind in fields if (inner := _exact(kind)) is not None]

    def exact(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if not value.keys() >= names:  # a dict view compares as a set, in C
            return False
        return all(inner(value[name]) for name, inner in below)

    return exact


class JsonNames:
    """The field-name rule over JSON values of one dataset (module docstring)."""

    def __init__(self, dataset: Dataset) -> None:
        fields = tuple((c.name, parse_type(c.type)) for c in dataset.schema_)
        self._record = _struct_conformer(fields, "")
        self._record_exact = _exact_struct(fields)
        self._columns = {name: _conformer(kind, name) for name, kind in fields}

    def record(self, parsed: dict[str, Any], text: str) -> tuple[str | None, list[str]]:
        """A JSON Lines record (`parsed` from `text`): its text with the declared names when
        they differ from the record's (None when they do not), and the reasons it must be
        rejected (ambiguous names)."""
        if self._record_exact(parsed):
            return None, []
        return self._conformed(self._record, parsed, text)

    def cell(self, column: str, text: str) -> tuple[str | None, list[str]]:
        """The same for a CSV cell that holds a declared column's value as JSON text (a text
        that is not JSON is left to validation)."""
        conform = self._columns.get(column)
        if conform is None or not text.strip():
            return None, []
        try:
            parsed = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return None, []
        return self._conformed(conform, parsed, text)

    def nested(self, column: str) -> bool:
        """Whether a column's declared type holds a struct (its JSON text has names)."""
        return self._columns.get(column) is not None

    @staticmethod
    def _conformed(conform: _Conform, parsed: Any, text: str) -> tuple[str | None, list[str]]:
        walk = _Walk([])
        conform(parsed, walk)
        if walk.reasons:
            return None, walk.reasons
        if not walk.changed:
            return None, []
        return dump(conform(_parse_keeping_numbers(text), _Walk([], build=True))), []
