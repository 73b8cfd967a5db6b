"""`lethe erasure certificate`'s work once the request record is read: the signed certificate
envelope of a COMPLETED request (or of one that ended FAILED with outcome INCOMPLETE: its
certificate says `complete: false` and lists every place not fully searched), read from S3,
summarised, written as an HTML page, and (with --verify) checked with the stack's pinned key
(KMS Verify, or offline with its public key), its documents re-hashed and matched against the
request record (lethe.commands.certificate_verify; --verify-chain walks the certificate
chain). A verified certificate of an incomplete erasure (`complete: false`) says so on the
verify line, and --verify then fails (exit 1, ExitCode.FAILURE, as `erasure status --wait` does
for that request): the signature is valid, but what it certifies is not a completed erasure, so
`lethe erasure certificate ID --verify && echo done` must not say done.

The certificate holds keyed hashes of the subjects, never a raw id: the summary shows a count.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lethe.commands import CommandError, ExitCode
from lethe.commands import retention_certificate as retention
from lethe.commands.erasure_records import is_terminal, status_text
from lethe.target import Target
from lethe_shared.erasure.requests import ErasureStatus

INCOMPLETE = "INCOMPLETE"  # the outcome of a FAILED request whose certificate is incomplete


class IncompleteErasureError(CommandError):
    """--verify on a certificate whose signature is valid but that says `complete: false`: the
    request did not complete (it is FAILED, outcome INCOMPLETE)."""

    exit_code = ExitCode.FAILURE


def show_certificate(
    target: Target,
    request_id: str,
    record: dict[str, Any],
    *,
    as_json: bool,
    html: Path | None,
    verify: bool,
    options: VerifyOptions | None = None,
) -> None:
    """Print the certificate of request `request_id`, whose record is `record`: its summary,
    or with `as_json` the envelope; write it as an HTML page to `html`; with `verify`, check it
    and print the outcome (on stderr with `as_json`). Raises CommandError (exit 1) when there is
    none or it does not verify, and IncompleteErasureError (exit 1) when it verifies but
    certifies an incomplete erasure."""
    pointer = record.get("certificate") or {}
    certified = record.get("status") == ErasureStatus.COMPLETED or (
        record.get("status") == ErasureStatus.FAILED
        and (record.get("outcome") == INCOMPLETE or pointer.get("partial") is True)
    )
    if not certified or not pointer.get("url"):
        raise CommandError(
            f"request {request_id} has no certificate: it is {status_text(record)}"
            + (" (certificates come with COMPLETED)" if not is_terminal(record) else "")
        )
    raw, envelope = _read_envelope(target, str(pointer["url"]))
    if retention.is_retention(envelope):  # a scheduled retention run's (rt-...)
        retention.show_retention(
            target, envelope, raw=raw, record=record, url=str(pointer["url"]), as_json=as_json,
            html=html, verify=verify, options=options or VerifyOptions(),
        )  # fmt: skip
        return
    if as_json:
        print(json.dumps(envelope, indent=2, sort_keys=True))
    else:
        for line in certificate_lines(envelope, str(pointer["url"])):
            print(line)
    if html:
        _write_html(envelope, html)
    if verify:
        lines, places = _verify(
            target, envelope, raw=raw, record=record, url=str(pointer["url"]),
            options=options or VerifyOptions(),
        )  # fmt: skip
        for line in lines:
            print(line, file=sys.stderr if as_json else sys.stdout)
        _refuse_partial(envelope, request_id)
        if places is not None:
            raise IncompleteErasureError(
                f"the signature is valid, but the erasure of request {request_id} is "
                f"{INCOMPLETE}: {places} place(s) were not fully searched (the certificate lists "
                "them); the request did not complete"
            )


def _read_envelope(target: Target, url: str) -> tuple[bytes, dict[str, Any]]:
    raw = _read_s3(target, url)
    try:
        envelope = json.loads(raw)
    except ValueError as exc:
        raise CommandError(f"{url} is not JSON: {exc}") from None
    if not isinstance(envelope, dict):
        raise CommandError(f"{url} is not a certificate envelope")
    return raw, envelope


def _refuse_partial(envelope: dict[str, Any], request_id: str) -> None:
    """--verify of a failed run's partial certificate: valid, but no completed erasure."""
    partial = _mapping(_mapping(envelope.get("certificate")).get("partial"))
    if partial:
        raise IncompleteErasureError(
            f"the signature is valid, but it is the PARTIAL certificate of request "
            f"{request_id}'s failed run {partial.get('run', '?')}: it certifies what was done "
            "before the failure, not a completed erasure (resume it: `lethe erasure resume "
            f"{request_id}`, while its approval is valid)"
        )


