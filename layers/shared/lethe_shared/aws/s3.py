"""S3 objects and their versions: the one module that heads, lists and deletes them.

Everything Lethe asks S3 about an object goes through here, so that three questions have one
answer each:

- *is it there?* `S3ObjectStore.head` returns None for every "not found" S3 can answer
  (`lethe_shared.aws.errors.is_s3_not_found`), and raises anything else;
- *which versions does this key have?* `S3ObjectStore.versions_of` lists every version and delete
  marker of exactly that key, never of other keys that share it as a prefix (S3 lists by
  prefix: `reviews/a.csv` would also return `reviews/a.csv.bak`);
- *what does the key hold now?* `key_state` over those versions: a current object, hidden by a
  delete marker while older versions still hold data, or gone.

A store built with a `WriteLog` (a Lethe job's, `lethe_shared.catalog.writes_ledger`) says around
every PUT that it writes: an intent before, the version it made (or none) after. That ledger,
not the `lethe-producer` metadata, is how the rest of Lethe knows its own writes: metadata is
copied by `aws s3 cp` and CopyObject and can be set by any producer, so it is written for the
humans who read an object's headers and trusted by nothing.

Listing uses boto3's paginators. URLs of objects are `s3://<bucket>/<key>` (`s3_url`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from botocore.exceptions import ClientError

from lethe_shared.aws.errors import is_s3_condition_failed, is_s3_not_found
from lethe_shared.errors import BucketVersioningError

NULL_VERSION = "null"  # the version id S3 gives objects written while versioning was off
# S3 user metadata (x-amz-meta-lethe-producer): which Lethe job wrote a version, for people who
# read its headers. Never trusted (a copy carries it, a producer can set it): Lethe knows its own
# writes from the writes ledger alone (lethe_shared.catalog.writes_ledger).
PRODUCER_METADATA = "lethe-producer"
CORRELATION_METADATA = "lethe-correlation-id"  # the run of a Lethe job that wrote the version
ERASURE_METADATA = "lethe-erasure"  # the erasure request whose job wrote the version
# rows that request's erase job removed in writing the version (a re-run after a crash reads it)
ERASED_ROWS_METADATA = "lethe-erased-rows"
CHUNK_BYTES = 1024 * 1024

# Headers of a version that a rewrite of it keeps (besides metadata, tags, storage class, SSE).
_KEPT_HEADERS = (
    "ContentType",
    "ContentEncoding",
    "ContentDisposition",
    "ContentLanguage",
    "CacheControl",
    "Expires",
    "WebsiteRedirectLocation",
    "ServerSideEncryption",
    "BucketKeyEnabled",
)


def s3_url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def split_s3_url(url: str) -> tuple[str, str]:
    """("bucket", "key") of an `s3://bucket/key` URL. Raises ValueError for anything else."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://") :].partition("/")
    if not bucket or not key:
        raise ValueError(f"not an S3 object URL: {url!r}")
    return bucket, key


def plain_etag(etag: Any) -> str:
    """An ETag without the quotes S3 puts around it, as the catalog and the index store it."""
    return str(etag or "").strip('"')


def version_args(version_id: str | None) -> dict[str, str]:
    """`VersionId` for a request on one exact version; none for "null" or None (the current
    version, or the only version of an object written without versioning)."""
    return {"VersionId": version_id} if version_id and version_id != NULL_VERSION else {}


def get_version(
    client: Any,
    bucket: str,
    key: str,
    version_id: str | None,
    *,
    byte_range: tuple[int, int] | None = None,
) -> Any:
    """GET one exact version of an object (`version_args`: the current one for None or "null"),
    whole or only `byte_range`: its first and last byte, both included, as an HTTP Range names
    them. The response as boto3 gives it (its `Body` a stream). The one place a versioned GET is
    spelled; a ClientError raises as S3 answered it (whether it says "not found" is for
    `lethe_shared.aws.errors.is_s3_not_found` to decide)."""
    extra = version_args(version_id)
    if byte_range is not None:
        first, last = byte_range
        extra = {"Range": f"bytes={first}-{last}", **extra}
    return client.get_object(Bucket=bucket, Key=key, **extra)


