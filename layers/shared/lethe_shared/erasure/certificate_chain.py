"""The deployment's certificate chain: every certificate (complete or not) names the one before.

Design: one object per link in the reports bucket, `erasure/_chain/<sequence, 12 digits>.json`,
holding the signed envelope, written with If-None-Match (`DocumentStore.put_once`). S3's
conditional create is the only arbiter: of two certify steps that pick the same next sequence,
exactly one creates the link; the other signs again with the next free sequence and the winner
as its previous. A pointer item updated with a conditional write would serialise the same way
but needs a second store and a read-modify-write; a create-only object per link never changes
once written, and the link objects are the chain itself (no pointer that can disagree with it).

`erasure/_chain/head.json` is a hint only (the highest sequence its writer knew): the next free
sequence is found by probing upward from it, so a stale or racing hint costs GETs, never a fork.
Before it signs, a certify attempt records the sequence it is trying in its request's
`chain_claim.json`: a retry after a crash between creating the link and writing
`certificate.json` finds its own link there and reuses it instead of signing a second one.

The prefix is under `erasure/` (the certify function's S3 permission) and cannot be a request's
folder (request ids are `er-...`). The first certificate signed with chaining has no previous
(certificates signed before it are not in the chain).

A cut tail: deleting the newest links and rewinding `head.json` leaves a chain that walks clean.
What it cannot rewind is outside the bucket: every certified request's record (the requests
table) holds its certificate's SHA-256 and `chain_sequence`. `check_tail` holds the chain against
them: a certified request whose link lies beyond the chain's last, or whose link is another
certificate, is a problem naming the request. With the bucket's Object Lock (evidence) the
deletion itself is refused; this check covers a bucket without it (before the upgrade).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lethe_shared.erasure.report import canonical_json, report_key
from lethe_shared.errors import LetheError

if TYPE_CHECKING:
    from lethe_shared.erasure.certificate import ErasureCertificate, Signer, Verifier
    from lethe_shared.erasure.certificate_statement import ChainLink
    from lethe_shared.erasure.workflow import DocumentStore

CHAIN_PREFIX = "erasure/_chain"
HEAD_KEY = f"{CHAIN_PREFIX}/head.json"
CLAIM = "chain_claim.json"
_JSON = "application/json"
_ATTEMPTS = 25


class ChainContendedError(LetheError):
    """No free link could be taken after many attempts (other certify steps kept winning)."""


def link_key(sequence: int) -> str:
    return f"{CHAIN_PREFIX}/{sequence:012d}.json"


def _hint(get: Callable[[str], bytes | None]) -> int:
    body = get(HEAD_KEY)
    try:
        return max(0, int(json.loads(body)["sequence"])) if body else 0
    except (ValueError, KeyError, TypeError):
        return 0


def last_sequence(get: Callable[[str], bytes | None]) -> int:
    """The highest taken sequence reachable from the hint (0: the chain is empty)."""
    n = _hint(get)
    while get(link_key(n + 1)) is not None:
        n += 1
    return n


def sign_chained(
    documents: DocumentStore,
    request_id: str,
    build: Callable[[ChainLink], ErasureCertificate],
    signer: Signer,
    *,
    name: str = "certificate.json",
) -> tuple[dict[str, Any], bytes]:
    """The request's one certificate envelope, signed once as the chain's next link and written
    to the chain and to `name` (`certificate.json`; a FAILED run's partial certificate has its
    own, lethe_shared.erasure.failure); a retry reuses what an earlier attempt wrote."""
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        certificate_digest,
        sign_certificate,
    )
    from lethe_shared.erasure.certificate_statement import ChainLink  # noqa: PLC0415

    cert_key = report_key(request_id, name)
    stored = documents.get(cert_key)
    if stored is not None:
        return json.loads(stored), stored
    claim_key = report_key(request_id, CLAIM if name == "certificate.json" else f"{name}.claim")
    claim = documents.get(claim_key)
    if claim is not None:
        body = documents.get(link_key(int(json.loads(claim)["sequence"])))
        if body is not None and _is_link_of(json.loads(body)["certificate"], request_id, name):
            return _finish(documents, cert_key, body, int(json.loads(claim)["sequence"]))
    for _ in range(_ATTEMPTS):
        last = last_sequence(documents.get)
        previous = json.loads(documents.get(link_key(last)) or b"null") if last else None
        link = ChainLink(
            sequence=last + 1,
            previous_digest=certificate_digest(previous["certificate"]).hex() if previous else None,
            previous_certificate_id=str(previous["certificate"]["certificate_id"])
            if previous
            else "",
        )
        documents.put(claim_key, canonical_json({"sequence": link.sequence}), _JSON)
        body = canonical_json(sign_certificate(build(link), signer))
        if documents.put_once(link_key(link.sequence), body, _JSON):
            return _finish(documents, cert_key, body, link.sequence)
    raise ChainContendedError(f"request {request_id}: no free certificate chain link")


def _is_link_of(certificate: dict[str, Any], request_id: str, name: str) -> bool:
    """A claimed link is this request's certificate of this name (a FAILED run's partial
    certificate may have taken the sequence a failed certify step had claimed)."""
    partial = certificate.get("partial")
    run = partial.get("run") if isinstance(partial, dict) else None
    stored = "certificate.json" if run is None else f"failed-run-{run}/certificate.json"
    return certificate.get("request_id") == request_id and stored == name


def _finish(
    documents: DocumentStore, cert_key: str, body: bytes, sequence: int
) -> tuple[dict[str, Any], bytes]:
    if not documents.put_once(cert_key, body, _JSON):
        body = documents.get(cert_key) or body
    if _hint(documents.get) < sequence:
        documents.put(HEAD_KEY, canonical_json({"sequence": sequence}), _JSON)
    return json.loads(body), body


# --------------------------------------------------------------------------- walking it


def stored_name(certificate: ErasureCertificate) -> str:
    """Where a link's certificate is stored under its request: `certificate.json`, or a partial
    certificate's own name (lethe_shared.erasure.failure.partial_name)."""
    if certificate.partial is not None:
        return f"failed-run-{certificate.partial.run}/certificate.json"
    return "certificate.json"