def _read_s3(target: Target, url: str) -> bytes:
    from lethe_shared.aws.s3 import split_s3_url  # noqa: PLC0415

    try:
        bucket, key = split_s3_url(url)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    try:
        return bytes(target.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except (BotoCoreError, ClientError) as exc:
        raise CommandError(f"cannot read the certificate {url}: {exc}") from None


def certificate_lines(envelope: dict[str, Any], url: str) -> list[str]:
    """A summary read from the envelope as stored (not validated: --verify does that)."""
    cert = _mapping(envelope.get("certificate"))
    signature = _mapping(envelope.get("signature"))
    totals = _mapping(cert.get("totals"))
    verification = _mapping(cert.get("verification"))
    if not verification:
        verification = {"objects_verified": 0, "verified_at": "never (the run failed)"}
    lines = [
        f"certificate      {cert.get('certificate_id', '')}",
        f"request          {cert.get('request_id', '')}",
        f"issued           {cert.get('issued_at', '')}",
        f"requested by     {cert.get('requested_by', '')}",
        f"approved by      {cert.get('approved_by', '')} at {cert.get('approved_at', '')}",
        f"subjects         {len(cert.get('subject_hashes') or [])} (keyed hashes"
        + (f", key {cert['key_fingerprint']})" if cert.get("key_fingerprint") else ")"),
        f"objects          {totals.get('objects', 0)}",
        f"rows removed     {totals.get('rows_removed', 0)}",
        f"versions purged  {totals.get('versions_purged', 0)}",
        f"verification     {verification.get('objects_verified', 0)} objects scanned at "
        f"{verification.get('verified_at', '')}: "
        f"{verification.get('matching_rows_found', '?')} matching rows found",
        f"complete         {_completeness(cert)}",
        f"key id           {signature.get('key_id', '')}",
        f"signed digest    {signature.get('digest_sha256', '')}",
        f"stored at        {url}",
    ]
    return lines + not_searched_lines(cert)


def _completeness(cert: dict[str, Any]) -> str:
    partial = _mapping(cert.get("partial"))
    if partial:
        return (
            f"NO: PARTIAL, run {partial.get('run', '?')} FAILED ({partial.get('cause', '')}); "
            f"{partial.get('objects_done', 0)} of {partial.get('objects_in_report', 0)} "
            "object(s) done, the rest not erased (below)"
        )
    if "complete" not in cert:
        return "not recorded (an older certificate)"
    if cert.get("complete") is True:
        return "yes: every place was searched"
    gaps = cert.get("not_searched") or []
    return f"NO: {INCOMPLETE}, {len(gaps)} place(s) not fully searched (below)"


def not_searched_lines(cert: dict[str, Any]) -> list[str]:
    """One line per place the certificate says was not fully searched: reason, count,
    dataset, object and version, then its detail (counts and column names, never a value)."""
    gaps = [g for g in cert.get("not_searched") or [] if isinstance(g, dict)]
    if not gaps:
        return []
    lines = ["not fully searched"]
    for gap in gaps:
        version = f" (version {gap['version_id']})" if gap.get("version_id") else ""
        lines.append(
            f"  {gap.get('reason', '?')}  {gap.get('count', 0)}  {gap.get('dataset_id', '')}  "
            f"s3://{gap.get('bucket', '')}/{gap.get('key', '')}{version}"
        )
        if gap.get("detail"):
            lines.append(f"    {gap['detail']}")
    return lines


def _write_html(envelope: dict[str, Any], path: Path) -> None:
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        CertificateInvalidError,
        render_certificate_html,
    )

    try:
        page = render_certificate_html(envelope)
    except CertificateInvalidError as exc:
        raise CommandError(f"cannot render the certificate: {exc.reason}: {exc.detail}") from None
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc}") from None
    print(f"wrote {path}", file=sys.stderr)


@dataclass(frozen=True)
class VerifyOptions:
    """--verify's options: the pinned key (--key-id, default the stack's output), --offline
    with --public-key FILE and --documents DIR, and --verify-chain."""

    offline: bool = False
    key_id: str | None = None
    public_key: Path | None = None
    documents: Path | None = None
    chain: bool = False


def _verify(
    target: Target,
    envelope: dict[str, Any],
    *,
    raw: bytes,
    record: dict[str, Any],
    url: str,
    options: VerifyOptions,
) -> tuple[list[str], int | None]:
    """Check the signature with the pinned key, the documents, the request record and (with
    --verify-chain) the chain (lethe.commands.certificate_verify). Raises CommandError (exit 1)
    naming the reason. Returns the lines to print, and for an incomplete erasure how many places
    it says were not fully searched (None: complete)."""
    from lethe.commands import certificate_verify as checks  # noqa: PLC0415
    from lethe_shared.aws.s3 import split_s3_url  # noqa: PLC0415
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        CertificateInvalidError,
        verify_envelope,
    )
    from lethe_shared.erasure.report import report_key  # noqa: PLC0415

    key_id, verifier = checks.envelope_verifier(
        target,
        str(_mapping(envelope.get("signature")).get("key_id") or ""),
        key_id=options.key_id, offline=options.offline, public_key=options.public_key,
    )  # fmt: skip
    try:
        verified = verify_envelope(envelope, verifier)
    except CertificateInvalidError as exc:
        raise CommandError(f"certificate does not verify: {exc.reason}: {exc.detail}") from None
    except (BotoCoreError, ClientError, ValueError) as exc:
        raise CommandError(f"cannot verify the certificate with key {key_id}: {exc}") from None
    cert = verified.certificate
    checks.check_record(cert, verified.digest_sha256, raw, key_id, record)
    bucket = split_s3_url(url)[0]
    get = checks.s3_reader(target, bucket)
    if options.documents is not None:
        read = checks.local_reader(options.documents)
    elif options.offline:
        read = None
    else:
        read = lambda name: get(report_key(cert.request_id, name))  # noqa: E731
    lines = checks.check_documents(cert, envelope, read)
    if options.chain:
        records = checks.request_records(target)  # outside the bucket: a cut tail shows
        lines += checks.check_chain(get, verifier, cert, raw, records)
    line = f"certificate verifies: signed by {key_id}, digest {verified.digest_sha256}"
    if cert.complete:
        return [*lines, line], None
    places = len(cert.not_searched)
    line += f"; it certifies an {INCOMPLETE} erasure: {places} place(s) were not fully searched"
    return [*lines, line], places


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
