"""The rewrite of Parquet objects (lake files, raw Parquet) without the erased rows.

- Each row group is read once, whole: its subject columns are matched on it
  (`groups.group_match`, the same rows `match.parquet_matches` finds) and it is written
  without the matching rows. The file is written from the first row group with a match on
  (the row groups before it are read again to be copied), so an object with no match is
  never written; when no row remains, what was written is removed. A file whose row groups
  cannot be read whole, or whose INT96 timestamps must be read at microseconds, is matched
  on its subject columns first and rewritten after (two reads), as before.
- Parquet is rewritten one row group at a time (memory bounded by a row group): each row group
  filtered and written as one row group, an emptied one dropped; per column the same codec,
  dictionary encoding, non-dictionary encoding (DELTA_*, BYTE_STREAM_SPLIT), statistics, page
  index and bloom filter presence; the same sorting columns; the key-value metadata copied
  verbatim (ARROW:schema, when the file had one, is the original bytes; none is added when it
  had none); the writer options (format version, INT96 timestamps, decimals as INT32/INT64,
  list element names, TIME adjusted to UTC) chosen by writing the empty schema under each
  candidate, so that the Parquet schema tree (names, repetition, physical and logical types,
  field ids) is the original one. INT96 columns are read at nanosecond precision unless a value
  lies outside the nanosecond range (1677-2262), then at microseconds, so no date wraps around.
  What pyarrow cannot reproduce is reported in `EraseResult.deviations` (schema lines and
  column paths, never values): Spark's legacy list and map layout (writeLegacyFormat), a file
  mixing INT96 and INT64 timestamps or integer and fixed-length decimals, a codec pyarrow
  cannot write (LZO). Not kept, because the footer does not record it or pyarrow cannot set
  it: the root's name (Spark's `spark_schema` becomes `schema`), `created_by` (names the writer
  of the new file), the compression level (the codec's default), the data page version (1.0),
  page checksums, per row group differences of codec or encoding (the first row group's are
  used), row groups above 64 Mi rows (split).
- Raw Parquet wrapped in gzip is unwrapped, rewritten and wrapped again.
"""

from __future__ import annotations

import bisect
import json
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_jobs.erase_rows.groups import group_match
from lethe_jobs.erase_rows.gzip_members import gzip_file, unwrapped_parquet
from lethe_jobs.erase_rows.match import (
    PARQUET_ERRORS,
    open_parquet,
    parquet_matches,
    scan_parquet,
)
from lethe_jobs.erase_rows.model import (
    EraseResult,
    RowMatches,
    SubjectMatcher,
    rewrite_needed,
    subject_counts,
)
from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers.payload import is_gzip
from lethe_shared.datasets.document import Compression


def erase_parquet(
    kind: ObjectKind,
    source: Path,
    target: Path,
    object_key: str,
    matcher: SubjectMatcher,
    *,
    workdir: Path,
) -> EraseResult:
    raw = kind is ObjectKind.RAW
    # a scratch directory only for a raw object wrapped in gzip (unwrapped there)
    wrapped = raw and is_gzip(source)
    with tempfile.TemporaryDirectory(dir=workdir) if wrapped else nullcontext(None) as scratch:
        local, header = (source, None)
        if wrapped or (raw and matcher.dataset.compression is Compression.GZIP):
            # unwrapped, or refused: declared gzip, it is not
            local, header = unwrapped_parquet(source, matcher.dataset, Path(scratch or workdir))
        out = target if header is None else Path(scratch or workdir) / "erased.parquet"
        result = _erase_in_one_read(local, out, object_key, matcher, raw=raw)
        if result is None:  # the two reads: match the subject columns, then rewrite
            matches = parquet_matches(local, object_key, matcher, raw=raw)
            if not rewrite_needed(matches):
                return EraseResult.of(matches, written=False)
            result = EraseResult.of(
                matches, written=True, deviations=_rewrite_parquet(local, out, matches.positions)
            )
        if result.written and header is not None:
            gzip_file(out, target, header)
    return result


@dataclass(frozen=True)
class _ParquetPlan:
    """How to write a file like the source: the writer's options and the INT96 read unit."""

    int96_unit: str | None
    options: Mapping[str, Any]


