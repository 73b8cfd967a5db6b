"""The writes ledger (lethe_shared.catalog.writes_ledger) against moto: one contract for the
DynamoDB adapter and the test fake, its items apart from the catalog's in the catalog table, and
S3ObjectStore's PUTs recorded around the write. How the object events handler decides from it:
tests/integration/test_object_events_handler.py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog
from lethe_shared.catalog.writes_ledger import (
    CLOCK_SKEW_SECONDS,
    DynamoWritesLedger,
    Writer,
    WritesLedger,
    intent_seconds,
)
from lethe_shared.errors import WriteNotSettledError
from tests.fakes import MemoryWritesLedger
from tests.integration.conftest import LAKE, RAW

pytestmark = pytest.mark.lambda_runtime

KEY = "reviews/2026/11/22/reviews-009.jsonl"
COPY = "reviews/2026/11/23/copy-of-reviews-009.jsonl"
T0 = datetime(2026, 11, 22, 12, tzinfo=UTC)


class Clock:
    """A clock the test moves; both implementations read it."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["memory", "dynamodb"])
def ledger(
    request: pytest.FixtureRequest, lethe_tables: dict[str, Any]
) -> Iterator[tuple[WritesLedger, Callable[[timedelta], None]]]:
    """The ledger, and how a test moves its clock."""
    if request.param == "memory":
        memory = MemoryWritesLedger(T0)

        def move_memory(by: timedelta) -> None:
            memory.now += by

        yield memory, move_memory
        return
    clock = Clock()

    def move(by: timedelta) -> None:
        clock.now += by

    yield DynamoWritesLedger(lethe_tables["ObjectCatalogTable"], clock), move


# -- the contract ------------------------------------------------------------------------------


