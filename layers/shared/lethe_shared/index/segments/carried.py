"""The carried pointers of a dataset: what retired level-0 segments said, in one S3 file.

A level-0 segment's item says which objects its write describes (`described`); an object's
pointer is derived from those and its override item (`rules.effective`). When compaction retires
level-0 segments, what they said must not be lost: it is merged into the dataset's carried file,
`segments/<dataset>/carried/<seq>.parquet`, two columns sorted by digest:

| column | type | what |
|---|---|---|
| digest | binary (8 bytes) | an object URL's digest (`described.url_digest`) |
| origin | string | the highest origin of the retired level-0 segments describing it |

The highest origin is all `effective` needs of them: it takes the highest origin at or above the
floor, and a lower one is at or above the floor only when the highest is too. Row groups of
GROUP_ROWS rows with statistics, so a reader of some objects' pointers reads the footer (cached
by key and ETag, with the whole file while it is small) and the row groups whose digest range
holds one of them: for a batch of objects, at most one row group each, usually fewer. No subject
hash and no object URL in it: nothing an erasure must remove.

The file is named by one manifest item, `seg#<dataset>` / `P#<seq>` (state, etag, bytes,
entries = its rows, created_at). `P#` sorts after `L0#` and `L1#`: the ONE listing Query of a
reader returns it after the level-0 items (`Manifest.listing`). Compaction writes a new file
(item `pending` first, then the file), then commits it in one transaction that also retires the
old item (on the condition it is unchanged), and only then retires the level-0 segments it
holds, one by one. So a reader whose listing misses a retired level-0 item reads the carried
item later in the same Query and finds the new file; a reader that sees both says the same
origin twice (harmless: the origins are a set). A reader that opens a carried file deleted
since its listing gets `SegmentGoneError` and starts again from the manifest, like a segment's.

Size: 8 bytes of digest an object plus its origin, dictionary-encoded and zstd-packed (about
10 bytes an object written; benchmarks measure it with the index). Entries of objects gone stay
(an object with no row left has nothing to judge); not collected.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_shared.index.segments.s3_ranges import SegmentFiles

GROUP_ROWS = 8192
SCHEMA = pa.schema([pa.field("digest", pa.binary()), pa.field("origin", pa.string())])
SK_PREFIX = "P#"


def carried_key(dataset_id: str, seq: str) -> str:
    return f"segments/{dataset_id}/carried/{seq}.parquet"


@dataclass(frozen=True)
class CarriedItem:
    """The manifest item naming a dataset's carried file."""

    dataset_id: str
    seq: str
    state: str
    etag: str = ""
    bytes: int = 0
    entries: int = 0
    created_at: str = ""

    @property
    def key(self) -> str:
        return carried_key(self.dataset_id, self.seq)

    @property
    def pk(self) -> str:
        return f"seg#{self.dataset_id}"

    @property
    def sk(self) -> str:
        return SK_PREFIX + self.seq

    def primary(self) -> dict[str, str]:
        return {"pk": self.pk, "sk": self.sk}

    def to_item(self) -> dict[str, object]:
        return {
            **self.primary(),
            "state": self.state,
            "etag": self.etag,
            "bytes": self.bytes,
            "entries": self.entries,
            "created_at": self.created_at,
        }

    @classmethod
    def of_item(cls, item: dict[str, object]) -> CarriedItem:
        return cls(
            dataset_id=str(item["pk"]).removeprefix("seg#"),
            seq=str(item["sk"]).removeprefix(SK_PREFIX),
            state=str(item["state"]),
            etag=str(item.get("etag", "")),
            bytes=int(str(item.get("bytes", 0))),
            entries=int(str(item.get("entries", 0))),
            created_at=str(item.get("created_at", "")),
        )

    def unchanged_condition(self) -> dict[str, Any]:
        return {
            "ConditionExpression": "attribute_exists(pk) AND #s = :s AND etag = :e",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":s": self.state, ":e": self.etag},
        }


def is_carried_sk(sk: str) -> bool:
    return sk.startswith(SK_PREFIX)


def empty() -> pa.Table:
    return SCHEMA.empty_table()


def merged(old: pa.Table, going: Iterable[tuple[str, frozenset[bytes]]]) -> pa.Table:
    """The carried table after retiring `going` ((origin, digests) of each level-0 segment):
    per digest the highest origin of the old table and of `going`, sorted by digest."""
    digests: list[bytes] = []
    origins: list[str] = []
    for origin, held in going:
        digests += held
        origins += [origin] * len(held)
    table = pa.concat_tables(
        [old.cast(SCHEMA), pa.table({"digest": digests, "origin": origins}, schema=SCHEMA)]
    )
    if table.num_rows == 0:
        return empty()
    top = table.group_by("digest", use_threads=False).aggregate([("origin", "max")])
    return top.rename_columns(["digest", "origin"]).select(SCHEMA.names).sort_by("digest")


def to_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(
        table.cast(SCHEMA),
        sink,
        row_group_size=GROUP_ROWS,
        compression="zstd",
        write_statistics=True,
        use_dictionary=["origin"],
        store_schema=False,
    )
    return sink.getvalue()


def read_whole(files: SegmentFiles, item: CarriedItem | None) -> pa.Table:
    """The whole table (compaction merges it); empty when there is no carried item."""
    if item is None:
        return empty()
    return pq.read_table(pa.BufferReader(files.whole(item.key, item.etag))).cast(SCHEMA)


@dataclass(frozen=True)
class CarriedPointers:
    """The origins a dataset's carried file gives, read by digest (module docstring)."""

    files: SegmentFiles
    items: tuple[CarriedItem, ...]  # the `active` carried items of one listing (one, or two
    # when the listing met a compaction's commit: the newer holds the older's)

    def origins(self, digests: Iterable[bytes]) -> dict[bytes, str]:
        """Digest -> its carried origin, for the digests the file holds."""
        from lethe_shared.index.segments.reader import _holds_any, groups_holding  # noqa: PLC0415

        wanted = sorted(set(digests))
        found: dict[bytes, str] = {}
        if not wanted:
            return found
        for item in self.items:
            parquet = self.files.open(item.key, item.etag)
            groups = groups_holding(parquet.metadata, "digest", _holds_any(wanted))
            if not groups:
                continue
            table = parquet.read_row_groups(groups, columns=SCHEMA.names, use_threads=False)
            table = table.filter(pc.is_in(table["digest"], value_set=pa.array(wanted, pa.binary())))
            for digest, origin in zip(
                table["digest"].to_pylist(), table["origin"].to_pylist(), strict=True
            ):
                found[digest] = max(found.get(digest, ""), origin)
        return found
