"""`lethe erasure certificate ID --verify | --verify-chain`: what a certificate is checked against.

Trust nothing the certificate says about itself:

- the key: the signature is checked with the stack's certificate key (the stack output
  `ErasureCertificateKeyArn`, or `--key-id`), never with the key the certificate names; a
  certificate naming another key fails (`key-mismatch`). `--offline` checks it locally with that
  key's public key: from KMS GetPublicKey, or with `--public-key FILE` (PEM) from the file alone;
- the documents (format_version 2): manifest.json, results.json, verification.json,
  index_update.json and audit.json are re-read from the reports bucket (`--offline`: from
  `--documents DIR`, or reported "not checked" when no directory is given) and re-hashed; the
  audit record must name the certificate's own signature;
- the request record: same request, a status that matches what the certificate says (COMPLETED
  for complete, FAILED with outcome INCOMPLETE for incomplete), the approved report's SHA-256,
  the certificate's SHA-256 and key (format_version 2: each must be recorded);
- `--verify-chain`: every link of the deployment's certificate chain
  (lethe_shared.erasure.certificate_chain.walk_chain), and this request's certificate in it;
  and the chain against every request record (`GET /erasure-requests`, the requests table,
  outside the bucket): a certified request whose link is past the chain's end (the newest
  links deleted and head.json rewound) or is another certificate fails, naming the request
  (certificate_chain.check_tail). Records that cannot be listed fail the check (closed).

Every failure is a CommandError (exit 1) whose message says what differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lethe.commands import CommandError
from lethe.target import Target
from lethe_shared.erasure.requests import ErasureStatus

KEY_OUTPUT = "ErasureCertificateKeyArn"
REPORTS_OUTPUT = "ReportsBucketName"
INCOMPLETE = "INCOMPLETE"


def pinned_key(target: Target, key_id: str | None) -> str:
    if key_id:
        return key_id
    try:
        return target.output(KEY_OUTPUT)
    except Exception as exc:  # TargetError, or a target without outputs
        raise CommandError(
            f"cannot pin the certificate key: {exc}; pass --key-id ARN (or --offline "
            "--public-key FILE)"
        ) from None


def verifier_for(target: Target, key_id: str, *, offline: bool, public_key: Path | None) -> Any:
    """A Verifier of the pinned key: KMS Verify, or offline its public key (file or KMS)."""
    from lethe_shared.erasure.certificate import KmsSigner, PublicKeyVerifier  # noqa: PLC0415

    if public_key is not None:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        try:
            key = serialization.load_pem_public_key(public_key.read_bytes())
            der = key.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            return PublicKeyVerifier(der)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the public key {public_key}: {exc}") from None
    signer = KmsSigner(target.client("kms"), key_id)
    if not offline:
        return signer
    try:
        return PublicKeyVerifier(signer.public_key_der())
    except (BotoCoreError, ClientError, ValueError) as exc:
        raise CommandError(f"cannot read the public key of {key_id}: {exc}") from None


def envelope_verifier(
    target: Target,
    named: str,
    *,
    key_id: str | None,
    offline: bool,
    public_key: Path | None,
) -> tuple[str, Any]:
    """The key a certificate envelope naming `named` must verify with, and its Verifier: the
    stack's pinned key (or `key_id`), or with `--offline --public-key FILE` and no key id the
    file's key under the envelope's name. A certificate naming another key does not verify."""
    if public_key is not None and not key_id and offline:
        chosen = named  # the key is the file's; the name is compared with the record later
    else:
        chosen = pinned_key(target, key_id)
    if named != chosen:
        raise CommandError(
            f"certificate does not verify: key-mismatch: it names key {named or 'none'}, the "
            f"stack's certificate key is {chosen}"
        )
    return chosen, verifier_for(target, chosen, offline=offline, public_key=public_key)


def s3_reader(target: Target, bucket: str) -> Callable[[str], bytes | None]:
    s3 = target.client("s3")

    def get(key: str) -> bytes | None:
        try:
            return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except ClientError as exc:
            from lethe_shared.aws.errors import is_s3_not_found  # noqa: PLC0415

            if is_s3_not_found(exc):
                return None
            raise CommandError(f"cannot read s3://{bucket}/{key}: {exc}") from None
        except KeyError:
            return None  # a fake without the key
        except BotoCoreError as exc:
            raise CommandError(f"cannot read s3://{bucket}/{key}: {exc}") from None

    return get


def _fail(reason: str, detail: str) -> CommandError:
    return CommandError(f"certificate does not verify: {reason}: {detail}")


def check_documents(
    certificate: Any,
    envelope: dict[str, Any],
    read: Callable[[str], bytes | None] | None,
) -> list[str]:
    """Re-hash every document the certificate names (format_version 2). `read(name)`: the
    document's bytes or None when missing; None: not checked (offline without --documents).
    Returns the lines to print; raises CommandError on a missing or differing document."""
    from lethe_shared.erasure.certificate_statement import (  # noqa: PLC0415
        CERTIFIED_DOCUMENTS,
        DIGEST_OF_AUDIT,
    )

    if certificate.format_version < 2:
        return ["documents        not checked: a format_version 1 certificate names none"]
    if read is None:
        return ["documents        not checked (offline without --documents DIR)"]
    named = {d.name for d in certificate.documents}
    wanted: tuple[str, ...] = CERTIFIED_DOCUMENTS
    if certificate.partial is not None:  # a failed run's: the report and its own audit record
        wanted = ("manifest.json", f"failed-run-{certificate.partial.run}/audit.json")
    missing = [n for n in wanted if n not in named]
    if missing:
        raise _fail("document-missing", f"the certificate names no digest of {', '.join(missing)}")
    bodies: dict[str, bytes] = {}
    for digest in certificate.documents:
        body = read(digest.name)
        if body is None:
            raise _fail("document-missing", f"{digest.name} does not exist")
        if digest.digest_of == DIGEST_OF_AUDIT:
            actual = _audit_digest(digest.name, body, envelope)
        else:
            actual = hashlib.sha256(body).hexdigest()
        if actual != digest.sha256:
            raise _fail(
                "document-mismatch",
                f"{digest.name} has SHA-256 {actual}, the certificate signed {digest.sha256}",
            )
        bodies[digest.name] = body
    if certificate.document_digest("manifest.json").sha256 != certificate.report_sha256:
        raise _fail("document-mismatch", "manifest.json is not the report the certificate names")
    _check_key_fingerprint(certificate, bodies["manifest.json"])
    return [f"documents        {len(certificate.documents)} re-read and match their digests"]


def _check_key_fingerprint(certificate: Any, manifest: bytes) -> None:
    """The key fingerprint the certificate names (when it names one) is the one the report was
    frozen with (manifest.json's `key_fingerprint`)."""
    named = getattr(certificate, "key_fingerprint", "")
    if not named:
        return
    try:
        frozen = str(json.loads(manifest).get("key_fingerprint") or "")
    except (ValueError, AttributeError):
        raise _fail("document-mismatch", "manifest.json is not JSON") from None
    if frozen != named:
        raise _fail(
            "document-mismatch",
            f"the certificate names key fingerprint {named}, its report was frozen with "
            f"{frozen or 'none'}",
        )


def _audit_digest(name: str, body: bytes, envelope: dict[str, Any]) -> str:
    """SHA-256 of the JCS of the audit record without its `certificate_signature`, which must
    be this envelope's signature."""
    from lethe_shared.erasure.certificate_statement import (  # noqa: PLC0415
        AUDIT_SIGNATURE_MEMBER,
    )
    from lethe_shared.erasure.jcs import canonicalize  # noqa: PLC0415

    try:
        audit = json.loads(body)
        signature = audit.pop(AUDIT_SIGNATURE_MEMBER, None)
        actual = hashlib.sha256(canonicalize(audit)).hexdigest()
    except (ValueError, TypeError, AttributeError) as exc:
        raise _fail("document-mismatch", f"{name} is not JSON: {exc}") from None
    if signature != envelope.get("signature"):
        raise _fail("document-mismatch", f"{name} names another signature than this one")
    return actual


def check_record(
    certificate: Any, digest: str, raw: bytes, key_id: str, record: dict[str, Any]
) -> None:
    """The request record must agree with the certificate (module docstring)."""
    request_id = str(record.get("request_id", ""))
    if certificate.request_id != request_id:
        raise _fail(
            "request-mismatch",
            f"it certifies request {certificate.request_id}, not {request_id}",
        )
    strict = certificate.format_version >= 2
    status, outcome = record.get("status"), record.get("outcome", "")
    wanted = (
        (ErasureStatus.COMPLETED.value, "")
        if certificate.complete
        else (ErasureStatus.FAILED.value, "" if certificate.partial else INCOMPLETE)
    )
    if strict and (status, outcome or "") != wanted:
        raise _fail(
            "record-mismatch",
            f"the certificate says complete: {str(certificate.complete).lower()}"
            f"{' (partial)' if certificate.partial else ''}, the request record is {status}"
            f"{f' ({outcome})' if outcome else ''}",
        )
    fingerprint = str(record.get("key_fingerprint") or "")
    if certificate.key_fingerprint and certificate.key_fingerprint != fingerprint:
        raise _fail(
            "record-mismatch",
            f"the certificate names key fingerprint {certificate.key_fingerprint}, the request "
            f"record {fingerprint or 'none'}",
        )
    approved = str((record.get("report") or {}).get("manifest_sha256", ""))
    if (strict or approved) and approved != certificate.report_sha256:
        raise _fail(
            "record-mismatch",
            f"the certificate names report {certificate.report_sha256}, the request record "
            f"{approved or 'none'}",
        )
    pointer = record.get("certificate") or {}
    if (strict or pointer.get("key_id")) and pointer.get("key_id") != key_id:
        raise _fail(
            "key-mismatch",
            f"signed with the stack's key {key_id}, the request record names "
            f"{pointer.get('key_id') or 'none'}",
        )
    expected = pointer.get("sha256")
    if strict and not expected:
        raise _fail("record-mismatch", "the request record holds no certificate SHA-256")
    if expected and expected not in {hashlib.sha256(raw).hexdigest(), digest}:
        raise _fail("record-mismatch", "its SHA-256 is not the one the request record holds")


def local_reader(directory: Path) -> Callable[[str], bytes | None]:
    def read(name: str) -> bytes | None:
        path = directory / name
        return path.read_bytes() if path.is_file() else None

    return read


def request_records(target: Target) -> list[dict[str, Any]]:
    """Every erasure request record (the API's list), for the chain's tail check."""
    try:
        status, answer = target.call_api("GET", "/erasure-requests")
    except Exception as exc:  # TargetError, a transport error: the tail cannot be checked
        raise CommandError(
            f"the certificate chain's end cannot be checked: cannot list the requests: {exc}"
        ) from None
    records = answer.get("requests") if isinstance(answer, dict) else None
    if status >= 400 or not isinstance(records, list):
        raise CommandError(
            "the certificate chain's end cannot be checked: listing the requests answered "
            f"HTTP {status}"
        )
    return [r for r in records if isinstance(r, dict)]


def check_chain(
    get: Callable[[str], bytes | None],
    verifier: Any,
    certificate: Any,
    raw: bytes,
    records: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Walk the whole chain with the pinned key; this certificate must be its link; every
    certified request record (`records`; None: not checked) must find its link in it."""
    from lethe_shared.erasure.certificate_chain import (  # noqa: PLC0415
        CertifiedRecord,
        check_tail,
        link_key,
        walk_chain,
    )

    walk = walk_chain(get, verifier)
    problems = list(walk.problems)
    certified = [c for c in map(CertifiedRecord.of, records or []) if c is not None]
    problems += check_tail(get, walk.last, certified)
    if certificate.chain is None:
        problems.append("this certificate is not in the chain (format_version 1)")
    elif get(link_key(certificate.chain.sequence)) != raw:
        problems.append(
            f"link {certificate.chain.sequence} of the chain is not this request's certificate"
        )
    if problems:
        raise CommandError(
            f"the certificate chain does not verify ({walk.links} link(s) read): "
            + "; ".join(problems)
        )
    lines = [f"chain verifies: {walk.links} link(s), each signed and naming the one before"]
    if records is not None:
        lines.append(f"chain end        matches the {len(certified)} certified request record(s)")
    return lines
