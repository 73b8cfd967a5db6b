"""What an erasure searches besides the index (lethe_shared.erasure.scope), on in-memory ports:
the ingestion watermark, the raw versions the index cannot know (searched by adding their keys,
or named as not searched), and what the index holds for the subjects after the erasure (the
index update's look-up), named by the certificate.

SECRET is the raw id of the request's subject: it may reach no record, document or log."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.erasure import scope
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ObjectCheck,
    ObjectResult,
    Verification,
    VersionRef,
    build_manifest,
    canonical_json,
    report_key,
)
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureStatus,
    RequestClosedError,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.workflow import (
    VerificationMissingError,
    build_report,
    update_index,
)
from lethe_shared.erasure.workflow import (
    certify as certify_with,
)
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.conftest import REPO_ROOT
from tests.fakes import (
    MemoryCatalog,
    MemoryDocuments,
    MemoryErasureRequests,
    MemoryIndex,
    MemoryObjectStore,
    MemoryRegistry,
)
from tests.unit.test_certificate import MemorySigner

# certificates and audit records name objects by their shown keys (no dataset is registered
# here: every object is shown `<dataset>/~<keyed hash>`), which these tests compare with
NAMER = KeyNamer(b"n" * 32, lambda _: None)
certify = functools.partial(certify_with, namer=NAMER)
shown = NAMER.key

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
H_SECRET = hash_of_id(KEY, SECRET)
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)  # the request was filed
RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE = "lethe-local-lake-123456789012-us-east-1"
REVIEWS = parse_dataset(json.loads((REPO_ROOT / "samples/reviews.dataset.json").read_text()))
ORDERS = REVIEWS.model_copy(update={"dataset_id": "orders"})
LAKE_URL = s3_url(LAKE, "reviews/review_date=2026-11-01/part-0.parquet")
_SEQUENCE = iter(range(1, 10_000))


@pytest.fixture(autouse=True)
def _no_raw_id_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="lethe")
    yield
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET.casefold() not in logged.casefold()


class World:
    """The ports of one request: catalog, registry, raw bucket, index, records, documents."""

    def __init__(self, *, datasets: list[str] | None = None) -> None:
        self.catalog = MemoryCatalog()
        self.registry = MemoryRegistry(REVIEWS, ORDERS)
        self.objects = MemoryObjectStore()
        self.index = MemoryIndex()
        self.requests = MemoryErasureRequests()
        self.documents = MemoryDocuments()
        body = parse_request_body(
            {"subject_ids": [SECRET], "reason": "ticket 9", "requested_by": "dpo@example.com"}
        )
        record = new_request(RID, body, hash_subjects(body, KEY, []), now=T0)
        if datasets is not None:
            # the scope as filing records it (ErasureRequest.scope, from the body's `datasets`)
            record = ErasureRequest.model_validate(record.model_dump() | {"scope": datasets})
        self.requests.create(record)

    @property
    def record(self) -> ErasureRequest:
        found = self.requests.get(RID)
        assert found is not None
        return found

    def upload(
        self,
        key: str,
        status: ObjectStatus,
        *,
        at: datetime = T0 - timedelta(minutes=3),
        dataset: str = "reviews",
        body: bytes = b"user_id,review_date,stars,text\nu-x,2026-11-20,5,ok\n",
        rows_read: int | None = None,
    ) -> str:
        """A raw upload S3 holds and the catalog records in `status`; its version id."""
        version = self.objects.put(RAW, key, body)
        self.catalog.put_if_newer(
            CatalogItem(
                bucket=RAW,
                key=key,
                version_id=version,
                zone=Zone.RAW,
                status=status,
                sequencer=f"{next(_SEQUENCE):032X}",
                dataset_id=dataset,
                event_time=at.isoformat().replace("+00:00", "Z"),
                rows_read=rows_read,
            )
        )
        return version

    def watch(self, *, waited: int = 0, events: int = 0, at: datetime | None = None) -> Any:
        return scope.watch_ingestion(
            RID,
            requests=self.requests,
            catalog=self.catalog,
            registry=self.registry,
            waited_seconds=waited,
            max_wait_seconds=600,
            settle_seconds=90,
            events_waiting=lambda: events,
            now=at or T0 + timedelta(minutes=5),
        )

    def manifest(self, *, max_added: int = scope.MAX_ADDED_OBJECTS) -> Manifest:
        built = build_manifest(RID, [H_SECRET], 1, index=self.index, objects=self.objects, now=T0)
        return scope.widen(
            built, self.record, catalog=self.catalog, registry=self.registry,
            objects=self.objects, raw_bucket=RAW, max_added=max_added,
        )  # fmt: skip


# ---------------------------------------------------------------------------- watermark


def test_an_upload_still_ingesting_holds_the_report_and_the_record_says_so() -> None:
    world = World()
    world.upload("reviews/2026/11/22/last.csv", ObjectStatus.INGESTING)
    world.upload("reviews/2026/11/22/other.csv", ObjectStatus.RECEIVED)
    world.upload("orders/2026/11/22/o.csv", ObjectStatus.INGESTING, dataset="orders")
    world.upload("reviews/2026/11/21/done.csv", ObjectStatus.INGESTED)

    wait = world.watch()

    assert not wait.settled
    assert wait.in_flight == {"orders": 1, "reviews": 2}
    recorded = world.record.model_dump(mode="json")[scope.WAIT_ATTRIBUTE]
    assert recorded["in_flight"] == {"orders": 1, "reviews": 2}
    assert recorded["settled"] is False
    assert "waiting for 3 upload(s)" in recorded["why"]
    assert "last.csv" not in json.dumps(recorded)  # counts, never keys


def test_the_watermark_settles_once_ingestion_finished() -> None:
    world = World()
    version = world.upload("reviews/2026/11/22/last.csv", ObjectStatus.INGESTING)
    assert not world.watch().settled

    world.catalog.items[(s3_url(RAW, "reviews/2026/11/22/last.csv"), version)] = (
        world.catalog.items[(s3_url(RAW, "reviews/2026/11/22/last.csv"), version)].model_copy(
            update={"status": ObjectStatus.INGESTED}
        )
    )

    wait = world.watch(waited=30)
    assert (wait.settled, wait.in_flight) == (True, {})


def test_uploads_after_the_request_and_lake_objects_do_not_hold_it() -> None:
    world = World()
    world.upload(
        "reviews/2026/11/22/later.csv", ObjectStatus.INGESTING, at=T0 + timedelta(seconds=1)
    )
    world.catalog.put_if_newer(
        CatalogItem(
            bucket=LAKE, key="reviews/review_date=2026-11-22/p.parquet", zone=Zone.LAKE,
            status=ObjectStatus.RECEIVED, sequencer="F" * 32, dataset_id="reviews",
            event_time=(T0 - timedelta(hours=1)).isoformat(),
        )
    )  # fmt: skip

    assert world.watch().settled


def test_the_wait_is_bounded_and_then_settles_with_what_is_still_in_flight() -> None:
    world = World()
    world.upload("reviews/2026/11/22/stuck.csv", ObjectStatus.RECEIVED)

    wait = world.watch(waited=600)

    assert wait.settled
    assert wait.in_flight == {"reviews": 1}
    assert "names them as not searched" in wait.why


def test_the_catalog_must_have_caught_up_with_uploads_made_just_before_the_request() -> None:
    world = World()
    # 10 s after the request, nothing is in flight, but its upload may not be catalogued yet
    assert not world.watch(at=T0 + timedelta(seconds=10)).settled
    # 20 s: the object events queue holds events: they may be the upload's
    assert not world.watch(at=T0 + timedelta(seconds=20), events=3).settled
    # 20 s with an empty queue, or past the batch window and its margin
    assert world.watch(at=T0 + timedelta(seconds=20), events=0).settled
    assert world.watch(at=T0 + timedelta(seconds=91), events=3).settled


def test_a_request_scoped_to_datasets_waits_only_for_those() -> None:
    world = World(datasets=["orders"])
    world.upload("reviews/2026/11/22/last.csv", ObjectStatus.INGESTING)
    assert world.watch().settled
    world.upload("orders/2026/11/22/o.csv", ObjectStatus.INGESTING, dataset="orders")
    assert world.watch().in_flight == {"orders": 1}


def test_the_scope_is_the_one_filing_recorded_from_the_body() -> None:
    # Given a request filed with `datasets` in its body, as the API files it
    body = parse_request_body(
        {"subject_ids": [SECRET], "datasets": ["orders"], "reason": "ticket 9",
         "requested_by": "dpo@example.com"}
    )  # fmt: skip
    record = new_request(RID, body, hash_subjects(body, KEY, [REVIEWS, ORDERS]), now=T0)

    # Then the watermark and the report's widening cover that dataset only
    assert list(scope.scope_datasets(record, [REVIEWS, ORDERS])) == ["orders"]
    unscoped = parse_request_body({"subject_ids": [SECRET], "requested_by": "dpo@example.com"})
    everyone = new_request(RID, unscoped, hash_subjects(unscoped, KEY, [REVIEWS, ORDERS]), now=T0)
    assert list(scope.scope_datasets(everyone, [REVIEWS, ORDERS])) == ["orders", "reviews"]


def test_a_closed_request_is_not_watched() -> None:
    world = World()
    world.requests.transition(RID, ErasureStatus.REJECTED, by="test")
    with pytest.raises(RequestClosedError):
        world.watch()


# --------------------------------------------------------------- a pending re-index

REVIEWS_BY_TEXT = parse_dataset(
    json.loads((REPO_ROOT / "samples/reviews.dataset.json").read_text())
    | {"subject_columns": ["text"]}
)  # another matching definition of reviews: a PUT of it moves the matching generation


def _redefined(world: World) -> None:
    """reviews' matching definition changed: generation 2, its index still generation 1's."""
    world.registry.put(REVIEWS_BY_TEXT)
    registration = world.registry.registration("reviews")
    assert registration is not None
    assert (registration.matching_generation, registration.indexed_generation) == (2, 1)


def test_a_pending_reindex_holds_the_report_and_the_record_says_so() -> None:
    world = World()
    _redefined(world)

    wait = world.watch()

    assert not wait.settled
    assert wait.in_flight == {}
    recorded = world.record.model_dump(mode="json")[scope.WAIT_ATTRIBUTE]
    assert recorded["reindex_pending"] == {
        "reviews": {"matching_generation": 2, "indexed_generation": 1}
    }
    assert recorded["settled"] is False
    assert recorded["why"] == "waiting for the re-index of 1 dataset(s) of its scope (reviews)"


def test_uploads_in_flight_and_a_pending_reindex_are_both_waited_for() -> None:
    world = World()
    _redefined(world)
    world.upload("orders/2026/11/22/o.csv", ObjectStatus.INGESTING, dataset="orders")

    wait = world.watch()

    assert (wait.settled, wait.in_flight, list(wait.reindex_pending)) == (
        False, {"orders": 1}, ["reviews"],
    )  # fmt: skip
    assert wait.why == (
        "waiting for 1 upload(s) older than the request to be ingested and the re-index of "
        "1 dataset(s) of its scope (reviews)"
    )


def test_the_wait_settles_once_the_reindex_succeeded_and_nothing_is_named() -> None:
    world = World()
    _redefined(world)
    assert not world.watch().settled

    assert world.registry.record_indexed("reviews", 2)  # the re-index of generation 2 succeeded

    wait = world.watch(waited=30)
    assert (wait.settled, wait.reindex_pending) == (True, {})
    assert "no dataset of its scope awaits a re-index" in wait.why
    assert world.manifest().not_searched == ()


def test_a_reindex_still_pending_when_the_wait_ends_is_named_not_searched() -> None:
    world = World()
    _redefined(world)

    wait = world.watch(waited=600)

    assert wait.settled  # bounded: the report is frozen anyway
    assert list(wait.reindex_pending) == ["reviews"]
    assert wait.why == (
        "still waiting for the re-index of 1 dataset(s) of its scope (reviews) after 600 s: "
        "freezing the report, which names them as not searched"
    )
    (gap,) = world.manifest().not_searched
    assert (gap.object_url, gap.version_id, gap.dataset_id, gap.reason, gap.count) == (
        s3_url(RAW, "reviews/"), "", "reviews", "reindex_pending", 0,
    )  # fmt: skip
    assert "matching generation 2" in gap.detail
    assert "built for generation 1" in gap.detail
    assert "`lethe datasets reindex reviews`" in gap.detail
    assert gap.detail.endswith("then file the request again")


def test_a_pending_reindex_of_a_dataset_outside_the_scope_is_ignored() -> None:
    world = World(datasets=["orders"])
    _redefined(world)  # reviews, which the request does not reach

    wait = world.watch()

    assert (wait.settled, wait.reindex_pending) == (True, {})
    assert world.manifest().not_searched == ()


def test_a_pending_reindex_named_in_the_report_ends_the_request_incomplete() -> None:
    world = World()
    _redefined(world)  # the wait ended with the re-index still running

    _frozen(world)
    envelope = _erased_and_certified(world)

    record = world.record
    assert (record.status, record.outcome) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert "reindex_pending: 1" in record.error["cause"]
    assert record.report["not_searched"] == [
        {"dataset_id": "reviews", "reason": "reindex_pending", "versions": 1}
    ]
    certificate = envelope["certificate"]
    assert certificate["complete"] is False
    assert [
        (g["dataset_id"], g["bucket"], g["key"], g["version_id"], g["reason"])
        for g in certificate["not_searched"]
    ] == [("reviews", RAW, "reviews/", "", "reindex_pending")]


# ------------------------------------------------------------------------------- widen


def test_a_failed_raw_version_is_added_to_the_objects_the_job_erases() -> None:
    world = World()
    key = "reviews/2026/11/22/failed.csv"
    version = world.upload(key, ObjectStatus.FAILED)

    manifest = world.manifest()

    (added,) = manifest.objects
    assert (added.object_url, added.dataset_id, added.zone, added.format) == (
        s3_url(RAW, key), "reviews", Zone.RAW, "csv",
    )  # fmt: skip
    assert (added.expected_rows, added.subjects, added.state.value) == (0, (), "current")
    assert [v.version_id for v in added.versions] == [version]
    assert manifest.not_searched == ()
    # marked as added from the catalog (the erase job names it a gap if it cannot read it)
    assert added.widened_from == "FAILED"


def test_an_added_key_is_marked_with_its_current_version_s_status() -> None:
    world = World()
    key = "reviews/2026/11/22/retried.csv"
    world.upload(key, ObjectStatus.FAILED)
    world.upload(key, ObjectStatus.SUPERSEDED)

    (added,) = world.manifest().objects

    assert added.widened_from == "SUPERSEDED"
    assert len(added.versions) == 2


def test_an_object_the_index_names_is_not_marked_and_old_manifests_still_read() -> None:
    world = World()
    world.index.entries[(H_SECRET, LAKE_URL)] = IndexEntry(
        subject_hash=H_SECRET, object_url=LAKE_URL, dataset_id="reviews", zone=Zone.LAKE,
        format="parquet", rows=1, version_id="v1",
    )  # fmt: skip

    manifest = world.manifest()

    assert [o.widened_from for o in manifest.objects] == [""]
    old = json.loads(manifest.bytes())
    for item in old["objects"]:
        del item["widened_from"]  # a manifest frozen before the marker existed
    assert Manifest.model_validate(old).objects[0].widened_from == ""


def test_a_superseded_version_adds_its_key_and_an_indexed_key_is_not_added_twice() -> None:
    world = World()
    key = "reviews/2026/11/22/twice.csv"
    old = world.upload(key, ObjectStatus.SUPERSEDED)
    new = world.upload(key, ObjectStatus.INGESTED)
    world.index.entries[(H_SECRET, s3_url(RAW, key))] = IndexEntry(
        subject_hash=H_SECRET, object_url=s3_url(RAW, key), dataset_id="reviews",
        zone=Zone.RAW, format="csv", rows=1, version_id=new,
    )  # fmt: skip

    manifest = world.manifest()

    (item,) = manifest.objects  # the index's own, which the job erases with its older versions
    assert [v.version_id for v in item.versions] == [new, old]
    assert item.subjects  # from the index
    assert manifest.not_searched == ()


def test_versions_still_in_flight_are_named_not_searched() -> None:
    world = World()
    key = "reviews/2026/11/22/last.csv"
    version = world.upload(key, ObjectStatus.INGESTING)

    manifest = world.manifest()

    assert manifest.objects == ()
    (gap,) = manifest.not_searched
    assert (gap.object_url, gap.version_id, gap.dataset_id, gap.reason) == (
        s3_url(RAW, key), version, "reviews", "ingestion_in_flight",
    )  # fmt: skip
    assert "lethe objects reingest --dataset reviews" in gap.detail
    assert "file the request again" in gap.detail
    assert key not in gap.detail


def test_a_version_quarantined_whole_is_named_and_a_partly_rejected_one_is_indexed() -> None:
    world = World()
    whole = world.upload("reviews/2026/11/22/binary.csv", ObjectStatus.QUARANTINED, rows_read=0)
    world.upload("reviews/2026/11/22/rejected.csv", ObjectStatus.QUARANTINED, rows_read=4)

    manifest = world.manifest()

    assert manifest.objects == ()
    assert [(g.version_id, g.reason) for g in manifest.not_searched] == [(whole, "quarantined")]


def test_an_unreadable_older_version_of_a_key_the_job_erases_is_deleted_not_named() -> None:
    world = World()
    key = "reviews/2026/11/22/fixed.csv"
    world.upload(key, ObjectStatus.QUARANTINED, rows_read=0)
    world.upload(key, ObjectStatus.FAILED)  # the producer's corrected file, whose run failed

    manifest = world.manifest()

    (added,) = manifest.objects
    assert len(added.versions) == 2  # the job reads the current one and deletes the older
    assert manifest.not_searched == ()


def test_an_archived_version_is_named_and_its_key_is_not_added() -> None:
    world = World()
    key = "reviews/2025/01/01/cold.csv"
    version = world.upload(key, ObjectStatus.FAILED)
    world.objects.archive(RAW, key, version, "DEEP_ARCHIVE")

    manifest = world.manifest()

    assert manifest.objects == ()
    (gap,) = manifest.not_searched
    assert (gap.version_id, gap.reason) == (version, "archived")
    assert "DEEP_ARCHIVE" in gap.detail


def test_versions_s3_no_longer_holds_are_not_searched_for() -> None:
    world = World()
    key = "reviews/2026/11/22/gone.csv"
    version = world.upload(key, ObjectStatus.FAILED)
    world.objects.delete_version(RAW, key, version)

    assert world.manifest() == build_manifest(
        RID, [H_SECRET], 1, index=world.index, objects=world.objects, now=T0
    )


def test_past_the_bound_of_added_keys_failed_versions_are_named() -> None:
    world = World()
    world.upload("reviews/a.csv", ObjectStatus.FAILED)
    second = world.upload("reviews/b.csv", ObjectStatus.FAILED)

    manifest = world.manifest(max_added=1)

    assert [o.key for o in manifest.objects] == ["reviews/a.csv"]
    (gap,) = manifest.not_searched
    assert (gap.version_id, gap.reason) == (second, "ingestion_failed")
    assert "lethe objects reingest --dataset reviews --status FAILED" in gap.detail


def test_the_frozen_report_shows_what_is_not_searched(tmp_path: Path) -> None:
    world = World()
    world.upload("reviews/2026/11/22/last.csv", ObjectStatus.INGESTING)
    world.upload("reviews/2026/11/22/next.csv", ObjectStatus.RECEIVED)
    world.upload("orders/2026/11/22/binary.csv", ObjectStatus.QUARANTINED, dataset="orders")
    world.upload("reviews/2026/11/22/failed.csv", ObjectStatus.FAILED)

    summary = build_report(
        RID, requests=world.requests, index=world.index, objects=world.objects,
        documents=world.documents, now=T0 + timedelta(minutes=30),
        widen=lambda m, r: scope.widen(
            m, r, catalog=world.catalog, registry=world.registry, objects=world.objects,
            raw_bucket=RAW,
        ),
    )  # fmt: skip

    manifest = Manifest.model_validate_json(
        world.documents.bodies[report_key(RID, "manifest.json")]
    )
    assert [g.reason for g in manifest.not_searched] == [
        "quarantined", "ingestion_in_flight", "ingestion_in_flight",
    ]  # fmt: skip
    assert summary.objects == 1  # the failed upload, searched by the erase job
    text = world.documents.bodies[report_key(RID, "summary.txt")].decode()
    assert "NOT SEARCHED" in text
    assert "reviews                  ingestion_in_flight            2" in text
    assert "orders                   quarantined                    1" in text
    page = world.documents.bodies[report_key(RID, "summary.html")].decode()
    assert '<h2 id="not-searched">' in page
    assert '<td>ingestion_in_flight</td><td class="n">2</td>' in page
    for document in (text, page):
        assert "last.csv" not in document
        assert "binary.csv" not in document
    record = world.record
    assert record.report["not_searched"] == [
        {"dataset_id": "orders", "reason": "quarantined", "versions": 1},
        {"dataset_id": "reviews", "reason": "ingestion_in_flight", "versions": 2},
    ]
    assert record.history[-1].detail.endswith("3 not searched")


def test_a_report_with_nothing_left_out_has_no_not_searched_section() -> None:
    world = World()
    build_report(
        RID, requests=world.requests, index=world.index, objects=world.objects,
        documents=world.documents, now=T0,
        widen=lambda m, r: scope.widen(
            m, r, catalog=world.catalog, registry=world.registry, objects=world.objects,
            raw_bucket=RAW,
        ),
    )  # fmt: skip
    assert "NOT SEARCHED" not in world.documents.bodies[report_key(RID, "summary.txt")].decode()
    assert "not_searched" not in world.record.report


# ------------------------------------------- entries indexed after the report: the certificate
#
# The index update's final look-up (lethe_shared.erasure.index_update) finds what the index
# holds for the subjects after the erasure; the certificate step names each entry.


def _results(world: World, *objects: ObjectResult) -> bytes:
    """The erase job's results over the approved report (whose SHA-256 the record holds)."""
    record = world.requests.get(RID)
    assert record is not None
    return canonical_json(
        EraseResults(
            request_id=RID, manifest_sha256=record.report["manifest_sha256"], correlation_id="c",
            finished_at="t", objects=objects,
        ).model_dump(mode="json")
    )  # fmt: skip


