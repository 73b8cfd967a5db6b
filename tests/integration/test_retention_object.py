"""Retention through the erase job's own per-object machinery against moto S3
(lethe_jobs.erase_core.erase_object with lethe_jobs.retention_rows.RetentionMatcher, an
erase_rows.RowPredicate): the expired rows go from the current version with a conditional write
marked as the erase job's, every older version of the exact key is purged, a held subject's
rows stay, a key left without rows is deleted with every version, and the verify check of the
erase job (erase_rows.match_rows) finds no expired row left."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_core import EraseSettings, erase_object
from lethe_jobs.erase_rows import SubjectMatcher, match_rows
from lethe_jobs.objects import ObjectKind
from lethe_jobs.retention_rows import retention_matcher
from lethe_shared.aws.s3 import ERASED_ROWS_METADATA, PRODUCER_METADATA, KeyState, S3ObjectStore
from lethe_shared.catalog.object_catalog import Buckets, Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.retention import retention_rule
from lethe_shared.erasure.report import ManifestObject
from lethe_shared.index.maintenance import ERASE_PRODUCER
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.integration.conftest import LAKE, RAW

KEY = b"k" * 32
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
DATASET = parse_dataset({
    "dataset_id": "events", "format": "jsonl", "subject_columns": ["user"],
    "schema": [{"name": "user", "type": "string"}, {"name": "day", "type": "date"}],
    "retention": {"column": "day", "days": 30},
})  # fmt: skip
RULE = retention_rule(DATASET, NOW)
OBJECT_KEY = "events/2026/e.jsonl"
BODY = (
    b'{"user": "a", "day": "2026-09-01"}\n'  # expired
    b'{"user": "held", "day": "2026-09-02"}\n'  # expired, but held
    b'{"user": "b", "day": "2026-11-20"}\n'  # within the period
)


@dataclass(frozen=True)
class RetentionSettings(EraseSettings):
    """The erase job's settings whose matcher is a retention run's (the wiring a retention
    manifest will give erase_settings.job_settings)."""

    held: frozenset[str] = frozenset()

    def matcher(self, dataset_id: str) -> SubjectMatcher:
        assert RULE is not None
        return retention_matcher(self.datasets[dataset_id], RULE, self.hash_key, self.held)


def _settings(*held: str) -> RetentionSettings:
    return RetentionSettings(
        request_id="rt-events-20261127", correlation_id="retention-events-20261127",
        buckets=Buckets(raw=RAW, lake=LAKE), datasets={"events": DATASET}, hashes=frozenset(),
        hash_key=KEY, held=frozenset(hash_of_id(KEY, h) for h in held),
    )  # fmt: skip


def _item() -> ManifestObject:
    return ManifestObject(
        object_url=f"s3://{RAW}/{OBJECT_KEY}", bucket=RAW, key=OBJECT_KEY, dataset_id="events",
        zone=Zone.RAW, format="jsonl", state=KeyState.CURRENT, expected_rows=0, subjects=(),
        versions=(),
    )  # fmt: skip


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    return boto3.client("s3")


def _bodies(s3: Any) -> list[bytes]:
    listing = s3.list_object_versions(Bucket=RAW, Prefix=OBJECT_KEY).get("Versions", [])
    ordered = sorted(listing, key=lambda v: v["LastModified"], reverse=True)
    return [
        s3.get_object(Bucket=RAW, Key=OBJECT_KEY, VersionId=v["VersionId"])["Body"].read()
        for v in ordered
    ]


def test_expired_rows_go_from_every_version_and_a_held_subject_stays(
    s3: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=b'{"user": "a", "day": "2020-01-01"}\n')
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=BODY)

    result = erase_object(S3ObjectStore(s3), _item(), _settings("held"))

    assert (result.action, result.rows_removed, result.rows_after) == ("rewritten", 1, 2)
    assert result.versions_purged == 2  # the version read and the older one
    assert _bodies(s3) == [BODY.split(b"\n", 1)[1]]
    head = s3.head_object(Bucket=RAW, Key=OBJECT_KEY)
    assert head["Metadata"][PRODUCER_METADATA] == ERASE_PRODUCER
    assert head["Metadata"][ERASED_ROWS_METADATA] == "1"
    # the verify run's check: no expired row left but the held one
    local = tmp_path / "now.jsonl"
    local.write_bytes(_bodies(s3)[0])
    left = match_rows(ObjectKind.RAW, local, OBJECT_KEY, _settings("held").matcher("events"),
                      workdir=tmp_path)  # fmt: skip
    assert (left.rows, left.positions) == (2, ())
    unheld = match_rows(ObjectKind.RAW, local, OBJECT_KEY, _settings().matcher("events"),
                        workdir=tmp_path)  # fmt: skip
    assert unheld.positions == (1,)  # once released, the held row is the next run's


def test_a_key_with_only_expired_rows_is_deleted_with_every_version(s3: Any) -> None:
    old = b'{"user": "a", "day": "2026-01-01"}\n{"user": "b", "day": "2026-02-01"}\n'
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=b"{}\n")
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=old)

    result = erase_object(S3ObjectStore(s3), _item(), _settings())

    assert (result.action, result.rows_removed, result.version_after) == ("deleted", 2, None)
    assert s3.list_object_versions(Bucket=RAW, Prefix=OBJECT_KEY).get("Versions", []) == []


def test_nothing_expired_leaves_the_current_version_and_purges_older_ones(s3: Any) -> None:
    recent = b'{"user": "b", "day": "2026-11-20"}\n'
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=BODY)
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=recent)

    result = erase_object(S3ObjectStore(s3), _item(), _settings())

    # an older version may hold expired rows: it goes, as erasure purges older versions
    assert (result.action, result.rows_removed, result.versions_purged) == ("unchanged", 0, 1)
    assert _bodies(s3) == [recent]
