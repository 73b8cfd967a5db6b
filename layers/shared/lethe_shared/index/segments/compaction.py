"""Compaction: fold level-0 segments into one level-1 segment per partition, dropping dead rows.

Per partition p (each restarted on a conflict, up to PARTITION_ATTEMPTS times):
1. read p's active level-1 segment (if any) whole, and the rows of partition p of every active
   level-0 segment whose origin is above its `absorbed_through`, oldest first, at most
   MAX_INPUTS per round, and only those older than every `pending` level-0 segment and than
   `settle_seconds` (a writer that took its seq earlier but has not committed yet must not
   fall below `absorbed_through`: lookups would then skip it);
2. merge (a row present twice is one row), drop dead rows (`rules.row_status` with the
   pointers as read now: a row of an active segment once dead stays dead), write the new
   level-1 segment (item `pending` first, then its files);
3. commit in ONE TransactWriteItems: the new item `active` with `absorbed_through` = the
   highest origin absorbed; the old level-1 item `retired` on the condition its state and ETag
   are still the ones read; a ConditionCheck on each level-0 input (state and ETag unchanged).
   An erasure that rewrote any of them meanwhile cancels the commit: the new files are deleted
   and the partition starts again from the manifest, so an erased hash never comes back.
4. the old level-1 segment's files are deleted, then its item.

Then every active level-0 segment that every partition has absorbed is retired (conditional),
its files deleted, its item deleted. Before any is retired, what it says of its objects is
carried (`carry`): the dataset's carried file (`segments.carried`) is rewritten with the
digests and origins of the segments going (per digest the highest origin), its new item
committed in one transaction that retires the old one; so the pointers derived from a listing
(`rules.effective`) do not change when the items go. The writes: one pending item, one
transaction of two actions and the old item's deletion per compaction that retires anything,
whatever the number of objects (before: an override item per object). The old carried file and
item go after the level-0 items. `pending` segments and carried items older than
`pending_timeout_seconds` are swept (their writer is taken as dead), and leftover `retired`
items too.

One compaction per dataset at a time (the job that runs it must not overlap itself): two
concurrent compactions of a partition without a level-1 segment could both create one.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.errors import LetheError
from lethe_shared.index.segments import carried
from lethe_shared.index.segments.carried import CarriedItem
from lethe_shared.index.segments.format import (
    WIDE_SCHEMA,
    empty_wide,
    new_seq,
    partition_bounds,
    seq_ns,
    widen,
)
from lethe_shared.index.segments.lookup import SegmentLookup, active_level1
from lethe_shared.index.segments.manifest import (
    ACTIVE,
    PENDING,
    RETIRED,
    Listing,
    Manifest,
    SegmentItem,
    TransactionCancelled,
    now_iso,
)
from lethe_shared.index.segments.reader import SegmentReader
from lethe_shared.index.segments.rules import Pointer
from lethe_shared.index.segments.store import SegmentWriter

MAX_INPUTS = 98  # level-0 inputs per commit: 100 actions per transaction, 2 for level 1
PARTITION_ATTEMPTS = 8


class CompactionConflictError(LetheError):
    """A partition's commit kept failing (erasures or writers changing its inputs)."""


@dataclass
class CompactionReport:
    dataset_id: str
    partitions_written: list[int] = field(default_factory=list)
    level0_absorbed: int = 0
    rows_in: int = 0
    rows_out: int = 0
    level0_retired: int = 0
    carried_files_written: int = 0  # carried-pointer files committed (`carry`)
    pending_swept: int = 0
    restarts: int = 0
    bytes_written: int = 0


def dead_mask(wide: pa.Table, pointers: dict[str, Pointer | None]) -> pa.Array:
    """`rules.row_status(...) is DEAD` for every row, computed by column."""
    urls = sorted(pointers)
    live = [p for p in (pointers[u] for u in urls)]
    current = pa.array([p.current if p else "" for p in live], pa.string())
    floor = pa.array([p.floor if p else "" for p in live], pa.string())
    position = pc.index_in(wide["object_url"], value_set=pa.array(urls, pa.string()))
    row_current = pc.fill_null(pc.take(current, position), "")
    row_floor = pc.fill_null(pc.take(floor, position), "")
    origin = wide["origin_seq"]
    return pc.or_(
        pc.or_(pc.equal(row_current, ""), pc.less(origin, row_floor)),
        pc.greater(origin, row_current),
    )


def merge(parts: list[pa.Table]) -> pa.Table:
    """The union of wide rows, a row present twice kept once."""
    if not parts:
        return empty_wide()
    table = pa.concat_tables([p.cast(WIDE_SCHEMA) for p in parts])
    keys = [n for n in WIDE_SCHEMA.names if n not in {"rows", "subjects"}]
    grouped = table.group_by(keys, use_threads=False).aggregate(
        [("rows", "max"), ("subjects", "max")]
    )
    return (
        grouped.rename_columns([*keys, "rows", "subjects"])
        .select(WIDE_SCHEMA.names)
        .cast(WIDE_SCHEMA)
    )


