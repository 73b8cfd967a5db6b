"""What an erasure searches besides the subject index, and what it names as not searched.

The index knows what has been indexed. A raw upload Lethe already holds may not be: it is still
RECEIVED or INGESTING (a user's last upload is often minutes old when they ask to be forgotten),
its ingestion FAILED or was SUPERSEDED by a newer version before it ran (never indexed), it was
QUARANTINED whole (unreadable: never indexed), or it sits in an archive storage class. Two
steps of the erasure workflow (statemachines/erasure.asl.json, functions/erasure_steps) close
that gap, each reading the object catalog through `ObjectCatalog.in_status` (its GSI
`by_dataset_status`: a dataset's versions of one status, never its ingested bulk):

    watch_ingestion  the ingestion watermark, polled by the state machine (a Wait state) before
                     the report is frozen: done when no raw version of the request's datasets
                     that is older than the request is still RECEIVED or INGESTING (and the
                     catalog has had time to record uploads made just before the request) and
                     no dataset of the request's scope awaits a re-index, or when the wait is
                     over; the request record says what it waits for (`ingestion_wait`: counts
                     and generations per dataset, never keys)
    widen            at freezing time (workflow.build_report): raw versions older than the
                     request that the index cannot know are either searched or named. FAILED and
                     SUPERSEDED versions are ordinary raw objects of their dataset: their keys
                     are ADDED to the manifest's objects, so the erase job reads the key's
                     current version and matches it like any raw object, and deletes every
                     older version (whatever the index says). Versions the job cannot read
                     are named in `Manifest.not_searched`: still in flight after the wait
                     (`ingestion_in_flight`), quarantined whole as unreadable (`quarantined`),
                     in GLACIER or DEEP_ARCHIVE (`archived`), or past MAX_ADDED_OBJECTS keys
                     (`ingestion_failed`). A version that is an older version of a key the job
                     erases anyway is not named: the job deletes it (except in-flight ones,
                     whose ingestion may have written lake rows already). An added key is
                     marked (`ManifestObject.widened_from`: the catalog status that put it
                     there): a current version the job cannot read (a malformed file, often
                     why its ingestion failed) is then a gap of the request (`ingestion_failed`,
                     lethe_jobs.not_searched), not a failure of the whole erase run.
                     A dataset of the scope whose re-index is still pending is named too
                     (`reindex_pending`, below)

**A pending re-index.** When a dataset's matching definition changes (a PUT that moves its
matching generation, lethe_shared.datasets.matching), its index still describes the rows the old
definition matched until the re-index of the new generation succeeds
(`datasets.reindex.reindex_pending`: matching_generation > indexed_generation). The report finds
objects through that index and the erase job matches rows with the current document, so an
object holding the subject under the new definition only would be missed. The watermark
therefore also holds the report while a dataset of the scope has a re-index pending (read with
the registry's consistent `registration`), with the same bounded wait; if one is still pending
when the report is frozen, the dataset is named in `not_searched` (reason `reindex_pending`,
object_url the dataset's raw prefix `s3://<raw>/<dataset_id>/`, no version) and the request
ends INCOMPLETE.

**A key re-index pending.** Every index entry is an HMAC under the subject hash key, and so is
every hash of a request (computed when it is filed; the request records the key's fingerprint,
`ErasureRequest.key_fingerprint`). After the key is rotated, the index of a dataset holds
hashes under the old key until the dataset is re-indexed (the registry's
`indexed_key_fingerprint`, recorded by the re-index: lethe_shared.datasets.registry). A request
whose hashes are under another key than the one a dataset of its scope was indexed with would
find nothing there, so given the current key's fingerprint (`current_key`) the watermark and
the report treat that dataset exactly as a pending re-index: the request waits for it, and a
dataset still pending when the report is frozen is named `reindex_pending`, its detail saying
that the key changed (fingerprints only, never the key; lethe_shared.erasure.pending_reindex).
A request or dataset whose fingerprint is unknown (recorded by an older Lethe) counts as
another key. A request whose key is no longer the current one (filed just before a rotation,
or by a function still holding the old key in its cache) can match nothing the erase job reads
with the current key: every dataset of its scope is named, and it must be filed again.

What the index is found to hold after the erasure (entries indexed after the report was frozen)
is the index update's final look-up (lethe_shared.erasure.index_update), which the certificate
step reads with every other gap (lethe_shared.erasure.completion).

A request's scope is every registered dataset, or the registered ones among its optional
`datasets` field. "Older than the request" is the catalog's event time (S3's, of the upload)
before the request's `created_at`; a version without a readable time counts as older.
Nothing here holds or logs a subject id; details name commands, never keys.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ConfigDict, Field

from lethe_shared.aws.s3 import ObjectStore, ObjectVersion, key_state, split_s3_url
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectCatalog, ObjectStatus
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.registry import DatasetRegistry, Registrations
from lethe_shared.erasure.pending_reindex import (
    PendingReindex,
    pending_reindexes,
    reindex_gaps,
    request_keys,
)
from lethe_shared.erasure.report import (
    GapReason,
    Manifest,
    ManifestObject,
    NotSearched,
    version_ref,
)
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureRequests,
    RequestClosedError,
    RequestNotFoundError,
)
from lethe_shared.models import Model

LOG = logging.getLogger("lethe.erasure")

IN_FLIGHT = (ObjectStatus.RECEIVED, ObjectStatus.INGESTING)
# Raw versions whose ingestion never indexed them, readable as raw objects of their dataset.
SEARCHABLE = (ObjectStatus.FAILED, ObjectStatus.SUPERSEDED)
NEVER_INDEXED = (*SEARCHABLE, ObjectStatus.QUARANTINED)
ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})  # not readable without a restore
# Keys one report adds for their never-indexed versions; beyond, they are named (the manifest
# travels to every Spark task, and the report step lists each key's versions).
MAX_ADDED_OBJECTS = 500
# How long S3 and EventBridge take to put an upload's event in the object events queue: a
# request this old whose queue is empty has every earlier upload catalogued.
QUIET_SECONDS = 15
WAIT_ATTRIBUTE = "ingestion_wait"  # on the request record, while the watermark holds


# ------------------------------------------------------------------------------ the scope


class ScopeRegistry(DatasetRegistry, Registrations, Protocol):
    """The dataset registry as the scope reads it: the registered datasets (`list`) and each
    one's matching generations (`registration`, a consistent read: DynamoDatasetRegistry)."""


