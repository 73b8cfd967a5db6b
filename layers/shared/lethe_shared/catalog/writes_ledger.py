"""The writes ledger: which object versions Lethe's own jobs wrote, known server-side.

Lethe must tell its own writes from a producer's: a raw version an erasure rewrote is not
ingested again (it is recorded REWRITTEN), and a lake object the ingest or erase job wrote is not
indexed again (the job indexed it). The `lethe-producer` metadata cannot say so: `aws s3 cp` and
CopyObject copy metadata by default, so a copy of an erased object under a new key would never
be indexed (and never erasable), and any producer could set the header to switch indexing off.
So Lethe's jobs record what they write here, and only here decides: a version is Lethe's when,
and only when, the job that wrote it recorded its (bucket, key, version id) after S3 returned
it. The metadata is still written, for people who read an object's headers; nothing trusts it.

Items live in `ObjectCatalogTable` (its key schema holds them without a new table), in
partitions of their own that no catalog read touches (the catalog's partitions are object URLs,
`s3://...`; its `by_dataset` index is sparse and ledger items have no `dataset_id`):

    object_url (HASH)   ledger#<SHA-256 of s3://<bucket>/<key>, hex>  (fixed size: a URL of
                        up to 1,024 bytes with a prefix would pass the by_dataset index's
                        1,024-byte key limit; the items name their bucket and key)
    version_id (RANGE)  v#<S3 version id>   a version a Lethe job wrote: writer, run_id, written_at
                                            (run_id: the ingest job's correlation id; for the
                                            erase job, the erasure request's id)
                        i#<token>           an intent: a job is about to write the key; writer,
                                            run_id, opened_at, open_until, expires_at (TTL)

**The ordering race.** A version's id is known only once its PUT returns, and S3's event for it
may reach the object events function before the job has recorded it. So a job's store
(`lethe_shared.aws.s3.S3ObjectStore` with `writes=`) writes, per PUT:

1. an intent on the key (`LedgerWriter.intend`), *before* the PUT;
2. the PUT;
3. the version it made (`written`: a PutItem), *then* closes the intent (a DeleteItem); or, when
   the PUT made no version (a failed `If-Match`, an error), closes the intent (`abandoned`).

The event path asks `settled_writer_of`, which reads the key's intents *first* and the version
*second*: when it sees no open intent, any version recorded before that intent closed is visible
to its second read (both are strongly consistent), so "no intent and no record" means no Lethe
job wrote that version. A version without a record while an intent it could belong to is open
(opened before the version was created, with `CLOCK_SKEW_SECONDS` of slack, and not expired) is
*not known yet*: `WriteNotSettledError`, and the object events handler fails the SQS record so
that SQS delivers it again later. Once the job has recorded the version, the event finds it
(Lethe's); once the intent closed or expired without it, the version is a producer's and is
ingested and indexed like any upload.

**Bounds.** An intent stays open for `intent_seconds(size)`: 600 s plus one second per 4 MiB
of the body, at most 1,800 s (a PUT still running then loses its claim: its version is treated
as a producer's and ingested or indexed again, which repeats work and loses nothing). Only
intents opened up to `CLOCK_SKEW_SECONDS` (120 s) after the version's creation can hold its
event, so every event is decided at most 32 minutes after its version was created, whatever
Lethe writes to the key meanwhile; the object events queue redelivers a failed record after
its visibility timeout (720 s), so a record waits at most 4 receives of the 5 its redrive policy
allows. A job that dies between its PUT and its record leaves the intent open until it expires:
the same outcome as a late PUT. Closed intents are deleted; expired ones are removed by the
table's TTL (`expires_at`, one day after `open_until`; the decision never waits for the TTL).
A version's record is removed when the version is permanently deleted (`forget`, on its Object
Deleted event), so the ledger holds about one item per stored version that Lethe wrote.

Idempotent: a token is random per PUT, a record is keyed by its version (written twice, the
same item), closing an intent twice deletes nothing the second time.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from lethe_shared.aws.dynamo import query_all
from lethe_shared.aws.s3 import WriteLog, s3_url
from lethe_shared.errors import WriteNotSettledError

LEDGER_PREFIX = "ledger#"  # the partitions of the ledger's items: ledger#<hash of the URL>
VERSION_PREFIX = "v#"
INTENT_PREFIX = "i#"
INTENT_SECONDS = 600  # how long an intent holds the events of its key, plus the body's time:
INTENT_BYTES_PER_SECOND = 4 * 1024 * 1024  # one second per 4 MiB (a slow PUT's pace)
MAX_INTENT_SECONDS = 1800  # never longer: the events it holds are decided within 32 minutes
CLOCK_SKEW_SECONDS = 120  # between the writer's clock and S3's event time
INTENT_KEPT_SECONDS = 86_400  # an expired intent's item stays this long before the TTL


class Writer(StrEnum):
    """The Lethe jobs that write object versions (the names their metadata shows too)."""

    INGEST = "ingest"  # lake files and quarantine of the ingest job (it indexes them)
    ERASE = "erase"  # the erase job's rewrites of raw, lake and quarantine objects


@dataclass(frozen=True)
class Written:
    """The record of one version a Lethe job wrote: which job, and which run of it (for the
    erase job, the erasure request's id: what verification and a re-run's row count ask)."""

    writer: str  # a Writer value
    run_id: str


def ledger_partition(bucket: str, key: str) -> str:
    """The ledger's partition key of one S3 key: never an object URL of the catalog."""
    digest = hashlib.sha256(s3_url(bucket, key).encode("utf-8")).hexdigest()
    return f"{LEDGER_PREFIX}{digest}"


