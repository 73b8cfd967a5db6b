"""Conform raw rows to a dataset schema: pure DataFrame -> DataFrame transformations.

Input frames hold one column per data column as read (strings from CSV and JSON Lines, Arrow
types from Parquet), optionally with the meta columns POSITION (source coordinate), RECORD (the
record as read, JSON text) and REASONS (reasons found earlier). `conform(dataset)` returns, per
row, POSITION (when given), every schema column converted to its declared type, REASONS (every
reason the row is rejected for, an empty array for a valid row) and RECORD (when given).

Rules, in the order their reasons are listed:
1. type: a value converts with `try_cast` semantics (Spark's ANSI cast, null instead of an
   error). A string that is empty is a null, not an error (CSV has no other null); any other value
   that does not convert is rejected: "column stars: 'abc' is not a valid int". Nested types
   (struct, array, map) are read from JSON text: every leaf is parsed as text first and then cast,
   so a leaf of the wrong type is caught, not silently nulled. A file column whose type cannot be
   cast at all (a Parquet struct declared as int) rejects every row that has a value there.
   A schema column the file lacks is null in every row (schema evolution), not an error.
   A decimal is never rounded: a value with more fraction digits than the declared scale is
   rejected ("column amount: '0.005' has more fraction digits than decimal(38,2) holds (it would
   be rounded)"), one with more integer digits than the precision allows is not a valid value;
   trailing zeros and an exponent count as written (`1.50`, `1e3` fit decimal(10,2)). Text is
   checked by its digits (`_rounds_text`), a typed source (Parquet decimal, double, float) by
   converting the value back: it must give the source value again. A caller may hand over
   values it converted already where that provably gives the same (`conform`'s `typed`: the
   ingest job's read task, `ingest_tasks.typed`); only the other texts are cast here.
2. nullability: a column declared `nullable: false` must hold a value: "column x must not be null".
3. subjects: every subject column (`user_id`, `customer.id`) must hold a value:
   "subject column customer.id is missing". Only null counts as missing. An empty or
   whitespace-only value is a value (the row is kept), but by the one subject-id rule
   (lethe_shared.subject_hashing.canonical.is_no_subject) it names nobody: the row is never
   indexed, no request can name it (blank ids are refused), and it is counted per object as
   `rows_without_subject`. `0` is an id like any other.
A column whose value failed rule 1 is not reported again by rules 2 and 3.
Columns of the file that are not in the schema are dropped (`extra_columns` names them).

Names, never positions: a schema column, and every field of a declared struct (at any depth,
also in arrays and map values), is the file's field that the one field-name rule of
`lethe_shared.datasets.field_names` finds (the exact name, else the one case variant; the rule
the index and erasure read rows by). A typed struct (Parquet) is rebuilt by name before it is
converted (`struct_names.by_name`), so `struct<name,id>` in a file fills a declared
`struct<id,name>` field by field; undeclared fields are dropped, like undeclared columns. Where
the file's struct type lacks a declared field, or holds several case variants of it and not
the exact name, every row in which that struct holds a value is rejected, and the column is
not reported again by rules 2 and 3: "column customer: field customer.id is missing", "column
customer: field customer.id is ambiguous (CUSTOMERID, customerId differ only in case)" (an
array element's fields are `orders[].id`, a map value's `attrs{}.x`); a schema column whose
name is ambiguous among the file's columns rejects every row. JSON text is conformed to the
schema's names before it gets here (`readers.json_names`: the JSON Lines reader, CSV cells in
the read task): a JSON Lines record whose declared names differ from its own arrives in NAMED,
with the declared names, and `extract_json_fields` reads it instead of RECORD; Spark's JSON
functions then match names exactly.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_jobs.struct_names import (
    ambiguous_field_reason,
    by_name,
    name_problems,
)
from lethe_shared.datasets.document import Column as SchemaColumn
from lethe_shared.datasets.document import Dataset, parse_type
from lethe_shared.datasets.document import DataType as DdlType
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field

POSITION = "_lethe_position"
REASONS = "_lethe_reasons"
RECORD = "_lethe_record"
NAMED = "_lethe_named"  # JSON Lines: the record with the schema's names, where they differ
META_COLUMNS = (POSITION, REASONS, RECORD, NAMED)
MAX_VALUE_CHARS = 200  # a value quoted in a reason is cut to this length

_CORRUPT = "_corrupt"
_JSON_OPTIONS = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}
_PRIMITIVES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "short": T.ShortType(),
    "byte": T.ByteType(),
    "double": T.DoubleType(),
    "float": T.FloatType(),
    "boolean": T.BooleanType(),
    "date": T.DateType(),
    "timestamp": T.TimestampType(),
    "timestamp_ntz": T.TimestampNTZType(),
    "binary": T.BinaryType(),
}

Transform = Callable[[DataFrame], DataFrame]


def col(name: str) -> Column:
    """A column by its exact name (dots, spaces and backticks are not syntax)."""
    return F.col("`" + name.replace("`", "``") + "`")


def spark_type(ddl: DdlType) -> T.DataType:
    """The Spark type of a parsed dataset column type."""
    if ddl.name in _PRIMITIVES:
        return _PRIMITIVES[ddl.name]
    if ddl.name == "decimal":
        return T.DecimalType(ddl.precision or 10, ddl.scale or 0)
    if ddl.name == "array" and ddl.element is not None:
        return T.ArrayType(spark_type(ddl.element))
    if ddl.name == "map" and ddl.key is not None and ddl.element is not None:
        return T.MapType(spark_type(ddl.key), spark_type(ddl.element))
    if ddl.name == "struct":
        return T.StructType([T.StructField(n, spark_type(t)) for n, t in ddl.fields])
    raise ValueError(f"unsupported type {ddl.ddl()}")


def schema_of(dataset: Dataset) -> T.StructType:
    """The dataset's schema as Spark types, with the declared nullability."""
    return T.StructType(
        [
            T.StructField(c.name, spark_type(parse_type(c.type)), nullable=c.nullable)
            for c in dataset.schema_
        ]
    )


