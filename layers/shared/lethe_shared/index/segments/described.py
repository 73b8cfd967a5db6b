"""Which objects a level-0 segment describes, and the pointers derived from it (`rules.effective`).

A level-0 segment's manifest item carries `described`: the sorted 8-byte digests (SHA-256 of
the object URL, first DIGEST_BYTES bytes) of every object its write describes, entries or not,
packed in one binary attribute (8 bytes an object). Above MAX_INLINE objects (256 KiB of
digests: the item stays well under DynamoDB's 400 KB) the digests go to an S3 file next to the
segment (`<seq>.described`, the same packing) and the item says `described_file`. An erasure
rewrite keeps the old segment's digests whatever rows it drops: they record the write, not the
rows. No subject hash, no object URL in the item (a digest only).

Two URLs of a dataset sharing a digest (about 2**-64 per pair) would make a write of one count
as a write of the other (its rows flagged older): accepted, and stated in docs/INDEX_SEGMENTS.md.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from lethe_shared.index.segments.rules import Pointer, effective

DIGEST_BYTES = 8
MAX_INLINE = 32_768  # objects whose digests the item holds itself


def url_digest(object_url: str) -> bytes:
    return hashlib.sha256(object_url.encode()).digest()[:DIGEST_BYTES]


def pack(urls: Iterable[str]) -> bytes:
    return b"".join(sorted({url_digest(u) for u in urls}))


def unpack(data: bytes) -> frozenset[bytes]:
    return frozenset(data[i : i + DIGEST_BYTES] for i in range(0, len(data), DIGEST_BYTES))


def described_key(entries: str) -> str:
    """The S3 file of a level-0 segment's digests when the item cannot hold them."""
    return entries.removesuffix(".parquet") + ".described"


@dataclass
class DescribedCache:
    """The digests of level-0 segments, by segment key (immutable: a key names one write; an
    erasure rewrite gets a new key), read from the item or from the S3 file (`read`)."""

    read: Callable[[str], bytes]
    limit: int = 4096  # segments held (then the cache starts again)
    _held: dict[str, frozenset[bytes]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def digests(self, key: str, inline: bytes, file_key: str = "") -> frozenset[bytes]:
        with self._lock:
            held = self._held.get(key)
        if held is None:
            held = unpack(self.read(file_key) if file_key else inline)
            with self._lock:
                if len(self._held) >= self.limit:
                    self._held.clear()
                self._held[key] = held
        return held


class CarriedOrigins(Protocol):
    """What retired level-0 segments said (`carried.CarriedPointers`)."""

    def origins(self, digests: Iterable[bytes]) -> Mapping[bytes, str]: ...


@dataclass(frozen=True)
class Level0:
    """The active level-0 segments of a dataset as one listing read them: (origin, digests) of
    each; and the carried pointers of the same listing (what retired ones said), read by digest
    when a pointer is asked for."""

    segments: tuple[tuple[str, frozenset[bytes]], ...] = ()
    carried: CarriedOrigins | None = None

    def of(self, object_url: str, carried: Mapping[bytes, str]) -> tuple[str, ...]:
        """The origins of the segments describing the object, and its carried origin (from
        `carried`: the carried origins `pointers` read for all its objects at once)."""
        digest = url_digest(object_url)
        held = carried.get(digest)
        return tuple(origin for origin, digests in self.segments if digest in digests) + (
            (held,) if held else ()
        )

    def pointer(self, object_url: str, override: Pointer | None) -> Pointer | None:
        return self.pointers({object_url: override}, [object_url])[object_url]

    def pointers(
        self, overrides: Mapping[str, Pointer | None], urls: Iterable[str] | None = None
    ) -> dict[str, Pointer | None]:
        """URL -> effective pointer, for `urls` (every URL of `overrides` when None); the carried
        origins of all of them read at once."""
        wanted = list(overrides.keys() if urls is None else urls)
        carried: Mapping[bytes, str] = {}
        if self.carried is not None and wanted:
            carried = self.carried.origins({url_digest(u) for u in wanted})
        return {u: effective(u, overrides.get(u), self.of(u, carried)) for u in wanted}


def level0_of(
    segments: Iterable[tuple[str, frozenset[bytes]]], carried: CarriedOrigins | None = None
) -> Level0:
    """From (origin, digests) of each active level-0 segment, and the carried pointers."""
    return Level0(tuple(segments), carried)
