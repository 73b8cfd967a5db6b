"""A retention run's frozen report (lethe_shared.erasure.retention_run) and how the erase job reads
it (lethe_jobs.erase_settings.job_settings): every planned object with every stored version, the
rule per dataset, pinned; the job matches its objects with RetentionMatcher, adds subjects held
since the plan, and refuses everything of a dataset held since, untouched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lethe_jobs.erase_settings import EraseArgs, ErasePorts, job_settings
from lethe_jobs.retention_rows import RetentionMatcher
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.holds import HoldView, LegalHold, new_hold
from lethe_shared.datasets.retention import StoredObject, plan_retention
from lethe_shared.erasure.retention_run import retention_manifest
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from tests.fakes import MemoryObjectStore, MemoryRegistry

KEY = b"retention-run-unit-test-key-0123456789"
KEY_FP = key_fingerprint(KEY)
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
RAW, LAKE = "raw-bucket", "lake-bucket"
EVENTS = parse_dataset({
    "dataset_id": "events", "format": "csv", "subject_columns": ["user_id"],
    "partition_by": ["day"], "retention": {"column": "day", "days": 30},
    "schema": [{"name": "user_id", "type": "string"}, {"name": "day", "type": "date"}],
})  # fmt: skip
OLD_LAKE = "events/day=2026-01-01/part-a.parquet"
NEW_LAKE = "events/day=2026-11-20/part-b.parquet"
UPLOAD = "events/2026/11/upload.csv"
QUARANTINE = "events/_quarantine/q.jsonl"


class Holds:
    def __init__(self, *holds: LegalHold) -> None:
        self.holds = list(holds)

    def active_for(self, dataset_ids: Any) -> list[LegalHold]:
        wanted = set(dataset_ids)
        return [h for h in self.holds if h.active and wanted & set(h.datasets())]


def _stored() -> tuple[MemoryObjectStore, list[StoredObject]]:
    objects = MemoryObjectStore()
    listed = []
    for bucket, key, zone in (
        (LAKE, OLD_LAKE, "lake"), (LAKE, NEW_LAKE, "lake"), (RAW, UPLOAD, "raw"),
        (LAKE, QUARANTINE, "lake"),
    ):  # fmt: skip
        objects.put_version(bucket, key, "v1")
        listed.append(StoredObject(zone, bucket, key, NOW))
    objects.put_version(RAW, UPLOAD, "v2")  # an overwritten upload: both versions listed
    return objects, listed


def _manifest(*holds: LegalHold) -> Any:
    objects, listed = _stored()
    plan = plan_retention(EVENTS, listed, NOW, HoldView.of(holds, KEY_FP))
    return retention_manifest(
        "rt-events-20261127", [(EVENTS, plan)], objects=objects, now=NOW,
        key_fingerprint=KEY_FP, registry=MemoryRegistry(EVENTS),
    )  # fmt: skip


def _args() -> EraseArgs:
    return EraseArgs(
        request_id="rt-events-20261127", manifest="s3://reports/retention/m.json",
        manifest_sha256="0" * 64, requests_table="r", raw_bucket=RAW, lake_bucket=LAKE,
        reports_bucket="reports", datasets_table="d", catalog_table="", hash_key_secret="s",
        correlation_id="retention-events", mode="erase",
    )  # fmt: skip


def _settings(manifest: Any, *holds: LegalHold) -> Any:
    ports = ErasePorts(
        reports=MemoryObjectStore(),  # type: ignore[arg-type]
        datasets=MemoryRegistry(EVENTS), hash_key=KEY, holds=Holds(*holds),
    )  # fmt: skip
    return job_settings(_args(), manifest, ports)


def test_the_report_lists_what_the_plan_reaches_with_every_version_and_the_rule() -> None:
    manifest = _manifest()

    by_key = {o.key: o for o in manifest.objects}
    assert sorted(by_key) == [UPLOAD, QUARANTINE, OLD_LAKE]  # not the partition within
    assert [v.version_id for v in by_key[UPLOAD].versions] == ["v2", "v1"]
    assert (by_key[QUARANTINE].format, by_key[UPLOAD].format, by_key[OLD_LAKE].format) == (
        "jsonl", "csv", "parquet",
    )  # fmt: skip
    assert all(o.subjects == () for o in manifest.objects)
    (spec,) = manifest.retention
    assert (spec.column, spec.cutoff) == ("day", "2026-10-28T00:00:00+00:00")
    assert manifest.key_fingerprint == KEY_FP
    assert [p.dataset_id for p in manifest.dataset_pins] == ["events"]


def test_the_erase_job_matches_a_retention_report_with_the_retention_rule() -> None:
    manifest = _manifest()

    ctx = _settings(manifest)

    matcher = ctx.matcher("events")
    assert isinstance(matcher, RetentionMatcher)
    assert matcher.rule == manifest.retention[0].rule()
    assert (matcher.hashes, matcher.held_hashes) == (frozenset(), frozenset())
    assert ctx.refused == {}  # pinned and not held


def test_subjects_held_at_the_plan_or_since_are_kept_and_a_dataset_held_since_is_refused() -> None:
    early = new_hold(
        dataset_id="events", reason="claim", held_by="dpo@x.eu", now=NOW,
        subject_hashes={"events": hash_of_id(KEY, "u-1")}, key_fingerprint=KEY_FP,
    )  # fmt: skip
    late = new_hold(
        dataset_id="events", reason="claim 2", held_by="dpo@x.eu", now=NOW,
        subject_hashes={"events": hash_of_id(KEY, "u-2")}, key_fingerprint=KEY_FP,
    )  # fmt: skip
    manifest = _manifest(early)
    assert manifest.retention[0].held_hashes == (hash_of_id(KEY, "u-1"),)

    kept = _settings(manifest, early, late).matcher("events")
    whole = new_hold(dataset_id="events", reason="audit", held_by="dpo@x.eu", now=NOW)
    refused = _settings(manifest, whole).refused

    assert kept.held_hashes == {hash_of_id(KEY, "u-1"), hash_of_id(KEY, "u-2")}
    assert set(refused) == {o.object_url for o in manifest.objects}
    assert {g.reason for g in refused.values()} == {"legal_hold"}


def test_a_dataset_held_when_planned_contributes_nothing() -> None:
    whole = new_hold(dataset_id="events", reason="audit", held_by="dpo@x.eu", now=NOW)

    manifest = _manifest(whole)

    assert (manifest.objects, manifest.retention) == ((), ())
