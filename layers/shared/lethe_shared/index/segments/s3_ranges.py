"""Reading segment files from S3 by exact byte ranges, counting every GET.

`RangeFile` is a read-only, seekable file over one S3 object: each read pyarrow asks for is one
`GetObject` with `Range: bytes=a-b`, except reads inside the file's tail, which one suffix GET
(`bytes=-TAIL_BYTES`) fetched when the footer was first read. Given to
`pyarrow.parquet.ParquetFile` with `pre_buffer=True`, pyarrow coalesces the column chunks of a
row group into one read, so a row group costs one GET.

Footers are cached in memory (`FooterCache`) keyed by S3 key and ETag: segments are immutable,
a rewritten segment has another key. The cache is bounded (least recently used first out) and
holds Parquet metadata only: row-group statistics of `subject_hash` are subject hashes, so the
cache lives in the process's memory and nowhere else.

`ReadCounter` counts GETs and bytes per S3 key, so tests and benchmarks can assert what one
lookup reads.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import ClientError

from lethe_shared.aws.errors import is_s3_not_found
from lethe_shared.errors import LetheError

TAIL_BYTES = 64 * 1024  # the suffix GET that reads a footer (pyarrow's own footer read size)
FOOTER_CACHE_ENTRIES = 512


class SegmentGoneError(LetheError):
    """A segment file the manifest named is gone (compaction or an erasure replaced it since the
    manifest was read): read the manifest again."""


@dataclass
class ReadCounter:
    """GETs and bytes read from S3, in total and per key."""

    gets: int = 0
    bytes: int = 0
    by_key: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, size: int) -> None:
        self.gets += 1
        self.bytes += size
        self.by_key[key] = self.by_key.get(key, 0) + 1

    def reset(self) -> None:
        self.gets, self.bytes = 0, 0
        self.by_key.clear()


class FooterCache:
    """(key, etag) -> (file size, Parquet metadata), bounded, least recently used first out."""

    def __init__(self, entries: int = FOOTER_CACHE_ENTRIES) -> None:
        self._entries = entries
        self._items: OrderedDict[tuple[str, str], tuple[int, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, etag: str) -> tuple[int, Any] | None:
        with self._lock:
            found = self._items.get((key, etag))
            if found is not None:
                self._items.move_to_end((key, etag))
            return found

    def put(self, key: str, etag: str, size: int, metadata: Any) -> None:
        if not etag:
            return  # a file whose ETag the manifest does not know (pending) is not cached
        with self._lock:
            self._items[(key, etag)] = (size, metadata)
            self._items.move_to_end((key, etag))
            while len(self._items) > self._entries:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def _get(s3: Any, bucket: str, key: str, counter: ReadCounter, **range_: str) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = s3.get_object(Bucket=bucket, Key=key, **range_)
    except ClientError as exc:
        if is_s3_not_found(exc):
            raise SegmentGoneError(f"segment file {key} is gone") from exc
        raise
    return answer


class RangeFile(io.RawIOBase):
    """One S3 object as a seekable file; every read outside the fetched tail is a ranged GET."""

    def __init__(
        self, s3: Any, bucket: str, key: str, counter: ReadCounter, size: int | None = None
    ) -> None:
        self._s3, self._bucket, self._key, self._counter = s3, bucket, key, counter
        self._size = size
        self._tail = b""
        self._tail_start = 0
        self._pos = 0

    def _fetch_tail(self) -> None:
        answer = _get(
            self._s3, self._bucket, self._key, self._counter, Range=f"bytes=-{TAIL_BYTES}"
        )
        data = answer["Body"].read()
        self._counter.add(self._key, len(data))
        content_range = str(answer.get("ContentRange", ""))
        total = int(content_range.rpartition("/")[2]) if "/" in content_range else len(data)
        self._size = total
        self._tail, self._tail_start = data, total - len(data)

    @property
    def size(self) -> int:
        if self._size is None:
            self._fetch_tail()
        assert self._size is not None
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._read_range(self._pos, end)
        self._pos = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _read_range(self, start: int, end: int) -> bytes:
        if self._tail and start >= self._tail_start:
            return self._tail[start - self._tail_start : end - self._tail_start]
        answer = _get(
            self._s3, self._bucket, self._key, self._counter, Range=f"bytes={start}-{end - 1}"
        )
        data: bytes = answer["Body"].read()
        self._counter.add(self._key, len(data))
        return data


@dataclass
class SegmentFiles:
    """Reads the files of segments: whole, or a footer and chosen row groups."""

    s3: Any
    bucket: str
    counter: ReadCounter = field(default_factory=ReadCounter)
    footers: FooterCache = field(default_factory=FooterCache)

    def open(self, key: str, etag: str) -> pq.ParquetFile:
        """A ParquetFile over the S3 object: the footer from the cache (by key and ETag) or one
        suffix GET; each row group read later is one ranged GET."""
        cached = self.footers.get(key, etag)
        if cached is not None:
            size, metadata = cached
            source = RangeFile(self.s3, self.bucket, key, self.counter, size)
            return pq.ParquetFile(
                pa.PythonFile(source, mode="r"), metadata=metadata, pre_buffer=True
            )
        source = RangeFile(self.s3, self.bucket, key, self.counter)
        parquet = pq.ParquetFile(pa.PythonFile(source, mode="r"), pre_buffer=True)
        self.footers.put(key, etag, source.size, parquet.metadata)
        return parquet

    def whole(self, key: str) -> bytes:
        """The whole file: one GET (compaction, erasure)."""
        data: bytes = _get(self.s3, self.bucket, key, self.counter)["Body"].read()
        self.counter.add(key, len(data))
        return data

    def put(self, key: str, data: bytes) -> str:
        """PUT a file; its ETag."""
        answer = self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        return str(answer["ETag"]).strip('"')

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)

    def gone(self, key: str) -> bool:
        """Whether the key has no object (HeadObject answers 404)."""
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if is_s3_not_found(exc):
                return True
            raise
        return False
