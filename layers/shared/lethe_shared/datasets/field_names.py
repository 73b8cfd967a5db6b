"""The one rule by which a declared column or struct field name finds a field in data.

Used alike by ingestion (conforming a file's columns and struct fields to the dataset's schema),
by the index (reading a subject column from a row, a Parquet column or a nested field) and by
erasure (matching rows of a raw or lake object), so a field is the same field everywhere:

1. a field whose name equals the declared name exactly is that field;
2. otherwise the one field whose name equals it ignoring case (Unicode lower case, as Spark's
   default `spark.sql.caseSensitive=false` compares names) is that field;
3. otherwise, when two or more fields equal it ignoring case and none exactly, the name is
   ambiguous: AmbiguousFieldError, which ingestion quarantines with a reason and erasure reports
   as not fully searched; never a guess;
4. no field: None (the data lacks the field).

Fields are never matched by position.
"""

from __future__ import annotations

from collections.abc import Iterable

from lethe_shared.errors import LetheError


class AmbiguousFieldError(LetheError):
    """Several fields equal a declared name ignoring case, none exactly."""

    def __init__(self, wanted: str, candidates: Iterable[str]) -> None:
        self.wanted = wanted
        self.candidates = tuple(sorted(candidates))
        super().__init__(
            f"field {wanted!r} is ambiguous: {len(self.candidates)} fields equal it ignoring case"
        )


def fold(name: str) -> str:
    """The case-insensitive form of a field name: Unicode lower case, as Spark compares names
    (Java's toLowerCase; not casefold, which would also equate "ß" and "ss")."""
    return name.lower()


def find_field(available: Iterable[str], wanted: str) -> str | None:
    """The name, among `available`, of the field that `wanted` names (see the module's rule);
    None when there is none. Raises AmbiguousFieldError."""
    names = list(available)
    if wanted in names:
        return wanted
    folded = fold(wanted)
    matches = [name for name in names if fold(name) == folded]
    if len(matches) > 1:
        raise AmbiguousFieldError(wanted, matches)
    return matches[0] if matches else None


def field_map(available: Iterable[str], wanted: Iterable[str]) -> dict[str, str | None]:
    """Each wanted name -> the available field it names (None: absent). Raises
    AmbiguousFieldError for the first ambiguous one."""
    names = list(available)
    return {name: find_field(names, name) for name in wanted}


def candidate_fields(available: Iterable[str], wanted: str) -> list[str]:
    """Every field `wanted` may name: the exact one alone when there is one, else each case
    variant (none, one, or several when the name is ambiguous). `find_field`'s answer without
    the error, for the index, which records every reading of an ambiguous name so that an
    erasure reaches the row (and reports it as not fully searched) instead of never seeing it."""
    names = list(available)
    if wanted in names:
        return [wanted]
    folded = fold(wanted)
    return [name for name in names if fold(name) == folded]
