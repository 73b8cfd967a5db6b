"""The erase job's per-object vocabulary: which rows to erase (`SubjectMatcher`), what an
object holds (`RowMatches`), what of it could not be searched (`Gap`) and what its rewrite did
(`EraseResult`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lethe_shared.datasets.document import Dataset
from lethe_shared.erasure.report import GapReason
from lethe_shared.subject_hashing.keys import KEY_MIN_BYTES

_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SubjectMatcher:
    """The rows to erase: those of `dataset` whose subject hashes (HMAC-SHA256 hex under `key`,
    as the subject index stores them) are in `hashes`."""

    dataset: Dataset
    hashes: frozenset[str]
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < KEY_MIN_BYTES:
            raise ValueError(f"the subject hash key must have at least {KEY_MIN_BYTES} bytes")
        if not all(_HASH.fullmatch(h) for h in self.hashes):
            raise ValueError("subject hashes are 64 lowercase hexadecimal characters")


@dataclass(frozen=True)
class Gap:
    """Part of an object that could not be (fully) searched for the subjects: a `NotSearched`
    without its object (lethe_shared.erasure.report). `count` is the rows or lines concerned
    (0: not known); `detail` holds counts, line numbers and declared column names only, never
    a value read from the object."""

    reason: GapReason
    count: int = 0
    detail: str = ""


@dataclass(frozen=True)
class RowMatches:
    """What an object holds: `rows` rows as the index counts them (rejected records included),
    and the coordinates of the matching ones, ascending (CSV, JSON Lines and quarantine files:
    the 1-based physical line a record starts on; Parquet: the 0-based row index).
    `by_subject`: how many of them each subject hash matched, sorted by hash; `gaps`: what of
    the object could not be searched (the caller reports it, never as a plain "unchanged").
    Two matches are equal when they hold the same rows and positions: `by_subject` follows from
    the positions, `gaps` are read with them (compare them on their own)."""

    rows: int
    positions: tuple[int, ...]
    by_subject: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    gaps: tuple[Gap, ...] = field(default=(), compare=False)

    @property
    def matched(self) -> int:
        return len(self.positions)


def subject_counts(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """`RowMatches.by_subject` of a mapping: positive counts, sorted by hash."""
    return tuple(sorted((h, int(n)) for h, n in counts.items() if n))


@dataclass(frozen=True)
class EraseResult:
    """The outcome of `erase_rows`. `written` is True when the target was written, which is
    exactly when some rows were removed and some remain (no row left: the caller deletes the
    object; nothing removed: the object stays as it is)."""

    rows_before: int
    positions: tuple[int, ...]  # coordinates of the removed rows in the source object
    written: bool
    deviations: tuple[str, ...] = ()  # Parquet properties the rewrite could not keep
    by_subject: tuple[tuple[str, int], ...] = ()  # removed rows per subject hash
    gaps: tuple[Gap, ...] = ()  # what of the source could not be searched

    @classmethod
    def of(
        cls, matches: RowMatches, *, written: bool, deviations: tuple[str, ...] = ()
    ) -> EraseResult:
        """The result of erasing `matches` (every matching row is removed)."""
        return cls(
            matches.rows, matches.positions, written, tuple(deviations),
            matches.by_subject, matches.gaps,
        )  # fmt: skip

    @property
    def rows_removed(self) -> int:
        return len(self.positions)

    @property
    def rows_after(self) -> int:
        return self.rows_before - self.rows_removed


class ErasureVerificationError(Exception):
    """A rewritten object still holds a matching row, or not the rows it should."""


def rewrite_needed(matches: RowMatches) -> bool:
    return 0 < matches.matched < matches.rows
