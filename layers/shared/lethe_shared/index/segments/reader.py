"""Reading rows out of segments: by subject hash (a lookup), by object (an object's entries),
or whole (compaction, erasure, a dataset's entries).

By hash: the footer (cached), then only the row groups whose `subject_hash` min/max hold a
wanted hash, then the object table's row groups whose `object_id` min/max hold an id found.
By object: the object table's row groups whose `object_url` min/max hold the URL (object ids
follow URL order), then the row groups whose `object_id` min/max overlap the object's ids: of
the level-1 segment's by-object file (the same entries sorted by (object_id, subject_hash): the
object's rows are contiguous, so this reads row groups in proportion to the object's entries),
or of a level-0 segment's entries file (small: one ingestion run).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_shared.index.segments.format import (
    ENTRIES_SCHEMA,
    OBJECT_FIELDS,
    OBJECTS_SCHEMA,
    from_parquet,
    widen,
)
from lethe_shared.index.segments.manifest import SegmentItem
from lethe_shared.index.segments.rules import Row
from lethe_shared.index.segments.s3_ranges import SegmentFiles

ENTRY_COLUMNS = ["subject_hash", "object_id", "rows", "subjects"]


def _column_index(metadata: Any, name: str) -> int:
    schema = metadata.schema
    for i in range(len(schema)):
        if schema.column(i).path == name:
            return i
    raise KeyError(name)


def _ranges(metadata: Any, name: str) -> list[tuple[Any, Any] | None]:
    """Each row group's (min, max) of a column; None when the group has no statistics."""
    j = _column_index(metadata, name)
    out: list[tuple[Any, Any] | None] = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(j).statistics
        if stats is None or not stats.has_min_max:
            out.append(None)
        else:
            out.append((stats.min, stats.max))
    return out


def groups_holding(metadata: Any, name: str, keep: Callable[[Any, Any], bool]) -> list[int]:
    """The row groups whose statistics of `name` may hold a wanted value (no statistics: yes)."""
    return [
        i
        for i, bounds in enumerate(_ranges(metadata, name))
        if metadata.row_group(i).num_rows and (bounds is None or keep(*bounds))
    ]


def _holds_any(sorted_values: list[Any]) -> Callable[[Any, Any], bool]:
    def keep(low: Any, high: Any) -> bool:
        return any(low <= v <= high for v in sorted_values)

    return keep


def rows_of(wide: pa.Table) -> list[Row]:
    """Wide rows as Row values."""
    columns = {name: wide[name].to_pylist() for name in wide.column_names}
    hashes = [h.hex() for h in columns["subject_hash"]]
    return [
        Row(
            subject_hash=hashes[i],
            object_url=columns["object_url"][i],
            origin_seq=columns["origin_seq"][i],
            rows=columns["rows"][i],
            subjects=columns["subjects"][i],
            version_id=columns["version_id"][i],
            etag=columns["etag"][i],
            zone=columns["zone"][i],
            format=columns["format"][i],
            matching_fingerprint=columns["matching_fingerprint"][i],
            key_fingerprint=columns["key_fingerprint"][i],
            updated_at=columns["updated_at"][i],
        )
        for i in range(wide.num_rows)
    ]


