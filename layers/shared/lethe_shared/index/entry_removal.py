"""Removing subject index entries only while they still describe what was judged.

The erasure's index update (lethe_shared.erasure.index_update) reads what each entry of an
object describes (`EntryState`: subject hash, version id, ETag, flag), judges it, and removes the
entries it may. Each delete holds only while the entry still describes exactly that state: an
indexer that writes the entry of a newer version between the read and the delete wins, and the
entry stays. Such entries come back as they are now (`Removal.changed`), for the caller to judge
again; entries already gone count in neither list.

On DynamoDB (`delete_unchanged`) the deletes go as TransactWriteItems of up to 100 actions, each
with a ConditionExpression on `version_id`, `etag` and `deleted` and
ReturnValuesOnConditionCheckFailure=ALL_OLD. A transaction is cancelled whole when one action
fails: the actions whose condition failed are set apart (with the item as it is now, or as gone)
and the others sent again; actions cancelled for another reason (a conflicting transaction,
throttling) are sent again after a pause, a bounded number of times. The writes a transaction
costs are twice a plain delete's; the batch size keeps a key with many entries to one call per
100 of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from lethe_shared.aws.errors import (
    cancellation_reasons,
    is_action_condition_failed,
    is_action_fine,
)
from lethe_shared.aws.s3 import NULL_VERSION
from lethe_shared.errors import LetheError

TRANSACTION_LIMIT = 100  # actions per TransactWriteItems (DynamoDB's limit)
MAX_SENDS = 6  # sends of one batch while other writers conflict with it


@dataclass(frozen=True)
class EntryState:
    """What one entry of an object describes: the version (id and ETag) its subject's rows were
    found in, and whether it is flagged `deleted` (the rows are in older versions only)."""

    subject_hash: str
    version_id: str = NULL_VERSION
    etag: str = ""
    deleted: bool = False

    @classmethod
    def of_item(cls, item: Mapping[str, Any]) -> EntryState:
        return cls(
            subject_hash=str(item["subject_hash"]),
            version_id=str(item.get("version_id", NULL_VERSION)),
            etag=str(item.get("etag", "")),
            deleted=bool(item.get("deleted", False)),
        )


@dataclass(frozen=True)
class Removal:
    """What a conditional removal did: the entries removed, and the entries a writer changed
    meanwhile, as they are now (they stay)."""

    removed: tuple[EntryState, ...] = ()
    changed: tuple[EntryState, ...] = ()


def unchanged_condition(state: EntryState) -> tuple[str, dict[str, Any]]:
    """The ConditionExpression (and its values) under which the entry still describes `state`:
    it exists, with that version id, ETag and flag (an absent attribute reads as the default)."""
    parts = [
        "attribute_exists(subject_hash)",
        "version_id = :v"
        if state.version_id != NULL_VERSION
        else "(attribute_not_exists(version_id) OR version_id = :v)",
        "etag = :e" if state.etag else "(attribute_not_exists(etag) OR etag = :e)",
        "deleted = :d" if state.deleted else "(attribute_not_exists(deleted) OR deleted = :d)",
    ]
    values = {":v": state.version_id, ":e": state.etag, ":d": state.deleted}
    return " AND ".join(parts), values


def delete_unchanged(
    table: Any,
    object_url: str,
    expected: Iterable[EntryState],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Removal:
    """Delete each of the object's entries in `expected` only while it still describes that
    state (module docstring). `table` is a boto3 Table resource. Raises
    TransactionsKeptFailingError when a batch is cancelled for other reasons than failed
    conditions every time it is sent."""
    states = sorted({s.subject_hash: s for s in expected}.values(), key=lambda s: s.subject_hash)
    removed: list[EntryState] = []
    changed: list[EntryState] = []
    for start in range(0, len(states), TRANSACTION_LIMIT):
        pending = states[start : start + TRANSACTION_LIMIT]
        codes: set[str] = set()
        for attempt in range(MAX_SENDS):
            cancelled = _send(table, object_url, pending)
            if cancelled is None:  # the transaction went through: every action of it
                removed.extend(pending)
                break
            now, pending, codes = cancelled
            changed.extend(state for state in now if state is not None)
            if not pending:
                break
            if codes:  # another writer's transaction, or throttling: wait a little
                sleep(min(0.05 * 2**attempt, 1.0))
        else:
            raise TransactionsKeptFailingError(
                f"{len(pending)} entries of {object_url} could not be removed in {MAX_SENDS} "
                f"sends (cancelled: {', '.join(sorted(codes))})"
            )
    return Removal(tuple(removed), tuple(changed))


class TransactionsKeptFailingError(LetheError):
    """A batch of conditional deletes was cancelled every time it was sent, not for a failed
    condition (other writers' transactions, throttling, a malformed action)."""


def _send(
    table: Any, object_url: str, states: Sequence[EntryState]
) -> tuple[list[EntryState | None], list[EntryState], set[str]] | None:
    """One transaction deleting `states`: None when it went through; when cancelled, the
    entries whose condition failed as they are now (None: gone), the ones to send again, and
    the other cancellation codes seen."""
    actions = []
    for state in states:
        condition, values = unchanged_condition(state)
        actions.append(
            {
                "Delete": {
                    "TableName": table.name,
                    "Key": {"subject_hash": state.subject_hash, "object_url": object_url},
                    "ConditionExpression": condition,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        )
    try:
        table.meta.client.transact_write_items(TransactItems=actions)
    except ClientError as exc:
        reasons = cancellation_reasons(exc)
        if reasons is None or len(reasons) != len(states):
            raise
        now: list[EntryState | None] = []
        again: list[EntryState] = []
        codes: set[str] = set()
        for state, reason in zip(states, reasons, strict=True):
            if is_action_condition_failed(reason):
                item = reason.get("Item")
                now.append(EntryState.of_item(_plain_item(item)) if item else None)
            else:
                again.append(state)
                if not is_action_fine(reason):
                    codes.add(str(reason.get("Code", "")))
        return now, again, codes
    return None


def _plain_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item of a cancellation reason, in DynamoDB's typed form, as Python values."""
    from boto3.dynamodb.types import TypeDeserializer  # noqa: PLC0415 - on a failed condition only

    deserialize = TypeDeserializer().deserialize
    return {name: deserialize(value) for name, value in item.items()}
