"""Legal holds in an erasure (lethe_shared.erasure.legal_holds): a held dataset or subject is left
out of the frozen report and named `legal_hold` (the request cannot end COMPLETED), a hold added
after the report makes the erase job refuse the objects it reaches, untouched, and the index
update leaves the held subjects' entries without naming them a second time."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.holds import HoldView, LegalHold, new_hold
from lethe_shared.erasure.index_update import not_searched, settle_index
from lethe_shared.erasure.legal_holds import apply_holds, hold_refusals, without_held
from lethe_shared.erasure.pins import accepts_refused, refused_result
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ManifestObject,
    ObjectResult,
    VersionRef,
    build_manifest,
    report_notes,
    summary_text,
)
from lethe_shared.erasure.requests import (
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.subjects import group_hashes
from lethe_shared.erasure.workflow import build_report, update_index
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryIndex, MemoryObjectStore

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
KEY_FP = key_fingerprint(KEY)
SECRET, OTHER = "u-SECRET-1001", "u-2002"
H_SECRET, H_OTHER = hash_of_id(KEY, SECRET), hash_of_id(KEY, OTHER)
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LAKE = "lethe-local-lake-123456789012-us-east-1"
RAW = "lethe-local-raw-123456789012-us-east-1"
SHARED_URL = s3_url(LAKE, "reviews/review_date=2026-11-01/part-0.parquet")  # SECRET and OTHER
ALONE_URL = s3_url(RAW, "reviews/2026/11/01/upload.jsonl")  # SECRET alone
ORDERS_URL = s3_url(LAKE, "orders/day=2026-11-01/part-0.parquet")  # SECRET
WIDENED_URL = s3_url(RAW, "reviews/2026/11/02/failed.jsonl")  # never indexed
GROUPS = group_hashes({"reviews": [H_SECRET, H_OTHER], "orders": [H_SECRET, H_OTHER]})


def entry(url: str, dataset_id: str, subject: str) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject, object_url=url, dataset_id=dataset_id, zone=Zone.LAKE,
        format="parquet", rows=2, version_id="v1", etag="e1", key_fingerprint=KEY_FP,
    )  # fmt: skip


def indexed() -> tuple[MemoryIndex, MemoryObjectStore]:
    index, objects = MemoryIndex(), MemoryObjectStore()
    for found in (
        entry(SHARED_URL, "reviews", H_SECRET),
        entry(SHARED_URL, "reviews", H_OTHER),
        entry(ALONE_URL, "reviews", H_SECRET),
        entry(ORDERS_URL, "orders", H_SECRET),
    ):
        index.entries[(found.subject_hash, found.object_url)] = found
        bucket, key = found.object_url[5:].split("/", 1)
        if not objects.versions_of(bucket, key):
            objects.put_version(bucket, key, "v1")
    return index, objects


def manifest() -> Manifest:
    index, objects = indexed()
    built = build_manifest(
        RID, [H_SECRET, H_OTHER], 2, index=index, objects=objects, now=T0, hash_groups=GROUPS
    )
    added = ManifestObject(
        object_url=WIDENED_URL, bucket=RAW, key="reviews/2026/11/02/failed.jsonl",
        dataset_id="reviews", zone=Zone.RAW, format="jsonl", state="current", expected_rows=0,
        subjects=(), versions=(), widened_from="FAILED",
    )  # fmt: skip
    return built.model_copy(update={"objects": (*built.objects, added), "key_fingerprint": KEY_FP})


def subject_hold(dataset_id: str = "reviews", key: str = KEY_FP) -> LegalHold:
    return new_hold(
        dataset_id=dataset_id, reason="litigation", held_by="dpo@example.com",
        subject_hashes={dataset_id: H_SECRET}, key_fingerprint=key, now=T0,
    )  # fmt: skip


def dataset_hold(dataset_id: str) -> LegalHold:
    return new_hold(dataset_id=dataset_id, reason="tax audit", held_by="dpo@example.com", now=T0)


def view(*holds: LegalHold) -> HoldView:
    return HoldView.of(holds, KEY_FP)


# --------------------------------------------------------------------- when the report is frozen


def test_without_holds_the_report_is_unchanged() -> None:
    frozen = manifest()

    assert apply_holds(frozen, view(), RAW) == frozen
    released = subject_hold().model_copy(update={"released_at": T0.isoformat()})
    assert apply_holds(frozen, view(released), RAW) == frozen  # a released hold holds nothing


def test_a_held_subject_is_left_out_of_its_dataset_and_named() -> None:
    hold = subject_hold()

    held = apply_holds(manifest(), view(hold), RAW)

    # Then in reviews, SECRET is neither matched nor listed: the shared object keeps OTHER, the
    # object of SECRET alone is not erased at all, the never-indexed key is matched with OTHER
    assert held.hashes_for("reviews") == (H_OTHER,)
    assert set(held.hashes_for("orders")) == {H_SECRET, H_OTHER}  # the hold is in reviews only
    by_url = {o.object_url: o for o in held.objects}
    assert set(by_url) == {SHARED_URL, ORDERS_URL, WIDENED_URL}
    assert [s.subject_hash for s in by_url[SHARED_URL].subjects] == [H_OTHER]
    assert by_url[SHARED_URL].expected_rows == 2
    # and the report says exactly what was not erased and why, by hold id and counts only
    (gap,) = held.not_searched
    assert (gap.reason, gap.dataset_id, gap.count) == ("legal_hold", "reviews", 1)
    assert gap.object_url == s3_url(RAW, "reviews/")
    assert hold.hold_id in gap.detail
    for text in (gap.detail, *report_notes(held), summary_text(held, "0" * 64, "dpo@x.eu")):
        assert SECRET not in text
        assert H_SECRET not in text
    assert f"Legal hold {hold.hold_id}: 1 subject(s) not erased in dataset reviews" in (
        report_notes(held)
    )
    assert "legal_hold" in summary_text(held, "0" * 64, "dpo@x.eu")
    assert [(p.hold_id, p.dataset_id, p.subject_hashes) for p in held.legal_holds] == [
        (hold.hold_id, "reviews", (H_SECRET,))
    ]


def test_a_held_dataset_is_left_out_whole_and_named_by_its_prefix() -> None:
    hold = dataset_hold("orders")

    held = apply_holds(manifest(), view(hold), RAW)

    assert ORDERS_URL not in {o.object_url for o in held.objects}
    assert {o.object_url for o in held.objects} == {SHARED_URL, ALONE_URL, WIDENED_URL}
    (gap,) = held.not_searched
    assert (gap.reason, gap.object_url, gap.version_id) == (
        "legal_hold", s3_url(RAW, "orders/"), "",
    )  # fmt: skip
    assert "none of its rows were erased" in gap.detail
    assert held.legal_holds[0].subject_hashes == ()


def test_a_subject_hold_under_another_key_holds_its_dataset_whole() -> None:
    held = apply_holds(manifest(), view(subject_hold(key="f" * 16)), RAW)

    assert {o.dataset_id for o in held.objects} == {"orders"}
    assert [g.dataset_id for g in held.not_searched] == ["reviews"]


def test_the_report_step_freezes_the_holds_and_the_record_counts_the_gap() -> None:
    requests, documents = MemoryErasureRequests(), MemoryDocuments()
    body = parse_request_body(
        {"subject_ids": [SECRET, OTHER], "reason": "t", "requested_by": "dpo@example.com"}
    )
    requests.create(new_request(RID, body, hash_subjects(body, KEY, []), now=T0,
                                key_fingerprint=KEY_FP))  # fmt: skip
    index, objects = indexed()
    hold = subject_hold()

    summary = build_report(
        RID, requests=requests, index=index, objects=objects, documents=documents, now=T0,
        widen=lambda m, record: apply_holds(m, HoldView.of([hold], record.key_fingerprint), RAW),
    )  # fmt: skip

    stored = json.loads(documents.bodies[f"erasure/{RID}/manifest.json"])
    assert stored["legal_holds"] == [
        {"hold_id": hold.hold_id, "dataset_id": "reviews", "subject_hashes": [H_SECRET]}
    ]
    assert f"Legal hold {hold.hold_id}: 1 subject(s) not erased in dataset reviews" in (
        summary.notes
    )
    record = requests.get(RID)
    assert record is not None
    assert record.status.value == "REPORTED"
    assert record.report["not_searched"] == [
        {"dataset_id": "reviews", "reason": "legal_hold", "versions": 1}
    ]
    assert record.history[-1].detail.endswith(", 1 not searched")


# ------------------------------------------------------------------ when the erase job starts


def test_a_hold_added_after_the_report_refuses_what_it_reaches() -> None:
    frozen = manifest()  # frozen without holds

    by_subject = hold_refusals(frozen, view(subject_hold()))
    by_dataset = hold_refusals(frozen, view(dataset_hold("orders")))

    # the objects listing SECRET in reviews, and the never-indexed key (it could hold SECRET's
    # rows); not the orders object: the hold is in reviews only
    assert set(by_subject) == {SHARED_URL, ALONE_URL, WIDENED_URL}
    assert set(by_dataset) == {ORDERS_URL}
    for gap in (*by_subject.values(), *by_dataset.values()):
        assert gap.reason == "legal_hold"
        assert "nothing of this object was touched" in gap.detail
        assert H_SECRET not in gap.detail
    # a hold already applied to the report does not refuse again
    assert hold_refusals(apply_holds(frozen, view(subject_hold()), RAW), view(subject_hold())) == {}


def test_a_refused_held_object_is_untouched_and_accepted_unread() -> None:
    frozen = manifest()
    gap = hold_refusals(frozen, view(dataset_hold("orders")))[ORDERS_URL]
    item = next(o for o in frozen.objects if o.object_url == ORDERS_URL)

    result = refused_result(item, gap)

    assert (result.action, result.rows_removed, result.versions_purged) == ("refused", 0, 0)
    assert accepts_refused(result)


# --------------------------------------------------------------------------- the index update


def _results(held: Manifest) -> EraseResults:
    rewritten = ObjectResult(
        object_url=SHARED_URL, dataset_id="reviews", zone=Zone.LAKE, action="rewritten",
        versions_before=(VersionRef(version_id="v1", etag="e1"),),
        version_after=VersionRef(version_id="v2", etag="e2"),
        rows_before=4, rows_removed=2, rows_after=2, versions_purged=1,
    )  # fmt: skip
    deleted = ObjectResult(
        object_url=ORDERS_URL, dataset_id="orders", zone=Zone.LAKE, action="deleted",
        versions_before=(VersionRef(version_id="v1", etag="e1"),), version_after=None,
        rows_before=2, rows_removed=2, rows_after=0, versions_purged=1,
    )  # fmt: skip
    return EraseResults(
        request_id=RID, manifest_sha256="ab" * 32, correlation_id=RID,
        finished_at=(T0 + timedelta(hours=1)).isoformat(), objects=(rewritten, deleted),
    )  # fmt: skip


def test_the_index_update_keeps_the_held_subjects_entries_without_naming_them_again() -> None:
    held = apply_holds(manifest(), view(subject_hold()), RAW)
    index, objects = indexed()
    objects.put_version(LAKE, SHARED_URL.split("/", 3)[3], "v2")

    update = settle_index(
        _results(held), [H_SECRET, H_OTHER], index=index, objects=objects,
        hashes_for=without_held(held, held.hashes_for),
    )  # fmt: skip

    # SECRET's entries in reviews stay (its rows were not erased there); OTHER's goes
    assert (H_SECRET, SHARED_URL) in index.entries
    assert (H_SECRET, ALONE_URL) in index.entries
    assert (H_OTHER, SHARED_URL) not in index.entries
    assert (H_SECRET, ORDERS_URL) not in index.entries  # erased in orders: not held there
    # and nothing is named as "appeared after the erasure": the report named the hold
    assert not_searched(update.summary()) == ()


def test_the_update_index_step_reads_the_holds_from_the_frozen_report() -> None:
    requests, documents = MemoryErasureRequests(), MemoryDocuments()
    body = parse_request_body(
        {"subject_ids": [SECRET, OTHER], "reason": "t", "requested_by": "dpo@example.com"}
    )
    requests.create(new_request(RID, body, hash_subjects(body, KEY, []), now=T0,
                                key_fingerprint=KEY_FP))  # fmt: skip
    index, objects = indexed()
    build_report(
        RID, requests=requests, index=index, objects=objects, documents=documents, now=T0,
        widen=lambda m, record: apply_holds(m, view(subject_hold()), RAW),
    )  # fmt: skip
    held = Manifest.model_validate_json(documents.bodies[f"erasure/{RID}/manifest.json"])
    documents.put(f"erasure/{RID}/results.json", _results(held).model_dump_json().encode(), "")
    for status in (ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED, ErasureStatus.ERASING):
        requests.transition(RID, status, by="test")
    objects.put_version(LAKE, SHARED_URL.split("/", 3)[3], "v2")

    summary = update_index(RID, requests=requests, index=index, documents=documents,
                           objects=objects)  # fmt: skip

    assert (H_SECRET, ALONE_URL) in index.entries
    assert summary["kept"] == []


def test_a_request_from_before_hashes_per_dataset_gets_groups_without_the_held_hash() -> None:
    # a manifest without hash_groups matches every hash in every dataset: holding SECRET in
    # reviews must still keep it out of reviews only
    old = manifest().model_copy(update={"hash_groups": ()})
    assert set(old.hashes_for("reviews")) == {H_SECRET, H_OTHER}

    held = apply_holds(old, view(subject_hold()), RAW)

    assert held.hashes_for("reviews") == (H_OTHER,)
    assert set(held.hashes_for("orders")) == {H_SECRET, H_OTHER}
