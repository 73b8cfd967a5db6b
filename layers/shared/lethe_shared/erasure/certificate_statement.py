"""What a certificate states besides the erased objects (format_version 2, all additive): the
digests of the documents it certifies, its link in the deployment's certificate chain, and a
certificate of sanitization after NIST SP 800-88 Rev. 1 (Appendix G) adapted to logical erasure:

- method: the rows are rewritten without the subjects' records, then every stored version that
  held them is purged (S3 versions deleted), the subject index entries removed;
- tool: Lethe's release and (when the build recorded it) git revision, the Spark engine, the
  workflow execution and the erase job's correlation id;
- verification: how it was verified (a second scan of every erased object's remaining version
  for the subjects' hashes) and what it found;
- scope: the datasets, the ingestion watermark's last look (how long it waited, what was still
  in flight), how many places were not fully searched, and what Lethe never searches;
- residual copies: where erased data may still exist for a bounded time and when that time ends
  (DynamoDB point-in-time recovery window, CloudWatch Logs retention, S3 noncurrent versions'
  expiry), read from the certify function's environment (`DeploymentFacts.from_environment`).

Who requested and approved, and when, are the certificate's own fields (requested_by,
approved_by, approved_at, issued_at).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from lethe_shared.models import Model

_HEX64 = r"^[0-9a-f]{64}$"

# How a document's digest is taken: the SHA-256 of the stored bytes, or (the audit record, which
# names the signature and so is written after it) of the JCS of its JSON without that member.
DIGEST_OF_FILE = "sha256-of-file"
DIGEST_OF_AUDIT = "sha256-of-jcs-without-certificate_signature"
AUDIT_SIGNATURE_MEMBER = "certificate_signature"
CERTIFIED_DOCUMENTS = (
    "manifest.json",
    "results.json",
    "verification.json",
    "index_update.json",
    "audit.json",
)


class _Frozen(Model):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DocumentDigest(_Frozen):
    """One document of the request in the reports bucket (erasure/<request>/<name>)."""

    name: str = Field(min_length=1)
    sha256: str = Field(pattern=_HEX64)
    digest_of: str = DIGEST_OF_FILE


class ChainLink(_Frozen):
    """The certificate's place in the deployment's chain: `sequence` (1, 2, ...) and the SHA-256
    (the signed digest) of the certificate before it; none for the first."""

    sequence: int = Field(ge=1)
    previous_digest: str | None = Field(default=None, pattern=_HEX64)
    previous_certificate_id: str = ""


class JobRun(_Frozen):
    """One Spark job run of the erasure: its mode (erase, verify), engine and the engine's own
    run id (Glue JobRunId, EMR Serverless JobRunId), from the workflow's .sync task output."""

    mode: str
    engine: str
    run_id: str


class ToolIdentity(_Frozen):
    name: str = "Lethe"
    version: str
    git_revision: str  # "unknown" (or "", older certificates) when the build did not record it
    engine: str  # GLUE | EMR_SERVERLESS | "" (not recorded)
    workflow_execution: str  # the Step Functions execution ARN
    job_correlation_id: str  # the erase job's run correlation id (results.json)
    job_runs: tuple[JobRun, ...] = ()  # the Spark runs of this workflow run, in order


PARTIAL_GAP = "not_done_run_failed"  # a report object the failed run did not finish


class PartialRun(_Frozen):
    """A *partial* certificate (`partial` set): the request's erase run FAILED; it certifies
    what was done before the failure and nothing more. It is no certificate of completion: its
    `complete` is false, it holds no verification (none ran to its end), and every object of
    the report the run did not finish is in `not_searched` (reason `not_done_run_failed`).
    `cause` is scrubbed: an error name and job run states, never an object key or a value."""

    status: str = Field(default="FAILED", pattern=r"^FAILED$")
    kind: str = Field(default="partial", pattern=r"^partial$")
    run: int = Field(ge=1)  # 1: the request's first erase run, 2: its first resume, ...
    error: str
    cause: str
    objects_in_report: int = Field(ge=0)
    objects_done: int = Field(ge=0)
    objects_not_done: int = Field(ge=0)


class VerificationStatement(_Frozen):
    method: str
    result: str
    objects_verified: int = Field(ge=0)
    matching_rows_found: int = Field(ge=0)


class ScopeStatement(_Frozen):
    datasets: tuple[str, ...]  # (): every registered dataset
    subject_count: int = Field(ge=0)
    subjects_not_looked_up: int = Field(ge=0)
    ingestion_wait: dict[str, Any]  # the watermark's last look ({}: not recorded)
    places_not_searched: int = Field(ge=0)
    never_searched: tuple[str, ...]


