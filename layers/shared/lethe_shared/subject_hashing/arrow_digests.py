"""Hashing a group of objects' subjects at once, with Arrow: the last step of the Arrow path.

An object's subjects arrive as `SubjectTexts` (`arrow.table_subjects`: the canonical text of each
subject as UTF-8 bytes, and a code per row naming its text). `hash_subjects` hashes each distinct
text of a group of objects once (HMAC-SHA256, `keys.hmac_sha256`: the key's pads hashed once):
the texts of all objects are concatenated and dictionary-encoded by Arrow, the distinct ones
hashed and hex-encoded at once, and each object's rows mapped to them with Arrow takes. Each
row gets its subject's id and a sort key (the digest's first 8 bytes as an integer), from which
the index (`lethe_shared.index.arrow_entries`) cuts entries and the erase job matches rows.

Imports pyarrow's compute kernels only (no numpy: the indexer Lambda's layer has pyarrow alone).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.subject_hashing.keys import hmac_sha256


@dataclass(frozen=True)
class SubjectTexts:
    """One object's subjects before hashing: the canonical text of each subject as UTF-8 bytes
    (a binary array) and a code per row (null: the row is nobody's) that names its text; or,
    without codes, each row's text (null: nobody's). Two codes share a text only when
    `distinct` is false (an integer and a string `1` in one union column): one subject."""

    codes: pa.Array | None
    texts: pa.Array
    distinct: bool

    @property
    def rows(self) -> int:
        return len(self.texts if self.codes is None else self.codes)


NO_TEXTS = pa.array([], pa.binary())
_DIGEST = pa.binary(32)
_HEX_OFFSETS: list[pa.Array] = [pa.array([0], pa.int32())]  # 0, 64, 128, ...: grown on demand


def _hex_offsets(count: int) -> pa.Buffer:
    """The offsets of `count` strings of 64 characters each, end to end (an int32 buffer)."""
    if len(_HEX_OFFSETS[0]) <= count:
        size = max(count + 1, 2 * len(_HEX_OFFSETS[0]))
        _HEX_OFFSETS[0] = pa.array(range(0, 64 * size, 64), pa.int32())
    return _HEX_OFFSETS[0].buffers()[1]


# Byte indexes that turn each 32-byte digest's first 8 bytes into a little-endian uint64 whose
# numeric order is the digests' (big-endian) order: 7, 6, ..., 0, 39, 38, ..., 32, ...
_PREFIX_BYTES: list[pa.Array] = [pa.array([], pa.int32())]


def _joined(texts: Sequence[pa.Array]) -> pa.Array:
    """The texts of several objects as one array (large binary unless all fit in binary)."""
    if len(texts) == 1:
        return texts[0]
    if all(t.type == pa.binary() for t in texts) and sum(t.nbytes for t in texts) < 2**30:
        return pa.concat_arrays(texts)
    return pa.concat_arrays([t.cast(pa.large_binary()) for t in texts])


@dataclass(frozen=True)
class HashedSubjects:
    """A group's subjects hashed: `hashes` (hex) of the group's distinct subjects, and for each
    object each row's subject (`ids`, an index into `hashes`; null: nobody's) and its sort key
    (`row_keys`: an unsigned integer per subject, ascending as the hashes are). `ascending`:
    one object holds every subject, `hashes` are ascending and each row's key is its id."""

    hashes: Sequence[str]
    ids: list[pa.Array]
    row_keys: list[pa.Array]
    ascending: bool