def _erase_in_one_read(
    source: Path, out: Path, object_key: str, matcher: SubjectMatcher, *, raw: bool
) -> EraseResult | None:
    """Match and rewrite reading each row group once, whole: the subject columns are matched
    on the row group the rewrite reads anyway. The writer is opened at the first row group
    with a match (the row groups before it, which have none, are read again to be copied), so
    an object with no match is never written. The same rows, counts and output bytes as
    matching (`parquet_matches`) and then rewriting (`_rewrite_parquet`); None when the file
    needs those two reads: INT96 timestamps read at microseconds (the match reads them at
    nanoseconds), or a row group that cannot be read whole."""
    scan = scan_parquet(source, object_key, matcher, raw=raw)
    if scan.gaps:
        return EraseResult.of(RowMatches(scan.rows, (), gaps=scan.gaps), written=False)
    try:  # what the rewrite needs: read here before the match, when it is needed
        plan = _plan(source, scan.parquet)
    except PARQUET_ERRORS:
        return None
    if plan.int96_unit not in (None, "ns"):
        return None
    parquet = scan.parquet if plan.int96_unit is None else open_parquet(source, plan.int96_unit)
    rewrite = _Rewrite(parquet, out, plan)
    found: list[int] = []
    counts: Counter[str] = Counter()
    offset = 0
    try:
        for index in range(parquet.num_row_groups):
            try:
                group = parquet.read_row_group(index)
            except PARQUET_ERRORS:
                rewrite.abandon()
                return None
            try:
                matched = group_match(scan.subject_columns(group), scan.ref, matcher)
            except PARQUET_ERRORS as exc:
                raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
            found += matched.positions(offset)
            counts.update(matched.counts)
            offset += int(group.num_rows)
            rewrite.add(index, group, matched.mask)
        matches = RowMatches(offset, tuple(found), subject_counts(counts))
        if not rewrite_needed(matches):
            rewrite.abandon()
            return EraseResult.of(matches, written=False)
        return EraseResult.of(matches, written=True, deviations=rewrite.finish())
    except BaseException:
        rewrite.abandon()
        raise