@dataclass
class SegmentReader:
    files: SegmentFiles

    def _read(self, parquet: pq.ParquetFile, groups: list[int], columns: list[str]) -> pa.Table:
        if not groups:
            return pa.schema([parquet.schema_arrow.field(c) for c in columns]).empty_table()
        return parquet.read_row_groups(groups, columns=columns, use_threads=False)

    def _objects(self, segment: SegmentItem, ids: Collection[int]) -> pa.Table:
        """The object table rows of these ids (the row groups whose id range holds one)."""
        if not ids:
            return OBJECTS_SCHEMA.empty_table()
        parquet = self.files.open(segment.objects_key, segment.objects_etag)
        wanted = sorted(ids)
        groups = groups_holding(parquet.metadata, "object_id", _holds_any(wanted))
        table = self._read(parquet, groups, list(OBJECTS_SCHEMA.names)).cast(OBJECTS_SCHEMA)
        return table.filter(pc.is_in(table["object_id"], value_set=pa.array(wanted, pa.int32())))

    def by_hashes(self, segment: SegmentItem, hashes: Iterable[bytes]) -> list[Row]:
        """The segment's rows of these subject keys (the dataset's width)."""
        wanted = sorted(set(hashes))
        if not wanted:
            return []
        parquet = self.files.open(segment.key, segment.etag)
        groups = groups_holding(parquet.metadata, "subject_hash", _holds_any(wanted))
        if not groups:
            return []
        entries = self._read(parquet, groups, ENTRY_COLUMNS).cast(ENTRIES_SCHEMA)
        value_set = pa.array(wanted, pa.binary())
        entries = entries.filter(pc.is_in(entries["subject_hash"], value_set=value_set))
        if entries.num_rows == 0:
            return []
        objects = self._objects(segment, set(entries["object_id"].to_pylist()))
        return rows_of(widen(entries, objects))

    def hash_groups(self, segment: SegmentItem, hashes: Iterable[bytes]) -> list[int]:
        """The entries' row groups whose statistics may hold one of the hashes (a footer read)."""
        wanted = sorted(set(hashes))
        parquet = self.files.open(segment.key, segment.etag)
        return groups_holding(parquet.metadata, "subject_hash", _holds_any(wanted))

    def by_object(
        self, segment: SegmentItem, object_url: str, hashes: Iterable[bytes] | None = None
    ) -> list[Row]:
        """The segment's rows of one object (of these hashes only, when given)."""
        parquet = self.files.open(segment.objects_key, segment.objects_etag)
        groups = groups_holding(
            parquet.metadata, "object_url", lambda lo, hi: lo <= object_url <= hi
        )
        objects = self._read(parquet, groups, list(OBJECTS_SCHEMA.names)).cast(OBJECTS_SCHEMA)
        objects = objects.filter(pc.equal(objects["object_url"], object_url))
        if objects.num_rows == 0:
            return []
        ids = sorted(objects["object_id"].to_pylist())
        if segment.by_object_etag:
            # level 1: the by-object file, sorted by object: only the object's row groups
            entries_file = self.files.open(segment.by_object_key, segment.by_object_etag)
        else:
            entries_file = self.files.open(segment.key, segment.etag)
        groups = groups_holding(
            entries_file.metadata, "object_id", lambda lo, hi: lo <= ids[-1] and hi >= ids[0]
        )
        if hashes is not None:
            wanted = sorted(set(hashes))
            by_hash = set(groups_holding(entries_file.metadata, "subject_hash", _holds_any(wanted)))
            groups = [g for g in groups if g in by_hash]
        entries = self._read(entries_file, groups, ENTRY_COLUMNS).cast(ENTRIES_SCHEMA)
        keep = pc.is_in(entries["object_id"], value_set=pa.array(ids, pa.int32()))
        if hashes is not None:
            keep = pc.and_(
                keep, pc.is_in(entries["subject_hash"], value_set=pa.array(wanted, pa.binary()))
            )
        return rows_of(widen(entries.filter(keep), objects))

    def object_urls(self, segment: SegmentItem) -> set[str]:
        """The URLs the segment's object table lists (its `object_url` column)."""
        parquet = self.files.open(segment.objects_key, segment.objects_etag)
        groups = list(range(parquet.metadata.num_row_groups))
        return set(self._read(parquet, groups, ["object_url"])["object_url"].to_pylist())

    def whole(self, segment: SegmentItem) -> tuple[pa.Table, pa.Table]:
        """Both files whole: (entries, object table)."""
        entries = from_parquet(self.files.whole(segment.key, segment.etag), ENTRIES_SCHEMA)
        objects = from_parquet(
            self.files.whole(segment.objects_key, segment.objects_etag), OBJECTS_SCHEMA
        )
        return entries, objects


def object_fields_of(row: Row) -> dict[str, str]:
    return {name: getattr(row, name) for name in OBJECT_FIELDS}
