"""Upload built Spark artifacts so that a deploy can be repeated: idempotent and checked.

`lethe deploy` (after `sam deploy`) sends what `make artifacts` built (`lethe artifacts build
--out .build/spark-artifacts`) to ``s3://<ArtifactsBucketName>/spark_jobs/``, where the Glue
jobs, the EMR Serverless job runs and the state machines' pre-flight (`Check Spark Artifacts`)
look for them. Each object carries its SHA-256 as user metadata (``x-amz-meta-sha256``); an
object already there with the same size and digest is left alone ("unchanged"), any other is
uploaded, then read back (HeadObject) and compared, so the command can name for each key what
is in S3: its size and digest.

`required_artifacts` is the one list of what a Spark run of each engine needs, the same list the
state machines' pre-flight checks (tests/unit/test_deploy_preflight.py keeps them equal).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from botocore.exceptions import ClientError

from lethe.artifacts import (
    _CONTENT_TYPES,
    DEPENDENCIES_ZIP,
    PYTHON_ENV_ARCHIVE,
    REQUIREMENTS,
    S3_PREFIX,
    ArtifactError,
)
from lethe_shared.aws.errors import is_s3_not_found
from lethe_shared.aws.s3 import s3_url

SHA256_METADATA: Final = "sha256"  # x-amz-meta-sha256
#: The entry script of each state machine's Spark job.
JOB_SCRIPTS: Final = {
    "ingestion": "ingest.py",
    "erasure": "erase.py",
    "index_backfill": "index.py",
    "index_reconcile": "reconcile.py",
    "index_compaction": "compact.py",
}
#: What a run needs besides its script: the code zip and the engine's Python dependencies.
ENGINE_DEPENDENCIES: Final = {
    "GLUE": (DEPENDENCIES_ZIP, REQUIREMENTS),
    "EMR_SERVERLESS": (DEPENDENCIES_ZIP, PYTHON_ENV_ARCHIVE),
}


def required_artifacts(engine: str) -> list[str]:
    """The file names under spark_jobs/ every Spark run of `engine` needs."""
    if engine not in ENGINE_DEPENDENCIES:
        raise ArtifactError(f"unknown SparkEngine {engine!r}: GLUE or EMR_SERVERLESS")
    return [*sorted(JOB_SCRIPTS.values()), *ENGINE_DEPENDENCIES[engine]]


@dataclass(frozen=True)
class SyncedArtifact:
    """One artifact as it is in S3 after the upload."""

    key: str
    url: str
    size: int
    sha256: str
    action: str  # "uploaded" or "unchanged"

    def line(self) -> str:
        return f"{self.action:<9} {self.url}  {self.size} bytes  sha256 {self.sha256}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        head: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key)
        return head
    except ClientError as exc:
        if is_s3_not_found(exc):
            return None
        raise


def _matches(head: dict[str, Any] | None, size: int, digest: str) -> bool:
    return (
        head is not None
        and int(head.get("ContentLength", -1)) == size
        and head.get("Metadata", {}).get(SHA256_METADATA) == digest
    )


def sync_artifacts(
    s3: Any, bucket: str, paths: Iterable[Path], prefix: str = S3_PREFIX
) -> list[SyncedArtifact]:
    """Upload each file as ``<prefix><file name>`` unless the same bytes are there already;
    every object is read back and compared. Raises ArtifactError naming the key that differs."""
    synced: list[SyncedArtifact] = []
    for path in paths:
        key = f"{prefix}{path.name}"
        size, digest = path.stat().st_size, sha256_of(path)
        action = "unchanged"
        if not _matches(_head(s3, bucket, key), size, digest):
            content_type = _CONTENT_TYPES.get(path.suffix, "application/octet-stream")
            s3.upload_file(
                str(path),
                bucket,
                key,
                ExtraArgs={"ContentType": content_type, "Metadata": {SHA256_METADATA: digest}},
            )
            action = "uploaded"
            if not _matches(_head(s3, bucket, key), size, digest):
                raise ArtifactError(
                    f"{s3_url(bucket, key)} does not hold {path} after the upload "
                    f"({size} bytes, sha256 {digest}): upload again"
                )
        synced.append(SyncedArtifact(key, s3_url(bucket, key), size, digest, action))
    return synced


def missing_in_bucket(
    s3: Any, bucket: str, names: Sequence[str], prefix: str = S3_PREFIX
) -> list[str]:
    """The s3:// URLs of `names` that are not under `prefix` in `bucket` (or are empty), by one
    listing, as the state machines' pre-flight sees them."""
    present: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        present |= {o["Key"] for o in page.get("Contents", []) if int(o.get("Size", 0)) > 0}
    return [s3_url(bucket, prefix + name) for name in names if prefix + name not in present]