class _Rewrite:
    """The rewritten file, written from the first row group with a match on (module docstring
    of `_rewrite_parquet` for what it keeps)."""

    def __init__(self, parquet: Any, out: Path, plan: _ParquetPlan) -> None:
        self.parquet, self.out, self.plan = parquet, out, plan
        self.writer: Any = None
        self.written: list[Any] = []  # the footer of the file written, once closed

    def add(self, index: int, group: Any, drop: Any) -> None:
        """Row group `index`, without the rows `drop` selects (None: none)."""
        if self.writer is None:
            if drop is None:
                return  # copied when a later row group has a match, or never
            schema = self.parquet.schema_arrow.remove_metadata()
            # store_schema=False: the key-value metadata, ARROW:schema included, is the source's;
            # the footer written is collected as the writer closes
            self.writer = pq.ParquetWriter(
                str(self.out),
                schema,
                store_schema=False,
                metadata_collector=self.written,
                **self.plan.options,
            )
            for earlier in range(index):
                self._write(self.parquet.read_row_group(earlier))
        self._write(group if drop is None else group.filter(pc.invert(drop)))

    def _write(self, kept: Any) -> None:
        if kept.num_rows:
            self.writer.write_table(kept, row_group_size=kept.num_rows)

    def finish(self) -> tuple[str, ...]:
        if self.parquet.metadata.metadata:
            self.writer.add_key_value_metadata(self.parquet.metadata.metadata)
        self.writer.close()
        self.writer = None
        return tuple(_deviations(self.parquet.metadata, self.written[-1]))

    def abandon(self) -> None:
        """No file: the writer closed and what it wrote removed."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.out.unlink(missing_ok=True)


def _rewrite_parquet(source: Path, out: Path, drop: Sequence[int]) -> tuple[str, ...]:
    try:
        plan = _plan(source, open_parquet(source))
        parquet = open_parquet(source, plan.int96_unit)
        schema = parquet.schema_arrow.remove_metadata()
        offset = 0
        # store_schema=False: the key-value metadata, ARROW:schema included, is the source's own
        with pq.ParquetWriter(str(out), schema, store_schema=False, **plan.options) as writer:
            for index in range(parquet.num_row_groups):
                group = parquet.read_row_group(index)
                kept = group.filter(_keep_mask(offset, int(group.num_rows), drop))
                offset += int(group.num_rows)
                if kept.num_rows:
                    writer.write_table(kept, row_group_size=kept.num_rows)
            if parquet.metadata.metadata:
                writer.add_key_value_metadata(parquet.metadata.metadata)
        return tuple(_deviations(parquet.metadata, pq.ParquetFile(out).metadata))
    except BaseException:
        out.unlink(missing_ok=True)
        raise


def _keep_mask(offset: int, count: int, drop: Sequence[int]) -> Any:
    """False for the rows of the row group starting at `offset` whose index is in `drop`."""
    low, high = bisect.bisect_left(drop, offset), bisect.bisect_left(drop, offset + count)
    keep = np.ones(count, dtype=bool)
    keep[np.asarray(drop[low:high], dtype=np.int64) - offset] = False
    return pa.array(keep)


def _plan(source: Path, parquet: Any) -> _ParquetPlan:
    """The plan of `source`, opened as `parquet` (INT96 timestamps at the default unit)."""
    unit = _int96_unit(source, parquet.schema)
    opened = parquet if unit is None else open_parquet(source, unit)
    schema = opened.schema_arrow.remove_metadata()
    layout = _schema_options(schema, parquet.schema, parquet.metadata.format_version)
    return _ParquetPlan(unit, {**layout, **_column_options(parquet.metadata)})


def _int96_unit(source: Path, parquet_schema: Any) -> str | None:
    """How to read INT96 timestamps: nanoseconds (exact) unless a value lies outside what
    nanoseconds since 1970 hold, then microseconds (what Spark writes), so none wraps around."""
    columns = [parquet_schema.column(i) for i in range(len(parquet_schema))]
    heads = sorted({c.path.split(".")[0] for c in columns if c.physical_type == "INT96"})
    if not heads:
        return None
    parquet = open_parquet(source, "us")
    for index in range(parquet.num_row_groups):
        group = parquet.read_row_group(index, columns=heads)
        if not all(_fits_nanoseconds(chunk) for c in group.columns for chunk in c.chunks):
            return "us"
    return "ns"


def _fits_nanoseconds(array: Any) -> bool:
    for leaf in _timestamp_leaves(array):
        try:
            pc.cast(leaf, pa.timestamp("ns", leaf.type.tz))
        except pa.ArrowInvalid:
            return False
    return True


_LIST_TYPES = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
    pa.types.is_map,
)


def _timestamp_leaves(array: Any) -> Iterator[Any]:
    kind = array.type
    if pa.types.is_timestamp(kind):
        yield array
    elif pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            yield from _timestamp_leaves(array.field(index))
    elif any(check(kind) for check in _LIST_TYPES):
        yield from _timestamp_leaves(array.flatten())


def _schema_options(arrow_schema: Any, parquet_schema: Any, version: str) -> dict[str, Any]:
    """The writer options under which `arrow_schema` is written as `parquet_schema`, found by
    writing the empty schema under each candidate; when none gives it exactly, the closest (the
    difference is then reported by `_deviations`)."""
    columns = [parquet_schema.column(i) for i in range(len(parquet_schema))]
    fixed = {
        "use_deprecated_int96_timestamps": any(c.physical_type == "INT96" for c in columns),
        "store_decimal_as_integer": any(
            c.logical_type.type == "DECIMAL" and c.physical_type in {"INT32", "INT64"}
            for c in columns
        ),
        "write_time_adjusted_to_utc": any(
            c.logical_type.type == "TIME"
            and json.loads(c.logical_type.to_json())["isAdjustedToUTC"]
            for c in columns
        ),
    }
    versions = ("1.0",) if version == "1.0" else ("2.6", "2.4")
    wanted = _schema_lines(parquet_schema)
    # the choice depends on these alone: probed once per shape in a process (a task's objects
    # of one dataset share it)
    shape = (arrow_schema.serialize().to_pybytes(), tuple(wanted), versions, *fixed.values())
    if shape not in _SCHEMA_OPTIONS:
        if len(_SCHEMA_OPTIONS) >= _SCHEMA_OPTIONS_KEPT:
            _SCHEMA_OPTIONS.clear()
        _SCHEMA_OPTIONS[shape] = _probed_options(arrow_schema, wanted, fixed, versions)
    return dict(_SCHEMA_OPTIONS[shape])


_SCHEMA_OPTIONS: dict[tuple[Any, ...], Mapping[str, Any]] = {}


_SCHEMA_OPTIONS_KEPT = 256


def _probed_options(
    arrow_schema: Any, wanted: list[str], fixed: Mapping[str, Any], versions: tuple[str, ...]
) -> Mapping[str, Any]:
    candidates = [
        {**fixed, "version": v, "use_compliant_nested_type": compliant}
        for v in versions
        for compliant in (True, False)
    ]

    def differences(options: Mapping[str, Any]) -> int:
        found = _schema_lines(_probe(arrow_schema, options))
        return 0 if found == wanted else 1 + len(set(wanted) - set(found))

    return min(candidates, key=differences)  # the first of the closest ones


def _probe(arrow_schema: Any, options: Mapping[str, Any]) -> Any:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, arrow_schema, store_schema=False, **options):
        pass
    return pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema


def _schema_lines(parquet_schema: Any) -> list[str]:
    """The Parquet schema tree as text, one node a line: names, repetition, physical and logical
    types, field ids, group annotations (ParquetSchema.equals compares leaf columns only, not
    the names of the groups above them). Not the root's name, which pyarrow cannot set (Spark
    writes `spark_schema`; no reader uses it)."""
    lines = [line.strip() for line in str(parquet_schema).splitlines() if line.strip()]
    return lines[2:] if lines and lines[0].startswith("<") else lines[1:]


_WRITABLE_CODECS = frozenset({"NONE", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD"})


_PLAIN_ENCODINGS = frozenset({"PLAIN", "RLE", "BIT_PACKED", "PLAIN_DICTIONARY", "RLE_DICTIONARY"})


_COLUMN_ENCODINGS = frozenset(
    {"DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "BYTE_STREAM_SPLIT"}
)


def _codec(name: str) -> str:
    codec = "NONE" if name == "UNCOMPRESSED" else name
    return codec if codec in _WRITABLE_CODECS else "SNAPPY"  # reported as a deviation


def _column_encoding(chunk: Any) -> str | None:
    special = set(chunk.encodings) - _PLAIN_ENCODINGS
    if chunk.has_dictionary_page or len(special) != 1 or not special <= _COLUMN_ENCODINGS:
        return None
    return str(special.pop())


def _column_options(metadata: Any) -> dict[str, Any]:
    """Per column options as the first row group shows them: codec, dictionary, encoding,
    statistics, page index, bloom filter; and the row groups' sorting columns."""
    if metadata.num_row_groups == 0:
        return {}
    group = metadata.row_group(0)
    chunks = [group.column(j) for j in range(group.num_columns)]
    encodings = {c.path_in_schema: _column_encoding(c) for c in chunks}
    most_rows = max(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    bloom = {"ndv": max(1, int(most_rows))}  # at most one distinct value per row
    blooms = {c.path_in_schema: bloom for c in chunks if c.bloom_filter_offset is not None}
    return {
        "compression": {c.path_in_schema: _codec(c.compression) for c in chunks},
        "use_dictionary": [c.path_in_schema for c in chunks if c.has_dictionary_page],
        "column_encoding": {p: e for p, e in encodings.items() if e} or None,
        "write_statistics": [c.path_in_schema for c in chunks if c.is_stats_set],
        "write_page_index": any(c.has_column_index for c in chunks),
        "sorting_columns": group.sorting_columns or None,
        "bloom_filter_options": blooms or None,
    }


def _deviations(before: Any, after: Any) -> list[str]:
    """What the rewritten file does not keep of the source: schema lines, format version,
    key-value metadata keys, codecs (column paths and types only, never values)."""
    found: list[str] = []
    old_schema, new_schema = _schema_lines(before.schema), _schema_lines(after.schema)
    if new_schema != old_schema:
        kept = set(new_schema)
        lost = [line for line in old_schema if line not in kept]
        found += [f"schema: {line!r} is written differently" for line in lost] or ["schema"]
    if after.format_version != before.format_version:
        found.append(f"format version {before.format_version} became {after.format_version}")
    if (after.metadata or {}) != (before.metadata or {}):
        keys = sorted({*(before.metadata or {}), *(after.metadata or {})})
        found.append(f"key-value metadata differs (keys {keys})")
    if before.num_row_groups and after.num_row_groups:
        found += _codec_deviations(before.row_group(0), after.row_group(0))
    return found


def _codec_deviations(before: Any, after: Any) -> list[str]:
    old = {before.column(j).path_in_schema: before.column(j) for j in range(before.num_columns)}
    found = []
    for j in range(after.num_columns):
        chunk = after.column(j)
        original = old.get(chunk.path_in_schema)
        if original is not None and original.compression != chunk.compression:
            found.append(
                f"column {chunk.path_in_schema}: codec {original.compression} "
                f"became {chunk.compression}"
            )
    return found
