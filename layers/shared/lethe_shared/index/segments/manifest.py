"""The manifest: a DynamoDB table (`pk` S HASH, `sk` S RANGE) listing segments, object pointer
overrides and each dataset's partition configuration. No subject hash ever appears in an item.

| item | pk | sk | attributes |
|---|---|---|---|
| dataset | `datasets` | `<dataset_id>` | `bits`, `hash_bytes` |
| partitions | `cfg#<dataset_id>` | `partitions` | `bits` (2**bits partitions), `hash_bytes` |
| level-0 segment | `seg#<dataset_id>` | `L0#<seq>` | SEGMENT, origin_seq, DESCRIBED |
| level-1 segment | `seg#<dataset_id>` | `L1#<pppp>#<seq>` | SEGMENT, absorbed_through, LEVEL1 |
| carried pointers | `seg#<dataset_id>` | `P#<seq>` | state, etag, bytes, entries, created_at |
| pointer override | `obj#<dataset_id>` | `<object_url>` | POINTER |

SEGMENT: state, etag, objects_etag, bytes, entries, objects, created_at, writer. The dataset,
level, partition and seq are read from pk/sk, the S3 keys derived from them
(`format.entries_key`); readers project the attributes they use (READ_PROJECTION).

Every segment item of a dataset shares one partition key, so ONE consistent Query lists them
all (`listing`), level 0 first (`L0#` sorts before `L1#`, and both before `P#`): a reader sees
the level-0 items before the level-1 items, the order `lookup.consulted` relies on, and before
the carried-pointers item (`segments.carried`: what retired level-0 items said, in S3).

LEVEL1: by_object_etag (the by-object file).

DESCRIBED: `described` (binary: the 8-byte digests of the URLs of the objects the write
describes, `segments.described`) or, for more than `described.MAX_INLINE` objects,
`described_file` = true (the digests in S3 next to the segment). Ingestion writes no pointer:
an object's pointer is derived from these, the carried pointers and its override
(`rules.effective`).

Reads a lookup runs from its thread pool (`partition_bits`, `hash_width`, `listing`,
`pointers_of`) go through the table's client (`table.meta.client`, thread-safe, with the
resource's conversion of values), never through the Table resource (not thread-safe).

POINTER: current, version_id, etag, floor, deleted, entries, updated_at, rev. Written only by
flag_deleted, prune_flagged and remove_object (`rules` docstring), each an UpdateItem
conditional on `rev` as read (absent: no item), which it increments.

`state` is `pending` (written first, before the files), `active` (committed) or `retired`
(superseded; its files are deleted, then the item). A segment rewritten by erasure gets a new
seq (sk) and keeps `origin_seq` (level 0: the seq its rows were written with), so readers order
level-0 segments by `origin_seq`, never by sk.
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from lethe_shared.aws.dynamo import batch_get_all, query_all
from lethe_shared.aws.errors import cancellation_reasons, is_condition_failed
from lethe_shared.index.concurrent_reads import ClientTable
from lethe_shared.index.segments.carried import CarriedItem, is_carried_sk
from lethe_shared.index.segments.described import described_key
from lethe_shared.index.segments.format import (
    DEFAULT_PARTITION_BITS,
    HASH_BYTES,
    MAX_PARTITION_BITS,
    by_object_key,
    check_dataset_id,
    check_width,
    entries_key,
    objects_key,
    partition_name,
)
from lethe_shared.index.segments.rules import Pointer

PENDING, ACTIVE, RETIRED = "pending", "active", "retired"
# what readers of segment items need (fewer attributes read: smaller Query answers)
READ_PROJECTION = {
    "ProjectionExpression": "pk, sk, #st, etag, objects_etag, origin_seq, absorbed_through, "
    "by_object_etag, created_at, #b, described, described_file",
    "ExpressionAttributeNames": {"#st": "state", "#b": "bytes"},
}
DATASETS_PK = "datasets"


def manifest_table_definition(table_name: str) -> dict[str, Any]:
    """The manifest table's CreateTable arguments (template.yaml: the same keys, on demand)."""
    return {
        "TableName": table_name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def segment_pk(dataset_id: str) -> str:
    return f"seg#{dataset_id}"


def segment_sk_prefix(level: int, partition: int | None) -> str:
    """The sort key prefix of a level (and partition): `L0#`, `L1#<pppp>#`."""
    if level == 0:
        return "L0#"
    assert partition is not None
    return f"L1#{partition_name(partition)}#"


def pointer_pk(dataset_id: str) -> str:
    return f"obj#{dataset_id}"


@dataclass(frozen=True)
class SegmentItem:
    """One segment's manifest item."""

    dataset_id: str
    level: int
    partition: int | None  # level 1 only
    seq: str
    key: str
    objects_key: str
    state: str
    etag: str = ""
    objects_etag: str = ""
    bytes: int = 0
    entries: int = 0
    objects: int = 0
    created_at: str = field(default_factory=now_iso)
    writer: str = ""
    origin_seq: str = ""  # level 0: the seq its rows were written with
    absorbed_through: str = ""  # level 1: the highest level-0 origin whose rows it holds
    by_object_etag: str = ""  # level 1: the ETag of its by-object file
    described: builtins.bytes = b""  # level 0: the digests of the objects it describes (DESCRIBED)
    described_file: bool = False  # level 0: the digests are in S3 (`described_key`)

    @property
    def by_object_key(self) -> str:
        """Level 1: the by-object file (the entries sorted by object); "" at level 0."""
        return by_object_key(self.key) if self.level == 1 else ""

    @property
    def files(self) -> tuple[str, ...]:
        """Every S3 key the segment may have: entries, object table and, at level 1, the
        by-object file (deleted and checked gone even when it was not written)."""
        extra = (self.by_object_key,) if self.level == 1 else ()
        if self.described_file:
            extra = (self.described_key,)
        return (self.key, self.objects_key, *extra)

    @property
    def described_key(self) -> str:
        return described_key(self.key)

    @property
    def pk(self) -> str:
        return segment_pk(self.dataset_id)

    @property
    def sk(self) -> str:
        return segment_sk_prefix(self.level, self.partition) + self.seq

    def to_item(self) -> dict[str, Any]:
        """The stored item: what cannot be derived from the keys (the dataset, level,
        partition and seq are in pk/sk, the S3 keys follow from them)."""
        item: dict[str, Any] = {
            "pk": self.pk,
            "sk": self.sk,
            "state": self.state,
            "etag": self.etag,
            "objects_etag": self.objects_etag,
            "bytes": self.bytes,
            "entries": self.entries,
            "objects": self.objects,
            "created_at": self.created_at,
            "writer": self.writer,
        }
        if self.level == 0:
            item["origin_seq"] = self.origin_seq
            if self.described:
                item["described"] = self.described
            if self.described_file:
                item["described_file"] = True
        else:
            item["absorbed_through"] = self.absorbed_through
            item["by_object_etag"] = self.by_object_etag
        return item

    @classmethod
    def of_item(cls, item: dict[str, Any]) -> SegmentItem:
        """From a stored item, whole or read with READ_PROJECTION (then entries, objects and
        writer are 0 / "": nothing reads them back but benchmarks)."""
        dataset_id = str(item["pk"]).removeprefix("seg#")
        head, _, seq = str(item["sk"]).rpartition("#")
        level = 0 if head == "L0" else 1
        partition = int(head.removeprefix("L1#"), 16) if level == 1 else None
        key = entries_key(dataset_id, level, partition, seq)
        return cls(
            dataset_id=dataset_id,
            level=level,
            partition=partition,
            seq=seq,
            key=key,
            objects_key=objects_key(key),
            state=str(item["state"]),
            etag=str(item.get("etag", "")),
            objects_etag=str(item.get("objects_etag", "")),
            bytes=int(item.get("bytes", 0)),
            entries=int(item.get("entries", 0)),
            objects=int(item.get("objects", 0)),
            created_at=str(item.get("created_at", "")),
            writer=str(item.get("writer", "")),
            origin_seq=str(item.get("origin_seq", "")),
            absorbed_through=str(item.get("absorbed_through", "")),
            by_object_etag=str(item.get("by_object_etag", "")),
            described=_binary(item.get("described")),
            described_file=bool(item.get("described_file", False)),
        )

    def primary(self) -> dict[str, str]:
        return {"pk": self.pk, "sk": self.sk}

    def unchanged(self, table_name: str) -> dict[str, Any]:
        """A ConditionCheck action: the item still exists in this state with this ETag."""
        return {
            "ConditionCheck": {
                "TableName": table_name,
                "Key": self.primary(),
                **self.unchanged_condition(),
            }
        }

    def unchanged_condition(self) -> dict[str, Any]:
        return {
            "ConditionExpression": "attribute_exists(pk) AND #s = :s AND etag = :e",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":s": self.state, ":e": self.etag},
        }