def scope_datasets(record: ErasureRequest, datasets: Iterable[Dataset]) -> dict[str, Dataset]:
    """The registered datasets the request covers: all, or those of its scope (the body's
    optional `datasets`, kept on the record as `scope`; a name that is no longer registered has
    nothing to search)."""
    registered = {d.dataset_id: d for d in datasets}
    if not record.scope:
        return dict(sorted(registered.items()))
    names = set(record.scope)
    return {d: registered[d] for d in sorted(registered) if d in names}


def _time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def catalog_time(item: CatalogItem) -> datetime | None:
    """When the version was written, as the catalog knows it (S3's event time)."""
    return _time(item.event_time) or _time(item.updated_at)


def raw_versions_before(
    catalog: ObjectCatalog,
    dataset_ids: Iterable[str],
    before: datetime,
    statuses: Sequence[ObjectStatus],
) -> list[CatalogItem]:
    """The raw object versions (not delete markers) of these datasets in these statuses whose
    catalog time is before `before` (or unknown), in a stable order."""
    found = []
    for dataset_id in dataset_ids:
        for item in catalog.in_status(dataset_id, statuses):
            if item.zone is not Zone.RAW or item.delete_marker:
                continue
            written = catalog_time(item)
            if written is None or written < before:
                found.append(item)
    return sorted(found, key=lambda i: (str(i.dataset_id), i.object_url, i.version_id))