def extra_columns(columns: Iterable[str], dataset: Dataset) -> list[str]:
    """Data columns of a file that no schema column names (they are dropped)."""
    data = [c for c in columns if c not in META_COLUMNS]
    named: set[str | None] = set()
    for column in dataset.schema_:
        try:
            named.add(find_field(data, column.name))
        except AmbiguousFieldError:
            continue
    return [c for c in data if c not in named]


def extract_json_fields(dataset: Dataset, keep: Sequence[str] = ()) -> Transform:
    """JSON Lines: one string column per top-level schema column, taken from the RECORD text
    (strings unquoted, numbers and booleans as written, objects and arrays as JSON text), or
    from NAMED where the reader conformed the record's names (module docstring). `keep` names
    columns of the caller's that pass through."""
    names = [c.name for c in dataset.schema_]

    def transform(df: DataFrame) -> DataFrame:
        text = F.coalesce(col(NAMED), col(RECORD)) if NAMED in df.columns else col(RECORD)
        fields = F.json_tuple(text, *names).alias(*names)
        return df.select(*[col(k) for k in keep], col(POSITION), col(RECORD), fields)

    return transform


def with_record(df: DataFrame) -> DataFrame:
    """Add RECORD (the data columns as a JSON object) when the frame has none."""
    if RECORD in df.columns:
        return df
    data = [col(c) for c in df.columns if c not in META_COLUMNS]
    record = F.to_json(F.struct(*data)) if data else F.lit("{}")
    return df.withColumn(RECORD, record)


def valid_rows(df: DataFrame) -> DataFrame:
    """Rows of a conformed frame with no reason, without REASONS and RECORD."""
    keep = [col(c) for c in df.columns if c not in (REASONS, RECORD)]
    return df.where(F.size(col(REASONS)) == 0).select(*keep)


def rejected_rows(df: DataFrame) -> DataFrame:
    """POSITION, REASONS and RECORD of the rows of a conformed frame that have a reason."""
    return df.where(F.size(col(REASONS)) > 0).select(col(POSITION), col(REASONS), col(RECORD))


# ---------------------------------------------------------------------------------- conform


