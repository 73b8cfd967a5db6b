"""Reading segment files from S3 by exact byte ranges, counting every GET.

`RangeFile` is a read-only, seekable file over one S3 object: each read pyarrow asks for is one
`GetObject` with `Range: bytes=a-b`, except reads inside the file's tail, which one suffix GET
(`bytes=-TAIL_BYTES`) fetched when the footer was first read. Given to
`pyarrow.parquet.ParquetFile` with `pre_buffer=True`, pyarrow coalesces the column chunks of a
row group into one read, so a row group costs one GET.

Footers are cached in memory (`FooterCache`) keyed by S3 key and ETag: segments are immutable,
a rewritten segment has another key. A file no larger than the footer's suffix GET came whole
with it: the cache then keeps its bytes too (at most SMALL_FILES_BYTES in all), and later reads
of it cost no GET (level-0 segments and object tables are mostly that small). The cache is
bounded (least recently used first out): row-group statistics and small files hold subject
hashes, so the cache lives in the process's memory and nowhere else.

`ReadCounter` counts GETs and bytes per S3 key, so tests and benchmarks can assert what one
lookup reads. A lookup reads its segments from several threads at once (`lookup.run_all`): the
counter and the footer cache take a lock; a `RangeFile` belongs to the one read that opened it.
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
SMALL_FILES_BYTES = 32 * 1024 * 1024  # bytes of whole small files the footer cache may keep


class SegmentGoneError(LetheError):
    """A segment file the manifest named is gone (compaction or an erasure replaced it since the
    manifest was read): read the manifest again."""


@dataclass
class ReadCounter:
    """GETs and bytes read from S3, in total and per key (counted from any thread)."""

    gets: int = 0
    bytes: int = 0
    by_key: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, key: str, size: int) -> None:
        with self._lock:
            self.gets += 1
            self.bytes += size
            self.by_key[key] = self.by_key.get(key, 0) + 1

    def reset(self) -> None:
        with self._lock:
            self.gets, self.bytes = 0, 0
            self.by_key.clear()


class FooterCache:
    """(key, etag) -> (file size, Parquet metadata, the whole file when small), bounded in
    entries and in bytes of small files, least recently used first out."""

    def __init__(
        self, entries: int = FOOTER_CACHE_ENTRIES, small_bytes: int = SMALL_FILES_BYTES
    ) -> None:
        self._entries = entries
        self._small_bytes = small_bytes
        self._held = 0
        self._items: OrderedDict[tuple[str, str], tuple[int, Any, bytes | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, etag: str) -> tuple[int, Any] | None:
        found = self.get_whole(key, etag)
        return None if found is None else (found[0], found[1])

    def get_whole(self, key: str, etag: str) -> tuple[int, Any, bytes | None] | None:
        with self._lock:
            found = self._items.get((key, etag))
            if found is not None:
                self._items.move_to_end((key, etag))
            return found

    def put(self, key: str, etag: str, size: int, metadata: Any, data: bytes | None = None) -> None:
        if not etag:
            return  # a file whose ETag the manifest does not know (pending) is not cached
        if data is not None and len(data) > self._small_bytes:
            data = None
        with self._lock:
            old = self._items.pop((key, etag), None)
            if old is not None and old[2] is not None:
                self._held -= len(old[2])
            self._items[(key, etag)] = (size, metadata, data)
            self._held += len(data) if data is not None else 0
            while len(self._items) > self._entries or self._held > self._small_bytes:
                _, dropped = self._items.popitem(last=False)
                self._held -= len(dropped[2]) if dropped[2] is not None else 0

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

    @property
    def whole(self) -> bytes | None:
        """The whole file when its tail read fetched all of it."""
        return self._tail if self._tail and self._tail_start == 0 else None

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
        suffix GET; each row group read later is one ranged GET, none when the file is small
        enough to have come whole with its footer (then its bytes are cached with it)."""
        cached = self.footers.get_whole(key, etag)
        if cached is not None:
            size, metadata, data = cached
            if data is not None:
                return pq.ParquetFile(pa.BufferReader(data), metadata=metadata)
            source = RangeFile(self.s3, self.bucket, key, self.counter, size)
            return pq.ParquetFile(
                pa.PythonFile(source, mode="r"), metadata=metadata, pre_buffer=True
            )
        source = RangeFile(self.s3, self.bucket, key, self.counter)
        whole = source.whole if source.size <= TAIL_BYTES else None
        if whole is not None:
            parquet = pq.ParquetFile(pa.BufferReader(whole))
        else:
            parquet = pq.ParquetFile(pa.PythonFile(source, mode="r"), pre_buffer=True)
        self.footers.put(key, etag, source.size, parquet.metadata, whole)
        return parquet

    def whole(self, key: str, etag: str = "") -> bytes:
        """The whole file: from the cache when it is small and cached (by key and ETag), else
        one GET (compaction, erasure, a dataset's entries)."""
        cached = self.footers.get_whole(key, etag) if etag else None
        if cached is not None and cached[2] is not None:
            return cached[2]
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
