"""A row selector other than subject hashes, for the erase job's per-object machinery: what a
`RowPredicate` selects is removed by `erase_rows` and checked by `verify_erased` / `match_rows`
exactly as a subject's rows are (download, rewrite in the object's own format, conditional
write, writes ledger, purge of every older version: lethe_jobs.erase_core).

A predicate is a `SubjectMatcher` (so every port that takes one takes it) whose own `hashes` are
empty (a plain subject match selects nothing: fail safe), with its own `match` and `erase`. The
one predicate today is retention's (lethe_jobs.retention_rows.RetentionMatcher: rows past the
dataset's retention period, held subjects' rows kept).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from lethe_jobs.erase_rows.model import EraseResult, RowMatches, SubjectMatcher
from lethe_jobs.objects import ObjectKind


@dataclass(frozen=True)
class RowPredicate(SubjectMatcher, ABC):
    """Selects rows by something else than their subject (module docstring)."""

    @abstractmethod
    def match(self, kind: ObjectKind, path: Path, object_key: str, *, workdir: Path) -> RowMatches:
        """The rows of the object at `path` this predicate selects (as `match_rows`)."""

    @abstractmethod
    def erase(
        self, kind: ObjectKind, source: Path, target: Path, object_key: str, *, workdir: Path
    ) -> EraseResult:
        """The object without the selected rows (as `erase_rows`)."""