@dataclass(frozen=True)
class _Plan:
    """How one schema column is converted. Stage 1 selects `sources` (helper columns named
    `_lethe_raw_<i>`, `_lethe_json_<i>`, `_lethe_names_<i>`, `_lethe_decimal_<i>`,
    `_lethe_converted_<i>`), stage 2
    adds `value` (as `value_name`); `failed` (boolean, never null) and `reason` refer only to
    helper columns and `value_name`. With `named`, the helper
    `_lethe_names_<i>` holds the row's reasons about the column's names (`struct_names`)."""

    column: SchemaColumn
    index: int
    sources: tuple[tuple[str, Column], ...]
    value: Column
    failed: Column
    reason: Column
    named: bool = False

    @property
    def value_name(self) -> str:
        return f"_lethe_value_{self.index}"

    @property
    def names(self) -> Column:
        """The row's reasons about the column's names (an array, maybe empty)."""
        if not self.named:
            return F.array().cast("array<string>")
        return col(f"_lethe_names_{self.index}")

    @property
    def troubled(self) -> Column:
        """The value failed, or a name did: rules 2 and 3 say nothing more of the column."""
        return self.failed | (F.size(self.names) > 0) if self.named else self.failed


def conform(
    dataset: Dataset, keep: Sequence[str] = (), typed: Mapping[str, str] | None = None
) -> Transform:
    """The transformation that converts and checks every row against `dataset` (module doc).
    `keep` names columns of the caller's (not data columns) that pass through unchanged.
    `typed` maps a schema column read as text to a column of the caller's holding, already of
    the declared type, the values of the rows whose text was converted before (their text is
    null): such a row's value is that one, and only the other rows' texts are converted and
    checked here. The caller converts only texts whose conversion here gives the same value
    and no reason (`ingest_tasks.typed`)."""
    typed = dict(typed or {})

    def transform(df: DataFrame) -> DataFrame:
        data = df.drop(*keep, *typed.values())
        plans = [
            _plan(data, column, index, typed.get(column.name))
            for index, column in enumerate(dataset.schema_)
        ]
        meta = [*keep, *[c for c in (POSITION, REASONS, RECORD) if c in df.columns]]
        sources = [source.alias(name) for p in plans for name, source in p.sources]
        staged = df.select(*[col(c) for c in meta], *sources)
        staged = staged.select(
            *[col(c) for c in staged.columns], *[p.value.alias(p.value_name) for p in plans]
        )
        earlier = col(REASONS) if REASONS in meta else F.array().cast("array<string>")
        reasons = F.concat(earlier, _reasons(dataset, plans))
        output = [col(k) for k in keep]
        output += [col(POSITION)] if POSITION in meta else []
        output += [col(p.value_name).alias(p.column.name) for p in plans]
        output.append(reasons.alias(REASONS))
        if RECORD in meta:
            output.append(col(RECORD))
        return staged.select(*output)

    return transform


def _reasons(dataset: Dataset, plans: Sequence[_Plan]) -> Column:
    """The row's reasons. Built only where a row has one: a row none of whose checks fails (a
    valid row, nearly every row) gets the empty array without the arrays of the checks being
    made and joined (each check's reason is there only where it fails, so that is the array
    they give)."""
    by_name = {p.column.name: p for p in plans}
    subject_heads = {path.split(".")[0] for path in dataset.subject_columns}
    parts = [F.concat(p.names, F.array(F.when(p.failed, p.reason))) for p in plans]
    problems = [p.troubled for p in plans]
    later = []
    for plan in plans:
        if not plan.column.nullable and plan.column.name not in subject_heads:
            missing = col(plan.value_name).isNull() & ~plan.troubled
            later.append(F.when(missing, F.lit(f"column {plan.column.name} must not be null")))
            problems.append(missing)
    for path in dataset.subject_columns:
        head, *rest = path.split(".")
        plan = by_name[head]
        value = functools.reduce(Column.getField, rest, col(plan.value_name))
        missing = value.isNull() & ~plan.troubled
        later.append(F.when(missing, F.lit(f"subject column {path} is missing")))
        problems.append(missing)
    if later:
        parts.append(F.array(*later))
    reasons = F.array_compact(F.concat(*parts))
    # a check that cannot tell (null) counts as failing: its row's reasons are then built
    return F.when(F.coalesce(_any(problems), F.lit(True)), reasons).otherwise(
        F.array().cast("array<string>")
    )