class ResidualCopy(_Frozen):
    """Where erased data may still exist after the certificate, and until when at the latest."""

    place: str
    retention_days: int = Field(ge=0)
    ends_by: str  # ISO 8601 date (UTC): issued_at + retention_days
    note: str = ""


class SanitizationStatement(_Frozen):
    standard: str = "NIST SP 800-88 Rev. 1 certificate of sanitization, adapted to logical erasure"
    sanitization_type: str = "clear (logical: records removed, every stored version purged)"
    method: str
    tool: ToolIdentity
    verification: VerificationStatement
    scope: ScopeStatement
    residual_copies: tuple[ResidualCopy, ...]


METHOD = (
    "row rewrite: each object holding the subjects' rows is rewritten without them (a new S3 "
    "version, or the key deleted when no row remains); purge: every older stored version that "
    "held them is deleted; the subject index entries of the erased rows are removed"
)
VERIFICATION_METHOD = (
    "a second Spark run (verify mode) re-reads every erased object's remaining version and "
    "counts rows matching the subjects' keyed hashes; it also checks that no older version is left"
)
NEVER_SEARCHED = (
    "copies outside the stack's buckets and tables (downloads, exports, other accounts, "
    "AWS Backup or replication set up outside Lethe)",
    "the residual copies listed below, until their end date",
)


UNKNOWN_REVISION = "unknown"
BUILD_INFO = Path(__file__).resolve().parent.parent / "build_info.json"


def build_revision(path: Path = BUILD_INFO) -> str:
    """The git revision `make sam-build` stamped into the built layer (lethe.build_stamp writes
    lethe_shared/build_info.json), or "unknown": a layer run from the source tree (the local
    cloud, tests) or built without the stamp records none, and the certificate says so."""
    try:
        revision = json.loads(path.read_text(encoding="utf-8")).get("git_revision")
    except (OSError, ValueError, AttributeError):
        return UNKNOWN_REVISION
    return str(revision) if isinstance(revision, str) and revision else UNKNOWN_REVISION


@dataclass(frozen=True)
class DeploymentFacts:
    """What the certify step knows of its deployment (template parameters via environment)."""

    version: str = "0.1.0"
    git_revision: str = UNKNOWN_REVISION
    engine: str = ""
    pitr_days: int = 35  # DynamoDB point-in-time recovery: 35 days unless RecoveryPeriodInDays
    log_retention_days: int = 0  # 0: not known
    noncurrent_expiration_days: int = 0  # 0: not known

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> DeploymentFacts:
        env = os.environ if env is None else env
        return cls(
            version=env.get("LETHE_VERSION", cls.version) or cls.version,
            git_revision=env.get("LETHE_GIT_REVISION", "") or build_revision(),
            engine=env.get("SPARK_ENGINE", ""),
            pitr_days=_days(env.get("PITR_RECOVERY_PERIOD_DAYS"), 35),
            log_retention_days=_days(env.get("LOG_RETENTION_DAYS"), 0),
            noncurrent_expiration_days=_days(env.get("NONCURRENT_VERSION_EXPIRATION_DAYS"), 0),
        )


