"""The signed erasure certificate: what an erasure removed, proven by a KMS signature.

A certificate lists, for every object the erase job touched, the versions that held the
subjects' rows (version id and ETag), the version written in their place (or none when no row
remained and the key was deleted), the row counts and the number of versions purged, plus the
verification scan that found no matching row. Subjects appear only as keyed hashes.

It also says whether the erasure was complete (`complete`) and lists every place that was not
fully searched (`not_searched`: bucket, key, version, dataset, reason, count, detail): a
certificate with `complete: false` certifies what was erased and names what may remain; its
request ended FAILED with outcome INCOMPLETE (lethe_shared.erasure.completion). Certificates
signed before these two fields existed have neither: they read as complete with no gap, and
verify as they did (the digest is of the stored document, whatever fields it has).

Signing: the SHA-256 digest of the certificate's canonical JSON (`canonical_bytes`) is signed
with an asymmetric KMS key (`ECC_NIST_P256`, `SIGN_VERIFY`) as `MessageType="DIGEST"`,
`ECDSA_SHA_256`. The envelope

    {"certificate": {...},
     "signature": {"algorithm": "ECDSA_SHA_256", "key_id": ..., "digest_sha256": hex,
                   "value": base64 DER}}

is stored as JSON (S3, the reports bucket). Verification recomputes the digest from the stored
certificate document itself, never trusting `digest_sha256`, and checks the signature through
KMS (`KmsSigner`) or offline from the key's public key (`verify_envelope_offline`, DER from KMS
GetPublicKey), so an auditor needs no access to KMS.

Canonical JSON: the certificate's `format_version` (in the signed body) selects it. Version 2
(every certificate signed now) is RFC 8785 JCS (lethe_shared.erasure.jcs), which any JCS tool
reproduces; a certificate without the field (version 1, signed before JCS) keeps the form it was
signed in (Python's json.dumps: sorted keys, no whitespace, UTF-8 unescaped), so it still
verifies. For the values a certificate holds (ASCII keys, strings, integers, booleans, null) the
two agree byte for byte; the version says which one a verifier must use.

Version 2 adds (lethe_shared.erasure.certificate_statement): `documents` (the SHA-256 of
manifest.json, results.json, verification.json, index_update.json and of the audit record's
content), `chain` (its sequence in the deployment's certificate chain and the previous
certificate's digest) and `statement` (NIST SP 800-88 style: method, tool, verification, scope,
residual copies; `statement.tool.job_runs`: the Spark runs). A failed run's *partial*
certificate (lethe_shared.erasure.failure) has `partial` set, `complete: false` and no
verification (`verification: null`). Numbers in a certificate are integers.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import html
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from pydantic import AwareDatetime, ConfigDict, Field, ValidationError, model_validator

from lethe_shared.catalog.zones import Zone
from lethe_shared.erasure.certificate_index import INDEX_ERASURE_FIELD, IndexErasure
from lethe_shared.erasure.certificate_statement import (
    PARTIAL_GAP as PARTIAL_GAP,  # noqa: PLC0414 - re-exported
)
from lethe_shared.erasure.certificate_statement import (
    ChainLink,
    DocumentDigest,
    PartialRun,
    SanitizationStatement,
    statement_html,
)
from lethe_shared.erasure.jcs import canonicalize
from lethe_shared.errors import LetheError
from lethe_shared.models import Model

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey

SIGNING_ALGORITHM = "ECDSA_SHA_256"
FORMAT_VERSION = 2  # RFC 8785 canonical JSON; documents, chain and statement
_HEX64 = r"^[0-9a-f]{64}$"


class CertificateInvalidError(LetheError):
    """A certificate envelope does not verify. `reason` is one of `malformed`,
    `unsupported-algorithm`, `digest-mismatch`, `bad-signature`."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"invalid erasure certificate ({reason}): {detail}")


# ------------------------------------------------------------------ the document


class _Frozen(Model):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObjectVersion(_Frozen):
    version_id: str = Field(min_length=1)
    etag: str