@dataclass
class Compactor:
    manifest: Manifest
    reader: SegmentReader
    writer: SegmentWriter
    pending_timeout_seconds: float = 3600.0
    settle_seconds: float = 60.0
    before_commit: Callable[[int], None] | None = None  # tests: run something in the window
    _wide: dict[tuple[str, str], pa.Table] = field(default_factory=dict)
    lookups: SegmentLookup | None = None

    def __post_init__(self) -> None:
        if self.lookups is None:
            self.lookups = SegmentLookup(self.manifest, self.reader)

    @property
    def reads(self) -> SegmentLookup:
        assert self.lookups is not None
        return self.lookups

    def compact(self, dataset_id: str) -> CompactionReport:
        report = CompactionReport(dataset_id)
        bits = self.manifest.partition_bits(dataset_id)
        if bits is None:
            return report
        self._wide.clear()
        self._sweep(dataset_id, report)
        for p in range(1 << bits):
            self._partition(dataset_id, p, bits, report)
        self._retire_absorbed(dataset_id, bits, report)
        self._wide.clear()
        return report

    def _absorbable(self, dataset_id: str) -> list[SegmentItem]:
        level0 = self.manifest.segments(dataset_id, 0)
        pending = [s.origin_seq for s in level0 if s.state == PENDING]
        horizon = time.time_ns() - int(self.settle_seconds * 1e9)
        limit = min(pending) if pending else None
        return sorted(
            (
                s
                for s in level0
                if s.state == ACTIVE
                and seq_ns(s.origin_seq) < horizon
                and (limit is None or s.origin_seq < limit)
            ),
            key=lambda s: s.origin_seq,
        )

    def _read_wide(self, segment: SegmentItem) -> pa.Table:
        cached = self._wide.get((segment.key, segment.etag))
        if cached is None:
            cached = widen(*self.reader.whole(segment))
            self._wide[(segment.key, segment.etag)] = cached
        return cached

    def _partition(self, dataset_id: str, p: int, bits: int, report: CompactionReport) -> None:
        low, high = partition_bounds(p, bits, self.manifest.hash_width(dataset_id))
        for _ in range(PARTITION_ATTEMPTS):
            top = active_level1(self.manifest.segments(dataset_id, 1, p))
            through = top.absorbed_through if top else ""
            inputs = [s for s in self._absorbable(dataset_id) if s.origin_seq > through]
            inputs = inputs[:MAX_INPUTS]
            if not inputs:
                return
            try:
                if self._round(
                    dataset_id=dataset_id,
                    p=p,
                    top=top,
                    inputs=inputs,
                    bounds=(low, high),
                    report=report,
                ):
                    return
            except TransactionCancelled:
                pass
            report.restarts += 1
            self._wide.clear()
        raise CompactionConflictError(f"partition {p} of {dataset_id} kept conflicting")

    def _round(
        self,
        *,
        dataset_id: str,
        p: int,
        top: SegmentItem | None,
        inputs: list[SegmentItem],
        bounds: tuple[bytes, bytes],
        report: CompactionReport,
    ) -> bool:
        from lethe_shared.index.segments.s3_ranges import SegmentGoneError  # noqa: PLC0415

        try:
            parts = [self._read_wide(top)] if top else []
            for segment in inputs:
                rows = self._read_wide(segment)
                in_p = pc.and_(
                    pc.greater_equal(rows["subject_hash"], pa.scalar(bounds[0], pa.binary())),
                    pc.less_equal(rows["subject_hash"], pa.scalar(bounds[1], pa.binary())),
                )
                parts.append(rows.filter(in_p))
        except SegmentGoneError:
            return False
        merged = merge(parts)
        pointers = self.reads.pointers(dataset_id, set(merged["object_url"].to_pylist()))
        kept = merged.filter(pc.invert(dead_mask(merged, pointers)))
        new = self.writer.write(
            dataset_id, 1, p, kept, absorbed_through=max(s.origin_seq for s in inputs)
        )
        if self.before_commit is not None:
            self.before_commit(p)
        actions = [self.writer.activate_action(new)]
        if top is not None:
            actions.append(self._retire_action(top))
        actions += [s.unchanged(self.manifest.table.name) for s in inputs]
        try:
            self.manifest.transact(actions)
        except TransactionCancelled:
            self.writer.discard(new)
            raise
        report.partitions_written.append(p)
        report.rows_in += sum(t.num_rows for t in parts)
        report.rows_out += kept.num_rows
        report.bytes_written += new.bytes
        report.level0_absorbed = max(report.level0_absorbed, len(inputs))
        if top is not None:
            self._remove(top, RETIRED)
        return True

    def _retire_action(self, segment: SegmentItem) -> dict[str, object]:
        return {
            "Update": {
                "TableName": self.manifest.table.name,
                "Key": segment.primary(),
                "UpdateExpression": "SET #s = :r",
                **{
                    k: v
                    for k, v in segment.unchanged_condition().items()
                    if k != "ExpressionAttributeValues"
                },
                "ExpressionAttributeValues": {
                    **segment.unchanged_condition()["ExpressionAttributeValues"],
                    ":r": RETIRED,
                },
            }
        }

    def _remove(self, segment: SegmentItem, state: str) -> None:
        """Files first, then the item (while still in `state` with its ETag)."""
        for key in segment.files:
            self.reader.files.delete(key)
        self.manifest.delete_segment(SegmentItem(**{**segment.__dict__, "state": state}))

    def _retire_absorbed(self, dataset_id: str, bits: int, report: CompactionReport) -> None:
        throughs = []
        for p in range(1 << bits):
            top = active_level1(self.manifest.segments(dataset_id, 1, p))
            throughs.append(top.absorbed_through if top else "")
        floor = min(throughs)
        listed = self.manifest.listing(dataset_id)
        going = [s for s in listed if s.level == 0 and s.state == ACTIVE and s.origin_seq <= floor]
        replaced: list[CarriedItem] = []
        if going:
            replaced = self.carry(dataset_id, listed, going)
            report.carried_files_written += 1
        for segment in self.manifest.segments(dataset_id, 0):
            if segment.state == RETIRED:
                self._remove(segment, RETIRED)
            elif segment.state == ACTIVE and segment.origin_seq <= floor:
                try:
                    self.manifest.transact([self._retire_action(segment)])
                except TransactionCancelled:
                    continue  # an erasure rewrote it meanwhile: the next compaction retires it
                self._remove(segment, RETIRED)
                report.level0_retired += 1
        for item in replaced:
            self._remove_carried(item)

    def carry(
        self, dataset_id: str, listed: Listing, going: list[SegmentItem]
    ) -> list[CarriedItem]:
        """Commit a carried file holding what `going` says and what the listing's active carried
        files held (module docstring); the carried items it retired (their files and items are
        removed after the level-0 items)."""
        old = list(listed.active_carried)
        held = [carried.read_whole(self.reader.files, item) for item in old]
        table = carried.merged(
            pa.concat_tables([carried.empty(), *held]),
            ((s.origin_seq, self.reads.digests(s)) for s in going),
        )
        pending = CarriedItem(dataset_id, new_seq(), PENDING, created_at=now_iso())
        self.manifest.put_carried_pending(pending)
        data = carried.to_bytes(table)
        etag = self.reader.files.put(pending.key, data)
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.manifest.table.name,
                    "Key": pending.primary(),
                    "UpdateExpression": "SET #s = :a, etag = :e, #b = :b, entries = :n",
                    "ConditionExpression": "attribute_exists(pk) AND #s = :p",
                    "ExpressionAttributeNames": {"#s": "state", "#b": "bytes"},
                    "ExpressionAttributeValues": {
                        ":a": ACTIVE,
                        ":p": PENDING,
                        ":e": etag,
                        ":b": len(data),
                        ":n": table.num_rows,
                    },
                }
            }
        ]
        for item in old:
            condition = item.unchanged_condition()
            actions.append(
                {
                    "Update": {
                        "TableName": self.manifest.table.name,
                        "Key": item.primary(),
                        "UpdateExpression": "SET #s = :r",
                        "ConditionExpression": condition["ConditionExpression"],
                        "ExpressionAttributeNames": condition["ExpressionAttributeNames"],
                        "ExpressionAttributeValues": {
                            **condition["ExpressionAttributeValues"],
                            ":r": RETIRED,
                        },
                    }
                }
            )
        try:
            self.manifest.transact(actions)
        except TransactionCancelled as exc:
            self.reader.files.delete(pending.key)
            self.manifest.delete_carried(pending)
            raise CompactionConflictError(
                f"the carried pointers of {dataset_id} changed under the compaction"
            ) from exc
        return [replace(item, state=RETIRED) for item in old]

    def _remove_carried(self, item: CarriedItem) -> None:
        """The file first, then the item (while still in its state and ETag)."""
        self.reader.files.delete(item.key)
        self.manifest.delete_carried(item)

    def _sweep(self, dataset_id: str, report: CompactionReport) -> None:
        """Pending items older than the timeout: their writer is dead."""
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=self.pending_timeout_seconds)
        for segment in self.manifest.all_segments(dataset_id):
            if segment.state != PENDING:
                continue
            created = dt.datetime.fromisoformat(segment.created_at)
            if created <= cutoff:
                self._remove(segment, PENDING)
                report.pending_swept += 1
        for item in self.manifest.listing(dataset_id).carried:
            # a carried item left retired (its compaction died before removing it), or pending
            # past the timeout (its compaction died before committing it)
            created = dt.datetime.fromisoformat(item.created_at)
            if item.state == RETIRED or (item.state == PENDING and created <= cutoff):
                self._remove_carried(item)
                if item.state == PENDING:
                    report.pending_swept += 1
