"""What a certificate says of the subject index (issue 20): with the segment store, the erased
subjects' keyed hashes leave S3 within the erasure, and the certificate cites the proof
(`index_erasure`): how many index segments were rewritten without their rows or dropped, how
many old segment files were checked gone (HeadObject: 404; the index bucket is unversioned, so
no older version of a segment remains), and whether the hashes left the index
(`hashes_left_index`: every old file gone and no entry of the subjects kept; a kept entry is
named in `not_searched` as well; with 48-bit prefixes, no row of a subject's prefix kept because
another subject shares it: `prefix_rows_kept`, `prefix_rows_shared`). Read from
index_update.json's `segments` member (lethe_shared.erasure.index_segments), whose SHA-256 the
certificate's `documents` carry; the document lists every rewritten segment (keys, seqs,
ETags). Absent (None) with the DynamoDB store and in certificates signed before it existed: an
additive optional field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from lethe_shared.models import Model


class IndexErasure(Model):
    model_config = ConfigDict(frozen=True, extra="forbid")

    store: Literal["segments"] = "segments"
    segments_rewritten: int = Field(ge=0)
    segments_dropped: int = Field(ge=0)
    old_files_checked_gone: int = Field(ge=0)
    hashes_left_index: bool
    detail: str = ""
    # 48-bit prefixes (hash_bytes=6): rows of a subject's prefix left because another subject,
    # still present, shares it (left out of the document when 0: full-digest certificates are
    # unchanged). `shared`: the row's version holds both subjects (it still counts the erased
    # subject's rows until that object is indexed again: the request is not COMPLETED);
    # `verified_clean`: the version the erasure left, verified free of the subject's rows.
    prefix_rows_kept: int = Field(default=0, ge=0, exclude_if=lambda value: value == 0)
    prefix_rows_shared: int = Field(default=0, ge=0, exclude_if=lambda value: value == 0)


# Left out of the certificate's document when None: a certificate of the DynamoDB store is the
# document it always was (its canonical bytes, hence its digest, unchanged).
INDEX_ERASURE_FIELD: Any = Field(default=None, exclude_if=lambda value: value is None)


def index_erasure_of(document: Mapping[str, Any]) -> IndexErasure | None:
    """The certificate's `index_erasure` from index_update.json (None without `segments`)."""
    segments = document.get("segments")
    if not isinstance(segments, Mapping):
        return None
    left = bool(segments.get("hashes_left_index"))
    rewritten = int(segments.get("segments_rewritten", 0))
    dropped = int(segments.get("segments_dropped", 0))
    gone = int(segments.get("old_files_checked_gone", 0))
    prefix_kept = int(segments.get("prefix_rows_kept", 0))
    prefix_shared = int(segments.get("prefix_rows_shared", 0))
    detail = (
        f"the subjects' keyed hashes were removed from the subject index: {rewritten} index "
        f"segment(s) rewritten without them and {dropped} dropped, {gone} old segment file(s) "
        "checked gone (the index bucket keeps no older version)"
        if left
        else "the subject index still holds entries of the subjects (see not_searched)"
    )
    if prefix_kept:
        detail = (
            f"{rewritten} index segment(s) rewritten without the subjects' rows and {dropped} "
            f"dropped, {gone} old segment file(s) checked gone; the index stores 48-bit "
            f"prefixes of the keyed hashes and keeps {prefix_kept} row(s) whose prefix equals "
            "an erased subject's because another subject, still present, shares it: "
            f"{prefix_shared} in an object version holding both subjects (named in not_searched: "
            "the row still counts the erased subject's rows until the object is indexed again), "
            f"{prefix_kept - prefix_shared} in the version the erasure left, verified on the "
            "full keyed hash to hold none of the erased subjects' rows; index_update.json "
            "lists each object version (segments.datasets[].prefix_rows)"
        )
    return IndexErasure(
        segments_rewritten=rewritten,
        segments_dropped=dropped,
        old_files_checked_gone=gone,
        hashes_left_index=left,
        detail=detail,
        prefix_rows_kept=prefix_kept,
        prefix_rows_shared=prefix_shared,
    )
