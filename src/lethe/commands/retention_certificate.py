"""`lethe erasure certificate rt-...`: a scheduled retention run's certificate
(lethe_shared.erasure.retention_certificate), summarised, and with --verify checked with the
stack's pinned certificate key (KMS Verify, or offline with its public key) and matched against
the run's record (the SHA-256 of the stored envelope). It names no subject. A verified
certificate of an incomplete run fails --verify (exit 1), as an incomplete erasure's does.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lethe.commands import CommandError, ExitCode

if TYPE_CHECKING:
    from pathlib import Path

    from lethe.target import Target


class VerifyOptions(Protocol):
    """What --verify takes (lethe.commands.erasure_certificate.VerifyOptions)."""

    @property
    def offline(self) -> bool: ...
    @property
    def key_id(self) -> str | None: ...
    @property
    def public_key(self) -> Path | None: ...


RETENTION_FORMAT = "lethe-retention-certificate/1"


class IncompleteRetentionError(CommandError):
    exit_code = ExitCode.FAILURE


def is_retention(envelope: dict[str, Any]) -> bool:
    cert = envelope.get("certificate")
    return isinstance(cert, dict) and cert.get("format") == RETENTION_FORMAT


def retention_lines(envelope: dict[str, Any], url: str) -> list[str]:
    """A summary read from the envelope as stored (not validated: --verify does that)."""
    cert = envelope.get("certificate") or {}
    totals = cert.get("totals") or {}
    verification = cert.get("verification") or {}
    gaps = [g for g in cert.get("not_removed") or [] if isinstance(g, dict)]
    lines = [
        f"retention run    {cert.get('run_id', '')}",
        f"dataset          {cert.get('dataset_id', '')} (version {cert.get('dataset_version')})",
        f"issued           {cert.get('issued_at', '')}",
        f"rule             {cert.get('rule_text', '')} (SHA-256 {cert.get('rule_sha256', '')})",
        f"authorised by    {cert.get('authorised_by', '')}, in force since "
        f"{cert.get('rule_since', '')}",
        f"cutoff           {cert.get('cutoff', '')}",
        f"objects          {totals.get('objects', 0)} ({totals.get('rewritten', 0)} rewritten, "
        f"{totals.get('deleted', 0)} deleted)",
        f"rows removed     {totals.get('rows_removed', 0)}",
        f"versions purged  {totals.get('versions_purged', 0)}",
        f"holds honoured   {', '.join(cert.get('subject_holds_honoured') or []) or 'none'} "
        f"({cert.get('held_subjects', 0)} subject(s) kept)",
        f"verification     {verification.get('objects_checked', 0)} objects checked at "
        f"{verification.get('verified_at') or 'never'}: "
        + ("clean" if verification.get("verified") else "NOT verified"),
        f"re-indexed       {'yes' if cert.get('reindexed') else 'NO'}",
        "complete         "
        + ("yes" if cert.get("complete") is True else f"NO: {len(gaps)} place(s) below"),
        f"stored at        {url}",
    ]
    if gaps:
        lines.append("not removed")
        for gap in gaps:
            lines.append(
                f"  {gap.get('reason', '?')}  {gap.get('count', 0)}  {gap.get('object_url', '')}"
            )
            if gap.get("detail"):
                lines.append(f"    {gap['detail']}")
    return lines


def verify_retention_certificate(
    target: Target,
    envelope: dict[str, Any],
    *,
    raw: bytes,
    record: dict[str, Any],
    options: VerifyOptions,
) -> list[str]:
    """Check the signature with the pinned key and the envelope against the run's record;
    CommandError when it does not verify, IncompleteRetentionError when it verifies but the
    run is not complete."""
    from lethe.commands import certificate_verify as checks  # noqa: PLC0415
    from lethe_shared.erasure.certificate import CertificateInvalidError  # noqa: PLC0415
    from lethe_shared.erasure.retention_certificate import verify_retention  # noqa: PLC0415

    key_id, verifier = checks.envelope_verifier(
        target,
        str((envelope.get("signature") or {}).get("key_id") or ""),
        key_id=options.key_id, offline=options.offline, public_key=options.public_key,
    )  # fmt: skip
    try:
        certificate = verify_retention(envelope, verifier)
    except CertificateInvalidError as exc:
        raise CommandError(f"certificate does not verify: {exc.reason}: {exc.detail}") from None
    except (BotoCoreError, ClientError, ValueError) as exc:
        raise CommandError(f"cannot verify the certificate with key {key_id}: {exc}") from None
    stored = str((record.get("certificate") or {}).get("sha256") or "")
    if stored != hashlib.sha256(raw).hexdigest():
        raise CommandError(
            "certificate does not verify: record-mismatch: the run's record names another "
            f"certificate (SHA-256 {stored or 'none'})"
        )
    if certificate.run_id != record.get("request_id"):
        raise CommandError("certificate does not verify: it is another run's")
    digest = (envelope.get("signature") or {}).get("digest_sha256")
    line = f"certificate verifies: signed by {key_id}, digest {digest}"
    if not certificate.complete:
        print(line)
        raise IncompleteRetentionError(
            f"the signature is valid, but retention run {certificate.run_id} is INCOMPLETE: "
            f"{len(certificate.not_removed)} place(s) where expired rows may remain (listed)"
        )
    return [line]


def show_retention(
    target: Target,
    envelope: dict[str, Any],
    *,
    raw: bytes,
    record: dict[str, Any],
    url: str,
    as_json: bool,
    html: Path | None,
    verify: bool,
    options: VerifyOptions,
) -> None:
    """What `lethe erasure certificate` does for a retention run's certificate."""
    if html is not None:
        raise CommandError("a retention certificate has no HTML page: print it (--json)")
    if as_json:
        print(json.dumps(envelope, indent=2, sort_keys=True))
    else:
        for line in retention_lines(envelope, url):
            print(line)
    if verify:
        for line in verify_retention_certificate(
            target, envelope, raw=raw, record=record, options=options
        ):
            print(line, file=sys.stderr if as_json else sys.stdout)