@dataclass(frozen=True)
class ObjectHead:
    """One object version as HEAD (or GET, or PUT) reports it."""

    version_id: str
    etag: str
    size: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def producer(self) -> str | None:
        """What the version's `lethe-producer` metadata claims, for display only: a copy of a
        Lethe write carries it and any producer can set it, so no decision rests on it (the
        writes ledger says which versions Lethe wrote)."""
        return self.metadata.get(PRODUCER_METADATA)

    @property
    def story(self) -> str | None:
        """What `lethe trace` follows from this version: the erasure request that rewrote it, or
        the correlation id of the job run that wrote it; None for a producer's own upload."""
        return self.metadata.get(ERASURE_METADATA) or self.metadata.get(CORRELATION_METADATA)

    @classmethod
    def from_response(
        cls, response: Mapping[str, Any], version_id: str | None = None
    ) -> ObjectHead:
        return cls(
            version_id=str(response.get("VersionId") or version_id or NULL_VERSION),
            etag=plain_etag(response.get("ETag")),
            size=int(response.get("ContentLength") or 0),
            metadata=dict(response.get("Metadata") or {}),
        )


@dataclass(frozen=True)
class ObjectVersion:
    """One version or delete marker of a key, as ListObjectVersions reports it."""

    key: str
    version_id: str
    is_latest: bool
    delete_marker: bool = False
    etag: str = ""
    size: int = 0
    last_modified: datetime | None = None
    storage_class: str = ""  # STANDARD, GLACIER, DEEP_ARCHIVE, ... ("" for a delete marker)


class KeyState(StrEnum):
    """What a key holds, from all its versions."""

    CURRENT = "current"  # its latest version is an object
    HIDDEN = "hidden"  # its latest version is a delete marker; older versions still hold data
    GONE = "gone"  # no version holds data (nothing at all, or delete markers only)


def key_state(versions: Iterable[ObjectVersion]) -> KeyState:
    """The one rule for a key's state, used by every path that reacts to deletes: the index
    keeps a hidden key's entries (flagged `deleted`, erasure still needs them) and removes a
    gone key's entries (docs/INDEX.md)."""
    listed = list(versions)
    if any(v.is_latest and not v.delete_marker for v in listed):
        return KeyState.CURRENT
    if any(not v.delete_marker for v in listed):
        return KeyState.HIDDEN
    return KeyState.GONE


def current_of(versions: Iterable[ObjectVersion]) -> ObjectVersion | None:
    """The latest version or delete marker among `versions`, None when there is none."""
    return next((v for v in versions if v.is_latest), None)


def _newest_first(version: ObjectVersion) -> tuple[bool, float]:
    stamp = version.last_modified.timestamp() if version.last_modified else 0.0
    return (not version.is_latest, -stamp)


class ObjectStore(Protocol):
    """The S3 questions Lethe asks about objects and their versions (S3ObjectStore on AWS)."""

    def head(self, bucket: str, key: str, version_id: str | None = None) -> ObjectHead | None:
        """The current version (or the exact one); None when S3 has no such object version."""

    def versions_of(self, bucket: str, key: str) -> list[ObjectVersion]:
        """Every version and delete marker of exactly `key`, newest first."""

    def list_versions(self, bucket: str, prefix: str) -> Iterator[ObjectVersion]:
        """Every version and delete marker of every key under `prefix`."""

    def read_bytes(self, bucket: str, key: str, version_id: str | None = None) -> bytes | None:
        """The whole body of a (small) object version; None when it is not there."""

    def download(self, bucket: str, key: str, version_id: str, target: Path) -> ObjectHead | None:
        """Stream one exact version to a local file; None when it is not there."""


class WriteLog(Protocol):
    """Where a Lethe job says, around each PUT of a store built with it, what it writes
    (`lethe_shared.catalog.writes_ledger.LedgerWriter`). The object events path and the index
    job know Lethe's own versions from it alone."""

    def intend(self, bucket: str, key: str, size: int) -> str:
        """Before the PUT (`size` bytes): open an intent on the key; returns its token."""

    def written(self, bucket: str, key: str, token: str, version_id: str) -> None:
        """After the PUT: record the version it made, then close the intent."""

    def abandoned(self, bucket: str, key: str, token: str) -> None:
        """The PUT made no version (a failed condition) or failed: close the intent."""