def _binary(value: Any) -> bytes:
    """A binary attribute as read (boto3's Binary, or bytes); b"" when absent."""
    if value is None:
        return b""
    return bytes(getattr(value, "value", value))


class Listing(list[SegmentItem]):
    """The segment items of one listing Query, and the carried-pointers items it met
    (`carried`: every state; readers use the `active` ones)."""

    def __init__(self, segments: Iterable[SegmentItem], carried: Iterable[CarriedItem]) -> None:
        super().__init__(segments)
        self.carried = tuple(carried)

    @property
    def active_carried(self) -> tuple[CarriedItem, ...]:
        return tuple(c for c in self.carried if c.state == ACTIVE)


class TransactionCancelled(Exception):
    """A manifest transaction was cancelled; `reasons` per action, in order."""

    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__("transaction cancelled")
        self.reasons = reasons


class Manifest:
    """Reads and writes the manifest table (a boto3 Table resource). `declared_bits`: a
    dataset's declared partition bits (its document's `index_partition_bits`), or None when it
    declares none; asked only when a dataset's first write records its partitions."""

    def __init__(
        self, table: Any, declared_bits: Callable[[str], int | None] | None = None
    ) -> None:
        self.table = table
        self._declared = declared_bits
        self._bits: dict[str, int] = {}
        self._widths: dict[str, int] = {}
        self._reads: ClientTable | None = None

    @property
    def reads(self) -> ClientTable:
        """The table's reads through its client: safe from the lookup's threads."""
        if self._reads is None:
            self._reads = ClientTable(self.table)
        return self._reads

    # -- datasets and partitions
    def ensure_dataset(
        self, dataset_id: str, bits: int = DEFAULT_PARTITION_BITS, hash_bytes: int = HASH_BYTES
    ) -> int:
        """The dataset's partition bits, recorded with its key width (`hash_bytes`) on its first
        write (an existing dataset keeps its own): the bits its document declares, else
        `bits`."""
        check_dataset_id(dataset_id)
        if dataset_id in self._bits:
            return self._bits[dataset_id]
        check_width(hash_bytes)
        if self.partition_bits(dataset_id) is None:
            declared = self._declared(dataset_id) if self._declared else None
            bits = bits if declared is None else declared
            if not 0 <= bits <= MAX_PARTITION_BITS:
                raise ValueError(f"partition bits must be 0..{MAX_PARTITION_BITS}")
            # the listing first: a writer that dies in between leaves a listed dataset without
            # partitions (read as empty; the next write records them), never the reverse (a
            # dataset with segments that `lookup` does not list)
            for key in (
                {"pk": DATASETS_PK, "sk": dataset_id},
                {"pk": f"cfg#{dataset_id}", "sk": "partitions"},
            ):
                try:
                    self.table.put_item(
                        Item={**key, "bits": bits, "hash_bytes": hash_bytes},
                        ConditionExpression="attribute_not_exists(pk)",
                    )
                except ClientError as exc:
                    if not is_condition_failed(exc):
                        raise
            return self.ensure_dataset(dataset_id, bits, hash_bytes)
        return self._bits[dataset_id]

    def partition_bits(self, dataset_id: str) -> int | None:
        """The dataset's partition bits; None when it has never been written."""
        if dataset_id not in self._bits:
            found = self.reads.get_item(
                Key={"pk": f"cfg#{dataset_id}", "sk": "partitions"}, ConsistentRead=True
            ).get("Item")
            if found is None:
                return None
            # the width first: another thread that sees the bits finds the width (hash_width)
            self._widths[dataset_id] = int(found.get("hash_bytes", HASH_BYTES))
            self._bits[dataset_id] = int(found["bits"])
        return self._bits[dataset_id]

    def hash_width(self, dataset_id: str) -> int:
        """The dataset's key width in bytes (32: full digests; 6: prefixes); 32 when it has
        never been written."""
        self.partition_bits(dataset_id)
        return self._widths.get(dataset_id, HASH_BYTES)

    def datasets(self) -> list[str]:
        return sorted(
            str(i["sk"])
            for i in query_all(
                self.table,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": DATASETS_PK},
                ConsistentRead=True,
            )
        )

    # -- segments
    def listing(self, dataset_id: str) -> Listing:
        """Every segment item of the dataset, any state, in ONE consistent Query: level 0 (by
        seq), then level 1 (by partition, then seq); and the carried-pointers items after them
        (`Listing.carried`)."""
        items = list(
            query_all(
                self.reads,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": segment_pk(dataset_id)},
                ConsistentRead=True,
                **READ_PROJECTION,
            )
        )
        carried = [i for i in items if is_carried_sk(str(i["sk"]))]
        return Listing(
            (SegmentItem.of_item(i) for i in items if not is_carried_sk(str(i["sk"]))),
            (CarriedItem.of_item(i) for i in carried),
        )

    def segments(
        self, dataset_id: str, level: int, partition: int | None = None
    ) -> list[SegmentItem]:
        """Every segment item of one level (and partition), any state."""
        return [
            SegmentItem.of_item(i)
            for i in query_all(
                self.table,
                KeyConditionExpression="pk = :p AND begins_with(sk, :s)",
                ExpressionAttributeValues={
                    ":p": segment_pk(dataset_id),
                    ":s": segment_sk_prefix(level, partition),
                },
                ConsistentRead=True,
                **READ_PROJECTION,
            )
        ]

    def all_segments(
        self, dataset_id: str, partitions: Iterable[int] | None = None
    ) -> list[SegmentItem]:
        """Every segment of the dataset, any state: level 0, then level 1 of `partitions` (all
        when None). One Query."""
        if self.partition_bits(dataset_id) is None:
            return []
        wanted = None if partitions is None else set(partitions)
        return [
            s
            for s in self.listing(dataset_id)
            if s.level == 0 or wanted is None or s.partition in wanted
        ]

    # -- carried pointers (`segments.carried`)
    def put_carried_pending(self, item: CarriedItem) -> None:
        self.table.put_item(Item=item.to_item(), ConditionExpression="attribute_not_exists(pk)")

    def delete_carried(self, item: CarriedItem) -> bool:
        """Delete the item while it is still in the state and ETag read; False when not."""
        try:
            self.table.delete_item(Key=item.primary(), **item.unchanged_condition())
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    def get_segment(self, segment: SegmentItem) -> SegmentItem | None:
        item = self.table.get_item(Key=segment.primary(), ConsistentRead=True).get("Item")
        return SegmentItem.of_item(item) if item else None

    def put_pending(self, segment: SegmentItem) -> None:
        self.table.put_item(Item=segment.to_item(), ConditionExpression="attribute_not_exists(pk)")

    def delete_segment(self, segment: SegmentItem) -> bool:
        """Delete the item while it is still in the state and ETag read; False when not."""
        try:
            self.table.delete_item(Key=segment.primary(), **segment.unchanged_condition())
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    # -- pointer overrides (the pointer itself: `rules.effective`)
    def override(self, dataset_id: str, object_url: str) -> Pointer | None:
        item = self.reads.get_item(
            Key={"pk": pointer_pk(dataset_id), "sk": object_url}, ConsistentRead=True
        ).get("Item")
        return Pointer.of_item(item) if item else None

    def overrides(self, dataset_id: str, urls: Iterable[str]) -> dict[str, Pointer | None]:
        return self.overrides_of({(dataset_id, u) for u in urls}).get(dataset_id, {})

    def overrides_of(
        self, wanted: Iterable[tuple[str, str]]
    ) -> dict[str, dict[str, Pointer | None]]:
        """(dataset, object URL) pairs -> dataset -> URL -> override (None: none), read in
        BatchGetItems of up to 100 keys whatever their datasets."""
        pairs = sorted(set(wanted))
        found: dict[str, dict[str, Pointer | None]] = {}
        for dataset_id, url in pairs:
            found.setdefault(dataset_id, {})[url] = None
        keys = [{"pk": pointer_pk(d), "sk": u} for d, u in pairs]
        for item in batch_get_all(self.table, keys, ConsistentRead=True):
            dataset_id = str(item["pk"]).removeprefix("obj#")
            found[dataset_id][str(item["sk"])] = Pointer.of_item(item)
        return found

    def all_overrides(self, dataset_id: str) -> dict[str, Pointer | None]:
        return {
            str(i["sk"]): Pointer.of_item(i)
            for i in query_all(
                self.table,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": pointer_pk(dataset_id)},
                ConsistentRead=True,
            )
        }

    def write_override(self, dataset_id: str, read: Pointer | None, update: Pointer) -> bool:
        """Write the override `update` (its current, floor, deleted, version_id, etag, entries;
        rev = the one read + 1) while the item is still as read (`read`: None, no item); False
        when another writer changed it first. An UpdateItem (it creates the item when absent):
        the object events function may update the manifest, not put to it (template.yaml)."""
        rev = read.rev if read is not None else 0
        fields: dict[str, Any] = {
            "current": update.current,
            "floor": update.floor,
            "deleted": update.deleted,
            "version_id": update.version_id,
            "etag": update.etag,
            "entries": update.entries,
            "updated_at": now_iso(),
            "rev": rev + 1,
        }
        values = {f":{k}": v for k, v in fields.items()}
        condition = "attribute_not_exists(pk)"
        if read is not None:
            condition, values[":read"] = "#rev = :read", rev
        try:
            self.table.update_item(
                Key={"pk": pointer_pk(dataset_id), "sk": update.object_url},
                UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in fields),
                ConditionExpression=condition,
                ExpressionAttributeNames={f"#{k}": k for k in fields},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if is_condition_failed(exc):
                return False
            raise
        return True

    def delete_override(self, dataset_id: str, object_url: str) -> None:
        self.table.delete_item(Key={"pk": pointer_pk(dataset_id), "sk": object_url})

    # -- transactions
    def transact(self, actions: Sequence[dict[str, Any]]) -> None:
        """One TransactWriteItems; TransactionCancelled with the reasons when cancelled."""
        try:
            self.table.meta.client.transact_write_items(TransactItems=list(actions))
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if reasons is None:
                raise
            raise TransactionCancelled(reasons) from exc
