"""Conditional removal of index entries on DynamoDB (lethe_shared.index.entry_removal), against
a table whose transactions are cancelled as DynamoDB cancels them: the conditions each delete
carries, and what is sent again when another writer's transaction conflicts."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

# What the removal imports on a failed condition, imported at collection: boto3's first import
# probes IPv6 with a socket, which a unit test may not open.
import boto3.dynamodb.types  # noqa: F401
import pytest
from botocore.exceptions import ClientError

from lethe_shared.aws.s3 import NULL_VERSION
from lethe_shared.index.entry_removal import (
    MAX_SENDS,
    EntryState,
    TransactionsKeptFailingError,
    delete_unchanged,
    unchanged_condition,
)

pytestmark = pytest.mark.lambda_runtime

URL = "s3://lake/reviews/p=1/part-a.parquet"
A, B, C = (EntryState(c * 64, "v1", "e1") for c in "abc")


def _cancelled(*codes: str, items: Sequence[dict[str, Any] | None] = ()) -> ClientError:
    """A cancelled transaction: one reason per action, with the item as it is now where given
    (`items`, by position)."""
    reasons: list[Any] = [
        {"Code": code, **({"Item": item} if item else {})}
        for code, item in zip(codes, [*items, *[None] * len(codes)], strict=False)
    ]
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
        "CancellationReasons": reasons,
    }
    return ClientError(response, "TransactWriteItems")


class Table:
    """A Table resource's name and client; each transact_write_items answers from `answers`
    (an exception to raise, or None: it went through) and records what it was sent."""

    name = "lethe-local-subject-index"

    def __init__(self, *answers: ClientError | None) -> None:
        self.answers = list(answers)
        self.sent: list[list[dict[str, Any]]] = []
        self.meta = SimpleNamespace(client=SimpleNamespace(transact_write_items=self._transact))

    def _transact(self, TransactItems: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.append(TransactItems)
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {}


def _subjects(actions: list[dict[str, Any]]) -> list[str]:
    return [a["Delete"]["Key"]["subject_hash"][0] for a in actions]


def test_each_delete_holds_only_while_the_entry_describes_what_was_read() -> None:
    condition, values = unchanged_condition(EntryState("a" * 64, "v1", "e1", deleted=True))
    assert condition == (
        "attribute_exists(subject_hash) AND version_id = :v AND etag = :e AND deleted = :d"
    )
    assert values == {":v": "v1", ":e": "e1", ":d": True}
    # an entry without a version id, ETag or flag (older items): the absent attribute matches
    condition, values = unchanged_condition(EntryState("a" * 64, NULL_VERSION, ""))
    assert condition == (
        "attribute_exists(subject_hash) AND (attribute_not_exists(version_id) OR version_id = :v)"
        " AND (attribute_not_exists(etag) OR etag = :e)"
        " AND (attribute_not_exists(deleted) OR deleted = :d)"
    )
    assert values == {":v": NULL_VERSION, ":e": "", ":d": False}


def test_a_failed_condition_sets_that_entry_apart_and_the_others_are_sent_again() -> None:
    now = {"subject_hash": {"S": "b" * 64}, "object_url": {"S": URL},
           "version_id": {"S": "v2"}, "etag": {"S": "e2"}}  # fmt: skip
    # b changed (its item as it is now), c gone (no item)
    table = Table(
        _cancelled("None", "ConditionalCheckFailed", "ConditionalCheckFailed", items=[None, now])
    )
    sleeps: list[float] = []

    removal = delete_unchanged(table, URL, [C, A, B], sleep=sleeps.append)

    assert removal.removed == (A,)
    assert removal.changed == (EntryState("b" * 64, "v2", "e2", False),)
    assert [_subjects(s) for s in table.sent] == [["a", "b", "c"], ["a"]]
    assert sleeps == []  # nothing conflicted: sent again at once
    first = table.sent[0][0]["Delete"]
    assert first["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert first["TableName"] == Table.name
    assert first["Key"] == {"subject_hash": "a" * 64, "object_url": URL}


def test_a_conflicting_transaction_is_waited_for_and_sent_again() -> None:
    table = Table(_cancelled("TransactionConflict", "None"), None)
    sleeps: list[float] = []

    removal = delete_unchanged(table, URL, [A, B], sleep=sleeps.append)

    assert removal.removed == (A, B)
    assert len(table.sent) == 2
    assert len(sleeps) == 1


def test_conflicts_without_end_fail_the_step() -> None:
    table = Table(*[_cancelled("ThrottlingError") for _ in range(MAX_SENDS)])

    with pytest.raises(TransactionsKeptFailingError, match="ThrottlingError"):
        delete_unchanged(table, URL, [A], sleep=lambda _: None)
    assert len(table.sent) == MAX_SENDS


def test_another_error_is_raised_as_it_is() -> None:
    error = ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "TransactWriteItems")
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        delete_unchanged(Table(error), URL, [A])


def test_more_than_100_entries_go_in_several_transactions() -> None:
    states = [EntryState(f"{n:064x}") for n in range(250)]
    table = Table()

    removal = delete_unchanged(table, URL, states)

    assert [len(s) for s in table.sent] == [100, 100, 50]
    assert removal.removed == tuple(states)