def test_a_recorded_version_is_its_writers_and_no_other_version_is(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    book, _ = ledger
    writes = book.writer(Writer.ERASE, "erasure-er-1")

    writes.written(RAW, KEY, writes.intend(RAW, KEY, 10), "v2")

    assert book.writer_of(RAW, KEY, "v2") == "erase"
    assert book.settled_writer_of(RAW, KEY, "v2", created_at=T0) == "erase"
    assert book.writer_of(RAW, KEY, "v1") is None  # another version of the key
    assert book.writer_of(RAW, COPY, "v2") is None  # the same version id under another key
    assert book.writer_of(LAKE, KEY, "v2") is None  # another bucket
    assert book.settled_writer_of(RAW, KEY, "v1", created_at=T0) is None


def test_an_open_intent_holds_an_unrecorded_version_until_it_is_recorded(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    book, move = ledger
    writes = book.writer(Writer.INGEST, "exec-1")
    token = writes.intend(LAKE, KEY, 10)

    with pytest.raises(WriteNotSettledError) as raised:
        book.settled_writer_of(LAKE, KEY, "v1", created_at=T0)
    assert 1 <= raised.value.retry_after_seconds <= intent_seconds(10) + 1
    assert "ingest (exec-1)" in str(raised.value)
    assert book.writer_of(LAKE, KEY, "v1") is None  # the plain question does not wait
    move(timedelta(seconds=3))
    writes.written(LAKE, KEY, token, "v1")

    assert book.settled_writer_of(LAKE, KEY, "v1", created_at=T0) == "ingest"
    assert book.settled_writer_of(LAKE, KEY, "v0", created_at=T0) is None  # intent closed


def test_an_abandoned_or_expired_intent_holds_nothing(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    book, move = ledger
    writes = book.writer(Writer.ERASE, "erasure-er-1")
    writes.abandoned(RAW, KEY, writes.intend(RAW, KEY, 10))  # a failed If-Match
    assert book.settled_writer_of(RAW, KEY, "v1", created_at=T0) is None

    writes.intend(RAW, KEY, 10)  # the job dies after its PUT
    with pytest.raises(WriteNotSettledError):
        book.settled_writer_of(RAW, KEY, "v1", created_at=T0)
    move(timedelta(seconds=intent_seconds(10)))

    assert book.settled_writer_of(RAW, KEY, "v1", created_at=T0) is None


def test_only_intents_opened_before_the_version_was_created_hold_it(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    book, move = ledger
    move(timedelta(seconds=CLOCK_SKEW_SECONDS + 1))
    book.writer(Writer.ERASE, "erasure-er-2").intend(RAW, KEY, 10)

    assert book.settled_writer_of(RAW, KEY, "v1", created_at=T0) is None  # created before it
    with pytest.raises(WriteNotSettledError):  # within the clock skew: it may be its claim
        book.settled_writer_of(RAW, KEY, "v1", created_at=T0 + timedelta(seconds=2))
    with pytest.raises(WriteNotSettledError):  # an event without a time: every open intent
        book.settled_writer_of(RAW, KEY, "v1", created_at=None)


def test_a_forgotten_version_is_nobodys(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    book, _ = ledger
    writes = book.writer(Writer.ERASE, "erasure-er-1")
    writes.written(RAW, KEY, writes.intend(RAW, KEY, 1), "v1")
    writes.written(RAW, KEY, writes.intend(RAW, KEY, 1), "v2")

    book.forget(RAW, KEY, "v1")
    book.forget(RAW, KEY, "v9")  # nothing recorded: nothing happens

    assert (book.writer_of(RAW, KEY, "v1"), book.writer_of(RAW, KEY, "v2")) == (None, "erase")


def test_a_key_of_the_longest_url_lethe_writes_is_recorded(
    ledger: tuple[WritesLedger, Callable[[timedelta], None]],
) -> None:
    # the ingest job writes lake keys whose URL is up to 1,024 bytes (ingest_tasks.write)
    book, _ = ledger
    key = "reviews/p=" + "x" * (1024 - len(f"s3://{LAKE}/reviews/p=") - 8) + "/a.jsonl"
    assert len(f"s3://{LAKE}/{key}".encode()) == 1024
    writes = book.writer(Writer.INGEST, "exec-1")

    writes.written(LAKE, key, writes.intend(LAKE, key, 1), "v1")

    assert book.settled_writer_of(LAKE, key, "v1", created_at=T0) == "ingest"


def test_intent_windows_are_bounded() -> None:
    assert intent_seconds(0) == 600
    assert intent_seconds(400 * 1024 * 1024) == 700  # one second per 4 MiB
    assert intent_seconds(5 * 1024**4) == 1800  # never longer


# -- the table -------------------------------------------------------------------------------


def test_ledger_items_live_apart_from_the_catalogs(lethe_tables: dict[str, Any]) -> None:
    table = lethe_tables["ObjectCatalogTable"]
    book = DynamoWritesLedger(table, Clock())
    writes = book.writer(Writer.ERASE, "erasure-er-1")
    writes.written(RAW, KEY, writes.intend(RAW, KEY, 1), "v1")
    open_token = writes.intend(RAW, KEY, 1)

    catalog = DynamoObjectCatalog(table)
    assert catalog.versions_of(f"s3://{RAW}/{KEY}") == []
    assert list(catalog.by_dataset("reviews")) == []
    assert catalog.get(RAW, KEY, "v1") is None
    items = {i["version_id"]: i for i in table.scan()["Items"]}
    assert set(items) == {"v#v1", f"i#{open_token}"}
    digest = hashlib.sha256(f"s3://{RAW}/{KEY}".encode()).hexdigest()
    assert {i["object_url"] for i in items.values()} == {f"ledger#{digest}"}
    assert {(i["bucket"], i["key"]) for i in items.values()} == {(RAW, KEY)}
    version, intent = items["v#v1"], items[f"i#{open_token}"]
    assert (version["writer"], version["run_id"], version["s3_version_id"]) == (
        "erase",
        "erasure-er-1",
        "v1",
    )
    assert "expires_at" not in version  # kept while the version exists (forget removes it)
    assert int(intent["expires_at"]) == int(intent["open_until"]) + 86_400  # TTL, a day later


# -- S3ObjectStore's PUTs ------------------------------------------------------------------


@pytest.fixture
def s3(lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    return boto3.client("s3")


class SpyLedger:
    """A WriteLog that notes what was said, and what S3 held when it was said."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.said: list[tuple[str, str, int]] = []  # (what, key, versions the key had)

    def _count(self, bucket: str, key: str) -> int:
        listing = self.client.list_object_versions(Bucket=bucket, Prefix=key)
        return len([v for v in listing.get("Versions", []) if v["Key"] == key])

    def intend(self, bucket: str, key: str, size: int) -> str:
        self.said.append(("intend", key, self._count(bucket, key)))
        return "t1"

    def written(self, bucket: str, key: str, token: str, version_id: str) -> None:
        self.said.append((f"written {version_id}", key, self._count(bucket, key)))

    def abandoned(self, bucket: str, key: str, token: str) -> None:
        self.said.append(("abandoned", key, self._count(bucket, key)))


def test_every_put_of_a_job_store_is_an_intent_before_and_its_version_after(
    s3: Any, tmp_path: Path
) -> None:
    spy = SpyLedger(s3)
    store = S3ObjectStore(s3, writes=spy)
    source = tmp_path / "part.parquet"
    source.write_bytes(b"PAR1")

    uploaded = store.upload(LAKE, "reviews/p=1/a.parquet", source, content_type="x")
    put = store.put_bytes(LAKE, "reviews/_quarantine/a.file.json", b"{}", content_type="x")
    source.write_bytes(b"PAR1 erased")
    rewritten = store.replace_version(
        LAKE, "reviews/p=1/a.parquet", source,
        like_version=uploaded.version_id, if_match=uploaded.etag, metadata={},
    )  # fmt: skip
    # the ETag it names is no longer current's: no version, and the intent closes
    refused = store.replace_version(
        LAKE, "reviews/p=1/a.parquet", source,
        like_version=uploaded.version_id, if_match=uploaded.etag, metadata={},
    )  # fmt: skip

    assert rewritten is not None
    assert refused is None
    assert spy.said == [
        ("intend", "reviews/p=1/a.parquet", 0),
        (f"written {uploaded.version_id}", "reviews/p=1/a.parquet", 1),
        ("intend", "reviews/_quarantine/a.file.json", 0),
        (f"written {put.version_id}", "reviews/_quarantine/a.file.json", 1),
        ("intend", "reviews/p=1/a.parquet", 1),
        (f"written {rewritten.version_id}", "reviews/p=1/a.parquet", 2),
        ("intend", "reviews/p=1/a.parquet", 2),
        ("abandoned", "reviews/p=1/a.parquet", 2),
    ]


def test_a_put_that_fails_closes_its_intent_and_raises(
    s3: Any, lethe_tables: dict[str, Any]
) -> None:
    book = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"])
    store = S3ObjectStore(s3, writes=book.writer(Writer.INGEST, "exec-1"))

    with pytest.raises(ClientError, match="NoSuchBucket"):
        store.put_bytes("no-such-bucket-for-ledger", KEY, b"x", content_type="x")

    assert book.intents("no-such-bucket-for-ledger", KEY) == []  # closed: nothing waits on it
