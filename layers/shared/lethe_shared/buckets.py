"""Checks on the buckets a dataset lives in."""

from __future__ import annotations

from typing import Any

from lethe_shared.errors import BucketVersioningError


def require_versioning(s3_client: Any, buckets: list[str]) -> None:
    """Refuse buckets without versioning: erasure must reach every stored version, and a bucket
    that never had versioning cannot tell Lethe which versions exist (ARCHITECTURE.md, 5)."""
    unversioned = [
        bucket
        for bucket in buckets
        if s3_client.get_bucket_versioning(Bucket=bucket).get("Status") != "Enabled"
    ]
    if unversioned:
        raise BucketVersioningError(
            "bucket(s) without versioning enabled: "
            + ", ".join(unversioned)
            + "; enable versioning before registering a dataset there"
        )
