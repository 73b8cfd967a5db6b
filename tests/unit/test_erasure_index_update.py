"""The index update after an erasure on in-memory ports (lethe_shared.erasure.index_update via
workflow.update_index): entries of versions the erasure read or wrote go; entries of versions it
never saw stay when S3 still stores them, and are reported (kept) on the step's result and the
request record; a writer that changes an entry between the read and the delete wins.

SECRET is the request's subject; OTHER a subject of the same objects the request does not name.
Versions: the erase job read v2 and v1 of the lake key and wrote v9; it read v3 of the raw key
and deleted it. v10 and v4 are a producer's, written after the erasure read the keys."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe_shared.aws.s3 import NULL_VERSION, s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.erasure.index_update import (
    KEPT_LISTED,
    IndexUpdate,
    not_searched,
    recorded_not_searched,
)
from lethe_shared.erasure.report import (
    EraseResults,
    NotSearched,
    ObjectResult,
    VersionRef,
    canonical_json,
    report_key,
)
from lethe_shared.erasure.requests import (
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.workflow import update_index
from lethe_shared.index.entry_removal import EntryState, Removal
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryIndex, MemoryObjectStore

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
H_SECRET = hash_of_id(KEY, SECRET)
H_OTHER = hash_of_id(KEY, "u-2002")
H_THIRD = hash_of_id(KEY, "u-3003")
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LAKE = "lethe-local-lake-123456789012-us-east-1"
RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE_KEY = "reviews/review_date=2026-11-01/part-0.parquet"
RAW_KEY = "reviews/2026/11/01/upload.jsonl"
LAKE_URL = s3_url(LAKE, LAKE_KEY)
RAW_URL = s3_url(RAW, RAW_KEY)
NEW_URL = s3_url(LAKE, "reviews/review_date=2026-11-03/part-0.parquet")

REWRITTEN = ObjectResult(
    object_url=LAKE_URL, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
    versions_before=(
        VersionRef(version_id="v2", etag="e2"), VersionRef(version_id="v1", etag="e1"),
    ),
    version_after=VersionRef(version_id="v9", etag="e9"),
    rows_before=5, rows_removed=2, rows_after=3, versions_purged=2,
)  # fmt: skip
DELETED = ObjectResult(
    object_url=RAW_URL, dataset_id="reviews", zone=Zone.RAW, action="deleted",
    versions_before=(VersionRef(version_id="v3", etag="e3"),), version_after=None,
    rows_before=1, rows_removed=1, rows_after=0, versions_purged=1,
)  # fmt: skip


@pytest.fixture(autouse=True)
def _logs_hold_no_id_or_hash(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="lethe")
    yield
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET.casefold() not in logged.casefold()
    assert H_SECRET not in logged
    assert H_OTHER not in logged


@pytest.fixture
def requests() -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 88", "requested_by": "privacy@example.com"}
    )
    store.create(new_request(RID, body, hash_subjects(body, KEY, []), now=T0))
    for status in (
        ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED,
        ErasureStatus.ERASING,
    ):  # fmt: skip
        store.transition(RID, status, by="test")
    return store


def entry(
    subject: str, url: str, version: str, etag: str, *, rows: int = 1, zone: Zone = Zone.LAKE
) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject, object_url=url, dataset_id="reviews", zone=zone,
        format="parquet" if zone is Zone.LAKE else "jsonl", rows=rows, version_id=version,
        etag=etag,
    )  # fmt: skip


def flagged(found: IndexEntry) -> IndexEntry:
    return found.model_copy(update={"deleted": True})


def erased(documents: MemoryDocuments, *objects: ObjectResult) -> None:
    results = EraseResults(
        request_id=RID, manifest_sha256="ab" * 32, correlation_id=RID,
        finished_at=(T0 + timedelta(hours=2)).isoformat(), objects=objects,
    )  # fmt: skip
    documents.put(
        report_key(RID, "results.json"), canonical_json(results.model_dump(mode="json")), "json"
    )


def stored(*versions: tuple[str, str, str]) -> MemoryObjectStore:
    """S3 after the erasure: (bucket, key, version id) of every version still stored."""
    objects = MemoryObjectStore()
    for bucket, key, version in versions:
        objects.put_version(bucket, key, version)
    return objects


def run(
    requests: MemoryErasureRequests,
    index: MemoryIndex,
    documents: MemoryDocuments,
    objects: MemoryObjectStore,
) -> dict[str, Any]:
    return update_index(
        RID, requests=requests, index=index, documents=documents, objects=objects, namer=NAMER
    )


# the step's result and the request record name kept objects by their shown keys; the
# document (index_update.json) by their real ones
NAMER = KeyNamer(b"n" * 32, lambda _: None)


def shown(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**k, "object_url": NAMER.url(k["object_url"])} for k in kept]


def test_a_producer_version_indexed_between_the_erase_and_the_update_keeps_its_entries(
    requests: MemoryErasureRequests,
) -> None:
    # Given the lake key erasure rewrote (v2 read, v9 written), then a producer's v10 holding
    # SECRET and OTHER, which the indexer indexed before the index update ran
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = stored((LAKE, LAKE_KEY, "v9"), (LAKE, LAKE_KEY, "v10"))
    index.replace_object(
        LAKE_URL, [entry(s, LAKE_URL, "v10", "e10", rows=2) for s in (H_SECRET, H_OTHER)]
    )
    erased(documents, REWRITTEN)

    # When the index is updated
    counts = run(requests, index, documents, objects)

    # Then SECRET's entry of v10 stays (v10 holds its rows: the erasure never read it), and
    # the update says so: on its result, in its document and on the request record
    kept = [{"object_url": LAKE_URL, "version_id": "v10", "dataset_id": "reviews", "rows": 2,
             "reason": "later_version"}]  # fmt: skip
    assert index.entries[(H_SECRET, LAKE_URL)].version_id == "v10"
    assert index.entries[(H_OTHER, LAKE_URL)].version_id == "v10"
    assert counts["kept"] == shown(kept)
    assert [counts[k] for k in ("entries_removed", "flagged_pruned", "entries_kept")] == [0, 0, 1]
    assert counts["kept_reasons"]["later_version"] == 1
    record = requests.get(RID)
    assert record is not None
    assert (record.model_extra or {})["index"] == counts
    document = json.loads(documents.bodies[report_key(RID, "index_update.json")])
    assert document["kept"] == kept
    assert counts["document"] == documents.url(report_key(RID, "index_update.json"))
    # and the certificate step can name it as not searched, without any id or hash
    assert recorded_not_searched(record) == (
        NotSearched(
            object_url=NAMER.url(LAKE_URL), version_id="v10", dataset_id="reviews",
            reason="appeared_after_erase", count=2,
            detail="the index names this version for 2 row(s) of the request's subjects: a "
            "version the erasure never read or wrote (written after it read the key)",
        ),
    )  # fmt: skip
    assert H_SECRET not in json.dumps(counts)
    assert H_SECRET not in json.dumps(document)


def test_entries_of_versions_the_erasure_read_or_wrote_are_removed(
    requests: MemoryErasureRequests,
) -> None:
    # Given SECRET's entry of the lake key describing v2 (read), and of a key erasure found
    # clean describing the version it left (v5, read and kept), OTHER's entries of both
    index, documents = MemoryIndex(), MemoryDocuments()
    clean_url = s3_url(LAKE, "reviews/review_date=2026-11-02/part-0.parquet")
    unchanged = REWRITTEN.model_copy(
        update={
            "object_url": clean_url, "action": "unchanged",
            "versions_before": (VersionRef(version_id="v5", etag="e5"),),
            "version_after": VersionRef(version_id="v5", etag="e5"),
            "rows_removed": 0, "versions_purged": 0,
        }
    )  # fmt: skip
    index.replace_object(LAKE_URL, [entry(s, LAKE_URL, "v2", "e2") for s in (H_SECRET, H_OTHER)])
    index.replace_object(clean_url, [entry(s, clean_url, "v5", "e5") for s in (H_SECRET, H_OTHER)])
    index.replace_object(NEW_URL, [entry(H_OTHER, NEW_URL, "v7", "e7")])
    erased(documents, REWRITTEN, unchanged)
    objects = stored((LAKE, LAKE_KEY, "v9"), (LAKE, clean_url.split("/", 3)[3], "v5"))

    counts = run(requests, index, documents, objects)

    assert counts["entries_removed"] == 2
    assert (counts["entries_kept"], counts["kept"]) == (0, [])
    assert sorted(index.entries) == sorted(
        [(H_OTHER, LAKE_URL), (H_OTHER, clean_url), (H_OTHER, NEW_URL)]
    )
    assert index.lookup(H_SECRET) == []
    record = requests.get(RID)
    assert record is not None
    assert recorded_not_searched(record) == ()


class RacingIndex(MemoryIndex):
    """The indexer writes SECRET's entry of the producer's v10 between the update's read of the
    entries and its conditional delete (once)."""

    def __init__(self, objects: MemoryObjectStore) -> None:
        super().__init__()
        self.objects = objects
        self.raced = False

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        if not self.raced and object_url == LAKE_URL:
            self.raced = True
            self.objects.put_version(LAKE, LAKE_KEY, "v10")
            self.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, "v10", "e10")])
        return super().remove_unchanged(object_url, expected)


def test_a_writer_between_the_read_and_the_delete_wins(requests: MemoryErasureRequests) -> None:
    # Given SECRET's entry of v2 (which the erasure read), read by the update, and the indexer
    # writing v10's entry for SECRET before the delete
    objects = stored((LAKE, LAKE_KEY, "v9"))
    index, documents = RacingIndex(objects), MemoryDocuments()
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, "v2", "e2")])
    erased(documents, REWRITTEN)

    counts = run(requests, index, documents, objects)

    # Then the delete's condition (still v2) fails: v10's entry stays, judged again, and is kept
    assert index.raced
    assert index.entries[(H_SECRET, LAKE_URL)].version_id == "v10"
    assert (counts["entries_removed"], counts["conditions_failed"]) == (0, 1)
    assert [(k["version_id"], k["reason"]) for k in counts["kept"]] == [("v10", "later_version")]


def test_a_key_erasure_deleted_keeps_the_entries_of_a_version_written_since(
    requests: MemoryErasureRequests,
) -> None:
    # Given the raw key erasure deleted (v3 read), then uploaded again by a producer (v4) and
    # indexed for SECRET and OTHER; THIRD's entry still describes v3
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = stored((RAW, RAW_KEY, "v4"))
    index.replace_object(RAW_URL, [entry(H_THIRD, RAW_URL, "v3", "e3", zone=Zone.RAW)])
    index.replace_object(
        RAW_URL, [entry(s, RAW_URL, "v4", "e4", zone=Zone.RAW) for s in (H_SECRET, H_OTHER)]
    )
    erased(documents, DELETED)

    counts = run(requests, index, documents, objects)

    # Then only THIRD's entry of v3 goes (flagged when v4 was indexed: still v3's); v4's stay,
    # SECRET's reported, OTHER's counted
    assert sorted(index.entries) == sorted([(H_SECRET, RAW_URL), (H_OTHER, RAW_URL)])
    assert counts["entries_removed"] == 1
    assert counts["kept_reasons"]["later_version"] == 2
    assert counts["kept"] == shown([{"object_url": RAW_URL, "version_id": "v4",
                                     "dataset_id": "reviews", "rows": 1,
                                     "reason": "later_version"}])  # fmt: skip


def test_a_flag_a_later_version_set_on_the_erasure_s_own_version_is_not_pruned(
    requests: MemoryErasureRequests,
) -> None:
    # Given v9 (erasure's) holding OTHER, then a producer's v10 without OTHER: its indexing
    # flagged OTHER's entry of v9, which v9 still holds; and THIRD's flagged entry of v1 (purged)
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = stored((LAKE, LAKE_KEY, "v9"), (LAKE, LAKE_KEY, "v10"))
    index.replace_object(LAKE_URL, [entry(s, LAKE_URL, "v9", "e9") for s in (H_OTHER, H_THIRD)])
    index.replace_object(LAKE_URL, [entry(H_THIRD, LAKE_URL, "v10", "e10")])  # OTHER flagged
    index.entries[(H_THIRD, LAKE_URL)] = flagged(entry(H_THIRD, LAKE_URL, "v1", "e1"))
    erased(documents, REWRITTEN)

    counts = run(requests, index, documents, objects)

    # Then THIRD's flag of purged v1 is pruned; OTHER's flag of v9 stays, counted
    assert (counts["flagged_pruned"], counts["kept_reasons"]["erasure_version_stored"]) == (1, 1)
    assert list(index.entries) == [(H_OTHER, LAKE_URL)]
    assert index.entries[(H_OTHER, LAKE_URL)].deleted
    assert counts["kept"] == []


def test_an_entry_of_a_version_gone_before_the_erasure_read_the_key_is_removed(
    requests: MemoryErasureRequests,
) -> None:
    # Given SECRET's entry of v0, a version deleted before the erasure listed the key (not in
    # versions_before, not stored), and a flagged OTHER entry of it
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = stored((LAKE, LAKE_KEY, "v9"))
    index.replace_object(LAKE_URL, [entry(s, LAKE_URL, "v0", "e0") for s in (H_SECRET, H_OTHER)])
    index.flag_deleted(LAKE_URL)
    erased(documents, REWRITTEN)

    counts = run(requests, index, documents, objects)

    assert [counts[k] for k in ("entries_removed", "flagged_pruned", "entries_kept")] == [1, 1, 0]
    assert index.entries == {}


def test_the_null_version_of_an_unversioned_key_is_told_apart_by_its_etag(
    requests: MemoryErasureRequests,
) -> None:
    # Given an unversioned lake key erasure rewrote (null/e2 read, null/e9 written), then a
    # producer overwrote it (null/e10) and the indexer indexed that for SECRET
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = MemoryObjectStore()
    objects.put_version(LAKE, LAKE_KEY, NULL_VERSION, b"the producer's rows\n")
    (current,) = objects.versions_of(LAKE, LAKE_KEY)
    result = REWRITTEN.model_copy(
        update={
            "versions_before": (VersionRef(version_id=NULL_VERSION, etag="e2"),),
            "version_after": VersionRef(version_id=NULL_VERSION, etag="e9"),
        }
    )
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, NULL_VERSION, current.etag)])
    index.replace_object(NEW_URL, [entry(H_SECRET, NEW_URL, NULL_VERSION, "e2")])
    erased(documents, result, result.model_copy(update={"object_url": NEW_URL}))

    counts = run(requests, index, documents, objects)

    # Then the entry of the erased content (null/e2) goes, the producer's (null/e10) stays
    assert list(index.entries) == [(H_SECRET, LAKE_URL)]
    assert [(k["object_url"], k["version_id"]) for k in counts["kept"]] == [
        (NAMER.url(LAKE_URL), NULL_VERSION)
    ]


def test_an_object_indexed_after_the_report_is_named(requests: MemoryErasureRequests) -> None:
    # Given SECRET indexed in an object the erasure's results do not list
    index, documents = MemoryIndex(), MemoryDocuments()
    index.replace_object(NEW_URL, [entry(H_SECRET, NEW_URL, "v7", "e7", rows=3)])
    erased(documents, REWRITTEN)

    counts = run(requests, index, documents, stored((LAKE, LAKE_KEY, "v9")))

    assert list(index.entries) == [(H_SECRET, NEW_URL)]
    assert counts["kept"] == shown([{"object_url": NEW_URL, "version_id": "v7",
                                     "dataset_id": "reviews", "rows": 3,
                                     "reason": "object_not_erased"}])  # fmt: skip
    assert "report did not list" in not_searched(counts)[0].detail


def test_running_the_update_twice_removes_nothing_more_and_reports_the_same(
    requests: MemoryErasureRequests,
) -> None:
    # Given a removable entry (v2), a flag to prune (v1) and a kept one (v10)
    index, documents = MemoryIndex(), MemoryDocuments()
    objects = stored((LAKE, LAKE_KEY, "v9"), (LAKE, LAKE_KEY, "v10"))
    index.replace_object(LAKE_URL, [entry(H_OTHER, LAKE_URL, "v1", "e1")])
    index.replace_object(LAKE_URL, [entry(H_THIRD, LAKE_URL, "v2", "e2")])  # OTHER flagged
    index.replace_object(NEW_URL, [entry(H_SECRET, NEW_URL, "v2", "e2")])
    index.replace_object(LAKE_URL, [entry(H_SECRET, LAKE_URL, "v10", "e10")])
    erased(documents, REWRITTEN)

    first = run(requests, index, documents, objects)
    left = dict(index.entries)
    second = run(requests, index, documents, objects)

    assert (first["flagged_pruned"], second["flagged_pruned"], second["entries_removed"]) == (
        2, 0, 0,
    )  # fmt: skip
    assert index.entries == left
    assert second["kept"] == first["kept"] != []
    assert second["kept_reasons"] == first["kept_reasons"]


def test_kept_items_beyond_the_listed_ones_are_named_by_the_document() -> None:
    update = IndexUpdate()
    update.kept = [
        {"object_url": f"s3://{LAKE}/k{n:04d}", "version_id": "v1", "dataset_id": "reviews",
         "rows": 1, "reason": "later_version"}
        for n in range(KEPT_LISTED + 5)
    ]  # fmt: skip
    summary = update.summary("s3://reports/erasure/er-1/index_update.json")

    gaps = not_searched(summary)

    assert (len(summary["kept"]), summary["kept_unlisted"]) == (KEPT_LISTED, 5)
    assert len(gaps) == KEPT_LISTED + 1
    assert {g.reason for g in gaps} == {"appeared_after_erase"}
    assert gaps[-1].object_url == "s3://reports/erasure/er-1/index_update.json"
    assert gaps[-1].detail.startswith("5 more object version(s)")
    assert len(update.document()["kept"]) == KEPT_LISTED + 5
