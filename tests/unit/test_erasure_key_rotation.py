"""A rotated subject hash key, as the erasure scope sees it (lethe_shared.erasure.scope): a
dataset whose index was built with another key than the one a request's ids were hashed with
(its registry's `indexed_key_fingerprint`, the request's `key_fingerprint`) holds the
report like a pending re-index, is named `reindex_pending` when the wait ends (the request ends
INCOMPLETE), and stops holding it once a re-index with the request's key is recorded."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from lethe_shared.aws.s3 import s3_url
from lethe_shared.erasure import scope
from lethe_shared.erasure.report import Manifest, build_manifest
from lethe_shared.erasure.requests import ErasureStatus
from lethe_shared.erasure.workflow import build_report
from lethe_shared.subject_hashing.keys import key_fingerprint
from tests.unit.test_erasure_scope import (
    H_SECRET,
    KEY,
    LAKE,
    LAKE_KEY,
    LAKE_URL,
    RAW,
    RID,
    T0,
    World,
    _entry,
    _erased_and_certified,
)

OLD = key_fingerprint(KEY)  # the key the request was hashed with, and the datasets indexed with
NEW = key_fingerprint(b"n" * 32)


def _world(*, request_key: str = OLD, indexed: dict[str, str] | None = None) -> World:
    world = World()
    world.requests.update(RID, {"key_fingerprint": request_key})
    world.registry.indexed_keys.update(
        {"reviews": OLD, "orders": OLD} if indexed is None else indexed
    )
    return world


def _watch(world: World, *, waited: int = 0, current: str | None = None) -> Any:
    """The watermark as the erasure steps function runs it: with the current key's fingerprint
    (the request's own key unless `current` says otherwise)."""
    return scope.watch_ingestion(
        RID, requests=world.requests, catalog=world.catalog, registry=world.registry,
        waited_seconds=waited, max_wait_seconds=600, settle_seconds=90,
        events_waiting=lambda: 0, now=T0 + timedelta(minutes=5),
        current_key=current if current is not None else world.record.key_fingerprint,
    )  # fmt: skip


def _manifest(world: World, current: str | None = None) -> Manifest:
    built = build_manifest(RID, [H_SECRET], 1, index=world.index, objects=world.objects, now=T0)
    return scope.widen(
        built, world.record, catalog=world.catalog, registry=world.registry,
        objects=world.objects, raw_bucket=RAW,
        current_key=current if current is not None else world.record.key_fingerprint,
    )  # fmt: skip


def test_datasets_indexed_with_the_request_s_key_hold_nothing() -> None:
    world = _world()

    wait = _watch(world)

    assert (wait.settled, wait.reindex_pending) == (True, {})
    assert _manifest(world).not_searched == ()


def test_a_request_hashed_with_a_new_key_waits_for_the_datasets_indexed_with_the_old_one() -> None:
    world = _world(request_key=NEW, indexed={"reviews": OLD, "orders": NEW})

    wait = _watch(world)

    assert not wait.settled
    assert wait.why == "waiting for the re-index of 1 dataset(s) of its scope (reviews)"
    recorded = world.record.model_dump(mode="json")[scope.WAIT_ATTRIBUTE]
    assert recorded["reindex_pending"] == {
        "reviews": {
            "matching_generation": 1,
            "indexed_generation": 1,
            "key_fingerprint": NEW,
            "indexed_key_fingerprint": OLD,
        }
    }


def test_the_key_is_checked_only_given_the_current_one() -> None:
    # the erasure steps function always gives it (functions/erasure_steps); without it only
    # generations count, as before
    world = _world(request_key=NEW)

    unchecked = scope.watch_ingestion(
        RID, requests=world.requests, catalog=world.catalog, registry=world.registry,
        waited_seconds=0, max_wait_seconds=600, settle_seconds=90,
        events_waiting=lambda: 0, now=T0 + timedelta(minutes=5),
    )  # fmt: skip

    assert unchecked.settled
    assert not _watch(world).settled


def test_a_request_whose_key_is_no_longer_current_is_held_and_names_every_dataset() -> None:
    # hashed (and every dataset indexed) with the old key, but the key is now NEW: the erase
    # job would hash rows with NEW and match none of the request's hashes
    world = _world(request_key=OLD)

    wait = _watch(world, current=NEW)

    assert not wait.settled
    assert sorted(wait.reindex_pending) == ["orders", "reviews"]
    assert wait.reindex_pending["reviews"].current_key_fingerprint == NEW
    gaps = _manifest(world, current=NEW).not_searched
    assert [(g.dataset_id, g.reason) for g in gaps] == [
        ("orders", "reindex_pending"),
        ("reviews", "reindex_pending"),
    ]
    assert f"hashed (with key {OLD}; the current key is key {NEW})" in gaps[0].detail
    assert gaps[0].detail.endswith("File the request again")


def test_a_key_reindex_still_pending_when_the_wait_ends_is_named_with_the_fingerprints() -> None:
    world = _world(request_key=NEW, indexed={"orders": NEW})  # reviews: from before, unknown

    wait = _watch(world, waited=600)

    assert wait.settled  # bounded: frozen anyway
    (gap,) = _manifest(world).not_searched
    assert (gap.object_url, gap.version_id, gap.dataset_id, gap.reason) == (
        s3_url(RAW, "reviews/"), "", "reviews", "reindex_pending",
    )  # fmt: skip
    assert gap.detail.startswith("the subject hash key changed: the request's subject ids were ")
    assert f"hashed with key {NEW}" in gap.detail
    assert "last built with an unknown key (recorded by an older Lethe)" in gap.detail
    assert "`lethe datasets reindex reviews`, or `--all` after a rotation" in gap.detail
    assert "matching definition" not in gap.detail  # the generation did not move
    assert gap.detail.endswith("then file the request again")
    assert KEY.decode() not in gap.detail


def test_a_request_from_before_key_fingerprints_counts_as_another_key() -> None:
    world = _world(request_key="")

    wait = _watch(world)

    assert not wait.settled
    assert sorted(wait.reindex_pending) == ["orders", "reviews"]
    assert wait.reindex_pending["orders"].key_fingerprint == ""


def test_the_wait_settles_once_the_reindex_with_the_new_key_is_recorded() -> None:
    world = _world(request_key=NEW)
    assert not _watch(world).settled

    assert world.registry.record_indexed("reviews", 1, NEW)
    assert world.registry.record_indexed("orders", 1, NEW)

    assert _watch(world, waited=30).settled
    assert _manifest(world).not_searched == ()


def test_a_changed_definition_and_key_are_both_said() -> None:
    world = _world(request_key=NEW)
    world.registry.put(
        world.registry.datasets["reviews"].model_copy(update={"subject_columns": ["text"]})
    )

    (gap, _orders) = sorted(_manifest(world).not_searched, key=lambda g: g.dataset_id != "reviews")

    assert gap.dataset_id == "reviews"
    assert gap.detail.startswith(
        "the dataset's matching definition changed (matching generation 2)"
    )
    assert "; the subject hash key changed" in gap.detail


def test_a_key_reindex_named_in_the_report_ends_the_request_incomplete() -> None:
    world = _world(request_key=NEW, indexed={"reviews": OLD, "orders": NEW})
    world.objects.put_version(LAKE, LAKE_KEY, "lv1")
    world.index.entries[(H_SECRET, LAKE_URL)] = _entry(LAKE_URL, "lv1", rows=1)
    build_report(
        RID, requests=world.requests, index=world.index, objects=world.objects,
        documents=world.documents, now=T0,
        widen=lambda m, r: scope.widen(
            m, r, catalog=world.catalog, registry=world.registry, objects=world.objects,
            raw_bucket=RAW, current_key=NEW,
        ),
    )  # fmt: skip
    # certify refuses a request without a recorded approval decision (who and when)
    decision = {"approval": {"decided_by": "dpo@example.com", "decided_at": T0.isoformat()}}
    for status in (ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED, ErasureStatus.ERASING):
        world.requests.transition(
            RID, status, by="test", updates=decision if status == ErasureStatus.APPROVED else None
        )
    world.objects.put_version(LAKE, LAKE_KEY, "lv2")
    world.objects.delete_version(LAKE, LAKE_KEY, "lv1")

    envelope = _erased_and_certified(world)

    record = world.record
    assert (record.status, record.outcome) == (ErasureStatus.FAILED, "INCOMPLETE")
    assert record.report["not_searched"] == [
        {"dataset_id": "reviews", "reason": "reindex_pending", "versions": 1}
    ]
    assert envelope["certificate"]["complete"] is False