class ErasedObject(_Frozen):
    """One object key the erasure rewrote (or deleted) and whose older versions it purged."""

    dataset_id: str = Field(min_length=1)
    zone: Zone
    bucket: str = Field(min_length=1)
    key: str = Field(min_length=1)
    versions_before: tuple[ObjectVersion, ...] = Field(min_length=1)
    version_after: ObjectVersion | None  # None: no row remained, the key was deleted
    rows_before: int = Field(ge=0)
    rows_removed: int = Field(ge=0)
    rows_after: int = Field(ge=0)
    versions_purged: int = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.rows_before != self.rows_removed + self.rows_after:
            raise ValueError("rows_before must equal rows_removed + rows_after")
        if self.version_after is None and self.rows_after != 0:
            raise ValueError("an object without a version after the erasure has no rows left")
        return self


class NotSearchedPlace(_Frozen):
    """A place the request's subjects may still be, and why it was not (fully) searched
    (lethe_shared.erasure.report.NotSearched, with the object as bucket and key). `count`: the
    rows or lines concerned (0: not known); `detail`: counts and column names, never a value."""

    dataset_id: str = ""
    bucket: str = Field(min_length=1)
    key: str = Field(min_length=1)
    version_id: str = ""
    reason: str = Field(pattern=r"^[a-z][a-z_]*$")  # a report.GapReason
    count: int = Field(ge=0)
    detail: str = ""


class CertificateTotals(_Frozen):
    objects: int = Field(ge=0)
    rows_removed: int = Field(ge=0)
    versions_purged: int = Field(ge=0)

    @classmethod
    def of(cls, objects: tuple[ErasedObject, ...] | list[ErasedObject]) -> CertificateTotals:
        return cls(
            objects=len(objects),
            rows_removed=sum(o.rows_removed for o in objects),
            versions_purged=sum(o.versions_purged for o in objects),
        )


class CertificateVerification(_Frozen):
    """The erase job's verification scan: a certificate exists only when it found no row."""

    objects_verified: int = Field(ge=0)
    matching_rows_found: int = Field(ge=0, le=0)
    verified_at: AwareDatetime


class ErasureCertificate(_Frozen):
    # 1 (absent): signed before JCS (module docstring); 2: JCS, with the fields at the end
    format_version: int = Field(default=1, ge=1, le=FORMAT_VERSION)
    certificate_id: str = Field(min_length=1)
    request_id: str = Field(min_length=1)
    issued_at: AwareDatetime
    requested_by: str = Field(min_length=1)
    approved_by: str = Field(min_length=1)
    approved_at: AwareDatetime
    report_sha256: str = Field(pattern=_HEX64)
    subject_hashes: tuple[str, ...] = Field(min_length=1)  # keyed hashes (HMAC-SHA256 hex)
    objects: tuple[ErasedObject, ...]
    totals: CertificateTotals
    verification: CertificateVerification | None  # None: a partial certificate only
    # Absent from certificates signed before they existed (read as complete, no gap).
    complete: bool = True
    not_searched: tuple[NotSearchedPlace, ...] = ()
    # format_version 2 (absent from older certificates)
    documents: tuple[DocumentDigest, ...] = ()
    chain: ChainLink | None = None
    statement: SanitizationStatement | None = None
    partial: PartialRun | None = None  # a FAILED run's partial certificate (PartialRun)
    # the request's key_fingerprint: the key subject_hashes were computed with ("" before it)
    key_fingerprint: str = Field(default="", pattern=r"^([0-9a-f]{16})?$")
    index_erasure: IndexErasure | None = INDEX_ERASURE_FIELD  # segments (certificate_index)

    def document_digest(self, name: str) -> DocumentDigest | None:
        return next((d for d in self.documents if d.name == name), None)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if any(not _is_hex64(h) for h in self.subject_hashes):
            raise ValueError("subject_hashes holds keyed hashes only (64 hex digits each)")
        if self.totals != CertificateTotals.of(self.objects):
            raise ValueError("totals do not add up over objects")
        if self.partial is not None:
            if self.complete or self.verification is not None:
                raise ValueError("a partial certificate is not complete and holds no verification")
            return self
        if self.verification is None:
            raise ValueError("a certificate of completion names its verification")
        if self.verification.objects_verified != len(self.objects):
            raise ValueError("the verification must cover every object")
        if self.complete == bool(self.not_searched):
            raise ValueError("an erasure is complete exactly when no place was left unsearched")
        return self