class S3ObjectStore:
    """ObjectStore on a boto3 S3 client (AWS, or the local cloud's endpoint). With `writes`
    (a Lethe job's WriteLog), every PUT it makes is recorded there: an intent before, the
    version after."""

    def __init__(self, client: Any, writes: WriteLog | None = None) -> None:
        self.client = client  # a boto3 S3 client
        self.writes = writes

    def _put(
        self, bucket: str, key: str, size: int, put: Callable[[], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Run one PUT (`put`: its response, None when its condition failed) between the write
        log's intent and its record of the version made: the intent is open before S3 can have
        the version (so an event about it that arrives first waits), the version is recorded
        before the intent closes."""
        if self.writes is None:
            return put()
        token = self.writes.intend(bucket, key, size)
        response: dict[str, Any] | None = None
        try:
            response = put()
        finally:
            if response is None:  # a failed condition, or an error: no version of ours
                self.writes.abandoned(bucket, key, token)
        if response is not None:
            version = str(response.get("VersionId") or NULL_VERSION)
            self.writes.written(bucket, key, token, version)
        return response

    def head(self, bucket: str, key: str, version_id: str | None = None) -> ObjectHead | None:
        try:
            response = self.client.head_object(Bucket=bucket, Key=key, **version_args(version_id))
        except ClientError as exc:
            if is_s3_not_found(exc, version_id=version_id):
                return None
            raise
        return ObjectHead.from_response(response, version_id)

    def list_versions(self, bucket: str, prefix: str) -> Iterator[ObjectVersion]:
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Versions", []):
                yield ObjectVersion(
                    key=item["Key"],
                    version_id=str(item.get("VersionId") or NULL_VERSION),
                    is_latest=bool(item.get("IsLatest")),
                    etag=plain_etag(item.get("ETag")),
                    size=int(item.get("Size") or 0),
                    last_modified=item.get("LastModified"),
                    storage_class=str(item.get("StorageClass") or ""),
                )
            for item in page.get("DeleteMarkers", []):
                yield ObjectVersion(
                    key=item["Key"],
                    version_id=str(item.get("VersionId") or NULL_VERSION),
                    is_latest=bool(item.get("IsLatest")),
                    delete_marker=True,
                    last_modified=item.get("LastModified"),
                )

    def versions_of(self, bucket: str, key: str) -> list[ObjectVersion]:
        found = [v for v in self.list_versions(bucket, key) if v.key == key]
        # Versions and delete markers come in two lists: merge them, the latest first.
        return sorted(found, key=_newest_first)

    def _get(self, bucket: str, key: str, version_id: str | None) -> dict[str, Any] | None:
        try:
            return dict(get_version(self.client, bucket, key, version_id))
        except ClientError as exc:
            if is_s3_not_found(exc):
                return None
            raise

    def read_bytes(self, bucket: str, key: str, version_id: str | None = None) -> bytes | None:
        response = self._get(bucket, key, version_id)
        return None if response is None else bytes(response["Body"].read())

    def download(self, bucket: str, key: str, version_id: str, target: Path) -> ObjectHead | None:
        """Stream one exact object version ("null": the unversioned one) to `target`, never
        holding it whole in memory. None when that version is not there."""
        response = self._get(bucket, key, version_id)
        if response is None:
            return None
        with target.open("wb") as out:
            for chunk in response["Body"].iter_chunks(CHUNK_BYTES):
                out.write(chunk)
        return ObjectHead.from_response(response, version_id)

    def upload(
        self,
        bucket: str,
        key: str,
        source: Path,
        *,
        content_type: str,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectHead:
        """Upload a local file (streamed); returns the new version and its ETag."""
        size = source.stat().st_size

        def put() -> dict[str, Any]:
            with source.open("rb") as body:
                return dict(
                    self.client.put_object(
                        Bucket=bucket,
                        Key=key,
                        Body=body,
                        ContentType=content_type,
                        Metadata=dict(metadata or {}),
                    )
                )

        response = self._put(bucket, key, size, put) or {}
        return ObjectHead.from_response(
            {**response, "ContentLength": size, "Metadata": metadata or {}}
        )

    def put_bytes(
        self,
        bucket: str,
        key: str,
        body: bytes,
        *,
        content_type: str,
        metadata: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> ObjectHead:
        """Write a small document (a report, a manifest) as a new version. `extra`: more
        PutObject arguments (an erasure document's Object Lock retention:
        lethe_shared.erasure.evidence.put_arguments)."""

        def put() -> dict[str, Any]:
            return dict(
                self.client.put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=body,
                    ContentType=content_type,
                    Metadata=dict(metadata or {}),
                    **dict(extra or {}),
                )
            )

        response = self._put(bucket, key, len(body), put) or {}
        return ObjectHead.from_response(
            {**response, "ContentLength": len(body), "Metadata": dict(metadata or {})}
        )

    def replace_version(
        self,
        bucket: str,
        key: str,
        source: Path,
        *,
        like_version: str,
        if_match: str,
        metadata: Mapping[str, str],
    ) -> ObjectHead | None:
        """Write `source` as the key's new version, only if the key's current version still has
        ETag `if_match` (an S3 conditional write): a version a producer wrote meanwhile is never
        overwritten. The new version keeps `like_version`'s user metadata (with `metadata`
        added), tags, content headers, storage class and server-side encryption. None when the
        condition failed (re-read and try again), and when `like_version` itself is gone: it was
        the current version when read, so a writer (another erasure purging what it rewrote) has
        replaced it and the condition cannot hold either."""
        try:
            head = self.client.head_object(Bucket=bucket, Key=key, **version_args(like_version))
            tags = self.client.get_object_tagging(
                Bucket=bucket, Key=key, **version_args(like_version)
            ).get("TagSet", [])
        except ClientError as exc:
            if is_s3_not_found(exc, version_id=like_version):
                return None
            raise
        params: dict[str, Any] = {
            name: head[name] for name in _KEPT_HEADERS if head.get(name) not in (None, "")
        }
        if head.get("ServerSideEncryption") == "aws:kms" and head.get("SSEKMSKeyId"):
            params["SSEKMSKeyId"] = head["SSEKMSKeyId"]
        if head.get("StorageClass") not in (None, "STANDARD"):
            params["StorageClass"] = head["StorageClass"]
        if tags:
            params["Tagging"] = urlencode([(t["Key"], t["Value"]) for t in tags])
        kept = {**dict(head.get("Metadata") or {}), **metadata}
        size = source.stat().st_size

        def put() -> dict[str, Any] | None:
            try:
                with source.open("rb") as body:
                    return dict(
                        self.client.put_object(
                            Bucket=bucket,
                            Key=key,
                            Body=body,
                            IfMatch=f'"{if_match}"',
                            Metadata=kept,
                            **params,
                        )
                    )
            except ClientError as exc:
                if is_s3_condition_failed(exc):
                    return None
                raise

        response = self._put(bucket, key, size, put)
        if response is None:
            return None
        return ObjectHead.from_response({**response, "ContentLength": size, "Metadata": kept})

    def delete_current(self, bucket: str, key: str) -> bool:
        """Delete the current version of an object (a delete marker in a versioned bucket). An
        object that is not there is left alone, so that no stray delete markers pile up."""
        if self.head(bucket, key) is None:
            return False
        self.client.delete_object(Bucket=bucket, Key=key)
        return True

    def delete_versions(self, bucket: str, versions: Iterable[ObjectVersion]) -> int:
        """Permanently delete these exact versions (objects and delete markers)."""
        deleted = 0
        for version in versions:
            self.client.delete_object(Bucket=bucket, Key=version.key, VersionId=version.version_id)
            deleted += 1
        return deleted

    def delete_older_versions(self, bucket: str, key: str, keep_version_id: str) -> int:
        """Delete every version and delete marker of exactly `key` but `keep_version_id`."""
        older = [v for v in self.versions_of(bucket, key) if v.version_id != keep_version_id]
        return self.delete_versions(bucket, older)

    def require_versioning(self, buckets: Iterable[str]) -> None:
        """Refuse buckets without versioning: erasure must reach every stored version, and a
        bucket that never had versioning cannot tell Lethe which versions exist
        (ARCHITECTURE.md, 5). Raises BucketVersioningError naming every such bucket."""
        unversioned = [
            bucket
            for bucket in buckets
            if self.client.get_bucket_versioning(Bucket=bucket).get("Status") != "Enabled"
        ]
        if unversioned:
            raise BucketVersioningError(
                "bucket(s) without versioning enabled: "
                + ", ".join(unversioned)
                + "; enable versioning before registering a dataset there"
            )
