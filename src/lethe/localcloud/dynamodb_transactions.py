"""DynamoDB requests in the local cloud: each one atomic (`make_dynamodb_atomic`, one lock around
the backend's item methods), and TransactWriteItems rolled back from a journal of the items it
touches instead of from copies of whole tables (`patch_transaction_copies`).

Where: ``moto/dynamodb/models/__init__.py``, ``DynamoDBBackend.transact_write_items`` (moto
5.2.5). Before it writes anything it keeps a backup to roll back to, by looping over the
transaction's items and deep-copying, for each item, the whole table the item names
(``original_table_state[table_name] = copy.deepcopy(self.tables[table_name])``), and on a
failure it puts the copies in place of the tables. Why it matters: the index, catalog and
request writes of ``make soak`` are transactions, so every one of them copied the subject index
or the catalog whole (first once per item; since the previous version of this patch, once per
transaction), under the lock that serialises DynamoDB requests (``make_dynamodb_atomic``): CPU
and a churn of millions of short-lived objects per minute, growing with the tables. A full
soak's local cloud process grew to 18.6 GB and was killed; a soak of 400 objects and 25
requests grew by about 100 MB per erasure request.

What: while a thread runs ``transact_write_items``, a table deep-copies to itself (no copy is
made, so moto's rollback puts each table back in its own place), and the patch records, before
moto's call, each item the transaction names as it is (a deep copy of that one item, or its
absence). When moto's call raises (a condition failed, a validation error), the journal is
replayed backwards: every touched key gets back its recorded item, or is deleted if it had
none. All DynamoDB requests hold the lock of ``make_dynamodb_atomic``, so nothing else writes
between the journal and the rollback. Outside a transaction a table deep-copies exactly as
before.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, Final

from lethe.localcloud.common import PINNED_MOTO_VERSION, CloudError

_local = threading.local()


# DynamoDB backend methods that read or write items (BatchWriteItem and the PartiQL batch go
# through put_item / delete_item / execute_statement).
_DYNAMODB_ITEM_METHODS: Final = (
    "put_item",
    "get_item",
    "query",
    "scan",
    "update_item",
    "delete_item",
    "transact_write_items",
    "execute_statement",
)


# Serialises the DynamoDB backend's item methods (make_dynamodb_atomic) and the partition maps
# (lethe.localcloud.dynamodb_partitions) in this process.
DYNAMODB_LOCK: Final = threading.RLock()


def make_dynamodb_atomic() -> Callable[[], None]:
    """Make each DynamoDB request atomic with respect to the others, as DynamoDB is per item.

    moto 5.2.5's UpdateItem on a missing item inserts the key first and then applies each SET in
    place, so a concurrent Query (the server answers requests on threads) can read a half-built
    item: seen as catalog items without `status` or `sequencer`. One re-entrant lock around the
    backend's item methods serialises them in this process; throughput is not a concern locally.
    """
    from moto.dynamodb.models import DynamoDBBackend  # noqa: PLC0415 - heavy, see the top

    lock = DYNAMODB_LOCK
    originals = {name: getattr(DynamoDBBackend, name) for name in _DYNAMODB_ITEM_METHODS}

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(self, *args, **kwargs)

        return call

    for name, method in originals.items():
        setattr(DynamoDBBackend, name, locked(method))

    def undo() -> None:
        for name, method in originals.items():
            setattr(DynamoDBBackend, name, method)

    return undo


def _in_transaction() -> bool:
    return bool(getattr(_local, "in_transaction", False))


def _deepcopy_table(self: Any, memo: dict[int, Any]) -> Any:
    if _in_transaction():
        return self  # moto's backup: the journal below is the backup instead
    clone = self.__class__.__new__(self.__class__)
    memo[id(self)] = clone
    clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
    return clone


# (table, hash key, range key or None, the item before the transaction or None)
_Entry = tuple[Any, Any, Any, Any]


def _journal(backend: Any, transact_items: Any) -> list[_Entry]:
    """The items `transact_items` names, as they are now (deep copies), in order."""
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415 - heavy

    entries: list[_Entry] = []
    for action in transact_items if isinstance(transact_items, list) else []:
        if not isinstance(action, dict) or len(action) != 1:
            continue  # moto refuses it before writing anything
        op_type, op = next(iter(action.items()))
        table = backend.tables.get(op.get("TableName", "")) if isinstance(op, dict) else None
        if table is None:
            continue
        source = op.get("Item") if op_type == "Put" else op.get("Key")
        if not isinstance(source, dict) or table.hash_key_attr not in source:
            continue
        hash_value = DynamoType(source[table.hash_key_attr])
        range_value = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in source:
                continue
            range_value = DynamoType(source[table.range_key_attr])
        before = table.get_item(hash_value, range_value)
        entries.append((table, hash_value, range_value, copy.deepcopy(before)))
    return entries


def _roll_back(entries: list[_Entry]) -> None:
    """Every journalled key back to its recorded item (or none), and the partition maps of
    `dynamodb_partitions` brought up to date for those keys (items are put back in place, not
    through the patched put_item that keeps the maps current)."""
    from lethe.localcloud.dynamodb_partitions import reindex  # noqa: PLC0415 - a sibling patch

    for table, hash_value, range_value, before in reversed(entries):
        table.delete_item(hash_value, range_value)
        if before is None:
            continue
        if range_value is not None:
            table.items[hash_value][range_value] = before
        else:
            table.items[hash_value] = before
    for table, hash_value, range_value, _ in entries:
        reindex(table, [(hash_value, range_value)])


def patch_transaction_copies() -> Callable[[], None]:
    """Apply the patch (module docstring); returns the undo callable."""
    import moto  # noqa: PLC0415 - heavy
    from moto.dynamodb.models import DynamoDBBackend  # noqa: PLC0415 - heavy
    from moto.dynamodb.models.table import Table  # noqa: PLC0415 - heavy

    if moto.__version__ != PINNED_MOTO_VERSION or "__deepcopy__" in vars(Table):
        raise CloudError(
            f"lethe.localcloud.dynamodb_transactions is written for moto {PINNED_MOTO_VERSION} "
            f"(found {moto.__version__}) and a Table without __deepcopy__: re-check "
            "DynamoDBBackend.transact_write_items' backup and adjust"
        )
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: Any) -> Any:
        with DYNAMODB_LOCK:  # held by the atomic wrapper too: nothing writes in between
            entries = _journal(self, transact_items)
            _local.in_transaction = True
            try:
                return original(self, transact_items)
            except BaseException:
                _roll_back(entries)
                raise
            finally:
                _local.in_transaction = False

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    Table.__deepcopy__ = _deepcopy_table  # type: ignore[attr-defined]

    def undo() -> None:
        DynamoDBBackend.transact_write_items = original  # type: ignore[method-assign]
        del Table.__deepcopy__  # type: ignore[attr-defined]

    return undo
