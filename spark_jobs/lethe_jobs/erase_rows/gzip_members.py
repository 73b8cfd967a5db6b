"""Gzip as the erase job writes it back (lethe_jobs.erase_rows.text, .parquet).

- gzip stays gzip: the original (first) member header is copied verbatim (name, mtime, OS,
  extra field, comment) and the payload deflated again at the level its XFL byte names. A file
  of several gzip members becomes one member; an uncompressed file stays uncompressed.
- Raw Parquet wrapped in gzip is unwrapped, rewritten and wrapped again.
"""

from __future__ import annotations

import gzip
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.readers import open_payload
from lethe_shared.datasets.document import Dataset

GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


COPY_CHUNK = 1024 * 1024


@contextmanager
def payload_sink(
    target: Path, gzip_header: bytes | None, trailer: Callable[[], bool] = lambda: True
) -> Iterator[Callable[[bytes], object]]:
    """A writer of `target`'s payload: gzip-compressed behind `gzip_header` when given, with
    the member's trailer unless `trailer()` says no when it closes. A target left incomplete by
    an error is removed."""
    try:
        with target.open("wb") as out:
            if gzip_header is None:
                yield out.write
            else:
                member = _GzipMember(out, gzip_header)
                yield member.write
                member.close(trailer=trailer())
    except BaseException:
        target.unlink(missing_ok=True)
        raise


_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10


_LEVEL_OF_XFL = {2: 9, 4: 1}  # RFC 1952: 2 = maximum compression, 4 = fastest


def _zero_terminated(stream: IO[bytes]) -> bytes:
    data = bytearray()
    while (byte := stream.read(1)) and byte != b"\0":
        data += byte
    return bytes(data) + byte


def member_header(path: Path) -> bytes:
    """The first member header of a gzip file, verbatim: magic, method, flags, mtime, XFL, OS,
    and the optional extra field, file name, comment and header CRC."""
    with path.open("rb") as stream:
        head = stream.read(10)
        flags = head[3]
        parts = [head]
        if flags & _FEXTRA:
            size = stream.read(2)
            parts += [size, stream.read(int.from_bytes(size, "little"))]
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag:
                parts.append(_zero_terminated(stream))
        if flags & _FHCRC:
            parts.append(stream.read(2))
    return b"".join(parts)


class _GzipMember:
    """One gzip member behind a given header: raw deflate, then CRC-32 and size (RFC 1952)."""

    def __init__(self, out: IO[bytes], header: bytes) -> None:
        level = _LEVEL_OF_XFL.get(header[8], 6)
        self._out = out
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0
        out.write(header)

    def write(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._out.write(self._deflate.compress(data))

    def close(self, *, trailer: bool = True) -> None:
        """Ends the deflate stream; without `trailer` the member stops there, cut as a
        truncated one is (CRC-32 and size missing)."""
        self._out.write(self._deflate.flush())
        if trailer:
            self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


def gzip_file(source: Path, target: Path, header: bytes) -> None:
    with source.open("rb") as stream, payload_sink(target, header) as write:
        while chunk := stream.read(COPY_CHUNK):
            write(chunk)


def unwrapped_parquet(source: Path, dataset: Dataset, scratch: Path) -> tuple[Path, bytes | None]:
    """A raw Parquet object as a Parquet file, and its gzip header when it was wrapped in gzip
    (decided as readers.open_payload decides: by the magic number, never by the key)."""
    try:
        with open_payload(source, dataset.compression) as payload:
            if not isinstance(payload, gzip.GzipFile):
                return source, None
            local = scratch / "source.parquet"
            with local.open("wb") as out:
                shutil.copyfileobj(payload, out, length=COPY_CHUNK)
    except (*GZIP_ERRORS, UnreadableFileError) as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc}") from exc
    return local, member_header(source)
