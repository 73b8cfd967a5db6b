"""A raw object's bytes: decompressed when gzip is declared or detected (by the magic number,
never by the key), and a truncated gzip stream read up to its cut."""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers.records import TRUNCATED
from lethe_shared.datasets.document import Compression

GZIP_MAGIC = b"\x1f\x8b"


GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(2) == GZIP_MAGIC


@contextmanager
def open_payload(path: Path, compression: Compression) -> Iterator[IO[bytes]]:
    """The object's bytes, decompressed when gzip is declared or (for "auto") detected."""
    gzipped = is_gzip(path)
    if compression is Compression.GZIP and not gzipped:
        raise UnreadableFileError(
            "compression is declared as gzip but the object is not gzip (no 1f 8b magic number)"
        )
    if gzipped and compression is not Compression.NONE:
        with gzip.open(path, "rb") as stream:
            yield cast(IO[bytes], stream)
    else:
        with path.open("rb") as stream:
            yield stream


class _SalvagingGzip(io.RawIOBase):
    """A gzip stream that ends where a truncated stream is cut instead of raising: every byte
    decompressed before the cut is read (deflate output is a prefix of the original; the CRC
    that would confirm it is in the missing trailer), and `truncated` says why it ended. A
    stream that is not deflate still raises."""

    def __init__(self, stream: gzip.GzipFile) -> None:
        self._stream = stream
        self.truncated: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.truncated is not None:
            return 0
        try:
            data = self._stream.read1(len(buffer))  # one read: no data held when it raises
        except EOFError as exc:
            self.truncated = f"{TRUNCATED}: {exc}"
            return 0
        buffer[: len(data)] = data
        return len(data)


def salvaging(payload: IO[bytes]) -> IO[bytes]:
    """`payload` read to the cut when it is a truncated gzip stream (see `cut_of`); any other
    payload as it is."""
    if not isinstance(payload, gzip.GzipFile):
        return payload
    return cast(IO[bytes], io.BufferedReader(_SalvagingGzip(payload)))


def cut_of(payload: IO[bytes]) -> str | None:
    """Why a `salvaging` payload ended early (a truncated gzip stream), once it was read to its
    end; None when it ended as a stream should."""
    raw = getattr(payload, "raw", None)
    return raw.truncated if isinstance(raw, _SalvagingGzip) else None


def is_salvaging(payload: IO[bytes]) -> bool:
    return isinstance(getattr(payload, "raw", None), _SalvagingGzip)


def refuse_cut(payload: IO[bytes], where: str) -> None:
    """Raises UnreadableFileError when `payload` is a gzip stream cut `where` (no record)."""
    cut = cut_of(payload)
    if cut is not None:
        raise UnreadableFileError(f"{cut} ({where})")
