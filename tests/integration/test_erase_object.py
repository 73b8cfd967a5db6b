"""One object erased against moto S3 (lethe_jobs.erase_core.erase_object): every version of the
exact key goes, sibling keys stay, and a producer that writes mid-erasure never loses its data
while the erased subject is still gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe_jobs.erase_core import ConcurrentWritesError, EraseSettings, erase_object
from lethe_shared.aws.s3 import (
    ERASED_ROWS_METADATA,
    ERASURE_METADATA,
    PRODUCER_METADATA,
    KeyState,
    ObjectHead,
    S3ObjectStore,
)
from lethe_shared.catalog.object_catalog import Buckets, Zone
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer, Written
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.erasure.report import ManifestObject
from lethe_shared.index.maintenance import ERASE_PRODUCER
from lethe_shared.subject_hashing.keys import hash_of_id
from tests.integration.conftest import LAKE, RAW

KEY = b"k" * 32
DATASET = parse_dataset(
    {
        "dataset_id": "events",
        "format": "jsonl",
        "subject_columns": ["user"],
        "schema": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
    }
)
OBJECT_KEY = "events/2026/e.jsonl"
V1 = b'{"user": "gone", "n": 1}\n{"user": "stay", "n": 2}\n'
V1_ERASED = b'{"user": "stay", "n": 2}\n'


def _settings() -> EraseSettings:
    return EraseSettings(
        request_id="er-test-0001",
        correlation_id="erasure-er-test-0001",
        buckets=Buckets(raw=RAW, lake=LAKE),
        datasets={"events": DATASET},
        hashes=frozenset({hash_of_id(KEY, "gone")}),
        hash_key=KEY,
    )


def _item() -> ManifestObject:
    return ManifestObject(
        object_url=f"s3://{RAW}/{OBJECT_KEY}",
        bucket=RAW,
        key=OBJECT_KEY,
        dataset_id="events",
        zone=Zone.RAW,
        format="jsonl",
        state=KeyState.CURRENT,
        expected_rows=1,
        subjects=(),
        versions=(),
    )


class RacingStore(S3ObjectStore):
    """A store whose first conditional write is preceded by a producer's write."""

    def __init__(self, client: Any, producer: Callable[[], None]) -> None:
        super().__init__(client)
        self._producer: Callable[[], None] | None = producer

    def replace_version(
        self, bucket: str, key: str, source: Path, **kwargs: Any
    ) -> ObjectHead | None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer()
        return super().replace_version(bucket, key, source, **kwargs)


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    return boto3.client("s3")


def _bodies(s3: Any, key: str = OBJECT_KEY) -> list[bytes]:
    """Every stored version's body, newest first."""
    listing = s3.list_object_versions(Bucket=RAW, Prefix=key)
    versions = sorted(
        (v for v in listing.get("Versions", []) if v["Key"] == key),
        key=lambda v: v["LastModified"],
        reverse=True,
    )
    return [
        s3.get_object(Bucket=RAW, Key=key, VersionId=v["VersionId"])["Body"].read()
        for v in versions
    ]


def test_every_version_of_the_exact_key_goes_and_siblings_stay(s3: Any) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=b'{"user": "gone", "n": 0}\n')
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY + ".bak", Body=V1)

    result = erase_object(S3ObjectStore(s3), _item(), _settings())

    assert (result.action, result.rows_removed, result.versions_purged) == ("rewritten", 1, 2)
    assert _bodies(s3) == [V1_ERASED]
    assert _bodies(s3, OBJECT_KEY + ".bak") == [V1]  # a key sharing the prefix is not this key


def test_a_producer_writing_mid_erasure_keeps_its_data_and_the_subject_is_still_gone(
    s3: Any,
) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    producer_body = b'{"user": "new", "n": 3}\n{"user": "gone", "n": 4}\n'
    store = RacingStore(s3, lambda: s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=producer_body))

    result = erase_object(store, _item(), _settings())

    # the conditional write refused to overwrite the producer's version; the object was read
    # again and the producer's version erased in turn: its other row kept
    assert result.attempts == 2
    assert result.action == "rewritten"
    assert _bodies(s3) == [b'{"user": "new", "n": 3}\n']


def test_a_producer_writing_the_same_bytes_mid_erasure_leaves_no_copy_behind(s3: Any) -> None:
    """The producer's copy has the ETag erasure read, so the conditional write succeeds over
    it; the copy is then an older version and goes with the others."""
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    store = RacingStore(s3, lambda: s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1))

    result = erase_object(store, _item(), _settings())

    assert (result.action, result.attempts, result.versions_purged) == ("rewritten", 1, 2)
    assert _bodies(s3) == [V1_ERASED]


def test_a_producer_writing_while_a_key_is_deleted_keeps_its_version(s3: Any) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=b'{"user": "gone", "n": 1}\n')
    producer_body = b'{"user": "other", "n": 2}\n'

    class Interleaved(S3ObjectStore):
        calls = 0

        def delete_versions(self, bucket: str, versions: Any) -> int:
            Interleaved.calls += 1
            if Interleaved.calls == 1:  # the producer writes just before the key is deleted
                s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=producer_body)
            return super().delete_versions(bucket, versions)

    result = erase_object(Interleaved(s3), _item(), _settings())

    assert result.attempts == 2  # the new version was read and found clean
    assert result.action == "unchanged"
    assert _bodies(s3) == [producer_body]