def _entry(url: str, version: str, rows: int = 1) -> IndexEntry:
    return IndexEntry(
        subject_hash=H_SECRET, object_url=url, dataset_id="reviews", zone=Zone.LAKE,
        format="parquet", rows=rows, version_id=version,
    )  # fmt: skip


LAKE_KEY = LAKE_URL.split("/", 3)[3]
REWRITTEN = ObjectResult(
    object_url=LAKE_URL, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
    versions_before=(VersionRef(version_id="lv1"),), version_after=VersionRef(version_id="lv2"),
    rows_before=3, rows_removed=1, rows_after=2, versions_purged=1,
)  # fmt: skip


def _frozen(world: World) -> None:
    """The report frozen over the lake object (indexed for SECRET in version lv1, which the
    erasure then rewrote into lv2), and the request approved and erasing."""
    world.objects.put_version(LAKE, LAKE_KEY, "lv1")
    world.index.entries[(H_SECRET, LAKE_URL)] = _entry(LAKE_URL, "lv1", rows=1)
    build_report(
        RID, requests=world.requests, index=world.index, objects=world.objects,
        documents=world.documents, now=T0,
        widen=lambda m, r: scope.widen(
            m, r, catalog=world.catalog, registry=world.registry, objects=world.objects,
            raw_bucket=RAW,
        ),
    )  # fmt: skip
    # certify refuses a request without a recorded approval decision (who and when)
    decision = {"approval": {"decided_by": "dpo@example.com", "decided_at": T0.isoformat()}}
    for status in (ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED, ErasureStatus.ERASING):
        world.requests.transition(
            RID, status, by="test", updates=decision if status == ErasureStatus.APPROVED else None
        )
    world.objects.put_version(LAKE, LAKE_KEY, "lv2")  # the erase job's rewrite
    world.objects.delete_version(LAKE, LAKE_KEY, "lv1")  # and its purge


