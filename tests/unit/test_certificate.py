"""lethe_shared.erasure.certificate: the document, its canonical bytes, signing and verification."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from pydantic import ValidationError

from lethe_shared.erasure import certificate as cf
from lethe_shared.errors import LetheError

pytestmark = pytest.mark.lambda_runtime

T0 = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
H1 = hashlib.sha256(b"subject-1").hexdigest()
H2 = hashlib.sha256(b"subject-2").hexdigest()


class MemorySigner:
    """An in-memory P-256 key signing SHA-256 digests, as KMS does with MessageType=DIGEST."""

    def __init__(self, key_id: str = "test-key") -> None:
        self.key_id = key_id
        self.private_key = ec.generate_private_key(ec.SECP256R1())

    def sign(self, digest: bytes) -> bytes:
        return self.private_key.sign(digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))

    def verify(self, digest: bytes, signature: bytes) -> bool:
        try:
            self.private_key.public_key().verify(
                signature, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256()))
            )
        except InvalidSignature:
            return False
        return True

    def public_key_der(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def make_certificate(**overrides: Any) -> cf.ErasureCertificate:
    objects = [
        {
            "dataset_id": "reviews",
            "zone": "lake",
            "bucket": "lethe-lake",
            "key": "reviews/review_date=2026-11-01/part-0.parquet",
            "versions_before": [
                {"version_id": "v1", "etag": '"e1"'},
                {"version_id": "v2", "etag": '"e2"'},
            ],
            "version_after": {"version_id": "v3", "etag": '"e3"'},
            "rows_before": 10,
            "rows_removed": 3,
            "rows_after": 7,
            "versions_purged": 2,
        },
        {
            "dataset_id": "reviews",
            "zone": "raw",
            "bucket": "lethe-raw",
            "key": "reviews/2026/11/01/ünïcødé.jsonl.gz",
            "versions_before": [{"version_id": "r1", "etag": '"x1"'}],
            "version_after": None,
            "rows_before": 2,
            "rows_removed": 2,
            "rows_after": 0,
            "versions_purged": 1,
        },
    ]
    values: dict[str, Any] = {
        "certificate_id": "cert-0001",
        "request_id": "req-0001",
        "issued_at": T0 + dt.timedelta(hours=2),
        "requested_by": "privacy@example.com",
        "approved_by": "Zoë Dupont <dpo@example.com>",
        "approved_at": T0,
        "report_sha256": "ab" * 32,
        "subject_hashes": [H1, H2],
        "objects": objects,
        "totals": {"objects": 2, "rows_removed": 5, "versions_purged": 3},
        "verification": {
            "objects_verified": 2,
            "matching_rows_found": 0,
            "verified_at": T0 + dt.timedelta(hours=1),
        },
    }
    values.update(overrides)
    return cf.ErasureCertificate.model_validate(values)


# ------------------------------------------------------------------ canonical bytes


def test_canonical_bytes_sort_keys_without_whitespace() -> None:
    assert cf.canonical_bytes({"b": 1, "a": {"d": [1, 2], "c": "x"}}) == (
        b'{"a":{"c":"x","d":[1,2]},"b":1}'
    )


def test_canonical_bytes_do_not_depend_on_key_order() -> None:
    doc = make_certificate().model_dump(mode="json")
    reordered = json.loads(json.dumps(doc, sort_keys=True))
    reversed_doc = dict(reversed(list(doc.items())))
    assert cf.canonical_bytes(doc) == cf.canonical_bytes(reordered)
    assert cf.canonical_bytes(doc) == cf.canonical_bytes(reversed_doc)
    assert cf.canonical_bytes(doc) == cf.canonical_bytes(make_certificate())


def test_canonical_bytes_keep_unicode_as_utf8() -> None:
    data = cf.canonical_bytes({"name": "Zoë", "key": "ünïcødé", "emoji": "\U0001f5d1"})
    assert data == '{"emoji":"\U0001f5d1","key":"ünïcødé","name":"Zoë"}'.encode()
    assert b"\\u" not in data


def test_canonical_bytes_are_stable() -> None:
    """A pinned digest: any change to the canonical form breaks stored certificates."""
    doc = {"z": [1, "é"], "a": True, "m": None, "n": {"y": 0, "x": -1}}
    assert cf.canonical_bytes(doc) == '{"a":true,"m":null,"n":{"x":-1,"y":0},"z":[1,"é"]}'.encode()
    assert cf.certificate_digest(doc).hex() == hashlib.sha256(cf.canonical_bytes(doc)).hexdigest()


def test_canonical_bytes_refuse_nan() -> None:
    with pytest.raises(ValueError, match="JSON"):
        cf.canonical_bytes({"x": float("nan")})


def test_datetimes_serialize_in_utc_iso() -> None:
    doc = make_certificate().model_dump(mode="json")
    assert doc["approved_at"] == "2026-11-22T10:00:00Z"


# ------------------------------------------------------------------ the model


def test_certificate_consistency_rules() -> None:
    good = make_certificate().model_dump(mode="json")

    def variant(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        doc = copy.deepcopy(good)
        mutate(doc)
        return doc

    bad_docs = [
        variant(lambda d: d["verification"].update(matching_rows_found=1)),
        variant(lambda d: d["totals"].update(rows_removed=4)),
        variant(lambda d: d["verification"].update(objects_verified=1)),
        variant(lambda d: d["objects"][0].update(rows_after=8)),
        variant(lambda d: d["objects"][0].update(version_after=None)),
        variant(lambda d: d["subject_hashes"].append("user-4711")),
        variant(lambda d: d.update(subject_ids=["user-4711"])),
        variant(lambda d: d.update(report_sha256="x")),
        variant(lambda d: d.update(issued_at="2026-11-22T12:00:00")),
        variant(lambda d: d["objects"][0].update(versions_before=[])),
    ]
    for doc in bad_docs:
        with pytest.raises(ValidationError):
            cf.ErasureCertificate.model_validate(doc)


def test_totals_of_objects() -> None:
    cert = make_certificate()
    assert cf.CertificateTotals.of(cert.objects) == cert.totals


# ------------------------------------------------------------------ signing and verifying


def test_sign_and_verify_with_an_in_memory_signer() -> None:
    signer = MemorySigner()
    cert = make_certificate()
    envelope = cf.sign_certificate(cert, signer)
    assert envelope["signature"]["algorithm"] == "ECDSA_SHA_256"
    assert envelope["signature"]["key_id"] == "test-key"
    assert envelope["signature"]["digest_sha256"] == cf.certificate_digest(cert).hex()
    result = cf.verify_envelope(envelope, signer)
    assert result.certificate == cert
    assert result.digest_sha256 == envelope["signature"]["digest_sha256"]
    assert result.key_id == "test-key"
    offline = cf.verify_envelope_offline(envelope, signer.public_key_der())
    assert offline.certificate == cert


def test_envelope_survives_a_json_round_trip() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    stored = json.loads(cf.canonical_bytes(envelope))
    assert cf.verify_envelope(stored, signer).certificate == make_certificate()


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaf_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaf_paths(v, (*path, i))]
    return [path]


def _tamper(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return {"version_id": "forged", "etag": '"f"'}
    return value + "x" if value else "x"


def test_tampering_with_any_field_breaks_verification() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    paths = _leaf_paths(envelope["certificate"])
    assert len(paths) > 30
    for path in paths:
        forged = copy.deepcopy(envelope)
        target = forged["certificate"]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = _tamper(target[path[-1]])
        with pytest.raises(cf.CertificateInvalidError) as info:
            cf.verify_envelope(forged, signer)
        assert info.value.reason == "digest-mismatch", path


def test_tampering_that_also_replaces_the_stored_digest_fails_the_signature() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    forged = copy.deepcopy(envelope)
    forged["certificate"]["objects"][0]["rows_removed"] = 2
    forged["certificate"]["objects"][0]["rows_after"] = 8
    forged["certificate"]["totals"]["rows_removed"] = 4
    forged["signature"]["digest_sha256"] = cf.certificate_digest(forged["certificate"]).hex()
    with pytest.raises(cf.CertificateInvalidError) as info:
        cf.verify_envelope(forged, signer)
    assert info.value.reason == "bad-signature"
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(forged, signer.public_key_der())


def test_adding_or_removing_a_field_breaks_verification() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    added = copy.deepcopy(envelope)
    added["certificate"]["note"] = "x"
    removed = copy.deepcopy(envelope)
    del removed["certificate"]["objects"][1]
    for forged in (added, removed):
        with pytest.raises(cf.CertificateInvalidError, match="digest-mismatch"):
            cf.verify_envelope(forged, signer)


def test_a_signature_from_another_key_fails() -> None:
    envelope = cf.sign_certificate(make_certificate(), MemorySigner())
    other = MemorySigner()
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope(envelope, other)
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(envelope, other.public_key_der())


def test_tampered_signature_value() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    raw = bytearray(base64.b64decode(envelope["signature"]["value"]))
    raw[-1] ^= 1
    flipped = copy.deepcopy(envelope)
    flipped["signature"]["value"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(flipped, signer.public_key_der())
    garbage = copy.deepcopy(envelope)
    garbage["signature"]["value"] = base64.b64encode(b"not a DER signature").decode()
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(garbage, signer.public_key_der())
    empty = copy.deepcopy(envelope)
    empty["signature"]["value"] = ""
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope(empty, signer)
    not_b64 = copy.deepcopy(envelope)
    not_b64["signature"]["value"] = "***"
    with pytest.raises(cf.CertificateInvalidError, match="malformed"):
        cf.verify_envelope(not_b64, signer)


def test_malformed_envelopes() -> None:
    signer = MemorySigner()
    envelope = cf.sign_certificate(make_certificate(), signer)
    with pytest.raises(cf.CertificateInvalidError, match="malformed"):
        cf.verify_envelope({"certificate": envelope["certificate"]}, signer)
    with pytest.raises(cf.CertificateInvalidError, match="malformed"):
        cf.verify_envelope({"certificate": [], "signature": {}}, signer)
    other_algorithm = copy.deepcopy(envelope)
    other_algorithm["signature"]["algorithm"] = "RSASSA_PSS_SHA_256"
    with pytest.raises(cf.CertificateInvalidError, match="unsupported-algorithm"):
        cf.verify_envelope(other_algorithm, signer)
    assert issubclass(cf.CertificateInvalidError, LetheError)


def test_a_validly_signed_but_inconsistent_document_is_malformed() -> None:
    signer = MemorySigner()
    doc = make_certificate().model_dump(mode="json")
    doc["verification"]["matching_rows_found"] = 1
    digest = cf.certificate_digest(doc)
    envelope = {
        "certificate": doc,
        "signature": {
            "algorithm": "ECDSA_SHA_256",
            "key_id": signer.key_id,
            "digest_sha256": digest.hex(),
            "value": base64.b64encode(signer.sign(digest)).decode(),
        },
    }
    with pytest.raises(cf.CertificateInvalidError, match="malformed"):
        cf.verify_envelope(envelope, signer)


def test_public_key_verifier_refuses_other_curves() -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    der = p384.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ValueError, match="P256"):
        cf.PublicKeyVerifier(der)


def test_digest_must_be_sha256_sized() -> None:
    verifier = cf.PublicKeyVerifier(MemorySigner().public_key_der())
    with pytest.raises(ValueError, match="32 bytes"):
        verifier.verify(b"short", b"sig")


# ------------------------------------------------------------------ the readable page


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.scripts = 0
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts += 1
        self.ids.update(v for k, v in attrs if k == "id" and v)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_render_certificate_html() -> None:
    hostile = "<script>alert(1)</script>"
    cert = make_certificate(requested_by=hostile, approved_by="Zoë")
    envelope = cf.sign_certificate(cert, MemorySigner())
    page = cf.render_certificate_html(envelope)
    parser = _Text()
    parser.feed(page)
    text = " ".join(" ".join(parser.text).split())
    assert parser.scripts == 0
    assert "&lt;script&gt;" in page
    assert "s3://lethe-lake/reviews/review_date=2026-11-01/part-0.parquet" in text
    assert "s3://lethe-raw/reviews/2026/11/01/ünïcødé.jsonl.gz" in text
    assert "deleted (no row remained)" in text
    assert envelope["signature"]["digest_sha256"] in text
    assert envelope["signature"]["value"] in text
    assert H1 in text
    assert "0 matching rows found" in text
    assert "digest-warning" not in parser.ids
    forged = copy.deepcopy(envelope)
    forged["certificate"]["approved_by"] = "Mallory"
    warned = _Text()
    warned.feed(cf.render_certificate_html(forged))
    assert "digest-warning" in warned.ids