def _created(record: ErasureRequest) -> datetime:
    created = _time(record.created_at)
    if created is None:  # every record has one; without it, nothing can be older
        raise ValueError(f"request {record.request_id} has no readable created_at")
    return created


def _open(requests: ErasureRequests, request_id: str) -> ErasureRequest:
    record = requests.get(request_id)
    if record is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if record.terminal:
        raise RequestClosedError(f"request {request_id} is {record.status.value}")
    return record


# --------------------------------------------------------------------------- the watermark


class IngestionWait(Model):
    """One look at the watermark, as the request record keeps it (`ingestion_wait`)."""

    model_config = ConfigDict(frozen=True)

    checked_at: str
    waited_seconds: int = Field(ge=0)
    max_wait_seconds: int = Field(ge=0)
    # per dataset: raw versions older than the request still RECEIVED or INGESTING
    in_flight: dict[str, int]
    settled: bool  # the report may be frozen now
    why: str  # what the workflow does next, in words (no key, no id)
    # per dataset of the scope whose re-index is pending: its generations (additive field)
    reindex_pending: dict[str, PendingReindex] = Field(default_factory=dict)

    @property
    def pending(self) -> int:
        return sum(self.in_flight.values())


def _waiting_for(pending: int, reindexing: Sequence[str]) -> str:
    """What holds the report, in words: counts and dataset ids only."""
    parts = []
    if pending:
        parts.append(f"{pending} upload(s) older than the request to be ingested")
    if reindexing:
        parts.append(
            f"the re-index of {len(reindexing)} dataset(s) of its scope ({', '.join(reindexing)})"
        )
    return " and ".join(parts)


def watch_ingestion(
    request_id: str,
    *,
    requests: ErasureRequests,
    catalog: ObjectCatalog,
    registry: ScopeRegistry,
    waited_seconds: int,
    max_wait_seconds: int,
    settle_seconds: int,
    events_waiting: Callable[[], int] | None = None,
    now: datetime | None = None,
    current_key: str | None = None,
) -> IngestionWait:
    """The watermark: settled when the catalog has caught up with the request (below), no
    raw version of the request's datasets older than the request is in flight and no dataset of
    its scope has a re-index pending (module docstring), or once the workflow has waited
    `max_wait_seconds` (the catalog caught up). Recorded on the request.

    The catalog records an upload when the object events function reads its event, after the
    queue's batch window: it has caught up when the request is `settle_seconds` old (the
    window and a margin), or QUIET_SECONDS old with no object event waiting in the queue
    (`events_waiting`, visible, in flight or delayed: what an idle lake shows at once).

    `current_key`: the subject hash key's fingerprint now. Given, a dataset indexed with another
    key than the request's hashes, or every dataset when the request's key is not the current
    one (module docstring), holds the report too (the erasure steps function always gives it).
    """
    at = now or datetime.now(UTC)
    record = _open(requests, request_id)
    created = _created(record)
    datasets = scope_datasets(record, registry.list())
    flying = raw_versions_before(catalog, datasets, created, IN_FLIGHT)
    counts = dict(sorted(Counter(str(i.dataset_id) for i in flying).items()))
    age = (at - created).total_seconds()
    caught_up = age >= settle_seconds or (
        age >= QUIET_SECONDS and events_waiting is not None and events_waiting() == 0
    )
    timed_out = waited_seconds >= max_wait_seconds
    pending = sum(counts.values())
    reindexing = pending_reindexes(registry, datasets, *request_keys(record, current_key))
    held = _waiting_for(pending, list(reindexing))
    if not caught_up:
        why = "waiting for the object catalog to record uploads made before the request"
    elif not held:
        why = (
            "no upload older than the request is being ingested and no dataset of its scope "
            "awaits a re-index: freezing the report"
        )
    elif timed_out:
        why = (
            f"still waiting for {held} after {waited_seconds} s: freezing the report, which "
            "names them as not searched"
        )
    else:
        why = f"waiting for {held}"
    wait = IngestionWait(
        checked_at=at.isoformat(),
        waited_seconds=waited_seconds,
        max_wait_seconds=max_wait_seconds,
        in_flight=counts,
        settled=caught_up and (not held or timed_out),
        why=why,
        reindex_pending=reindexing,
    )
    requests.update(request_id, {WAIT_ATTRIBUTE: wait.model_dump(mode="json")})
    LOG.info(
        "ingestion watermark: %s", why,
        extra={"in_flight": counts, "reindex_pending": sorted(reindexing)},
    )  # fmt: skip
    return wait


