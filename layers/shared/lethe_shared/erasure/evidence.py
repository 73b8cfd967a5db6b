"""Immutable erasure evidence: every version of every `erasure/` document is locked when written.

The reports bucket is versioned and has S3 Object Lock enabled (template.yaml, ReportsBucket).
Each writer of a document under `erasure/` (the frozen report and its summaries, the erase job's
results, verification and per-object progress, the audit record, the certificate, the chain's
links, its head hint and a request's chain claim) puts it with a retention of its own:

    ObjectLockMode=<EVIDENCE_LOCK_MODE>, ObjectLockRetainUntilDate=<now + EVIDENCE_RETENTION_DAYS>

so that version cannot be deleted, nor its retention shortened, until that date: in GOVERNANCE
mode only a principal holding `s3:BypassGovernanceRetention` (which no Lethe role has) can; in
COMPLIANCE mode nobody, the account's root user included. A document written again (a re-run of
the erase job, a resumed request, the head hint) becomes a new version; the older version stays,
locked. Per-object retention, not a bucket default, because the same bucket holds `manifests/`
and `reconcile/`, which must still expire.

S3 requires an integrity checksum on a PUT with Object Lock parameters (Content-MD5 or an
x-amz-checksum-*): the arguments below ask the SDK for a SHA-256 checksum, which every boto3
that knows Object Lock computes itself.

This module is the one owner of the settings: the functions read them from their environment
(`EvidenceLock.from_environ`, set by template.yaml), the Spark erase job from its arguments
(`--evidence-retention-days`, `--evidence-lock-mode`: `EvidenceLock.from_values`, passed by the
erasure state machine). Unset (tests, a local run without the stack): nothing is locked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lethe_shared.errors import LetheError

EVIDENCE_PREFIX = "erasure/"
RETENTION_ENV = "EVIDENCE_RETENTION_DAYS"
MODE_ENV = "EVIDENCE_LOCK_MODE"
RETENTION_ARG = "--evidence-retention-days"
MODE_ARG = "--evidence-lock-mode"
MODES = ("GOVERNANCE", "COMPLIANCE")
MIN_DAYS = 1
MAX_DAYS = 3650  # template.yaml's EvidenceRetentionDays bounds
CHECKSUM = "SHA256"


class EvidenceSettingsError(LetheError):
    """The evidence lock settings are malformed (a deployment error: nothing is written)."""


def is_evidence(key: str) -> bool:
    """Whether `key` is an erasure document (locked when written)."""
    return key.startswith(EVIDENCE_PREFIX)


@dataclass(frozen=True)
class EvidenceLock:
    """How long, and in which Object Lock mode, each version of an erasure document is kept."""

    days: int
    mode: str = "GOVERNANCE"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise EvidenceSettingsError(
                f"evidence lock mode must be one of {', '.join(MODES)}, not {self.mode!r}"
            )
        if not MIN_DAYS <= self.days <= MAX_DAYS:
            raise EvidenceSettingsError(
                f"evidence retention must be {MIN_DAYS} to {MAX_DAYS} days, not {self.days}"
            )

    @classmethod
    def from_values(cls, days: str | int | None, mode: str | None) -> EvidenceLock | None:
        """From the two settings as given (environment or job arguments); None when the
        retention is unset or empty (nothing locked)."""
        if days is None or str(days).strip() == "":
            return None
        try:
            count = int(str(days).strip())
        except ValueError:
            raise EvidenceSettingsError(
                f"evidence retention must be a whole number of days, not {days!r}"
            ) from None
        return cls(days=count, mode=(mode or "GOVERNANCE").strip().upper())

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> EvidenceLock | None:
        env = os.environ if environ is None else environ
        return cls.from_values(env.get(RETENTION_ENV), env.get(MODE_ENV))

    def retain_until(self, now: datetime | None = None) -> datetime:
        """The retain-until date of a version written at `now` (whole seconds, UTC)."""
        moment = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
        return moment + timedelta(days=self.days)

    def job_arguments(self) -> dict[str, str]:
        """The Spark erase job's arguments that carry these settings."""
        return {RETENTION_ARG: str(self.days), MODE_ARG: self.mode}


def put_arguments(
    key: str, lock: EvidenceLock | None, now: datetime | None = None
) -> dict[str, Any]:
    """The extra PutObject arguments for `key`: the lock (and the checksum S3 requires with it)
    for an erasure document when a lock is configured; nothing otherwise."""
    if lock is None or not is_evidence(key):
        return {}
    return {
        "ObjectLockMode": lock.mode,
        "ObjectLockRetainUntilDate": lock.retain_until(now),
        "ChecksumAlgorithm": CHECKSUM,
    }