def intent_seconds(size: int) -> int:
    """How long an intent to PUT `size` bytes stays open (module docstring, Bounds)."""
    return min(MAX_INTENT_SECONDS, INTENT_SECONDS + max(size, 0) // INTENT_BYTES_PER_SECOND)


def event_time(text: str | None) -> datetime | None:
    """An S3 event's time (EventBridge `time`, ISO 8601) as an aware datetime; None when the
    event has none or it cannot be read (then every open intent of the key counts)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Intent:
    """An open claim on a key: a Lethe job is about to write it."""

    token: str
    writer: str
    run_id: str
    opened_at: datetime
    open_until: datetime

    def holds(self, created_at: datetime | None, now: datetime) -> bool:
        """Whether this intent may be the claim of a version created at `created_at`: still
        open, and opened before the version was created (with CLOCK_SKEW_SECONDS of slack)."""
        if now >= self.open_until:
            return False
        skew = timedelta(seconds=CLOCK_SKEW_SECONDS)
        return created_at is None or self.opened_at <= created_at + skew


def settle(
    pending: Iterable[Intent],
    writer: str | None,
    *,
    url: str,
    version_id: str,
    created_at: datetime | None,
    now: datetime,
) -> str | None:
    """The one rule of `settled_writer_of`, over the intents read first and the version's record
    (`writer`) read second: the recorded writer; else, while an intent may still claim the
    version, WriteNotSettledError; else None (a producer's version)."""
    if writer is not None:
        return writer
    holding = [i for i in pending if i.holds(created_at, now)]
    if not holding:
        return None
    until = max(i.open_until for i in holding)
    wait = max(1, int((until - now).total_seconds()) + 1)
    writers = ", ".join(sorted({f"{i.writer} ({i.run_id})" for i in holding}))
    raise WriteNotSettledError(
        f"{url} version {version_id}: {writers} may have written it and has not recorded it "
        f"yet; decided within {wait} s",
        retry_after_seconds=wait,
    )


class WritesLedger(Protocol):
    """Storage port of the writes ledger (DynamoWritesLedger; tests/fakes.py in memory)."""

    def writer_of(self, bucket: str, key: str, version_id: str) -> str | None:
        """The Lethe job (a `Writer` value) that recorded writing this exact version; None
        when none did: a producer's version, or one not recorded (yet)."""

    def written(self, bucket: str, key: str, version_id: str) -> Written | None:
        """`writer_of` with the run that recorded the version (read consistently)."""

    def settled_writer_of(
        self, bucket: str, key: str, version_id: str, *, created_at: datetime | None
    ) -> str | None:
        """`writer_of` for a version whose event is being read (created at `created_at`, S3's
        event time): raises WriteNotSettledError while an intent that may claim it is open."""

    def forget(self, bucket: str, key: str, version_id: str) -> None:
        """Remove the record of a version that was permanently deleted (nothing if none)."""

    def writer(self, name: Writer, run_id: str) -> WriteLog:
        """The WriteLog of one run of a Lethe job (`run_id`: its correlation id), for an
        S3ObjectStore that records every PUT it makes."""


def _now() -> datetime:
    return datetime.now(UTC)


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


@dataclass(frozen=True)
class DynamoLedgerWriter:
    """WriteLog of one job run on the table (module docstring, steps 1-3)."""

    table: Any  # a boto3 dynamodb Table resource
    name: Writer
    run_id: str
    clock: Callable[[], datetime] = field(default=_now, repr=False)

    def _key(self, bucket: str, key: str, sort: str) -> dict[str, str]:
        return {"object_url": ledger_partition(bucket, key), "version_id": sort}

    def intend(self, bucket: str, key: str, size: int) -> str:
        token = uuid.uuid4().hex
        opened = self.clock()
        until = opened + timedelta(seconds=intent_seconds(size))
        self.table.put_item(
            Item={
                **self._key(bucket, key, INTENT_PREFIX + token),
                "kind": "intent",
                "bucket": bucket,
                "key": key,
                "writer": self.name.value,
                "run_id": self.run_id,
                "opened_at": opened.isoformat(),
                "open_until": _epoch(until),
                "expires_at": _epoch(until) + INTENT_KEPT_SECONDS,
            }
        )
        return token

    def written(self, bucket: str, key: str, token: str, version_id: str) -> None:
        self.table.put_item(
            Item={
                **self._key(bucket, key, VERSION_PREFIX + version_id),
                "kind": "version",
                "bucket": bucket,
                "key": key,
                "s3_version_id": version_id,
                "writer": self.name.value,
                "run_id": self.run_id,
                "written_at": self.clock().isoformat(),
            }
        )
        self.abandoned(bucket, key, token)  # closed only once the version is on record

    def abandoned(self, bucket: str, key: str, token: str) -> None:
        self.table.delete_item(Key=self._key(bucket, key, INTENT_PREFIX + token))


def _intent(item: dict[str, Any]) -> Intent:
    return Intent(
        token=str(item["version_id"])[len(INTENT_PREFIX) :],
        writer=str(item.get("writer", "")),
        run_id=str(item.get("run_id", "")),
        opened_at=datetime.fromisoformat(str(item["opened_at"])),
        open_until=datetime.fromtimestamp(int(item["open_until"]), UTC),
    )


class DynamoWritesLedger:
    """WritesLedger on ObjectCatalogTable's ledger partitions (module docstring)."""

    def __init__(self, table: Any, clock: Callable[[], datetime] = _now) -> None:
        self._table = table  # a boto3 dynamodb Table resource (the object catalog's)
        self._clock = clock

    def writer_of(self, bucket: str, key: str, version_id: str) -> str | None:
        found = self.written(bucket, key, version_id)
        return found.writer if found else None

    def written(self, bucket: str, key: str, version_id: str) -> Written | None:
        item = self._table.get_item(
            Key={
                "object_url": ledger_partition(bucket, key),
                "version_id": VERSION_PREFIX + version_id,
            },
            ConsistentRead=True,
        ).get("Item")
        if not item or not item.get("writer"):
            return None
        return Written(writer=str(item["writer"]), run_id=str(item.get("run_id", "")))

    def intents(self, bucket: str, key: str) -> list[Intent]:
        """The key's intents not closed yet (open or expired), read consistently."""
        items = query_all(
            self._table,
            KeyConditionExpression="object_url = :u AND begins_with(version_id, :i)",
            ExpressionAttributeValues={":u": ledger_partition(bucket, key), ":i": INTENT_PREFIX},
            ConsistentRead=True,
        )
        return [_intent(item) for item in items]

    def settled_writer_of(
        self, bucket: str, key: str, version_id: str, *, created_at: datetime | None
    ) -> str | None:
        pending = self.intents(bucket, key)  # first the intents, then the record: see above
        writer = self.writer_of(bucket, key, version_id)
        return settle(
            pending,
            writer,
            url=s3_url(bucket, key),
            version_id=version_id,
            created_at=created_at,
            now=self._clock(),
        )

    def forget(self, bucket: str, key: str, version_id: str) -> None:
        self._table.delete_item(
            Key={
                "object_url": ledger_partition(bucket, key),
                "version_id": VERSION_PREFIX + version_id,
            }
        )

    def writer(self, name: Writer, run_id: str) -> DynamoLedgerWriter:
        return DynamoLedgerWriter(self._table, name, run_id, self._clock)
