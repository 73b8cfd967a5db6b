"""The index update after an erasure on DynamoDB (moto): an indexer that writes the entry of a
producer's new version between the update's read and its conditional delete wins; the entry
stays, is judged again, and is reported."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.erasure.report import EraseResults, ObjectResult, VersionRef, report_key
from lethe_shared.erasure.requests import (
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.shown import KEYLESS
from lethe_shared.erasure.workflow import update_index
from lethe_shared.index.entry_removal import EntryState, Removal
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryObjectStore
from tests.integration.conftest import LAKE

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
H_SECRET = hash_of_id(KEY, SECRET)
RID = "er-20261122T100000Z-0a1b2c3d"
LAKE_KEY = "reviews/review_date=2026-11-01/part-0.parquet"
URL = s3_url(LAKE, LAKE_KEY)


def _entry(subject: str, version: str, etag: str) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject, object_url=URL, dataset_id="reviews", zone=Zone.LAKE,
        format="parquet", rows=1, version_id=version, etag=etag,
    )  # fmt: skip


class RacingIndex(DynamoSubjectIndex):
    """The indexer (a plain PutItem, as its batch writer does) writes the subject's entry of
    the producer's v10 right before the update's first conditional delete."""

    def __init__(self, table: Any, objects: MemoryObjectStore) -> None:
        super().__init__(table)
        self.table, self.objects, self.raced = table, objects, 0

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        if not self.raced:
            self.objects.put_version(LAKE, LAKE_KEY, "v10")
            self.table.put_item(Item=_entry(H_SECRET, "v10", "e10").to_item())
        self.raced += 1
        return super().remove_unchanged(object_url, expected)


def test_a_concurrent_index_write_during_the_delete_keeps_the_new_entry(
    lethe_tables: dict[str, Any],
) -> None:
    # Given the lake key erasure rewrote (read v2 and v1, wrote v9), indexed for the subject
    # (v2) and another subject's flag of v1 (purged)
    objects = MemoryObjectStore()
    objects.put_version(LAKE, LAKE_KEY, "v9")
    table = lethe_tables["SubjectIndexTable"]
    index = RacingIndex(table, objects)
    index.replace_object(URL, [_entry(s, "v1", "e1") for s in (H_SECRET, "f" * 64)])
    index.replace_object(URL, [_entry(H_SECRET, "v2", "e2")])  # f flagged (v1)
    requests, documents = MemoryErasureRequests(), MemoryDocuments()
    body = parse_request_body({"subject_ids": [SECRET], "reason": "r", "requested_by": "p@x.io"})
    requests.create(new_request(RID, body, hash_subjects(body, KEY, [])))
    for status in ("REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(RID, ErasureStatus(status), by="test")
    result = ObjectResult(
        object_url=URL, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
        versions_before=(VersionRef(version_id="v2", etag="e2"),
                         VersionRef(version_id="v1", etag="e1")),
        version_after=VersionRef(version_id="v9", etag="e9"),
        rows_before=2, rows_removed=1, rows_after=1, versions_purged=2,
    )  # fmt: skip
    results = EraseResults(
        request_id=RID, manifest_sha256="ab" * 32, correlation_id=RID,
        finished_at=datetime(2026, 11, 22, 12, tzinfo=UTC).isoformat(), objects=(result,),
    )  # fmt: skip
    documents.put(report_key(RID, "results.json"), results.model_dump_json().encode(), "json")

    # When the index is updated (the indexer writing v10's entry meanwhile), then again
    first = update_index(RID, requests=requests, index=index, documents=documents, objects=objects)
    again = update_index(RID, requests=requests, index=index, documents=documents, objects=objects)

    # Then the transaction's condition on v2 failed for the subject: v10's entry stays and is
    # reported; the flag of purged v1 went with the same transaction's resend
    assert first["conditions_failed"] == 1
    assert (first["entries_removed"], first["flagged_pruned"]) == (0, 1)
    assert [(e.version_id, e.etag) for e in index.lookup(H_SECRET)] == [("v10", "e10")]
    assert index.subjects_of(URL) == {H_SECRET}
    kept = [{"object_url": URL, "version_id": "v10", "dataset_id": "reviews", "rows": 1,
             "reason": "later_version"}]  # fmt: skip
    # the step's result names the object by its shown key (no namer given: the dataset prefix
    # only); the reports bucket's index_update.json keeps the real one
    shown = [{**k, "object_url": KEYLESS.url(URL)} for k in kept]
    assert first["kept"] == again["kept"] == shown
    document = json.loads(documents.get(report_key(RID, "index_update.json")) or b"{}")
    assert document["kept"] == kept
    assert (again["entries_removed"], again["flagged_pruned"], again["conditions_failed"]) == (
        0, 0, 0,
    )  # fmt: skip