def _erased_and_certified(world: World) -> Any:
    """The erase job's documents (the lake object rewritten, verified clean), then the
    workflow's Update Index and Certify steps; the certificate's envelope."""
    world.documents.put(
        report_key(RID, "results.json"), _results(world, REWRITTEN), "application/json"
    )
    verification = Verification(
        request_id=RID, correlation_id="c", verified_at=(T0 + timedelta(hours=2)).isoformat(),
        objects=(
            ObjectCheck(object_url=LAKE_URL, ok=True, matching_rows=0, rows=2, versions_left=1),
        ),
    )  # fmt: skip
    world.documents.put(
        report_key(RID, "verification.json"),
        canonical_json(verification.model_dump(mode="json")),
        "application/json",
    )
    update_index(
        RID, requests=world.requests, index=world.index, documents=world.documents,
        objects=world.objects,
    )  # fmt: skip
    certify(RID, requests=world.requests, documents=world.documents, signer=MemorySigner())
    return json.loads(world.documents.bodies[report_key(RID, "certificate.json")])


def test_an_entry_indexed_after_the_manifest_is_named_in_the_certificate() -> None:
    world = World()
    _frozen(world)
    # an object holding SECRET indexed after the report was frozen, and another subject's entry
    later = s3_url(LAKE, "reviews/review_date=2026-11-23/part-0.parquet")
    world.index.entries[(H_SECRET, later)] = _entry(later, "v9", rows=2)
    other = hash_of_id(KEY, "u-other")
    world.index.entries[(other, later)] = _entry(later, "v9").model_copy(
        update={"subject_hash": other}
    )  # another subject's: not the request's

    envelope = _erased_and_certified(world)

    # the request is not COMPLETED: FAILED, outcome INCOMPLETE
    record = world.record
    assert (record.status, record.outcome) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert "appeared_after_erase: 1" in record.error["cause"]
    # and the signed certificate and the audit record name the later object, once
    certificate = envelope["certificate"]
    assert certificate["complete"] is False
    assert [
        (g["bucket"], g["key"], g["version_id"], g["reason"], g["count"])
        for g in certificate["not_searched"]
    ] == [
        (
            LAKE,
            shown("reviews/review_date=2026-11-23/part-0.parquet"),
            "v9",
            "appeared_after_erase",
            2,
        )
    ]
    audit = json.loads(world.documents.bodies[report_key(RID, "audit.json")])
    assert [(g["object_url"], g["reason"]) for g in audit["not_searched"]] == [
        (NAMER.url(later), "appeared_after_erase")
    ]
    assert other not in json.dumps(audit)
    assert report_key(RID, "after.json") not in world.documents.bodies  # one mechanism only


