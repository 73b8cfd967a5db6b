"""What a subject index calls a subject in its by-object answers (issue 20, 48-bit prefixes).

`subjects_of`, `entry_states(url)` without subjects and `entries_of_dataset` name each subject
by its stored key: the full keyed hash (64 hex digits) with `DynamoSubjectIndex` and with a
segment dataset of full digests, its first 6 bytes as 12 hex digits with a segment dataset of
48-bit prefixes (`hash_bytes=6`, lethe_shared.index.segments). A caller that compares those
answers with full hashes it computed (reindexing's stale set, reconcile's drift, the erasure's
index update) maps its hashes with `ids_of(index, dataset_id)` first.

Duck-typed: an index with a `manifest.hash_width(dataset_id)` (the segment store) says its
width per dataset (the width the dataset was first written with); any other index stores full
hashes. No pyarrow import: the DynamoDB path stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FULL_BYTES = 32
PREFIX_BYTES = 6


def key_width(index: Any, dataset_id: str) -> int:
    """The dataset's key width in bytes: 32 (full digests) or 6 (48-bit prefixes)."""
    manifest = getattr(index, "manifest", None)
    width = getattr(manifest, "hash_width", None)
    return int(width(dataset_id)) if callable(width) else FULL_BYTES


def subject_id(subject_hash: str, width: int) -> str:
    """A full hash (or an id already of this width) as the index names it: its first `width`
    bytes as lower-case hex (the hash itself with full digests)."""
    if width >= FULL_BYTES or len(subject_hash) == 2 * width:
        return subject_hash
    return bytes.fromhex(subject_hash)[:width].hex()


def ids_of(index: Any, dataset_id: str) -> Callable[[str], str]:
    """Full hash -> what `index`'s by-object answers call that subject in `dataset_id`."""
    width = key_width(index, dataset_id)
    if width >= FULL_BYTES:
        return lambda h: h
    return lambda h: subject_id(h, width)


def is_prefix_dataset(index: Any, dataset_id: str) -> bool:
    return key_width(index, dataset_id) < FULL_BYTES
