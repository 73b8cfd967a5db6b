"""The subject index as immutable sorted segments in S3 with a DynamoDB manifest (issue 20):
`SegmentSubjectIndex`, a second implementation of `lethe_shared.index.subject_index.SubjectIndex`.

Modules: `format` (seq ids, partitions, keys, the Parquet files), `s3_ranges` (ranged GETs,
the footer cache, read counting), `manifest` (the table and its items), `rules` (which rows are
current, older or dead; the pointer derived), `described` (the objects a level-0 write
describes), `reader` (rows by hash, by object, whole), `store` (writing and
committing segments), `lookup` (entries from rows), `compaction`, `erase`, `index` (the
Protocol implementation).
"""

from lethe_shared.index.segments.erase import SegmentErasure, SegmentRewrite
from lethe_shared.index.segments.index import SegmentSubjectIndex
from lethe_shared.index.segments.manifest import manifest_table_definition
from lethe_shared.index.segments.s3_ranges import FooterCache, ReadCounter

__all__ = [
    "FooterCache",
    "ReadCounter",
    "SegmentErasure",
    "SegmentRewrite",
    "SegmentSubjectIndex",
    "manifest_table_definition",
]
