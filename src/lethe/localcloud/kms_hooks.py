"""KMS `Sign`/`Verify` with `MessageType=DIGEST`, as AWS KMS does it.

moto 5.2.5 parses `MessageType` and ignores it: a DIGEST is hashed again, so its signatures
verify over SHA-256(digest) through moto itself but fail against the key's public key
(GetPublicKey), which is how an auditor checks an erasure certificate offline. AWS signs the
given digest as it is. The hook makes moto's ECDSA keys do the same for DIGEST messages and
leaves RAW messages to moto.

Where: `moto.kms.utils.ECDSAPrivateKey.sign/verify` (the key's operations) and
`moto.kms.responses.KmsResponse.sign/verify` (which know the request's MessageType, passed
down in a context variable). Pinned to moto 5.2.5; tests/integration/test_certificate_kms.py
has a canary that fails when moto implements DIGEST itself (getmoto/moto pull request 10202),
and then this hook can go.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils
from moto.kms import utils as kms_utils
from moto.kms.responses import KmsResponse

_DIGEST = contextvars.ContextVar("lethe_kms_message_type_digest", default=False)
DIGEST_BYTES = {"ECDSA_SHA_256": 32}


def _with_message_type(handler: Callable[[Any], str]) -> Callable[[Any], str]:
    def wrapped(self: Any) -> str:
        token = _DIGEST.set(self._get_param("MessageType") == "DIGEST")
        try:
            return handler(self)
        finally:
            _DIGEST.reset(token)

    return wrapped


def _prehashed(algorithm: str, message: bytes) -> ec.ECDSA:
    if DIGEST_BYTES.get(algorithm) != len(message):
        raise ValueError(
            f"a {algorithm} DIGEST message must have {DIGEST_BYTES.get(algorithm)} bytes"
        )
    return ec.ECDSA(utils.Prehashed(hashes.SHA256()))


def install() -> Callable[[], None]:
    """Patch moto's KMS; returns the function that restores it."""
    key_class = kms_utils.ECDSAPrivateKey
    sign, verify = key_class.sign, key_class.verify
    response_sign, response_verify = KmsResponse.sign, KmsResponse.verify

    def digest_sign(self: Any, message: bytes, signing_algorithm: str) -> bytes:
        if not _DIGEST.get():
            return bytes(sign(self, message, signing_algorithm))
        return bytes(self.private_key.sign(message, _prehashed(signing_algorithm, message)))

    def digest_verify(self: Any, message: bytes, signature: bytes, signing_algorithm: str) -> bool:
        if not _DIGEST.get():
            return bool(verify(self, message, signature, signing_algorithm))
        try:
            self.private_key.public_key().verify(
                signature, message, _prehashed(signing_algorithm, message)
            )
        except Exception:
            return False
        return True

    key_class.sign = digest_sign  # type: ignore[method-assign]
    key_class.verify = digest_verify  # type: ignore[method-assign]
    KmsResponse.sign = _with_message_type(response_sign)  # type: ignore[method-assign,assignment]
    KmsResponse.verify = _with_message_type(response_verify)  # type: ignore[method-assign,assignment]

    def uninstall() -> None:
        key_class.sign = sign  # type: ignore[method-assign]
        key_class.verify = verify  # type: ignore[method-assign]
        KmsResponse.sign = response_sign  # type: ignore[method-assign]
        KmsResponse.verify = response_verify  # type: ignore[method-assign]

    return uninstall
