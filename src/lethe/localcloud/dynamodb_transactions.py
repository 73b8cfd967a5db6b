"""DynamoDB requests in the local cloud: each one atomic (`make_dynamodb_atomic`, one lock around
the backend's item methods), and one backup copy of a table per TransactWriteItems, not one per
item (`patch_transaction_copies`).

Where: ``moto/dynamodb/models/__init__.py``, ``DynamoDBBackend.transact_write_items`` (moto
5.2.5). Before it writes anything it keeps a backup to roll back to, by looping over the
transaction's items and deep-copying, for each item, the whole table the item names
(``original_table_state[table_name] = copy.deepcopy(self.tables[table_name])``): a transaction
of 25 items on the subject index copies the entire index table 25 times, and the copies of one
table are identical (nothing is written during that loop) and all but the last are garbage at
once. Why it matters: the index and catalog writes of ``make soak`` are transactions, so every
one of them copied those tables over and over, under the lock that serialises DynamoDB requests
(``make_dynamodb_atomic``): the CPU that took, and the churn of short-lived objects it
left, grew with the tables. A full soak's local cloud process grew to 18.6 GB and was killed.

What: while a thread runs ``transact_write_items``, the first deep copy of a table is kept for
the rest of that call, and every further deep copy of the same table in it returns that copy.
The copy is made as ``copy.deepcopy`` makes it for an object without ``__deepcopy__`` (a new
instance of the class, its ``__dict__`` deep-copied with the same memo); outside a transaction
a table deep-copies exactly as before. The rollback moto performs is unchanged: it puts back
the one backup, which is what each of its copies held.
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


def _transaction_copies() -> dict[int, Any] | None:
    copies: dict[int, Any] | None = getattr(_local, "copies", None)
    return copies


def _deepcopy_table(self: Any, memo: dict[int, Any]) -> Any:
    copies = _transaction_copies()
    if copies is not None and id(self) in copies:
        return copies[id(self)]
    clone = self.__class__.__new__(self.__class__)
    memo[id(self)] = clone
    clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
    if copies is not None:
        copies[id(self)] = clone
    return clone


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
        _local.copies = {}
        try:
            return original(self, transact_items)
        finally:
            _local.copies = None

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    Table.__deepcopy__ = _deepcopy_table  # type: ignore[attr-defined]

    def undo() -> None:
        DynamoDBBackend.transact_write_items = original  # type: ignore[method-assign]
        del Table.__deepcopy__  # type: ignore[attr-defined]

    return undo
