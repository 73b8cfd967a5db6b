"""Pinned matching (lethe_shared.erasure.pins): the frozen report records the subject hash key
the request was hashed with and each dataset's matching definition, every index entry carries
what it was computed with, and the erase job refuses (untouched, named) every object whose pins
do not hold: a changed definition, a rotated key, an entry computed otherwise (or before pins),
a report without pins. The verify run accepts a refused object unread, and the index update
keeps every entry of it so the subjects stay findable."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.matching import Generations, matching_fingerprint
from lethe_shared.datasets.registry import Registration
from lethe_shared.erasure.index_update import not_searched, settle_index
from lethe_shared.erasure.intake import file_request
from lethe_shared.erasure.pins import (
    REFUSAL_REASONS,
    accepts_refused,
    pin_manifest,
    refusals,
    refused_result,
)
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ManifestObject,
    ObjectResult,
    SubjectRows,
    VersionRef,
    build_manifest,
)
from lethe_shared.erasure.requests import hash_subjects, new_request, parse_request_body
from lethe_shared.erasure.workflow import build_report
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from tests.fakes import (
    MemoryDocuments,
    MemoryErasureRequests,
    MemoryIndex,
    MemoryObjectStore,
    MemoryRegistry,
)

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
ROTATED = b"r" * 32
KEY_FP = key_fingerprint(KEY)
SECRET = "u-SECRET-1001"
H_SECRET = hash_of_id(KEY, SECRET)
H_OTHER = hash_of_id(KEY, "u-2002")
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LAKE = "lethe-local-lake-123456789012-us-east-1"
RAW = "lethe-local-raw-123456789012-us-east-1"
REVIEWS_URL = s3_url(LAKE, "reviews/review_date=2026-11-01/part-0.parquet")
REVIEWS_RAW_URL = s3_url(RAW, "reviews/2026/11/01/upload.jsonl")
ORDERS_URL = s3_url(LAKE, "orders/day=2026-11-01/part-0.parquet")
WIDENED_URL = s3_url(RAW, "reviews/2026/11/02/failed.jsonl")


def dataset(dataset_id: str, subject: str, kind: str = "string") -> Dataset:
    return parse_dataset(
        {
            "dataset_id": dataset_id,
            "format": "jsonl",
            "subject_columns": [subject],
            "schema": [
                {"name": subject, "type": kind},
                *({"name": c, "type": "string"} for c in ("user_id", "email") if c != subject),
            ],
        }
    )


REVIEWS = dataset("reviews", "user_id")
ORDERS = dataset("orders", "customer_id")


def entry(url: str, dataset_id: str, subject: str = H_SECRET, **pins: str) -> IndexEntry:
    found = dict(
        matching_fingerprint=matching_fingerprint(REVIEWS if dataset_id == "reviews" else ORDERS),
        key_fingerprint=KEY_FP,
    )
    return IndexEntry(
        subject_hash=subject, object_url=url, dataset_id=dataset_id, zone=Zone.LAKE,
        format="parquet", rows=1, version_id="v1", etag="e1", **(found | pins),
    )  # fmt: skip


def indexed(*entries: IndexEntry) -> tuple[MemoryIndex, MemoryObjectStore]:
    index, objects = MemoryIndex(), MemoryObjectStore()
    for found in entries:
        index.entries[(found.subject_hash, found.object_url)] = found
        bucket, key = found.object_url[5:].split("/", 1)
        if not objects.versions_of(bucket, key):
            objects.put_version(bucket, key, "v1")
    return index, objects


def pinned_manifest(registry: MemoryRegistry, *entries: IndexEntry) -> Manifest:
    index, objects = indexed(*entries)
    built = build_manifest(RID, [H_SECRET], 1, index=index, objects=objects, now=T0)
    return pin_manifest(built, key_fingerprint=KEY_FP, registry=registry)


def widened(manifest: Manifest) -> Manifest:
    """The manifest with a raw key the report added without index entries (scope.widen)."""
    added = ManifestObject(
        object_url=WIDENED_URL, bucket=RAW, key=WIDENED_URL.split("/", 3)[3],
        dataset_id="reviews", zone=Zone.RAW, format="jsonl", state=manifest.objects[0].state,
        expected_rows=0, subjects=(), versions=(), widened_from="FAILED",
    )  # fmt: skip
    return manifest.model_copy(update={"objects": (*manifest.objects, added)})


def registrations(registry: MemoryRegistry, *ids: str) -> dict[str, Registration]:
    found = {d: registry.registration(d) for d in ids}
    return {d: r for d, r in found.items() if r is not None}


def reasons(manifest: Manifest, registry: MemoryRegistry, key: bytes = KEY) -> dict[str, str]:
    refused = refusals(
        manifest, key_fingerprint=key_fingerprint(key),
        registrations=registrations(registry, "reviews", "orders"),
    )  # fmt: skip
    for gap in refused.values():
        assert SECRET not in gap.detail  # no id
        assert H_SECRET not in gap.detail  # no hash
        assert "then file a new request" in gap.detail
    return {url: gap.reason for url, gap in refused.items()}


# ------------------------------------------------------------------------ the frozen report


def test_intake_records_the_key_the_ids_were_hashed_with() -> None:
    class Starter:
        def start(self, request_id: str) -> str:
            return f"arn:aws:states:us-east-1:123456789012:execution:erasure:{request_id}"

    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "t", "requested_by": "dpo@example.com"}
    )
    filed = file_request(
        body, hash_key=KEY, datasets=[REVIEWS], requests=MemoryErasureRequests(),
        starter=Starter(), now=T0,
    )  # fmt: skip

    assert filed.request.key_fingerprint == KEY_FP
    assert "key_fingerprint" in filed.request.public()  # a fingerprint reveals nothing


def test_the_report_pins_the_key_each_dataset_and_each_entry() -> None:
    # Given a request filed with KEY, SECRET indexed in reviews (an entry of a definition
    # changed since: generation 2) and in orders (an entry written before pins)
    registry = MemoryRegistry(REVIEWS, ORDERS)
    registry.put(dataset("reviews", "user_id", "bigint"))  # generation 2 (not yet re-indexed)
    requests = MemoryErasureRequests()
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "t", "requested_by": "dpo@example.com"}
    )
    subjects = hash_subjects(body, KEY, [])
    requests.create(new_request(RID, body, subjects, now=T0, key_fingerprint=KEY_FP))
    index, objects = indexed(
        entry(REVIEWS_URL, "reviews"),
        entry(ORDERS_URL, "orders", matching_fingerprint="", key_fingerprint=""),
    )
    documents = MemoryDocuments()

    # When the report is frozen
    build_report(
        RID, requests=requests, index=index, objects=objects, documents=documents, now=T0,
        registry=registry,
    )  # fmt: skip

    # Then the manifest records the key, each dataset's registration, each entry's pin
    stored = json.loads(documents.bodies[f"erasure/{RID}/manifest.json"])
    assert stored["manifest_version"] == 3
    assert stored["key_fingerprint"] == KEY_FP
    reviews_now = registry.registration("reviews")
    assert reviews_now is not None
    assert stored["dataset_pins"] == [
        {"dataset_id": "orders", "matching_generation": 1,
         "matching_fingerprint": matching_fingerprint(ORDERS)},
        {"dataset_id": "reviews", "matching_generation": 2,
         "matching_fingerprint": reviews_now.matching_fingerprint},
    ]  # fmt: skip
    pins = {
        o["dataset_id"]: [(s["matching_fingerprint"], s["key_fingerprint"]) for s in o["subjects"]]
        for o in stored["objects"]
    }
    assert pins == {"orders": [("", "")], "reviews": [(matching_fingerprint(REVIEWS), KEY_FP)]}


def test_a_manifest_made_before_pins_still_parses_and_has_none() -> None:
    old = {
        "manifest_version": 2, "request_id": RID, "created_at": T0.isoformat(),
        "subject_hashes": [H_SECRET], "subject_count": 1,
        "objects": [{
            "object_url": REVIEWS_URL, "bucket": LAKE, "key": "k", "dataset_id": "reviews",
            "zone": "lake", "format": "parquet", "state": "current", "expected_rows": 1,
            "subjects": [{"subject_hash": H_SECRET, "rows": 1, "older_versions_only": False,
                          "version_id": "v1", "etag": "e1"}],
            "versions": [],
        }],
    }  # fmt: skip
    manifest = Manifest.model_validate(old)
    assert (manifest.key_fingerprint, manifest.dataset_pins) == ("", ())
    assert manifest.objects[0].subjects[0].matching_fingerprint == ""
    # and the erase job refuses every object of it (fail closed)
    registry = MemoryRegistry(REVIEWS)
    assert reasons(manifest, registry) == {REVIEWS_URL: "report_unpinned"}


# -------------------------------------------------------------------------- refusal rules


def test_a_report_whose_pins_hold_refuses_nothing() -> None:
    registry = MemoryRegistry(REVIEWS, ORDERS)
    manifest = widened(
        pinned_manifest(registry, entry(REVIEWS_URL, "reviews"), entry(ORDERS_URL, "orders"))
    )
    assert reasons(manifest, registry) == {}


def test_a_rotated_key_refuses_every_object_widened_ones_too() -> None:
    registry = MemoryRegistry(REVIEWS, ORDERS)
    manifest = widened(
        pinned_manifest(registry, entry(REVIEWS_URL, "reviews"), entry(ORDERS_URL, "orders"))
    )

    refused = refusals(
        manifest, key_fingerprint=key_fingerprint(ROTATED),
        registrations=registrations(registry, "reviews", "orders"),
    )  # fmt: skip

    assert {u: g.reason for u, g in refused.items()} == dict.fromkeys(
        (REVIEWS_URL, ORDERS_URL, WIDENED_URL), "hash_key_changed"
    )
    detail = refused[REVIEWS_URL].detail
    assert KEY_FP in detail
    assert key_fingerprint(ROTATED) in detail
    assert "lethe datasets reindex --all" in detail  # records the key each index was rebuilt with
    assert refused[REVIEWS_URL].version_id == ""  # the whole object: every version


def test_a_changed_definition_refuses_every_object_of_that_dataset_only() -> None:
    # Given a report frozen with reviews at generation 1; then its subject column changed
    registry = MemoryRegistry(REVIEWS, ORDERS)
    manifest = widened(
        pinned_manifest(registry, entry(REVIEWS_URL, "reviews"), entry(ORDERS_URL, "orders"))
    )
    registry.put(dataset("reviews", "email"))

    refused = refusals(
        manifest, key_fingerprint=KEY_FP,
        registrations=registrations(registry, "reviews", "orders"),
    )  # fmt: skip

    # Then both reviews objects (the widened one too) are refused, orders' is not
    assert {u: g.reason for u, g in refused.items()} == dict.fromkeys(
        (REVIEWS_URL, WIDENED_URL), "definition_changed"
    )
    detail = refused[REVIEWS_URL].detail
    assert "report: generation 1, fingerprint " + matching_fingerprint(REVIEWS) in detail
    assert "now: generation 2" in detail
    assert "lethe datasets reindex reviews" in detail


def test_a_registration_whose_document_does_not_have_its_recorded_fingerprint_is_refused() -> None:
    # Given a report pinned to reviews generation 1; the registry still says generation 1 and
    # the same fingerprint, but the document the job would match with is another one
    registry = MemoryRegistry(REVIEWS)
    manifest = pinned_manifest(registry, entry(REVIEWS_URL, "reviews"))
    registry.datasets["reviews"] = dataset("reviews", "email")
    now = registry.registration("reviews")
    assert now is not None
    assert now.generations == Generations(matching_fingerprint(REVIEWS), 1, 1)

    assert reasons(manifest, registry) == {REVIEWS_URL: "definition_changed"}


def test_an_entry_computed_otherwise_or_before_pins_refuses_its_object_only() -> None:
    # Given three objects: one whose entries are all pinned as the report, one with an entry
    # computed with another definition, one with an entry written before pins
    registry = MemoryRegistry(REVIEWS, ORDERS)
    other = s3_url(LAKE, "reviews/review_date=2026-11-02/part-0.parquet")
    manifest = widened(
        pinned_manifest(
            registry,
            entry(REVIEWS_URL, "reviews"),
            entry(REVIEWS_URL, "reviews", subject=H_OTHER),
            entry(other, "reviews", matching_fingerprint="0" * 32),
            entry(ORDERS_URL, "orders", matching_fingerprint="", key_fingerprint=""),
        )
    )
    # (the manifest names only the request's subject; H_OTHER's entry is not in it)

    refused = refusals(
        manifest, key_fingerprint=KEY_FP,
        registrations=registrations(registry, "reviews", "orders"),
    )  # fmt: skip

    # Then those two are refused, as index_stale; the widened key (no entries) is not
    assert {u: g.reason for u, g in refused.items()} == {
        other: "index_stale", ORDERS_URL: "index_stale",
    }  # fmt: skip
    assert f"entries: {'0' * 32}/{KEY_FP}" in refused[other].detail
    assert "1 written before entries were pinned" in refused[ORDERS_URL].detail
    assert "1 of 1 index entr(ies)" in refused[ORDERS_URL].detail
    assert "lethe datasets reindex orders --force" in refused[ORDERS_URL].detail


def test_an_entry_of_another_key_refuses_its_object() -> None:
    registry = MemoryRegistry(REVIEWS)
    manifest = pinned_manifest(
        registry, entry(REVIEWS_URL, "reviews", key_fingerprint=key_fingerprint(ROTATED))
    )
    assert reasons(manifest, registry) == {REVIEWS_URL: "index_stale"}


def test_a_dataset_without_a_pin_or_a_manifest_without_a_key_is_refused() -> None:
    registry = MemoryRegistry(REVIEWS, ORDERS)
    manifest = pinned_manifest(registry, entry(REVIEWS_URL, "reviews"), entry(ORDERS_URL, "orders"))
    no_orders = manifest.model_copy(
        update={"dataset_pins": tuple(p for p in manifest.dataset_pins if p.dataset_id != "orders")}
    )
    assert reasons(no_orders, registry) == {ORDERS_URL: "report_unpinned"}
    no_key = manifest.model_copy(update={"key_fingerprint": ""})
    assert reasons(no_key, registry) == dict.fromkeys((REVIEWS_URL, ORDERS_URL), "report_unpinned")


def test_the_first_rule_that_holds_names_the_object() -> None:
    # a rotated key and a changed definition at once: the key is named (it refuses everything)
    registry = MemoryRegistry(REVIEWS)
    manifest = pinned_manifest(registry, entry(REVIEWS_URL, "reviews", matching_fingerprint=""))
    registry.put(dataset("reviews", "email"))
    assert reasons(manifest, registry, key=ROTATED) == {REVIEWS_URL: "hash_key_changed"}
    assert reasons(manifest, registry) == {REVIEWS_URL: "definition_changed"}


# ------------------------------------------------------------- results, verify, index update


def refused_reviews() -> ObjectResult:
    registry = MemoryRegistry(REVIEWS)
    manifest = pinned_manifest(registry, entry(REVIEWS_URL, "reviews"))
    registry.put(dataset("reviews", "email"))
    (gap,) = refusals(
        manifest, key_fingerprint=KEY_FP, registrations=registrations(registry, "reviews")
    ).values()
    return refused_result(manifest.objects[0], gap)


def test_a_refused_object_is_untouched_in_its_result_and_accepted_unread() -> None:
    result = refused_reviews()

    assert (result.action, result.versions_before, result.version_after) == ("refused", (), None)
    assert (result.rows_removed, result.versions_purged) == (0, 0)
    assert [g.reason for g in result.not_searched] == ["definition_changed"]
    assert result.not_searched[0].reason in REFUSAL_REASONS
    assert accepts_refused(result)
    # but not a result that only claims it: no refusal gap, or something was touched
    assert not accepts_refused(result.model_copy(update={"not_searched": ()}))
    assert not accepts_refused(result.model_copy(update={"versions_purged": 1}))
    incomplete = result.model_copy(update={"action": "incomplete"})
    assert not accepts_refused(incomplete)


def test_the_index_update_keeps_every_entry_of_a_refused_object_and_names_it_once() -> None:
    # Given SECRET's entry and another subject's flagged entry of a refused object, and a
    # deleted object next to it
    index, objects = indexed(
        entry(REVIEWS_URL, "reviews"),
        entry(REVIEWS_URL, "reviews", subject=H_OTHER).model_copy(update={"deleted": True}),
        entry(REVIEWS_RAW_URL, "reviews"),
    )
    deleted = ObjectResult(
        object_url=REVIEWS_RAW_URL, dataset_id="reviews", zone=Zone.LAKE, action="deleted",
        versions_before=(VersionRef(version_id="v1", etag="e1"),), version_after=None,
        rows_before=1, rows_removed=1, rows_after=0, versions_purged=1,
    )  # fmt: skip
    results = EraseResults(
        request_id=RID, manifest_sha256="ab" * 32, correlation_id=RID,
        finished_at=(T0 + timedelta(hours=1)).isoformat(), objects=(refused_reviews(), deleted),
    )  # fmt: skip

    # When the index is updated
    update = settle_index(results, [H_SECRET], index=index, objects=objects)

    # Then the refused object keeps both entries (the subject stays findable there), the
    # deleted one loses its entry
    assert set(index.entries) == {(H_SECRET, REVIEWS_URL), (H_OTHER, REVIEWS_URL)}
    assert index.entries[(H_OTHER, REVIEWS_URL)].deleted
    assert update.entries_removed == 1
    assert update.kept == [
        {"object_url": REVIEWS_URL, "version_id": "v1", "dataset_id": "reviews", "rows": 1,
         "reason": "erasure_refused"},
    ]  # fmt: skip
    assert update.kept_reasons["erasure_refused"] == 1
    # and it is not named again as appearing after the erasure: its result names it
    assert not_searched(update.summary()) == ()


@pytest.mark.parametrize("reason", sorted(REFUSAL_REASONS))
def test_every_refusal_reason_is_a_gap_reason(reason: str) -> None:
    item = ManifestObject(
        object_url=REVIEWS_URL, bucket=LAKE, key="k", dataset_id="reviews", zone=Zone.LAKE,
        format="parquet", state="current", expected_rows=1,
        subjects=(SubjectRows(subject_hash=H_SECRET, rows=1, older_versions_only=False,
                              version_id="v1", etag="e1"),),
        versions=(),
    )  # fmt: skip
    result = ObjectResult.model_validate(
        refused_result(
            item,
            refused_reviews().not_searched[0].model_copy(update={"reason": reason}),
        ).model_dump(mode="json")
    )
    assert result.not_searched[0].reason == reason