def _is_hex64(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


# ------------------------------------------------------------------ canonical form and digest


def canonical_bytes(doc: Mapping[str, Any] | Model) -> bytes:
    """The canonical JSON the signature covers, as the document's `format_version` says: 2 is
    RFC 8785 (JCS); 1 or absent is JSON with sorted keys, no insignificant whitespace, UTF-8,
    non-ASCII kept as is (certificates signed before JCS).

    A model is dumped in JSON mode first (datetimes as ISO 8601 text). Raises ValueError or
    TypeError for values JSON cannot carry canonically (NaN, infinities, non-JSON types), and
    ValueError for a format_version this code does not know.
    """
    if isinstance(doc, ErasureCertificate):
        data: Any = certificate_document(doc)
    else:
        data = doc.model_dump(mode="json") if isinstance(doc, Model) else doc
    version = data.get("format_version", 1) if isinstance(data, Mapping) else 1
    if version == FORMAT_VERSION:
        return canonicalize(data)
    if version != 1:
        raise ValueError(f"unknown certificate format_version {version!r}")
    text = json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def certificate_document(certificate: ErasureCertificate) -> dict[str, Any]:
    """The JSON document of `certificate` as it is signed."""
    return certificate.model_dump(mode="json")


def certificate_digest(doc: Mapping[str, Any] | Model) -> bytes:
    """SHA-256 of `canonical_bytes(doc)`: what the key signs."""
    return hashlib.sha256(canonical_bytes(doc)).digest()


# ------------------------------------------------------------------ signers and verifiers


class Verifier(Protocol):
    def verify(self, digest: bytes, signature: bytes) -> bool: ...


class Signer(Verifier, Protocol):
    @property
    def key_id(self) -> str: ...

    def sign(self, digest: bytes) -> bytes: ...


class KmsSigner:
    """An asymmetric KMS key (ECC_NIST_P256, SIGN_VERIFY). Pass the key's ARN as `key_id`: it is
    written into every envelope, where an auditor looks it up."""

    def __init__(self, kms_client: Any, key_id: str) -> None:
        self._kms = kms_client  # a boto3 KMS client
        self.key_id = key_id

    def sign(self, digest: bytes) -> bytes:
        _require_digest(digest)
        response = self._kms.sign(
            KeyId=self.key_id,
            Message=digest,
            MessageType="DIGEST",
            SigningAlgorithm=SIGNING_ALGORITHM,
        )
        return bytes(response["Signature"])

    def verify(self, digest: bytes, signature: bytes) -> bool:
        _require_digest(digest)
        if not signature:
            return False
        try:
            response = self._kms.verify(
                KeyId=self.key_id,
                Message=digest,
                MessageType="DIGEST",
                Signature=signature,
                SigningAlgorithm=SIGNING_ALGORITHM,
            )
        except self._kms.exceptions.KMSInvalidSignatureException:
            return False  # what KMS answers for a signature that does not verify
        return bool(response.get("SignatureValid", False))

    def public_key_der(self) -> bytes:
        """The key's public key (SubjectPublicKeyInfo, DER), for offline verification."""
        return bytes(self._kms.get_public_key(KeyId=self.key_id)["PublicKey"])


class PublicKeyVerifier:
    """Verifies ECDSA P-256 signatures over a SHA-256 digest with a public key (DER, as KMS
    GetPublicKey returns it). Needs the `cryptography` package, imported here only, so that the
    Lambda layer does not have to ship it."""

    def __init__(self, public_key_der: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
        from cryptography.hazmat.primitives.serialization import (  # noqa: PLC0415
            load_der_public_key,
        )

        key = load_der_public_key(public_key_der)
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
            raise ValueError("the public key must be an ECC_NIST_P256 (secp256r1) key")
        self._key: EllipticCurvePublicKey = key

    def verify(self, digest: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature  # noqa: PLC0415
        from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec, utils  # noqa: PLC0415

        _require_digest(digest)
        try:
            self._key.verify(signature, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
        except (InvalidSignature, ValueError):
            return False
        return True


def _require_digest(digest: bytes) -> None:
    if len(digest) != hashlib.sha256().digest_size:
        raise ValueError("a digest is the 32 bytes of a SHA-256")


# ------------------------------------------------------------------ envelopes


def sign_certificate(certificate: ErasureCertificate, signer: Signer) -> dict[str, Any]:
    """The signed envelope of `certificate` (store it as JSON; `canonical_bytes` is fine)."""
    doc = certificate_document(certificate)
    digest = certificate_digest(doc)
    signature = signer.sign(digest)
    return {
        "certificate": doc,
        "signature": {
            "algorithm": SIGNING_ALGORITHM,
            "key_id": signer.key_id,
            "digest_sha256": digest.hex(),
            "value": base64.b64encode(signature).decode("ascii"),
        },
    }


@dataclass(frozen=True)
class VerifiedCertificate:
    certificate: ErasureCertificate
    digest_sha256: str
    key_id: str


def _parts(envelope: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    document = envelope.get("certificate") if isinstance(envelope, Mapping) else None
    signature = envelope.get("signature") if isinstance(envelope, Mapping) else None
    if not isinstance(document, Mapping) or not isinstance(signature, Mapping):
        raise CertificateInvalidError(
            "malformed", "an envelope holds a `certificate` and a `signature` object"
        )
    return document, signature


def _digest_of(document: Mapping[str, Any]) -> bytes:
    try:
        return certificate_digest(document)
    except (TypeError, ValueError) as exc:
        raise CertificateInvalidError("malformed", f"not canonical JSON: {exc}") from exc


def verify_envelope(envelope: Mapping[str, Any], verifier: Verifier) -> VerifiedCertificate:
    """Check an envelope: the digest recomputed from its certificate must equal the stored one
    and the signature must verify over it; the certificate must then be well formed.

    Raises CertificateInvalidError with `reason` digest-mismatch, bad-signature,
    unsupported-algorithm or malformed.
    """
    document, signature = _parts(envelope)
    if signature.get("algorithm") != SIGNING_ALGORITHM:
        raise CertificateInvalidError(
            "unsupported-algorithm",
            f"expected {SIGNING_ALGORITHM}, got {signature.get('algorithm')!r}",
        )
    digest = _digest_of(document)
    stored = signature.get("digest_sha256")
    if not isinstance(stored, str) or not hmac.compare_digest(
        stored.encode("utf-8"), digest.hex().encode("ascii")
    ):
        raise CertificateInvalidError(
            "digest-mismatch", "the certificate's SHA-256 is not the signed digest"
        )
    value = signature.get("value")
    try:
        signature_bytes = base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CertificateInvalidError("malformed", "the signature value is not base64") from exc
    if not signature_bytes or not verifier.verify(digest, signature_bytes):
        raise CertificateInvalidError(
            "bad-signature", "the signature does not verify with this key"
        )
    try:
        certificate = ErasureCertificate.model_validate(document)
    except ValidationError as exc:
        raise CertificateInvalidError("malformed", str(exc)) from exc
    return VerifiedCertificate(certificate, digest.hex(), str(signature.get("key_id", "")))


def verify_envelope_offline(
    envelope: Mapping[str, Any], public_key_der: bytes
) -> VerifiedCertificate:
    """`verify_envelope` with the signing key's public key (KMS GetPublicKey, DER), no KMS."""
    return verify_envelope(envelope, PublicKeyVerifier(public_key_der))


# ------------------------------------------------------------------ the readable page


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _version(version: ObjectVersion | None) -> str:
    if version is None:
        return "<em>deleted (no row remained)</em>"
    return f'<span class="mono">{_e(version.version_id)}</span>'


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1b1f24;line-height:1.4}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.5rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}
dt{font-weight:600}dd{margin:0}
table{border-collapse:collapse;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}
td.n{text-align:right}.mono{font-family:ui-monospace,monospace;word-break:break-all}
.warning{color:#b42318;font-weight:600}
"""


def _object_row(o: ErasedObject) -> str:
    before = "<br>".join(_version(v) for v in o.versions_before)
    return (
        "<tr>"
        f"<td>{_e(o.dataset_id)}</td><td>{_e(o.zone.value)}</td>"
        f'<td class="mono">s3://{_e(o.bucket)}/{_e(o.key)}</td>'
        f"<td>{before}</td><td>{_version(o.version_after)}</td>"
        f'<td class="n">{o.rows_before}</td><td class="n">{o.rows_removed}</td>'
        f'<td class="n">{o.rows_after}</td><td class="n">{o.versions_purged}</td>'
        "</tr>"
    )


def _gap_row(g: NotSearchedPlace) -> str:
    return (
        "<tr>"
        f"<td>{_e(g.dataset_id)}</td>"
        f'<td class="mono">s3://{_e(g.bucket)}/{_e(g.key)}</td>'
        f'<td class="mono">{_e(g.version_id)}</td>'
        f'<td class="mono">{_e(g.reason)}</td><td class="n">{g.count}</td>'
        f"<td>{_e(g.detail)}</td>"
        "</tr>"
    )


def _completeness(cert: ErasureCertificate, recorded: bool) -> tuple[str, str, str]:
    """The summary's line, the warning above it and the table of places not fully searched.
    `recorded`: the signed document has the `complete` field (older certificates do not)."""
    if not recorded:
        line = '<dd id="complete" data-complete="">not recorded (an older certificate)</dd>'
        return line, "", ""
    if cert.complete:
        return '<dd id="complete" data-complete="true">yes: every place was searched</dd>', "", ""
    count = len(cert.not_searched)
    if cert.partial is not None:
        p = cert.partial
        line = (
            f'<dd id="complete" data-complete="false" class="warning">NO: PARTIAL, the run '
            f"FAILED; {p.objects_done} of {p.objects_in_report} object(s) done</dd>"
        )
        warning = (
            '<p id="partial" class="warning">PARTIAL certificate of a FAILED erasure run (run '
            f"{p.run}): it is not a certificate of completion. It certifies only what was done "
            f"before the failure ({_e(p.error)}: {_e(p.cause)}); nothing was verified, and every "
            "place listed below was not (fully) erased.</p>\n"
        )
        return line, warning, _gaps_table(cert)
    line = (
        f'<dd id="complete" data-complete="false" class="warning">NO: {count} place(s) not '
        "fully searched (below)</dd>"
    )
    warning = (
        '<p id="incomplete" class="warning">INCOMPLETE erasure: the request ended FAILED '
        f"(outcome INCOMPLETE). {count} place(s) were not fully searched for the subjects, who "
        "may still be there; this certificate certifies only what is listed as erased.</p>\n"
    )
    return line, warning, _gaps_table(cert)


def _gaps_table(cert: ErasureCertificate) -> str:
    rows = "\n".join(_gap_row(g) for g in cert.not_searched)
    return (
        "<h2>Not fully searched</h2>\n"
        '<table id="not-searched">\n<thead><tr><th>Dataset</th><th>Object</th><th>Version</th>'
        "<th>Reason</th><th>Count</th><th>Detail</th></tr></thead>\n"
        f"<tbody>\n{rows}\n</tbody>\n</table>\n"
    )


def _verification(v: CertificateVerification | None) -> str:
    if v is None:
        return '<span class="warning">none: the run failed before a verification</span>'
    return (
        f"{v.objects_verified} objects scanned at {_e(_when(v.verified_at))}: "
        f"{v.matching_rows_found} matching rows found"
    )


def render_certificate_html(envelope: Mapping[str, Any]) -> str:
    """A readable page of a certificate envelope. It shows the stored signature and the digest
    recomputed from the certificate (with a warning when they differ) but does not verify the
    signature: `verify_envelope` does. Raises CertificateInvalidError for a malformed one."""
    document, signature = _parts(envelope)
    try:
        cert = ErasureCertificate.model_validate(document)
    except ValidationError as exc:
        raise CertificateInvalidError("malformed", str(exc)) from exc
    digest = _digest_of(document).hex()
    stored = str(signature.get("digest_sha256", ""))
    warning = (
        ""
        if hmac.compare_digest(stored.encode("utf-8"), digest.encode("ascii"))
        else '<p id="digest-warning" class="warning">The stored digest is not the SHA-256 of '
        "this certificate: it was altered after signing.</p>\n"
    )
    hashes = "".join(f'<li class="mono">{_e(h)}</li>' for h in cert.subject_hashes)
    under = f", hashed with the key {_e(cert.key_fingerprint)}" if cert.key_fingerprint else ""
    rows = "\n".join(_object_row(o) for o in cert.objects)
    complete, incomplete, gaps = _completeness(cert, "complete" in document)
    if cert.format_version >= 2:
        gaps += statement_html(cert.documents, cert.chain, cert.statement)
    title = f"Erasure certificate {cert.certificate_id}"
    body = (
        f"<h1>{_e(title)}</h1>\n"
        f"{incomplete}"
        '<dl id="summary">\n'
        f"<dt>Request</dt><dd>{_e(cert.request_id)}</dd>\n"
        f"<dt>Issued</dt><dd>{_e(_when(cert.issued_at))}</dd>\n"
        f"<dt>Requested by</dt><dd>{_e(cert.requested_by)}</dd>\n"
        f"<dt>Approved by</dt><dd>{_e(cert.approved_by)} at {_e(_when(cert.approved_at))}</dd>\n"
        f'<dt>Report SHA-256</dt><dd class="mono">{_e(cert.report_sha256)}</dd>\n'
        f"<dt>Data subjects</dt><dd>{len(cert.subject_hashes)} (keyed hashes below{under})</dd>\n"
        f"<dt>Objects</dt><dd>{cert.totals.objects}</dd>\n"
        f"<dt>Rows removed</dt><dd>{cert.totals.rows_removed}</dd>\n"
        f"<dt>Versions purged</dt><dd>{cert.totals.versions_purged}</dd>\n"
        f"<dt>Verification</dt><dd>{_verification(cert.verification)}</dd>\n"
        f"<dt>Complete</dt>{complete}\n"
        "</dl>\n"
        "<h2>Objects</h2>\n"
        '<table id="objects">\n<thead><tr><th>Dataset</th><th>Zone</th><th>Object</th>'
        "<th>Versions before</th><th>Version after</th><th>Rows before</th>"
        "<th>Rows removed</th><th>Rows after</th><th>Versions purged</th></tr></thead>\n"
        f"<tbody>\n{rows}\n</tbody>\n</table>\n"
        f"{gaps}"
        f"<h2>Subject hashes</h2>\n<ul>{hashes}</ul>\n"
        "<h2>Signature</h2>\n"
        '<dl id="signature">\n'
        f"<dt>Algorithm</dt><dd>{_e(signature.get('algorithm', ''))}</dd>\n"
        f'<dt>Key</dt><dd class="mono">{_e(signature.get("key_id", ""))}</dd>\n'
        f'<dt>Signed digest (SHA-256)</dt><dd class="mono">{_e(stored)}</dd>\n'
        f'<dt>Digest of this certificate</dt><dd class="mono">{_e(digest)}</dd>\n'
        f'<dt>Signature (base64, DER)</dt><dd class="mono">{_e(signature.get("value", ""))}</dd>\n'
        "</dl>\n"
        f"{warning}"
        "<p>This page does not check the signature. Verify the envelope with the key's public "
        "key (KMS GetPublicKey) or through KMS Verify, over the SHA-256 of the certificate's "
        "canonical JSON (RFC 8785 JCS for format_version 2).</p>\n"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n{body}</body>\n</html>\n"
    )
