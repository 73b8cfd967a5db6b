"""The subject hash key's fingerprint (lethe_shared.subject_hashing.keys.key_fingerprint): a
short, non-reversible name of the key, never the key nor any subject's hash."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32


def test_the_fingerprint_is_16_hex_digits_of_an_hmac_of_a_fixed_message() -> None:
    expected = hmac.new(KEY, b"\xfflethe key fingerprint v1", hashlib.sha256).hexdigest()[:16]

    assert key_fingerprint(KEY) == expected
    assert len(key_fingerprint(KEY)) == 16
    assert int(key_fingerprint(KEY), 16) >= 0


def test_the_fingerprint_is_stable_and_differs_per_key() -> None:
    other = b"k" * 31 + b"l"

    assert key_fingerprint(KEY) == key_fingerprint(bytes(KEY))
    assert key_fingerprint(other) != key_fingerprint(KEY)


def test_the_fingerprint_shows_nothing_of_the_key_or_of_a_subject_hash() -> None:
    key = b"0123456789abcdef" * 4  # a key of hex characters: no part of it may show
    fingerprint = key_fingerprint(key)

    assert fingerprint not in key.decode()
    assert key.decode()[:16] != fingerprint
    assert fingerprint != hashlib.sha256(key).hexdigest()[:16]  # not an unkeyed hash of it
    # no subject id, not even the fingerprint's own message as text, hashes to it
    assert not hash_of_id(key, "lethe key fingerprint v1").startswith(fingerprint)
    assert not hash_of_id(key, "\xfflethe key fingerprint v1").startswith(fingerprint)


def test_a_short_key_is_refused_as_for_hashing() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        key_fingerprint(b"short")