def test_a_producer_that_never_stops_fails_the_object(s3: Any) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    writes = iter(range(100))

    class Relentless(S3ObjectStore):
        def replace_version(
            self, bucket: str, key: str, source: Path, **kwargs: Any
        ) -> ObjectHead | None:
            # before every conditional write, a new version of another content (another ETag)
            body = V1 + b'{"user": "stay", "n": %d}\n' % next(writes)
            s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=body)
            return super().replace_version(bucket, key, source, **kwargs)

    with pytest.raises(ConcurrentWritesError, match="changed 5 times"):
        erase_object(Relentless(s3), _item(), _settings())
    assert b'"stay"' in _bodies(s3)[0]  # nothing of the producer's was lost


def test_a_version_purged_by_another_erasure_mid_write_is_read_again(s3: Any) -> None:
    """Two requests erasing one object (found by make soak): between this erasure's read and its
    conditional write, the other one wrote its version and purged the one this erasure read.
    Reading that version's tags then finds nothing; it is a conflict like a failed condition:
    the key is read again and erased from the other request's version."""
    first = s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)["VersionId"]
    other = b'{"user": "gone", "n": 1}\n'  # its version still holds ours: it erased another subject
    purged: list[str] = []

    class OtherErasure(S3ObjectStore):
        def replace_version(
            self, bucket: str, key: str, source: Path, **kwargs: Any
        ) -> ObjectHead | None:
            if not purged:
                s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=other + V1_ERASED)
                s3.delete_object(Bucket=RAW, Key=OBJECT_KEY, VersionId=first)
                purged.append(first)
            return super().replace_version(bucket, key, source, **kwargs)

    result = erase_object(OtherErasure(s3), _item(), _settings())

    assert purged == [first]
    assert result.attempts == 2
    assert result.action == "rewritten"
    assert _bodies(s3) == [V1_ERASED]


@pytest.mark.parametrize(("request_id", "credited"), [("er-test-0001", 1), ("er-other-0002", 0)])
def test_a_rerun_credits_rows_its_earlier_run_removed(
    s3: Any, lethe_tables: dict[str, Any], request_id: str, credited: int
) -> None:
    """A run that died after rewriting an object, before its results: the re-run finds nothing
    of the subject left, and the rows count still, from the version's metadata, when the writes
    ledger records the version as this request's erase job's (found by make soak: the
    certificate said 'unchanged'). Another request's version credits nothing. (Metadata without
    a ledger record credits nothing either: test_erase_forged_metadata.py.)"""
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    written = s3.put_object(
        Bucket=RAW,
        Key=OBJECT_KEY,
        Body=V1_ERASED,
        Metadata={
            PRODUCER_METADATA: ERASE_PRODUCER,
            ERASURE_METADATA: request_id,
            ERASED_ROWS_METADATA: "1",
        },
    )  # the earlier run died before purging the version it had read
    ledger = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    earlier = ledger.writer(Writer.ERASE, request_id)  # that run recorded it (run: the request)
    earlier.written(RAW, OBJECT_KEY, earlier.intend(RAW, OBJECT_KEY, 0), written["VersionId"])

    result = erase_object(S3ObjectStore(s3), _item(), _settings(), ledger=ledger)

    assert result.rows_removed == credited
    assert result.action == ("rewritten" if credited else "unchanged")
    assert result.rows_after == 1
    assert result.rows_before == 1 + credited
    assert result.versions_purged == 1
    assert _bodies(s3) == [V1_ERASED]


def test_the_rewrite_is_recorded_in_the_writes_ledger_and_nothing_else_is(
    s3: Any, lethe_tables: dict[str, Any]
) -> None:
    # the store erase_core's tasks build: every PUT recorded in the writes ledger
    original = str(s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)["VersionId"])
    ledger = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    store = S3ObjectStore(s3, writes=ledger.writer(Writer.ERASE, "er-test-0001"))

    result = erase_object(store, _item(), _settings())

    assert result.version_after is not None
    ours = result.version_after.version_id
    assert ledger.writer_of(RAW, OBJECT_KEY, ours) == "erase"
    assert ledger.written(RAW, OBJECT_KEY, ours) == Written("erase", "er-test-0001")
    assert ledger.writer_of(RAW, OBJECT_KEY, original) is None  # the producer's upload
    assert ledger.intents(RAW, OBJECT_KEY) == []  # closed once the version was on record
    # a copy under another key carries the metadata, and nothing in the ledger
    copy = s3.copy_object(
        Bucket=RAW, Key="events/2026/copy.jsonl", CopySource={"Bucket": RAW, "Key": OBJECT_KEY}
    )
    head = S3ObjectStore(s3).head(RAW, "events/2026/copy.jsonl")
    assert head is not None
    assert head.producer == ERASE_PRODUCER
    assert ledger.writer_of(RAW, "events/2026/copy.jsonl", copy["VersionId"]) is None


def test_a_write_a_producer_won_leaves_no_ledger_record_and_no_open_intent(
    s3: Any, lethe_tables: dict[str, Any]
) -> None:
    s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=V1)
    ledger = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    producer_body = b'{"user": "new", "n": 3}\n{"user": "gone", "n": 4}\n'
    store = RacingStore(s3, lambda: s3.put_object(Bucket=RAW, Key=OBJECT_KEY, Body=producer_body))
    store.writes = ledger.writer(Writer.ERASE, "er-test-0001")

    result = erase_object(store, _item(), _settings())

    # the first conditional write failed: its intent closed without a version; the second
    # erased the producer's version and is the one version on record
    assert (result.attempts, result.action) == (2, "rewritten")
    assert result.version_after is not None
    recorded = sorted(i["version_id"] for i in lethe_tables["ObjectCatalogTable"].scan()["Items"])
    assert recorded == [f"v#{result.version_after.version_id}"]