# ----------------------------------------------------------------------- at freezing time


def _raw_object(
    url: str, dataset: Dataset, listing: Sequence[ObjectVersion], status: ObjectStatus
) -> ManifestObject:
    """A raw key the index does not name, to erase like any raw object of its dataset: the
    job reads its current version and deletes every older one. No index rows are expected.
    Marked `widened_from` the catalog status that put it there (FAILED or SUPERSEDED)."""
    bucket, key = split_s3_url(url)
    return ManifestObject(
        object_url=url,
        bucket=bucket,
        key=key,
        dataset_id=dataset.dataset_id,
        zone=Zone.RAW,
        format=dataset.format.value,
        state=key_state(listing),
        expected_rows=0,
        subjects=(),
        versions=tuple(version_ref(v) for v in listing),
        widened_from=status.value,
    )


def _gap(item: CatalogItem, reason: GapReason, detail: str) -> NotSearched:
    return NotSearched(
        object_url=item.object_url,
        version_id=item.version_id,
        dataset_id=str(item.dataset_id),
        reason=reason,
        detail=detail,
    )


def _reingest(item: CatalogItem) -> str:
    return (
        f"`lethe objects reingest --dataset {item.dataset_id} --key <key> --version-id "
        f"{item.version_id}`"
    )


def _unsearched(
    item: CatalogItem, version: ObjectVersion, current: ObjectVersion | None, *, erased: bool
) -> NotSearched | None:
    """Why a never-indexed (or in-flight) raw version is not searched, or None when it is:
    the erase job deletes it (an older version of a key it erases) or reads it (the current
    version of such a key, FAILED or SUPERSEDED, in a readable storage class)."""
    if item.status not in IN_FLIGHT and erased:
        if not version.is_latest:
            return None
        readable = version.storage_class not in ARCHIVE_CLASSES
        if readable and item.status is not ObjectStatus.QUARANTINED:
            return None
    return _gap(item, *_why(item, version, current))


def _why(
    item: CatalogItem, version: ObjectVersion, current: ObjectVersion | None
) -> tuple[GapReason, str]:
    again = "then file the request again"
    if item.status in IN_FLIGHT:
        return (
            "ingestion_in_flight",
            f"still {item.status.value} when the report was frozen: let its ingestion finish "
            f"(`lethe objects list --dataset {item.dataset_id}`; a stuck one: {_reingest(item)}"
            f"), {again}",
        )
    if version.storage_class in ARCHIVE_CLASSES:
        return (
            "archived",
            f"in S3 storage class {version.storage_class}, which the erase job cannot read: "
            f"restore it and copy it to a readable storage class (or delete this version), "
            f"{again}",
        )
    if item.status is ObjectStatus.QUARANTINED:
        return (
            "quarantined",
            "quarantined whole at ingestion as unreadable (its quarantine document says why): "
            f"fix the file and re-ingest it ({_reingest(item)}) or delete this version, {again}",
        )
    if current is not None and current.storage_class in ARCHIVE_CLASSES:
        return (
            "archived",
            f"the key's current version is in S3 storage class {current.storage_class}, which "
            f"the erase job cannot read: restore it and copy it to a readable storage class, "
            f"{again}",
        )
    return (
        "ingestion_failed",
        f"{item.status.value}, never indexed, and past the raw objects one report searches "
        f"beyond the index ({MAX_ADDED_OBJECTS}): re-ingest the dataset's {item.status.value} "
        f"versions (`lethe objects reingest --dataset {item.dataset_id} --status "
        f"{item.status.value}`), {again}",
    )