def _prefixes(found: pa.FixedSizeBinaryArray) -> pa.Array | None:
    """An unsigned integer per digest, its first 8 bytes read big-endian: their order is the
    digests' (their hex's) where they differ, and Arrow sorts integers several times faster
    than 32-byte values. None on a big-endian machine."""
    if sys.byteorder != "little":
        return None
    count = len(found)
    if len(_PREFIX_BYTES[0]) < 8 * count:
        size = max(count, 2 * len(_PREFIX_BYTES[0]) // 8)
        indexes = [32 * (i >> 3) + 7 - (i & 7) for i in range(8 * size)]
        _PREFIX_BYTES[0] = pa.array(indexes, pa.int32())
    raw = pa.Array.from_buffers(pa.uint8(), 32 * count, [None, found.buffers()[1]])
    prefixes = pc.take(raw, _PREFIX_BYTES[0].slice(0, 8 * count))
    return pa.Array.from_buffers(pa.uint64(), count, [None, prefixes.buffers()[1]])


def _ascending(found: pa.FixedSizeBinaryArray, prefixes: pa.Array | None) -> pa.Array:
    """The indexes that sort distinct digests ascending: by their prefixes unless two share
    one, then by the whole digests."""
    if prefixes is not None:
        order = pc.sort_indices(prefixes)
        ordered = pc.take(prefixes, order)
        count = len(ordered)
        if count < 2 or not pc.any(pc.equal(ordered.slice(1), ordered.slice(0, count - 1))).as_py():
            return order
    return pc.sort_indices(found)


def _hex(found: pa.FixedSizeBinaryArray) -> list[str]:
    """The hex of each digest, encoded at once."""
    count = len(found)
    start = 32 * found.offset
    data = memoryview(found.buffers()[1])[start : start + 32 * count].hex().encode()
    hexed = pa.Array.from_buffers(
        pa.string(), count, [None, _hex_offsets(count), pa.py_buffer(data)]
    )
    return hexed.to_pylist()  # type: ignore[no-any-return]


def hash_subjects(objects: Sequence[SubjectTexts], key: bytes) -> HashedSubjects:
    """Each distinct text of the group hashed once, however many objects hold it: the texts
    of all objects are concatenated and dictionary-encoded by Arrow (equal texts, one
    subject), the distinct ones hashed and hex-encoded at once, and each object's rows mapped
    to them with Arrow takes. Rows are keyed by their digest's first 8 bytes (`_prefixes`;
    their rank when two subjects share those); for a single object (`entry_batch`), by their
    subject's rank, a small range that Arrow sorts by counting."""
    held = [i for i, o in enumerate(objects) if len(o.texts)]
    nobody = [pa.nulls(o.rows, pa.int32()) for o in objects]
    if not held:
        return HashedSubjects([], nobody, nobody, True)
    alone = objects[held[0]]
    if len(held) == 1 and alone.codes is not None and alone.distinct:
        distinct, ids = alone.texts, None
    else:
        encoded = pc.dictionary_encode(_joined([objects[i].texts for i in held]))
        distinct, ids = encoded.dictionary, encoded.indices
    digests = hmac_sha256(key)(distinct.to_pylist())
    count = len(digests)
    found = pa.FixedSizeBinaryArray.from_buffers(
        _DIGEST, count, [None, pa.py_buffer(b"".join(digests))]
    )
    prefixes = _prefixes(found)
    if len(held) == 1:
        order = _ascending(found, prefixes)
        keys = pc.sort_indices(order)  # the inverse permutation: each subject's rank
        hashes = _hex(pc.take(found, order))
    else:
        keys = prefixes
        if keys is None or len(pc.unique(keys)) < count:
            keys = pc.sort_indices(_ascending(found, None))
        hashes = _hex(found)
    rows, row_keys = list(nobody), list(nobody)
    text_keys = None if ids is None else pc.take(keys, ids)  # of every text of the group
    start = 0
    for i in held:
        found_i = objects[i]
        size = len(found_i.texts)
        if ids is None or text_keys is None:
            rows[i], row_keys[i] = found_i.codes, pc.take(keys, found_i.codes)
        elif found_i.codes is None:  # a text per row
            rows[i], row_keys[i] = ids.slice(start, size), text_keys.slice(start, size)
        else:
            rows[i] = pc.take(ids.slice(start, size), found_i.codes)
            row_keys[i] = pc.take(text_keys.slice(start, size), found_i.codes)
        start += size
    if len(held) == 1:
        rows[held[0]] = row_keys[held[0]]
    return HashedSubjects(hashes, rows, row_keys, len(held) == 1)
