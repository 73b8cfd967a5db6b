"""How an object is named where a person may see it: its *shown* key.

An S3 key can hold a subject id: a dataset partitioned by one of its subject columns puts the
id into every lake key (`<dataset>/user_id=u-123/part-<h>.parquet`), and a raw key is whatever
the producer chose. Certificates, audit records, erasure logs and erasure errors therefore name
objects by their shown key, never by the real one:

- a **lake key** (Lethe's own layout: `<dataset>/<p>=<v>/.../part-<16 hex>.parquet`, or
  `<dataset>/_quarantine/<16 hex>.jsonl|.file.json`) keeps its dataset, its layout and every
  partition segment of a column that is not a subject column (dates, countries); the value of a
  subject column's segment becomes `~` and a keyed hash: `user_id=~3f2a9c0e1b7d4a55`. When the
  dataset is not registered (any more) every partition value is hashed: nothing is known to be
  safe.
- a dataset's prefix (`<dataset>/`, a gap of a whole dataset) is shown as it is;
- **any other key** (raw uploads, a key that does not follow the lake layout) keeps only its
  first segment (the dataset's prefix) and a known data file extension; the rest becomes `~`
  and a keyed hash of the whole key: `orders/2026/11/u-123.csv` is shown `orders/~9b1c....csv`.

The hash is HMAC-SHA256 under the subject hash key (`keys.py`) of a message that starts with
the byte 0xFE (never in UTF-8, so no subject hash and no key fingerprint, whose messages start
with UTF-8 text or 0xFF, is ever equal to one) followed by the text hashed (the segment
`name=value` as the key spells it, or the whole key), cut to 16 hex digits. It is one-way for
whoever lacks the key; whoever holds it (`lethe keys shown`) computes the shown form of a real
key and so matches a shown key with the object. A key rotation changes shown keys: those of
earlier certificates are matched with the old key only.

Real keys stay where the jobs and the operators need them: the frozen report (manifest), the
erase results, verification and progress documents, the object catalog, the subject index, the
run manifests and S3's access logs (docs/SECURITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from lethe_shared.subject_hashing.keys import check_key

SHOWN_HEX = 16
MARK = "~"
_MESSAGE_PREFIX = b"\xfelethe object key v1\x00"
_LAKE_FILE = re.compile(r"part-[0-9a-f]{16}\.parquet")
_QUARANTINE_FILE = re.compile(r"[0-9a-f]{16}\.(jsonl|file\.json)")
QUARANTINE_SEGMENT = "_quarantine"
# extensions a raw file of a dataset may carry (formats and compressions): shown as they are
_EXTENSIONS = frozenset(
    {"csv", "tsv", "txt", "json", "jsonl", "ndjson", "parquet", "avro", "orc", "gz", "gzip",
     "zst", "bz2", "snappy", "xml"}
)  # fmt: skip


class _Partitioned(Protocol):
    @property
    def subject_columns(self) -> list[str]: ...

    @property
    def partition_by(self) -> list[str]: ...


def key_digest(hash_key: bytes, text: str) -> str:
    """The keyed hash a shown key puts in place of `text` (module docstring)."""
    check_key(hash_key)
    message = _MESSAGE_PREFIX + text.encode("utf-8")
    return hmac.new(hash_key, message, hashlib.sha256).hexdigest()[:SHOWN_HEX]


def _extension(name: str) -> str:
    """The known data extensions at the end of a file name (`.csv`, `.json.gz`), or ""."""
    parts = name.split(".")[1:]
    kept: list[str] = []
    for part in reversed(parts[-2:]):
        if part.lower() not in _EXTENSIONS:
            break
        kept.insert(0, part)
    return "".join(f".{p}" for p in kept)  # never the stem: it precedes the first dot


@dataclass
class KeyNamer:
    """Shown keys and URLs under one hash key; `dataset` looks a dataset up by id (None: not
    registered). Lookups are cached for the namer's life (one step, one job)."""

    hash_key: bytes
    dataset: Callable[[str], _Partitioned | None]
    # False: only a subject column's partition segments are hashed, wherever they are, and the
    # rest of every key is kept (the Spark jobs' logging backstop: ingestion's records keep raw
    # keys, docs/SECURITY.md)
    whole_keys: bool = True
    _seen: dict[str, _Partitioned | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_key(self.hash_key)

    def _lookup(self, dataset_id: str) -> _Partitioned | None:
        if dataset_id not in self._seen:
            try:
                self._seen[dataset_id] = self.dataset(dataset_id)
            except Exception:
                self._seen[dataset_id] = None
        return self._seen[dataset_id]

    def key(self, key: str) -> str:
        """The shown form of an object key (module docstring)."""
        head, sep, rest = key.partition("/")
        if sep and not rest:
            return key  # a dataset's prefix (`orders/`): a dataset id, never a subject's
        if not sep:
            return f"{MARK}{key_digest(self.hash_key, key)}{_extension(key)}"
        *folders, name = rest.split("/")
        if not self.whole_keys:
            return "/".join([head, *self._subject_segments(head, folders), name])
        if folders == [QUARANTINE_SEGMENT] and _QUARANTINE_FILE.fullmatch(name):
            return key
        if _LAKE_FILE.fullmatch(name) and all("=" in f for f in folders):
            shown = self._partitions(head, folders)
            if shown is not None:
                return "/".join([head, *shown, name])
        return f"{head}/{MARK}{key_digest(self.hash_key, key)}{_extension(name)}"

    def _subject_segments(self, dataset_id: str, folders: list[str]) -> list[str]:
        dataset = self._lookup(dataset_id)
        subjects = (
            set(dataset.subject_columns) & set(dataset.partition_by) if dataset else None
        )  # None: not known, every partition value hashed
        shown = []
        for folder in folders:
            name, sep, _ = folder.partition("=")
            hashed = sep and (subjects is None or name in subjects)
            shown.append(f"{name}={MARK}{key_digest(self.hash_key, folder)}" if hashed else folder)
        return shown

    def _partitions(self, dataset_id: str, folders: list[str]) -> list[str] | None:
        dataset = self._lookup(dataset_id)
        subjects = set(dataset.subject_columns) if dataset else set()
        partitions = set(dataset.partition_by) if dataset else set()
        shown = []
        for folder in folders:
            name, _, _ = folder.partition("=")
            if dataset is not None and name not in partitions:
                return None  # not this dataset's layout: shown as any other key
            if dataset is None or name in subjects:
                shown.append(f"{name}={MARK}{key_digest(self.hash_key, folder)}")
            else:
                shown.append(folder)
        return shown

    def url(self, url: str) -> str:
        """The shown form of `s3://bucket/key` (the bucket is kept); any other text is shown as
        a key."""
        if not url.startswith("s3://"):
            return self.key(url)
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return f"s3://{bucket}/{self.key(key)}"


def namer_of(
    hash_key: bytes, datasets: Mapping[str, _Partitioned] | Callable[[str], _Partitioned | None]
) -> KeyNamer:
    """A KeyNamer from a mapping of datasets by id or a lookup function."""
    if isinstance(datasets, Mapping):
        return KeyNamer(hash_key, datasets.get)
    return KeyNamer(hash_key, datasets)


class RedactingNamer:
    """Shown keys without a hash key: the dataset prefix and `~` only (`orders/~`). For callers
    that have no key (tests, tools): a shown key it gives cannot be matched with its object."""

    def key(self, key: str) -> str:
        head, sep, rest = key.partition("/")
        if sep and not rest:
            return key  # a dataset's prefix
        return f"{head}/{MARK}" if sep else MARK

    def url(self, url: str) -> str:
        if not url.startswith("s3://"):
            return self.key(url)
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return f"s3://{bucket}/{self.key(key)}"


class Namer(Protocol):
    """What shows keys: a KeyNamer, or a RedactingNamer where no hash key is at hand."""

    def key(self, key: str) -> str: ...

    def url(self, url: str) -> str: ...


@dataclass
class PartitionRedactor:
    """Shown keys without a hash key, for the object events function (which never reads it): a
    lake key's subject-column partition values become `~` (`visits/user_id=~/part-....parquet`);
    every other key is shown as it is (a raw key is the producer's: docs/SECURITY.md). The
    object is found again by its version id in the catalog."""

    dataset: Callable[[str], _Partitioned | None]
    _seen: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)

    def _subject_partitions(self, dataset_id: str) -> frozenset[str]:
        if dataset_id not in self._seen:
            try:
                found = self.dataset(dataset_id)
            except Exception:
                found = None
            self._seen[dataset_id] = (
                frozenset(found.partition_by) & frozenset(found.subject_columns)
                if found is not None
                else frozenset({"*"})
            )
        return self._seen[dataset_id]

    def key(self, key: str) -> str:
        head, _, rest = key.partition("/")
        if "=" not in rest:
            return key
        subjects = self._subject_partitions(head)
        segments = rest.split("/")
        for index, segment in enumerate(segments[:-1]):
            name, sep, _ = segment.partition("=")
            if sep and (name in subjects or "*" in subjects):
                segments[index] = f"{name}={MARK}"
        return "/".join([head, *segments])

    def url(self, url: str) -> str:
        if not url.startswith("s3://"):
            return self.key(url)
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return f"s3://{bucket}/{self.key(key)}"