@pytest.mark.parametrize(
    ("indexed", "named"),
    [("lv2", False), ("lv3", True)],
    ids=["the-version-the-erasure-left", "a-later-version"],
)
def test_an_entry_of_a_version_the_erasure_handled_is_not_named_but_a_later_one_is(
    indexed: str, named: bool
) -> None:
    world = World()
    _frozen(world)
    if indexed == "lv3":  # a producer wrote a version after the erasure read the key
        world.objects.put_version(LAKE, LAKE_KEY, "lv3")
    world.index.entries[(H_SECRET, LAKE_URL)] = _entry(LAKE_URL, indexed)

    certificate = _erased_and_certified(world)["certificate"]

    gaps = [(g["key"], g["version_id"], g["reason"]) for g in certificate["not_searched"]]
    assert gaps == ([(shown(LAKE_KEY), "lv3", "appeared_after_erase")] if named else [])
    assert world.record.status is (ErasureStatus.FAILED if named else ErasureStatus.COMPLETED)


def test_the_certificate_needs_the_index_update_s_look_up() -> None:
    world = World()
    _frozen(world)
    world.documents.put(
        report_key(RID, "results.json"), _results(world, REWRITTEN), "application/json"
    )
    world.documents.put(
        report_key(RID, "verification.json"),
        canonical_json(
            Verification(
                request_id=RID, correlation_id="c", verified_at=T0.isoformat(),
                objects=(
                    ObjectCheck(
                        object_url=LAKE_URL, ok=True, matching_rows=0, rows=2, versions_left=1
                    ),
                ),
            ).model_dump(mode="json")
        ),
        "application/json",
    )  # fmt: skip

    with pytest.raises(VerificationMissingError, match=r"index_update\.json"):
        certify(RID, requests=world.requests, documents=world.documents, signer=MemorySigner())

    assert report_key(RID, "certificate.json") not in world.documents.bodies
    assert world.record.status is ErasureStatus.ERASING
