"""The objects a level-0 write describes (lethe_shared.index.segments.described): packing, the
origins of an object's writes, the cache of digests."""

from __future__ import annotations

from lethe_shared.index.segments.described import (
    DIGEST_BYTES,
    DescribedCache,
    level0_of,
    pack,
    unpack,
    url_digest,
)
from lethe_shared.index.segments.rules import Pointer

S1, S2, S3 = (
    "00000000000000000001-aaaaaaaa",
    "00000000000000000002-bbbbbbbb",
    "00000000000000000003-cccccccc",
)
A, B, C = (f"s3://lake/ds/{n}.parquet" for n in "abc")


def test_digests_are_packed_sorted_once_each_and_unpacked_back() -> None:
    packed = pack([B, A, B])
    assert len(packed) == 2 * DIGEST_BYTES
    assert packed == b"".join(sorted([url_digest(A), url_digest(B)]))
    assert unpack(packed) == {url_digest(A), url_digest(B)}
    assert unpack(b"") == frozenset()
    assert url_digest(A) != url_digest(C)
    assert A.encode() not in packed  # a digest, never the URL


def test_an_object_gets_the_origins_of_the_writes_describing_it_and_its_pointer() -> None:
    level0 = level0_of([(S1, unpack(pack([A, B]))), (S3, unpack(pack([A]))), (S2, unpack(b""))])
    assert sorted(level0.of(A, {})) == [S1, S3]
    assert level0.of(B, {}) == (S1,)
    assert level0.of(C, {}) == ()
    assert level0.of(C, {url_digest(C): S2}) == (S2,)  # its carried origin (a retired write)
    pointers = level0.pointers({A: None, C: None}, [A, B, C])
    assert pointers[C] is None
    found_a, found_b = pointers[A], pointers[B]
    assert found_a is not None
    assert found_a.current == S3
    assert found_b is not None
    assert found_b.current == S1
    removed = Pointer(B, current="", floor=S1 + "~", rev=2)
    assert level0.pointer(B, removed) == removed  # its only write is below the floor


def test_digests_read_from_a_file_are_read_once_per_segment() -> None:
    reads: list[str] = []

    def read(key: str) -> bytes:
        reads.append(key)
        return pack([A])

    cache = DescribedCache(read, limit=2)
    assert cache.digests("seg-1", b"", "seg-1.described") == {url_digest(A)}
    assert cache.digests("seg-1", b"", "seg-1.described") == {url_digest(A)}
    assert reads == ["seg-1.described"]
    assert cache.digests("seg-2", pack([B])) == {url_digest(B)}  # inline: no read
    assert cache.digests("seg-3", pack([C])) == {url_digest(C)}  # over the limit: starts again
    assert cache.digests("seg-1", b"", "seg-1.described") == {url_digest(A)}
    assert reads == ["seg-1.described", "seg-1.described"]
