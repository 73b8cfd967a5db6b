"""DynamoDB conditional-check failures, on moto, where Lethe relies on them: callers racing the
same conditional write (threads released together by a barrier) and writes against a record
read before another writer changed it. Each ConditionalCheckFailedException is handled as
designed: exactly one writer wins, every other gets Lethe's own answer (False, the stored
record, InvalidTransitionError), never the raw ClientError, and nothing is written twice.

moto serialises DynamoDB's item operations here as DynamoDB does per item (the local cloud's
`make_dynamodb_atomic`): without it moto's UpdateItem is not atomic under threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from lethe.localcloud.dynamodb_transactions import make_dynamodb_atomic
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    DynamoObjectCatalog,
    ObjectStatus,
    Zone,
    normalize_sequencer,
)
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureRequest,
    ErasureStatus,
    HistoryEvent,
    InvalidTransitionError,
)
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from tests.integration.conftest import RAW, create_table_from_template

pytestmark = pytest.mark.integration

RACERS = 8
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
R = TypeVar("R")


@pytest.fixture(autouse=True)
def atomic_items(aws: None) -> Iterator[None]:
    undo = make_dynamodb_atomic()
    yield
    undo()


def race(calls: list[Callable[[], R]]) -> list[R | BaseException]:
    """Run every call on its own thread, all released at once; each one's result or error."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[R | BaseException] = [RuntimeError("not run")] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = calls[index]()
        except BaseException as exc:  # the outcome under test
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def _request(request_id: str, **changes: Any) -> ErasureRequest:
    values: dict[str, Any] = {
        "request_id": request_id,
        "status": ErasureStatus.RECEIVED,
        "created_at": T0.isoformat(),
        "updated_at": T0.isoformat(),
        "requested_by": "privacy@example.com",
        "reason": "ticket 88",
        "subject_hashes": ("1" * 64,),
        "subject_count": 1,
        "history": (
            HistoryEvent(
                status=ErasureStatus.RECEIVED, at=T0.isoformat(), by="privacy@example.com"
            ),
        ),
    }
    return ErasureRequest.model_validate(values | changes)


@pytest.fixture
def requests() -> DynamoErasureRequests:
    table = create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    return DynamoErasureRequests(table)


def test_racing_decisions_on_one_request_apply_exactly_one(
    requests: DynamoErasureRequests,
) -> None:
    # Given a request waiting for approval
    requests.create(_request("er-1"))
    requests.transition("er-1", ErasureStatus.REPORTED, by="workflow")
    requests.transition("er-1", ErasureStatus.AWAITING_APPROVAL, by="workflow")
    decisions = [
        (ErasureStatus.APPROVED if i % 2 else ErasureStatus.REJECTED, f"approver-{i}@example.com")
        for i in range(RACERS)
    ]

    # When eight approvers approve or reject at the same moment
    outcomes = race(
        [
            (lambda s=status, b=by: requests.transition("er-1", s, by=b, remove=("task_token",)))
            for status, by in decisions
        ]
    )

    # Then one decision is applied, every other one is refused as a transition from it
    won = [o for o in outcomes if isinstance(o, ErasureRequest)]
    refused = [o for o in outcomes if isinstance(o, InvalidTransitionError)]
    assert (len(won), len(refused)) == (1, RACERS - 1), outcomes
    stored = requests.get("er-1")
    assert stored == won[0]
    assert {e.current for e in refused} == {stored.status.value}
    assert [h.status for h in stored.history] == [
        ErasureStatus.RECEIVED, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        stored.status,
    ]  # fmt: skip