def widen(
    manifest: Manifest,
    record: ErasureRequest,
    *,
    catalog: ObjectCatalog,
    registry: ScopeRegistry,
    objects: ObjectStore,
    raw_bucket: str,
    max_added: int = MAX_ADDED_OBJECTS,
    current_key: str | None = None,
) -> Manifest:
    """The manifest built from the index, with the raw keys of never-indexed versions older
    than the request added to its objects and what cannot be searched in `not_searched`,
    including each dataset of the scope whose re-index is still pending (`reindex_gaps`;
    `raw_bucket` names their place; with `current_key`, also one indexed with another key than
    the request's, and every one when the request's key is not current)."""
    datasets = scope_datasets(record, registry.list())
    items = [
        item
        for item in raw_versions_before(
            catalog, datasets, _created(record), (*IN_FLIGHT, *NEVER_INDEXED)
        )
        # partly rejected files are indexed (their raw rows and quarantine file): only one
        # quarantined whole, with no row read, is not
        if item.status is not ObjectStatus.QUARANTINED or not item.rows_read
    ]
    by_url: dict[str, list[CatalogItem]] = defaultdict(list)
    for item in items:
        by_url[item.object_url].append(item)
    listed = {o.object_url for o in manifest.objects}
    added: list[ManifestObject] = []
    gaps: list[NotSearched] = []
    for url, versions in sorted(by_url.items()):
        bucket, key = split_s3_url(url)
        listing = objects.versions_of(bucket, key)
        stored = {v.version_id: v for v in listing if not v.delete_marker}
        present = [(i, stored[i.version_id]) for i in versions if i.version_id in stored]
        if not present:
            continue  # S3 no longer holds them: nothing left to search
        current = next((v for v in listing if v.is_latest and not v.delete_marker), None)
        readable = current is None or current.storage_class not in ARCHIVE_CLASSES
        wanted = any(i.status in SEARCHABLE for i, _ in present)
        erased = url in listed
        if not erased and wanted and readable and len(added) < max_added:
            status = _widened_status(present, current)
            added.append(_raw_object(url, datasets[str(present[0][0].dataset_id)], listing, status))
            erased = True
        for item, version in present:
            gap = _unsearched(item, version, current, erased=erased)
            if gap is not None:
                gaps.append(gap)
    gaps.extend(reindex_gaps(registry, datasets, raw_bucket, *request_keys(record, current_key)))
    if added or gaps:
        LOG.info(
            "report scope: %d raw object(s) never indexed added, %d place(s) not searched",
            len(added), len(gaps),
        )  # fmt: skip
    return manifest.model_copy(
        update={
            "objects": tuple(sorted((*manifest.objects, *added), key=lambda o: o.object_url)),
            "not_searched": _sorted((*manifest.not_searched, *gaps)),
        }
    )


def _widened_status(
    present: Sequence[tuple[CatalogItem, ObjectVersion]], current: ObjectVersion | None
) -> ObjectStatus:
    """The catalog status an added key is marked with: its current version's when that is one
    of SEARCHABLE, else the first searchable version's."""
    searchable = [i for i, _ in present if i.status in SEARCHABLE]
    now = [i for i in searchable if current is not None and i.version_id == current.version_id]
    return (now or searchable)[0].status


def _sorted(gaps: Iterable[NotSearched]) -> tuple[NotSearched, ...]:
    return tuple(sorted(gaps, key=lambda g: (g.dataset_id, g.object_url, g.version_id, g.reason)))


def not_searched_counts(gaps: Iterable[NotSearched]) -> list[dict[str, Any]]:
    """Per dataset and reason, how many versions: what the request record and the approver
    see (never keys)."""
    counted = Counter((g.dataset_id, g.reason) for g in gaps)
    return [
        {"dataset_id": dataset, "reason": reason, "versions": n}
        for (dataset, reason), n in sorted(counted.items())
    ]
