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
its files deleted, its item deleted. Before any is retired, the pointer it gives is carried
forward (`carry_forward`): each object whose current write is one of them (`rules.effective`)
gets an override item naming that `current` (conditional on the override as read), so the
pointer does not change when the item goes (these are compaction's manifest writes: one per
such object, counted apart from ingestion's); `pending` segments older than
`pending_timeout_seconds` are swept the same way (their writer is taken as dead), and leftover
`retired` items too.

One compaction per dataset at a time (the job that runs it must not overlap itself): two
concurrent compactions of a partition without a level-1 segment could both create one.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.errors import LetheError
from lethe_shared.index.segments.described import url_digest
from lethe_shared.index.segments.format import (
    WIDE_SCHEMA,
    empty_wide,
    partition_bounds,
    seq_ns,
    widen,
)
from lethe_shared.index.segments.lookup import SegmentLookup, active_level1
from lethe_shared.index.segments.manifest import (
    ACTIVE,
    PENDING,
    RETIRED,
    Manifest,
    SegmentItem,
    TransactionCancelled,
)
from lethe_shared.index.segments.reader import SegmentReader
from lethe_shared.index.segments.rules import Pointer, effective
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
    overrides_written: int = 0  # carry-forward overrides (manifest writes)
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
        if going:
            self.carry_forward(dataset_id, listed, going, report)
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

    def carry_forward(
        self,
        dataset_id: str,
        listed: list[SegmentItem],
        going: list[SegmentItem],
        report: CompactionReport,
    ) -> None:
        """An override for every object whose current write is one of `going` (module
        docstring). The objects: every URL an active segment's object table lists whose digest
        one of `going` holds (an object of `going` left with no row anywhere needs none: no row
        of it remains to judge)."""
        level0 = self.reads.level0(listed)
        digests = frozenset().union(*(self.reads.digests(s) for s in going))
        origins = {s.origin_seq for s in going}
        urls: set[str] = set()
        for segment in listed:
            if segment.state == ACTIVE:
                urls |= {u for u in self.reader.object_urls(segment) if url_digest(u) in digests}
        overrides = self.manifest.overrides(dataset_id, urls)
        for url in sorted(urls):
            override = overrides.get(url)
            for _ in range(PARTITION_ATTEMPTS):
                pointer = effective(url, override, level0.of(url))
                if pointer is None or pointer.current not in origins or pointer == override:
                    break
                if self.manifest.write_override(dataset_id, override, pointer):
                    report.overrides_written += 1
                    break
                override = self.manifest.override(dataset_id, url)
            else:
                raise CompactionConflictError("an object's override kept changing")

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
