"""The dataset document: what a dataset's raw files look like and who its data subjects are.

The document is a public contract (see docs/DATASETS.md). Validation is complete here, without
Spark, so that the API, the CLI and the Lambda functions reject a bad document with every problem
named at once. Column types are Spark SQL DDL strings; `parse_type` turns them into a small tree
that is enough to resolve nested subject columns (`customer.id`) and to check partition columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from pydantic import ConfigDict, Field, ValidationError, field_validator

from lethe_shared.datasets.processing import LegalBasis, Retention, retention_problems
from lethe_shared.errors import DatasetValidationError
from lethe_shared.models import Model

DATASET_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# `index_partition_bits`: at most this many (the segment index names a partition by 4 hex
# digits: lethe_shared.index.segments.format.MAX_PARTITION_BITS, held equal by a unit test)
MAX_INDEX_PARTITION_BITS = 16

_PRIMITIVES = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "int": "int",
    "integer": "int",
    "long": "long",
    "bigint": "long",
    "short": "short",
    "smallint": "short",
    "byte": "byte",
    "tinyint": "byte",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
}
# Types a subject column or a partition column may have: values with a stable text form.
KEY_TYPES = frozenset({"string", "int", "long", "short", "byte", "date", "decimal", "boolean"})


@dataclass(frozen=True)
class DataType:
    """A parsed Spark DDL type. `name` is canonical: `int`, not `integer`."""

    name: str
    fields: tuple[tuple[str, DataType], ...] = ()  # struct
    element: DataType | None = None  # array element, map value
    key: DataType | None = None  # map key
    precision: int | None = None  # decimal
    scale: int | None = None  # decimal

    def field(self, name: str) -> DataType | None:
        return next((t for n, t in self.fields if n == name), None)

    def ddl(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "struct":
            return "struct<" + ",".join(f"{n}:{t.ddl()}" for n, t in self.fields) + ">"
        if self.name == "array" and self.element is not None:
            return f"array<{self.element.ddl()}>"
        if self.name == "map" and self.key is not None and self.element is not None:
            return f"map<{self.key.ddl()},{self.element.ddl()}>"
        return self.name


class _TypeParser:
    _TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = self._TOKEN.match(text, pos)
            if not match:
                raise ValueError(f"unexpected character {text[pos:].strip()[0]!r}")
            self.tokens.append(match.group(1))
            pos = match.end()
        self.pos = 0

    def _next(self) -> str:
        if self.pos >= len(self.tokens):
            raise ValueError("unexpected end of type")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def _expect(self, token: str) -> None:
        got = self._next()
        if got != token:
            raise ValueError(f"expected {token!r}, found {got!r}")

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse(self) -> DataType:
        result = self._type()
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.pos]!r} after the type")
        return result

    def _type(self) -> DataType:
        word = self._next().lower()
        if word in _PRIMITIVES:
            return DataType(_PRIMITIVES[word])
        composite = {
            "decimal": self._decimal,
            "dec": self._decimal,
            "numeric": self._decimal,
            "array": self._array,
            "map": self._map,
            "struct": self._struct,
        }.get(word)
        if composite is None:
            raise ValueError(f"unknown type {word!r}")
        return composite()

    def _decimal(self) -> DataType:
        precision, scale = 10, 0
        if self._peek() == "(":
            self._next()
            precision = int(self._next())
            if self._peek() == ",":
                self._next()
                scale = int(self._next())
            self._expect(")")
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"decimal({precision},{scale}) is out of range")
        return DataType("decimal", precision=precision, scale=scale)

    def _array(self) -> DataType:
        self._expect("<")
        element = self._type()
        self._expect(">")
        return DataType("array", element=element)

    def _map(self) -> DataType:
        self._expect("<")
        key = self._type()
        self._expect(",")
        value = self._type()
        self._expect(">")
        return DataType("map", key=key, element=value)

    def _struct(self) -> DataType:
        self._expect("<")
        fields: list[tuple[str, DataType]] = []
        while True:
            name = self._next()
            self._expect(":")
            fields.append((name, self._type()))
            separator = self._next()
            if separator == ">":
                break
            if separator != ",":
                raise ValueError(f"expected ',' or '>', found {separator!r}")
        names = [n for n, _ in fields]
        if len(set(names)) != len(names):
            raise ValueError("struct has duplicate field names")
        return DataType("struct", fields=tuple(fields))


def parse_type(text: str) -> DataType:
    """Parse a Spark SQL DDL type string. Raises ValueError with the reason."""
    return _TypeParser(text).parse()


class DataFormat(StrEnum):
    CSV = "csv"
    JSONL = "jsonl"
    PARQUET = "parquet"


class Compression(StrEnum):
    AUTO = "auto"  # detected from the bytes (gzip magic number), not from the key's extension
    GZIP = "gzip"
    NONE = "none"


class Column(Model):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=255)
    type: str = Field(min_length=1)
    nullable: bool = True


class CsvOptions(Model):
    model_config = ConfigDict(extra="forbid", frozen=True)

    delimiter: str = Field(default=",", min_length=1, max_length=1)
    header: bool = True
    quote: str = Field(default='"', min_length=1, max_length=1)
    escape: str = Field(default='"', min_length=1, max_length=1)


class Dataset(Model):
    """A registered dataset. Unknown top-level fields are kept (the contract allows more fields)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    dataset_id: str = Field(pattern=DATASET_ID_PATTERN)
    format: DataFormat
    compression: Compression = Compression.AUTO
    subject_columns: list[str] = Field(min_length=1)
    partition_by: list[str] = Field(default_factory=list)
    schema_: list[Column] = Field(alias="schema", min_length=1)
    csv: CsvOptions = Field(default_factory=CsvOptions)
    description: str = ""
    # the record of processing, all optional (lethe_shared.datasets.processing; Art. 30)
    purpose: str | None = Field(default=None, min_length=1, max_length=2000)
    legal_basis: LegalBasis | None = None
    data_categories: list[str] | None = Field(default=None, max_length=50)
    recipients: list[str] | None = Field(default=None, max_length=50)
    retention: Retention | None = None
    # the segment index's hash partitions of this dataset: 2 ** bits, fixed at the dataset's
    # first index write (docs/DATASETS.md, "Index partitions"); None: the deployment's default
    index_partition_bits: int | None = Field(
        default=None, ge=0, le=MAX_INDEX_PARTITION_BITS, strict=True
    )

    @field_validator("data_categories", "recipients")
    @classmethod
    def _texts(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not t.strip() or len(t) > 200 for t in value):
            raise ValueError("each item must be a non-empty text of at most 200 characters")
        return value

    @field_validator("subject_columns", "partition_by")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names must be unique")
        return value

    def column_type(self, path: str) -> DataType | None:
        """The type at a dotted column path (`customer.id`), or None where there is none."""
        head, *rest = path.split(".")
        column = next((c for c in self.schema_ if c.name == head), None)
        if column is None:
            return None
        current: DataType | None = parse_type(column.type)
        for part in rest:
            if current is None or current.name != "struct":
                return None
            current = current.field(part)
        return current

    def document(self) -> dict[str, Any]:
        """The JSON document, as the contract spells it (the optional record-of-processing
        fields and `index_partition_bits` only where declared)."""
        found = self.model_dump(mode="json", by_alias=True)
        for name in (*_OPTIONAL_RECORD_FIELDS, "index_partition_bits"):
            if getattr(self, name) is None:
                found.pop(name, None)
        if self.retention is not None:
            found["retention"] = self.retention.document()
        return found