def test_a_decision_checked_against_a_stale_read_is_refused(
    requests: DynamoErasureRequests,
) -> None:
    requests.create(_request("er-1"))
    requests.transition("er-1", ErasureStatus.REPORTED, by="workflow")
    requests.transition("er-1", ErasureStatus.AWAITING_APPROVAL, by="workflow")
    seen = requests.get("er-1")  # the second approver's page read it here
    requests.transition("er-1", ErasureStatus.APPROVED, by="dpo@example.com")

    assert seen is not None
    assert seen.status is ErasureStatus.AWAITING_APPROVAL
    with pytest.raises(InvalidTransitionError) as caught:
        requests.transition("er-1", ErasureStatus.REJECTED, by="ciso@example.com")
    assert caught.value.current == "APPROVED"
    stored = requests.get("er-1")
    assert stored is not None
    assert [h.by for h in stored.history][-1] == "dpo@example.com"
    assert ErasureStatus.REJECTED not in [h.status for h in stored.history]


def test_racing_creates_of_one_request_store_it_once(requests: DynamoErasureRequests) -> None:
    bodies = [_request("er-1", reason=f"retry {i}") for i in range(RACERS)]

    outcomes = race([(lambda b=b: requests.create(b)) for b in bodies])

    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    created = [o for o in outcomes if isinstance(o, tuple) and o[1]]
    assert len(created) == 1
    stored = requests.get("er-1")
    assert stored == created[0][0]
    assert all(o[0] == stored for o in outcomes if isinstance(o, tuple))  # the others see it


def _item(
    version: str, sequencer: str, status: ObjectStatus = ObjectStatus.RECEIVED
) -> CatalogItem:
    return CatalogItem(
        bucket=RAW,
        key="reviews/a.csv",
        version_id=version,
        zone=Zone.RAW,
        status=status,
        sequencer=normalize_sequencer(sequencer),
        dataset_id="reviews",
    )


def test_racing_deliveries_of_object_events_keep_the_newest(lethe_tables: dict[str, Any]) -> None:
    catalog = DynamoObjectCatalog(lethe_tables["ObjectCatalogTable"])
    # the same event delivered eight times at once (SQS is at least once)
    duplicates = race([(lambda: catalog.put_if_newer(_item("v1", "10"))) for _ in range(RACERS)])
    # then the version's events out of order, at once: created (20), deleted (30), stale (15)
    events = [
        _item("v1", "20"),
        _item("v1", "30", ObjectStatus.DELETED),
        _item("v1", "15", ObjectStatus.DELETED),
    ] * 3
    ordered = race([(lambda e=e: catalog.put_if_newer(e)) for e in events])

    assert duplicates.count(True) == 1
    assert duplicates.count(False) == RACERS - 1
    assert all(isinstance(o, bool) for o in ordered), ordered
    stored = catalog.get(RAW, "reviews/a.csv", "v1")
    assert stored is not None
    assert (stored.sequencer, stored.status) == (normalize_sequencer("30"), ObjectStatus.DELETED)


def test_flagging_entries_removed_meanwhile_neither_fails_nor_brings_them_back(
    lethe_tables: dict[str, Any],
) -> None:
    url = "s3://lake/reviews/p=1/part-a.parquet"

    class StaleIndex(DynamoSubjectIndex):
        """Lists the object's subjects, then another writer removes one of them."""

        armed = False

        def subjects_of(self, object_url: str) -> set[str]:
            found = super().subjects_of(object_url)
            if self.armed:
                self._table.delete_item(Key={"subject_hash": "a" * 64, "object_url": object_url})
            return found

    index = StaleIndex(lethe_tables["SubjectIndexTable"])
    index.replace_object(
        url,
        [
            IndexEntry(
                subject_hash=s * 64, object_url=url, dataset_id="reviews", zone=Zone.LAKE,
                format="parquet", rows=1, version_id="v1", etag="e1",
            )
            for s in ("a", "b")
        ],
    )  # fmt: skip

    index.armed = True
    flagged = index.flag_deleted(url)  # a's conditional update fails: removed meanwhile

    assert flagged == 2
    assert index.lookup("a" * 64) == []  # not recreated as a bare {key, deleted} item
    assert [e.deleted for e in index.lookup("b" * 64)] == [True]