def _plan(df: DataFrame, column: SchemaColumn, index: int, typed: str | None = None) -> _Plan:
    declared = parse_type(column.type)
    target = spark_type(declared)
    raw_name = f"_lethe_raw_{index}"
    try:
        found = find_field([c for c in df.columns if c not in META_COLUMNS], column.name)
    except AmbiguousFieldError as exc:  # the file's own columns: every row
        problem = F.array(F.lit(ambiguous_field_reason(column.name, exc.candidates)))
        sources = ((raw_name, F.lit(None).cast(target)), (f"_lethe_names_{index}", problem))
        return _Plan(column, index, sources, _raw(index), F.lit(False), F.lit(None), named=True)
    if found is None:  # schema evolution: null in every row
        missing = ((raw_name, F.lit(None).cast(target)),)
        return _Plan(column, index, missing, _raw(index), F.lit(False), F.lit(None))
    source = col(found)
    raw_type = df.schema[found].dataType
    if raw_type == target:
        same = ((raw_name, source),)
        return _Plan(column, index, same, _raw(index), F.lit(False), F.lit(None))
    if isinstance(raw_type, T.StringType):
        if isinstance(target, T.StructType | T.ArrayType | T.MapType):
            return _from_json(column, index, declared, target, source)
        return _from_text(column, index, declared, target, source, typed=typed)
    return _from_typed(df, column, index, target, source=source, source_type=raw_type)


def _raw(index: int) -> Column:
    return col(f"_lethe_raw_{index}")


def _quoted(value: Column) -> Column:
    cut = F.when(
        F.length(value) > MAX_VALUE_CHARS,
        F.concat(F.substring(value, 1, MAX_VALUE_CHARS), F.lit("...")),
    ).otherwise(value)
    return F.concat(F.lit("'"), cut, F.lit("'"))


def _invalid(column: SchemaColumn, declared: DdlType, shown: Column) -> Column:
    return F.concat(
        F.lit(f"column {column.name}: "), _quoted(shown), F.lit(f" is not a valid {declared.ddl()}")
    )


def _try_cast(expression: str, target: T.DataType) -> Column:
    return F.expr(f"try_cast({expression} AS {target.simpleString()})")


def _rounding_reason(column: SchemaColumn, declared: DdlType, shown: Column) -> Column:
    return F.concat(
        F.lit(f"column {column.name}: "),
        _quoted(shown),
        F.lit(f" has more fraction digits than {declared.ddl()} holds (it would be rounded)"),
    )


# a decimal as Spark's cast reads it (java.math.BigDecimal, trimmed): groups 1 the fraction
# digits without trailing zeros, 2 the exponent. It matches the whole text: where a `$` would
# match before a final line terminator (U+0085, U+2028, U+2029; \s takes CR and LF), the
# terminator is part of the match, so that the rewrite of `_decimal_parts` holds nothing else.
_DECIMAL_TEXT = (
    r"^\s*[+-]?\p{Nd}*(?:\.(\p{Nd}*?)0*)?(?:[eE]([+-]?\p{Nd}+))?\s*[\u0085\u2028\u2029]?\z"
)


_SIGNS = ("+", "-")
_PLAIN_REST = ("", ".")  # a plain decimal's text without its ASCII digits, after its sign


def _plainly_fits(text: Column, scale: int) -> Column:
    """True where `text` is a plain decimal, `[+-]?[0-9]*(\\.[0-9]*)?` (ASCII digits, at most
    one sign, first, and one point, no space, no exponent), with at most `scale` digits after
    its point: such a text has the form `_DECIMAL_TEXT` reads, and its fraction, however many
    of its digits are trailing zeros, needs at most `scale` digits, so it is never rounded.
    Found without a regular expression (Spark's `translate`, `instr`, `length`: each value's
    characters once), so that the pattern runs only on the other texts."""
    rest = F.translate(text, "0123456789", "")
    signed = F.substring(text, 1, 1).isin(*_SIGNS) & F.substring(rest, 2, 2).isin(*_PLAIN_REST)
    plain = rest.isin(*_PLAIN_REST) | signed
    point = F.instr(text, ".")
    return plain & ((point == 0) | (F.length(text) - point <= F.lit(scale)))


def _decimal_parts(text: Column, scale: int | None = None) -> Column:
    """The decimal `text` as `#<fraction digits without trailing zeros>#<exponent>` where it
    has the form `_DECIMAL_TEXT` reads (one regular expression match), else as it is (a text
    the cast reads never holds "#"). With `scale`, a text that plainly fits it
    (`_plainly_fits`) is "##" instead (no fraction digits needed: never rounded), found
    without the match."""
    parts = F.regexp_replace(text, _DECIMAL_TEXT, "#$1#$2")
    if scale is None:
        return parts
    return F.when(_plainly_fits(text, scale), F.lit("##")).otherwise(parts)