_OPTIONAL_RECORD_FIELDS = ("purpose", "legal_basis", "data_categories", "recipients", "retention")


@dataclass
class _Problems:
    items: list[str] = field(default_factory=list)

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}")


def _check_columns(dataset: Dataset, problems: _Problems) -> None:
    names = [c.name for c in dataset.schema_]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        problems.add("schema", f"column {duplicate!r} is declared more than once")
    for index, column in enumerate(dataset.schema_):
        try:
            parse_type(column.type)
        except ValueError as exc:
            problems.add(f"schema[{index}].type", f"{column.type!r} is not a valid type ({exc})")


def _check_subject_columns(dataset: Dataset, problems: _Problems) -> None:
    for index, path in enumerate(dataset.subject_columns):
        found = dataset.column_type(path)
        if found is None:
            problems.add(f"subject_columns[{index}]", f"{path!r} is not a column of the schema")
        elif found.name not in KEY_TYPES:
            problems.add(
                f"subject_columns[{index}]",
                f"{path!r} has type {found.ddl()}; a subject column must be one of "
                + ", ".join(sorted(KEY_TYPES)),
            )


def _check_partitions(dataset: Dataset, problems: _Problems) -> None:
    for index, name in enumerate(dataset.partition_by):
        where = f"partition_by[{index}]"
        if "." in name:
            problems.add(where, f"{name!r}: partition columns must be top level")
            continue
        part_type = dataset.column_type(name)
        if part_type is None:
            problems.add(where, f"{name!r} is not a column of the schema")
        elif part_type.name not in KEY_TYPES:
            problems.add(where, f"{name!r} has type {part_type.ddl()}; partition by a simple type")


def _check_semantics(dataset: Dataset) -> list[str]:
    problems = _Problems()
    _check_columns(dataset, problems)
    if problems.items:
        return problems.items  # the checks below need parseable types
    _check_subject_columns(dataset, problems)
    _check_partitions(dataset, problems)
    problems.items += retention_problems(dataset)
    if dataset.format is DataFormat.PARQUET and dataset.compression is Compression.GZIP:
        problems.add("compression", "parquet files carry their own codec; use 'auto' or 'none'")
    return problems.items


def parse_dataset(document: Any) -> Dataset:
    """Validate a dataset document. Raises DatasetValidationError listing every problem."""
    if not isinstance(document, dict):
        raise DatasetValidationError(["document: must be a JSON object"])
    try:
        dataset = Dataset.model_validate(document)
    except ValidationError as exc:
        raise DatasetValidationError(
            [
                f"{'.'.join(str(p) for p in err['loc']) or 'document'}: {err['msg']}"
                for err in exc.errors()
            ]
        ) from exc
    problems = _check_semantics(dataset)
    if problems:
        raise DatasetValidationError(problems)
    return dataset


HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def hive_partition_values(key: str, dataset: Dataset) -> dict[str, str | None]:
    """The partition values a lake key carries (`<dataset>/<p>=<v>/.../file`), unescaped, as
    text (its canonical form as a subject id); `__HIVE_DEFAULT_PARTITION__` is null. Only the
    dataset's own partition columns are read."""
    values: dict[str, str | None] = {}
    for segment in key.split("/")[1:-1]:
        name, sep, raw = segment.partition("=")
        if sep and name in dataset.partition_by:
            text = unquote(raw)
            values[name] = None if text == HIVE_DEFAULT_PARTITION else text
    return values


QUARANTINE_PREFIX = "_quarantine"


def is_quarantine_key(object_key: str) -> bool:
    """Quarantine files (rows rejected by ingestion, `<dataset>/_quarantine/...`) hold raw
    records as JSON Lines: only the Spark jobs read them (spark_jobs/lethe_jobs/indexing.py
    types their values as ingestion does)."""
    head, _, rest = object_key.partition("/")
    return bool(head) and rest.startswith(f"{QUARANTINE_PREFIX}/")
