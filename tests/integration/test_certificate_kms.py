"""Certificates signed by an asymmetric KMS key (moto), verified through KMS and offline.

moto 5.2.5 parses Sign/Verify's `MessageType` and ignores it: a `DIGEST` is hashed again, so its
signatures verify over SHA-256(digest) and fail against GetPublicKey, while the same code works
on AWS (getmoto/moto pull request 10202 implements DIGEST; not released in 5.2.5). The
`kms_digest` fixture makes moto's ECDSA keys honour `DIGEST` as KMS does; the canary test below
fails once moto does it itself, and then the fixture can go.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lethe.localcloud import kms_hooks
from lethe_shared.erasure import certificate as cf
from tests.unit.test_certificate import make_certificate

REGION = "us-east-1"


@pytest.fixture
def kms_digest() -> Iterator[None]:
    """moto's KMS with the local cloud's DIGEST hook (lethe.localcloud.kms_hooks)."""
    uninstall = kms_hooks.install()
    yield
    uninstall()


@pytest.fixture
def kms(aws: None) -> Any:
    return boto3.client("kms", region_name=REGION)


@pytest.fixture
def signer(kms: Any) -> cf.KmsSigner:
    metadata = kms.create_key(
        KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY", Description="Lethe certificates"
    )["KeyMetadata"]
    return cf.KmsSigner(kms, metadata["Arn"])


def test_moto_still_ignores_digest_message_type(signer: cf.KmsSigner) -> None:
    """Canary: when this fails, moto honours DIGEST and the kms_digest fixture can go."""
    digest = cf.certificate_digest(make_certificate())
    signature = signer.sign(digest)
    assert signer.verify(digest, signature)
    assert not cf.PublicKeyVerifier(signer.public_key_der()).verify(digest, signature)


def test_kms_signed_certificate_verifies_through_kms_and_offline(
    kms_digest: None, signer: cf.KmsSigner
) -> None:
    cert = make_certificate()
    envelope = cf.sign_certificate(cert, signer)
    assert envelope["signature"]["key_id"] == signer.key_id
    assert envelope["signature"]["key_id"].startswith("arn:aws:kms:")

    assert cf.verify_envelope(envelope, signer).certificate == cert
    public_key = signer.public_key_der()
    assert cf.verify_envelope_offline(envelope, public_key).certificate == cert

    # What an auditor does with nothing but the envelope and the public key: the signature is
    # ECDSA P-256 over SHA-256 of the canonical JSON.
    key = serialization.load_der_public_key(public_key)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    key.verify(
        base64.b64decode(envelope["signature"]["value"]),
        cf.canonical_bytes(envelope["certificate"]),
        ec.ECDSA(hashes.SHA256()),
    )


def test_tampered_certificate_fails_through_kms_and_offline(
    kms_digest: None, signer: cf.KmsSigner
) -> None:
    envelope = cf.sign_certificate(make_certificate(), signer)
    public_key = signer.public_key_der()

    forged = copy.deepcopy(envelope)
    forged["certificate"]["objects"][0]["rows_removed"] = 2
    forged["certificate"]["objects"][0]["rows_after"] = 8
    forged["certificate"]["totals"]["rows_removed"] = 4
    for verifier in (signer, cf.PublicKeyVerifier(public_key)):
        with pytest.raises(cf.CertificateInvalidError) as info:
            cf.verify_envelope(forged, verifier)
        assert info.value.reason == "digest-mismatch"

    # the forger also recomputes the stored digest: the signature no longer matches it
    forged["signature"]["digest_sha256"] = cf.certificate_digest(forged["certificate"]).hex()
    for verifier in (signer, cf.PublicKeyVerifier(public_key)):
        with pytest.raises(cf.CertificateInvalidError) as info:
            cf.verify_envelope(forged, verifier)
        assert info.value.reason == "bad-signature"
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(forged, public_key)


def test_another_kms_key_does_not_verify(kms_digest: None, kms: Any, signer: cf.KmsSigner) -> None:
    envelope = cf.sign_certificate(make_certificate(), signer)
    other_arn = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"][
        "Arn"
    ]
    other = cf.KmsSigner(kms, other_arn)
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope(envelope, other)
    with pytest.raises(cf.CertificateInvalidError, match="bad-signature"):
        cf.verify_envelope_offline(envelope, other.public_key_der())


def test_kms_invalid_signature_exception_reads_as_invalid(signer: cf.KmsSigner) -> None:
    """Real KMS answers a bad signature with KMSInvalidSignatureException, not a false flag."""

    class Raising:
        exceptions = signer._kms.exceptions

        def verify(self, **_: Any) -> dict[str, Any]:
            raise self.exceptions.KMSInvalidSignatureException(
                {"Error": {"Code": "KMSInvalidSignatureException", "Message": "bad"}}, "Verify"
            )

    assert not cf.KmsSigner(Raising(), signer.key_id).verify(b"\0" * 32, b"sig")


def test_kms_signer_sends_a_digest(signer: cf.KmsSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    real_sign = signer._kms.sign

    def recording_sign(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_sign(**kwargs)

    monkeypatch.setattr(signer._kms, "sign", recording_sign)
    digest = cf.certificate_digest(make_certificate())
    signer.sign(digest)
    assert calls == [
        {
            "KeyId": signer.key_id,
            "Message": digest,
            "MessageType": "DIGEST",
            "SigningAlgorithm": "ECDSA_SHA_256",
        }
    ]
    with pytest.raises(ValueError, match="32 bytes"):
        signer.sign(b"not a digest")
