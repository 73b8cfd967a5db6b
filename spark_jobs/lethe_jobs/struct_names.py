"""Typed structs (Parquet) conformed to a dataset's declared structs by field name, never by
position: the part of `validate` that rebuilds a file's struct values with the declared fields
(`by_name`) and says which rows a field the file lacks, or names ambiguously, rejects
(`name_problems`), with the reasons' wording (also used for JSON text, `readers.json_names`).

Each declared field is the file's field that the field-name rule of
`lethe_shared.datasets.field_names` finds (the exact name, else the one case variant), at every
depth: in structs, arrays' elements and maps' keys and values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field


def _head(path: str) -> str:
    return re.split(r"[.\[{]", path, maxsplit=1)[0]


def missing_field_reason(path: str) -> str:
    """Why a row is rejected whose struct lacks a declared field (`customer.id`)."""
    return f"column {_head(path)}: field {path} is missing"


def ambiguous_field_reason(path: str, candidates: Iterable[str]) -> str:
    """Why a row is rejected where a declared name is ambiguous: several fields equal it
    ignoring case, none exactly (lethe_shared.datasets.field_names)."""
    shown = ", ".join(candidates)
    return f"column {_head(path)}: field {path} is ambiguous ({shown} differ only in case)"


def _needs_names(source: T.DataType, target: T.DataType) -> bool:
    """Whether a typed value's structs differ from the declared ones in their fields' names or
    order (case, fields missing or extra): then they are rebuilt by name (`by_name`)."""
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        if source.names != target.names:
            return True
        pairs = zip(source.fields, target.fields, strict=True)
        return any(_needs_names(s.dataType, t.dataType) for s, t in pairs)
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return _needs_names(source.elementType, target.elementType)
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return _needs_names(source.keyType, target.keyType) or _needs_names(
            source.valueType, target.valueType
        )
    return False


@dataclass(frozen=True)
class _Field:
    """Where a declared struct field is in a file's struct: `at` (its position there), or
    none, or several case variants (`candidates`)."""

    target: T.StructField
    at: int | None
    candidates: tuple[str, ...] = ()


def _fields(source: T.StructType, target: T.StructType) -> list[_Field]:
    """Each declared field of `target` found among `source`'s fields by the field-name rule (a
    name the file repeats exactly is ambiguous too: which one is meant cannot be told)."""
    names = source.names
    found = []
    for field in target.fields:
        try:
            name = find_field(names, field.name)
        except AmbiguousFieldError as exc:
            found.append(_Field(field, None, exc.candidates))
            continue
        if name is not None and names.count(name) > 1:
            found.append(_Field(field, None, (name,) * names.count(name)))
        else:
            found.append(_Field(field, None if name is None else names.index(name)))
    return found


def _positional(source: T.StructType) -> T.StructType:
    """The same struct with its fields named `f0`, `f1`, ...: a cast to it renames them, so that
    fields whose names differ only in case (which Spark's analyser cannot tell apart) can be
    taken one by one. The position only addresses the file's own field: which declared field
    it fills was decided by name (`_fields`)."""
    return T.StructType(
        [T.StructField(f"f{i}", f.dataType, f.nullable) for i, f in enumerate(source.fields)]
    )


def by_name(value: Column, source: T.DataType, target: T.DataType) -> Column:
    """`value` (of the file's type `source`) with every struct rebuilt with `target`'s fields,
    in `target`'s order, each taken from the file's field of that name (`_fields`); a field
    the file lacks (or names ambiguously) is null; undeclared fields are dropped; leaves keep
    the file's types (the caller casts them)."""
    if not _needs_names(source, target):
        return value
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        fields = source.fields
        aliased = value.cast(_positional(source))
        members = [
            F.lit(None).cast(f.target.dataType).alias(f.target.name)
            if f.at is None
            else by_name(
                aliased.getField(f"f{f.at}"), fields[f.at].dataType, f.target.dataType
            ).alias(f.target.name)
            for f in _fields(source, target)
        ]
        return F.when(value.isNotNull(), F.struct(*members))
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        element, wanted = source.elementType, target.elementType
        return F.transform(value, lambda e: by_name(e, element, wanted))
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        keys, values = (source.keyType, target.keyType), (source.valueType, target.valueType)
        if _needs_names(*keys):
            value = F.transform_keys(value, lambda k, _: by_name(k, *keys))
        if _needs_names(*values):
            value = F.transform_values(value, lambda _, v: by_name(v, *values))
        return value
    return value


_Problem = tuple[str, Column]  # a reason, and where it applies (a boolean, maybe null)


def name_problems(
    value: Column, source: T.DataType, target: T.DataType, path: str
) -> list[_Problem]:
    """The declared struct fields (at `path` and below) that the file's type lacks or names
    ambiguously, each with the rows it applies to: those in which the struct that should hold
    it is not null (for an array or map, any of its elements or values)."""
    if not _needs_names(source, target):
        return []
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        aliased = value.cast(_positional(source))
        present = value.isNotNull()
        problems: list[_Problem] = []
        for f in _fields(source, target):
            where = f"{path}.{f.target.name}"
            if f.candidates:
                problems.append((ambiguous_field_reason(where, f.candidates), present))
            elif f.at is None:
                problems.append((missing_field_reason(where), present))
            else:
                child, kind = aliased.getField(f"f{f.at}"), source.fields[f.at].dataType
                problems += name_problems(child, kind, f.target.dataType, where)
        return problems
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return _problems_in(value, source.elementType, target.elementType, f"{path}[]")
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        keys = _problems_in(F.map_keys(value), source.keyType, target.keyType, f"{path}{{key}}")
        values = F.map_values(value)
        return keys + _problems_in(values, source.valueType, target.valueType, f"{path}{{}}")
    return []


def _problems_in(
    items: Column, source: T.DataType, target: T.DataType, path: str
) -> list[_Problem]:
    """`name_problems` of the elements of an array: each applies where any element has it."""
    texts = [text for text, _ in name_problems(F.lit(None).cast(source), source, target, path)]

    def holds(k: int) -> Column:
        def has(element: Column) -> Column:
            return F.coalesce(name_problems(element, source, target, path)[k][1], F.lit(False))

        return F.exists(items, has)

    return [(text, holds(k)) for k, text in enumerate(texts)]