@dataclass
class ChainWalk:
    links: int = 0
    problems: list[str] = field(default_factory=list)
    last: int = 0  # the highest sequence the walk looked at (0: the chain is empty)

    @property
    def ok(self) -> bool:
        return not self.problems


def walk_chain(get: Callable[[str], bytes | None], verifier: Verifier) -> ChainWalk:
    """Check every link from 1 to the last: it exists, verifies with `verifier` (the stack's
    key), says its own sequence, names the digest of the link before it, and is byte for byte
    its request's `certificate.json`. Links past a missing one are still looked for (up to the
    hint), so a deleted link in the middle is a problem, not the chain's end."""
    from lethe_shared.erasure.certificate import (  # noqa: PLC0415
        CertificateInvalidError,
        verify_envelope,
    )

    walk = ChainWalk()
    end = max(_hint(get), 0)
    n, previous_digest, previous_id = 1, None, ""
    while True:
        body = get(link_key(n))
        if body is None:
            if n <= end or get(link_key(n + 1)) is not None:
                walk.problems.append(f"link {n} is missing (the chain continues after it)")
                n += 1
                previous_digest = "?"
                continue
            walk.last = n - 1
            break
        walk.links += 1
        try:
            verified = verify_envelope(json.loads(body), verifier)
        except (CertificateInvalidError, ValueError) as exc:
            walk.problems.append(f"link {n} does not verify with the stack's key: {exc}")
            n, previous_digest = n + 1, "?"
            continue
        cert = verified.certificate
        link = cert.chain
        if link is None or link.sequence != n:
            walk.problems.append(f"link {n} ({cert.certificate_id}) does not say sequence {n}")
        elif previous_digest not in {"?", link.previous_digest}:
            walk.problems.append(
                f"link {n} ({cert.certificate_id}) names previous {link.previous_digest} "
                f"({link.previous_certificate_id or 'none'}), the chain's link {n - 1} is "
                f"{previous_digest} ({previous_id or 'none'})"
            )
        stored = get(report_key(cert.request_id, stored_name(cert)))
        if stored is None:
            walk.problems.append(
                f"link {n}: the certificate of request {cert.request_id} is missing"
            )
        elif stored != body:
            walk.problems.append(
                f"link {n}: the certificate of request {cert.request_id} differs from the link"
            )
        n, previous_digest, previous_id = n + 1, verified.digest_sha256, cert.certificate_id
    return walk


@dataclass(frozen=True)
class CertifiedRecord:
    """What a request record says about its certificate (`certificate.sha256`,
    `certificate.chain_sequence`): kept in the requests table, outside the reports bucket."""

    request_id: str
    sequence: int
    sha256: str

    @classmethod
    def of(cls, record: dict[str, Any]) -> CertifiedRecord | None:
        """From a request record (its public form); None when it names no chain link."""
        pointer = record.get("certificate") or {}
        try:
            sequence = int(pointer.get("chain_sequence") or 0)
        except (TypeError, ValueError):
            sequence = 0
        if sequence <= 0:
            return None
        return cls(str(record.get("request_id", "")), sequence, str(pointer.get("sha256", "")))


def check_tail(
    get: Callable[[str], bytes | None], last: int, records: Iterable[CertifiedRecord]
) -> list[str]:
    """Each certified request's link must be within the chain (at most `last`, the walk's end)
    and be that request's certificate (its SHA-256 is the one the record holds). A problem per
    request that is not, naming it: the links after `last` were deleted and the head rewound,
    or a link was replaced."""
    problems: list[str] = []
    for record in sorted(records, key=lambda r: (r.sequence, r.request_id)):
        if record.sequence > last:
            problems.append(
                f"request {record.request_id} was certified as link {record.sequence}, but the "
                f"chain ends at link {last}: its newest links were deleted (and head.json "
                "rewound)"
            )
            continue
        body = get(link_key(record.sequence))
        if body is None:
            continue  # the walk has named the missing link already
        actual = hashlib.sha256(body).hexdigest()
        if record.sha256 and record.sha256 not in {actual, _signed_digest(body)}:
            problems.append(
                f"link {record.sequence} is not the certificate of request {record.request_id} "
                f"(SHA-256 {actual}, its request record holds {record.sha256})"
            )
    return problems


def _signed_digest(body: bytes) -> str:
    """The envelope's signed digest (what some records name instead of the file's SHA-256)."""
    try:
        return str(json.loads(body)["signature"]["digest_sha256"])
    except (ValueError, KeyError, TypeError):
        return ""