def _rounds_parts(parts: Column, target: T.DecimalType) -> Column:
    """`_rounds_text` of the text whose `_decimal_parts` are `parts`."""
    fraction = F.substring_index(F.substring_index(parts, "#", 2), "#", -1)
    exponent_text = F.substring_index(parts, "#", -1)
    exponent = F.when(exponent_text == "", F.lit(0.0)).otherwise(exponent_text.cast("double"))
    needed = F.length(fraction).cast("double") - exponent
    return ~parts.startswith("#") | exponent.isNull() | (needed > F.lit(float(target.scale)))


def _rounds_text(text: Column, target: T.DecimalType) -> Column:
    """True where the decimal `text` needs more fraction digits than `target`'s scale (its cast
    would round it): the fraction's digits without trailing zeros, less the exponent. A form
    whose digits cannot be counted here counts as rounded (rejected, never altered)."""
    return _rounds_parts(_decimal_parts(text, target.scale), target)


def _rounds(source: Column, value: Column, source_type: T.DataType, target: T.DataType) -> Column:
    """True where `value`, the cast of `source` to `target`, is a rounded (altered) decimal."""
    if not isinstance(target, T.DecimalType):
        return F.lit(False)
    if isinstance(source_type, T.StringType):
        return value.isNotNull() & _rounds_text(source, target)
    if isinstance(source_type, T.DecimalType | T.DoubleType | T.FloatType):
        return value.isNotNull() & ~value.cast(source_type).eqNullSafe(source)
    return F.lit(False)  # integers and booleans convert exactly or not at all


def _from_text(
    column: SchemaColumn,
    index: int,
    declared: DdlType,
    target: T.DataType,
    source: Column,
    *,
    typed: str | None = None,
) -> _Plan:
    raw = _raw(index)
    value = _try_cast(f"`_lethe_raw_{index}`", target)
    reason = _invalid(column, declared, raw)
    sources: tuple[tuple[str, Column], ...] = ((f"_lethe_raw_{index}", source),)
    if isinstance(target, T.DecimalType):  # a rounded decimal: rejected, and no value
        # the text's digits found once per row, in stage 1 (`_decimal_parts`)
        parts = f"_lethe_decimal_{index}"
        sources = (*sources, (parts, _decimal_parts(source, target.scale)))
        rounded = value.isNotNull() & _rounds_parts(col(parts), target)
        value = F.when(~rounded, value)
        reason = F.when(rounded, _rounding_reason(column, declared, raw)).otherwise(reason)
    if typed is not None:  # converted before where the text is null (`conform`)
        converted = f"_lethe_converted_{index}"
        sources = (*sources, (converted, col(typed)))
        value = F.coalesce(col(converted), value)
    # the value as stage 2 made it (a decimal: null where it would be rounded), not cast again
    failed = raw.isNotNull() & (raw != "") & col(f"_lethe_value_{index}").isNull()
    return _Plan(column, index, sources, value, F.coalesce(failed, F.lit(False)), reason)


def _text_leaves(data_type: T.DataType) -> T.DataType:
    """The same structure with every leaf a string: how nested JSON is parsed first."""
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _text_leaves(f.dataType)) for f in data_type])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_text_leaves(data_type.elementType))
    if isinstance(data_type, T.MapType):
        return T.MapType(T.StringType(), _text_leaves(data_type.valueType))
    return T.StringType()


def _from_json(
    column: SchemaColumn, index: int, declared: DdlType, target: T.DataType, text: Column
) -> _Plan:
    """Nested values from JSON text: wrapped as {"v": <text>} so that every JSON value (object,
    array, or a scalar in the wrong place) parses or lands in the corrupt-record column."""
    leaves = _text_leaves(target)
    wrapper = T.StructType([T.StructField("v", leaves), T.StructField(_CORRUPT, T.StringType())])
    wrapped = F.concat(F.lit('{"v":'), text, F.lit("}"))
    parsed = F.when(F.trim(text) != "", F.from_json(wrapped, wrapper, _JSON_OPTIONS))
    json_name = f"_lethe_json_{index}"
    value = _try_cast(f"`{json_name}`.v", target)
    json = col(json_name)
    bad = json[_CORRUPT].isNotNull() | _leaf_failed(json["v"], value, leaves, target)
    failed = F.coalesce(json.isNotNull() & bad, F.lit(False))
    sources = ((f"_lethe_raw_{index}", text), (json_name, parsed))
    return _Plan(column, index, sources, value, failed, _invalid(column, declared, _raw(index)))