def _days(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value else default
    except ValueError:
        return default


def _ends(at: dt.datetime, days: int) -> str:
    return (at.astimezone(dt.UTC) + dt.timedelta(days=days)).date().isoformat()


def residual_copies(facts: DeploymentFacts, at: dt.datetime) -> tuple[ResidualCopy, ...]:
    unknown = "retention not known to the certify function: check the stack's parameters"
    return (
        ResidualCopy(
            place="DynamoDB point-in-time recovery of the subject index, object catalog and "
            "erasure requests tables (keyed hashes and object keys, no raw id)",
            retention_days=facts.pitr_days,
            ends_by=_ends(at, facts.pitr_days),
        ),
        ResidualCopy(
            place="CloudWatch Logs of the stack's functions, state machines and Spark runs "
            "(keyed hashes only by rule)",
            retention_days=facts.log_retention_days,
            ends_by=_ends(at, facts.log_retention_days),
            note="" if facts.log_retention_days else unknown,
        ),
        ResidualCopy(
            place="S3 noncurrent versions the erasure did not purge itself (the places not fully "
            "searched, if any): the buckets' lifecycle expiry is the backstop",
            retention_days=facts.noncurrent_expiration_days,
            ends_by=_ends(at, facts.noncurrent_expiration_days),
            note="" if facts.noncurrent_expiration_days else unknown,
        ),
    )


def statement(
    *,
    facts: DeploymentFacts,
    at: dt.datetime,
    execution_arn: str,
    correlation_id: str,
    objects_verified: int,
    matching_rows: int,
    datasets: tuple[str, ...],
    subject_count: int,
    not_looked_up: int,
    ingestion_wait: Mapping[str, Any],
    places_not_searched: int,
    job_runs: tuple[JobRun, ...] = (),
    verified: bool = True,  # False: a partial certificate (the run failed before verifying)
) -> SanitizationStatement:
    return SanitizationStatement(
        method=METHOD,
        tool=ToolIdentity(
            version=facts.version,
            git_revision=facts.git_revision,
            engine=next((r.engine for r in job_runs if r.engine), facts.engine),
            workflow_execution=execution_arn,
            job_correlation_id=correlation_id,
            job_runs=job_runs,
        ),
        verification=VerificationStatement(
            method=VERIFICATION_METHOD,
            result=(
                "not run: the erase run failed before its verification"
                if not verified
                else "passed: no matching row found"
                if matching_rows == 0
                else f"failed: {matching_rows} matching row(s)"
            ),
            objects_verified=objects_verified,
            matching_rows_found=matching_rows,
        ),
        scope=ScopeStatement(
            datasets=datasets,
            subject_count=subject_count,
            subjects_not_looked_up=not_looked_up,
            ingestion_wait={
                k: ingestion_wait[k]
                for k in (
                    "checked_at",
                    "waited_seconds",
                    "max_wait_seconds",
                    "in_flight",
                    "settled",
                    "why",
                )
                if k in ingestion_wait
            },
            places_not_searched=places_not_searched,
            never_searched=NEVER_SEARCHED,
        ),
        residual_copies=residual_copies(facts, at),
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def statement_html(
    documents: tuple[DocumentDigest, ...],
    chain: ChainLink | None,
    st: SanitizationStatement | None,
) -> str:
    """The certificate page's sections of format version 2: the certified documents' digests,
    the chain link, the statement and the residual copies."""
    docs = "".join(
        f'<tr><td>{_e(d.name)}</td><td class="mono">{_e(d.sha256)}</td><td>{_e(d.digest_of)}</td>'
        "</tr>"
        for d in documents
    )
    parts = [
        "<h2>Certified documents</h2>\n"
        f'<table id="documents"><thead><tr><th>Document</th><th>SHA-256</th><th>Of</th></tr>'
        f"</thead><tbody>{docs}</tbody></table>\n"
    ]
    if chain:
        parts.append(
            f'<h2>Chain</h2>\n<dl id="chain"><dt>Sequence</dt><dd>{chain.sequence}</dd>'
            f'<dt>Previous certificate</dt><dd class="mono">{_e(chain.previous_certificate_id)}'
            f" {_e(chain.previous_digest or 'none: the first')}</dd></dl>\n"
        )
    if st:
        residual = "".join(
            f'<tr><td>{_e(r.place)}</td><td class="n">{r.retention_days}</td>'
            f"<td>{_e(r.ends_by)}</td><td>{_e(r.note)}</td></tr>"
            for r in st.residual_copies
        )
        wait = st.scope.ingestion_wait
        parts.append(
            f'<h2>Sanitization</h2>\n<dl id="statement"><dt>Standard</dt><dd>{_e(st.standard)}</dd>'
            f"<dt>Type</dt><dd>{_e(st.sanitization_type)}</dd><dt>Method</dt><dd>{_e(st.method)}"
            f"</dd><dt>Tool</dt><dd>{_e(st.tool.name)} {_e(st.tool.version)} (git "
            f"{_e(st.tool.git_revision or 'not recorded')}), engine {_e(st.tool.engine or '?')}, "
            f'execution <span class="mono">{_e(st.tool.workflow_execution)}</span>, job '
            f'<span class="mono">{_e(st.tool.job_correlation_id)}</span>'
            + "".join(
                f', {_e(r.mode)} run <span class="mono">{_e(r.run_id)}</span> ({_e(r.engine)})'
                for r in st.tool.job_runs
            )
            + "</dd>"
            f"<dt>Verification</dt><dd>{_e(st.verification.method)}: "
            f"{_e(st.verification.result)}</dd><dt>Scope</dt><dd>datasets "
            f"{_e(', '.join(st.scope.datasets) or 'every registered dataset')}; "
            f"{st.scope.subject_count} subject(s), {st.scope.subjects_not_looked_up} not looked "
            f"up; ingestion watermark waited {_e(wait.get('waited_seconds', '?'))} s "
            f"({_e(wait.get('why', 'not recorded'))}); {st.scope.places_not_searched} place(s) "
            f"not fully searched; never searched: {_e('; '.join(st.scope.never_searched))}</dd>"
            "</dl>\n<h2>Residual copies</h2>\n"
            '<table id="residual"><thead><tr><th>Place</th><th>Days</th><th>Ends by</th>'
            f"<th>Note</th></tr></thead><tbody>{residual}</tbody></table>\n"
        )
    return "".join(parts)