def _from_typed(
    df: DataFrame,
    column: SchemaColumn,
    index: int,
    target: T.DataType,
    *,
    source: Column,
    source_type: T.DataType,
) -> _Plan:
    """A typed file column (Parquet) of another type than declared: its structs rebuilt with
    the declared fields, found by name (`struct_names.by_name`), then cast."""
    declared = parse_type(column.type)
    raw = _raw(index)
    problems = name_problems(source, source_type, target, column.name)
    sources: tuple[tuple[str, Column], ...] = (
        (f"_lethe_raw_{index}", by_name(source, source_type, target)),
    )
    if problems:
        reasons = [F.when(F.coalesce(c, F.lit(False)), F.lit(text)) for text, c in problems]
        sources += ((f"_lethe_names_{index}", F.array_compact(F.array(*reasons))),)
    named = df.select(sources[0][1].alias("v"))
    raw_type = named.schema[0].dataType
    if raw_type == target:
        return _Plan(column, index, sources, raw, F.lit(False), F.lit(None), bool(problems))
    try:
        _ = named.select(_try_cast("v", target)).schema  # analyse
    except AnalysisException:
        reason = F.lit(
            f"column {column.name}: type {source_type.simpleString()} in the file cannot be "
            f"converted to {declared.ddl()}"
        )
        failed = F.coalesce(raw.isNotNull(), F.lit(False))
        none = F.lit(None).cast(target)
        return _Plan(column, index, sources, none, failed, reason, bool(problems))
    value = _try_cast(f"`_lethe_raw_{index}`", target)
    failed = F.coalesce(_leaf_failed(raw, value, raw_type, target), F.lit(False))
    reason = F.when(
        F.coalesce(_rounds(raw, value, raw_type, target), F.lit(False)),
        _rounding_reason(column, declared, raw.cast("string")),
    ).otherwise(_invalid(column, declared, raw.cast("string")))
    return _Plan(column, index, sources, value, failed, reason, bool(problems))


def _any(conditions: Sequence[Column]) -> Column:
    return functools.reduce(operator.or_, conditions) if conditions else F.lit(False)


def _leaf_failed(
    source: Column, value: Column, source_type: T.DataType, target: T.DataType
) -> Column:
    """True where `source` holds a value somewhere (at any depth) that `value`, its cast to
    `target`, lost. Null where both are null (callers coalesce)."""
    lost = source.isNotNull() & value.isNull()
    if isinstance(source_type, T.StructType) and isinstance(target, T.StructType):
        pairs = zip(source_type.fields, target.fields, strict=False)
        inner = [
            F.coalesce(
                _leaf_failed(source[s.name], value[t.name], s.dataType, t.dataType), F.lit(False)
            )
            for s, t in pairs
        ]
        return lost | _any(inner)
    if isinstance(source_type, T.ArrayType) and isinstance(target, T.ArrayType):
        return lost | _elements_failed(source, value, source_type.elementType, target.elementType)
    if isinstance(source_type, T.MapType) and isinstance(target, T.MapType):
        keys = _elements_failed(
            F.map_keys(source), F.map_keys(value), source_type.keyType, target.keyType
        )
        values = _elements_failed(
            F.map_values(source), F.map_values(value), source_type.valueType, target.valueType
        )
        return lost | keys | values
    if isinstance(source_type, T.StringType) and not isinstance(target, T.StringType):
        return (lost | _rounds(source, value, source_type, target)) & (source != "")
    return lost | _rounds(source, value, source_type, target)


def _elements_failed(
    source: Column, value: Column, source_type: T.DataType, target: T.DataType
) -> Column:
    pairs = F.zip_with(
        source,
        value,
        lambda s, v: F.coalesce(_leaf_failed(s, v, source_type, target), F.lit(False)),
    )
    return F.coalesce(F.exists(pairs, lambda failed: failed), F.lit(False))
