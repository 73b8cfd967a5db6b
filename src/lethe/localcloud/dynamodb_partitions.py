"""DynamoDB queries in the local cloud cost the partition they read, not the whole table.

Where: ``moto/dynamodb/models/table.py``, ``Table.query`` (moto 5.2.5). For a base-table query
it keeps ``[item for item in self.all_items() if item.hash_key == hash_key]``, and for a
global secondary index it loops over ``self.all_items()`` checking the index's key
attributes; ``all_items()`` builds a list of every item of the table and sorts it, on every
query. Why: under ``make soak`` the catalog and the index grow to tens of thousands of items
and every ingestion and erasure run queries them many times, so each query cost grew with the
table (an ingestion run of 100 versions took 240 s at first and 540 s by the eighth).

What: ``Table.query`` is given the candidates of one partition instead of ``all_items()`` and
then runs moto's own code unchanged on them: its key-condition checks, sort, pagination
(ExclusiveStartKey, Limit, LastEvaluatedKey), ScannedCount, filter and projection. The results
are therefore moto's as long as the candidates include every item moto would keep; moto sorts
what it keeps by a total order (index keys, then the table's primary key), so the order the
candidates come in does not matter.

- Base table: the candidates are ``self.items.get(hash_key)``, the items stored under that
  partition key (``get``: ``items`` is a defaultdict and a lookup must not insert).
- Global secondary index: a per-table, per-index partition map (index hash-key values -> the
  primary keys of the items carrying them) kept current on every path that changes an item:
  ``Table.put_item`` and ``Table.delete_item`` (which PutItem, DeleteItem, BatchWriteItem,
  TransactWriteItems, PartiQL statements and UpdateItem on a missing item all reach), and
  ``DynamoDBBackend.update_item`` (which changes an existing item's attributes in place,
  index key attributes included). The map lives on the Table object and remembers the
  ``items`` dict it was built from: a table that is deleted takes its map with it, a
  TransactWriteItems rollback puts back a deep copy of the table made with its map, and a
  table whose ``items`` were replaced wholesale (restored tables) or whose indexes changed is
  mapped again from its items on its next query. Candidates are looked up in ``items`` at
  query time, so an entry that is out of date is at worst a candidate moto's checks drop.

Any other query shape (local secondary indexes, a query with no hash key condition, an index
key condition that is not on every hash attribute) runs moto's code as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from lethe.localcloud.common import PINNED_MOTO_VERSION, CloudError

_STATE_ATTRIBUTE: Final = "_lethe_partitions"
# Partition of items whose index hash values cannot be hashed (not a valid key type): always
# candidates. A string, not a tuple like every other partition, and equal to itself in deep
# copies (a TransactWriteItems rollback deep-copies the table with its maps).
_UNHASHABLE: Final = "unhashable index key"

# Table.query before patching; the randomized comparison test runs it against the patch.
moto_query: Callable[..., Any] | None = None


@dataclass
class _IndexMap:
    hash_attributes: tuple[str, ...]
    partitions: dict[Any, dict[tuple[Any, Any], None]] = field(default_factory=dict)
    where: dict[tuple[Any, Any], Any] = field(default_factory=dict)

    def discard(self, key: tuple[Any, Any]) -> None:
        partition = self.where.pop(key, None)
        if partition is None:
            return
        members = self.partitions.get(partition)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self.partitions[partition]

    def add(self, key: tuple[Any, Any], item: Any) -> None:
        values = []
        for name in self.hash_attributes:
            value = item.attrs.get(name)
            if value is None:
                return
            values.append(value)
        partition: Any = tuple(values)
        try:
            hash(partition)
        except TypeError:
            partition = _UNHASHABLE
        self.where[key] = partition
        self.partitions.setdefault(partition, {})[key] = None


@dataclass
class _TableState:
    items_ref: Any
    indexes: dict[tuple[str, tuple[str, ...]], _IndexMap] = field(default_factory=dict)


def _stored_items(table: Any) -> Iterator[tuple[tuple[Any, Any], Any]]:
    """(primary key, item) of every item stored in the table, in no particular order."""
    for hash_key, stored in list(table.items.items()):
        if table.range_key_attr:
            for range_key, item in list(stored.items()):
                yield (hash_key, range_key), item
        else:
            yield (hash_key, None), stored


def _lookup(table: Any, key: tuple[Any, Any]) -> Any:
    """The item stored under a primary key, or None; never inserts into the defaultdict."""
    hash_key, range_key = key
    stored = table.items.get(hash_key)
    if stored is None:
        return None
    if table.range_key_attr:
        return stored.get(range_key) if isinstance(stored, dict) else None
    return None if isinstance(stored, dict) else stored


def _state(table: Any) -> _TableState:
    state: _TableState | None = table.__dict__.get(_STATE_ATTRIBUTE)
    if state is None or state.items_ref is not table.items:
        state = _TableState(items_ref=table.items)
        table.__dict__[_STATE_ATTRIBUTE] = state
    return state


def _index_map(table: Any, name: str, hash_attributes: tuple[str, ...]) -> _IndexMap:
    state = _state(table)
    key = (name, hash_attributes)
    index_map = state.indexes.get(key)
    if index_map is None:
        # Built from the items when first queried (or after the index changed); kept current
        # by the write hooks from then on.
        for stale in [k for k in state.indexes if k[0] == name]:
            del state.indexes[stale]
        index_map = _IndexMap(hash_attributes)
        for primary_key, item in _stored_items(table):
            index_map.add(primary_key, item)
        state.indexes[key] = index_map
    return index_map


def reindex(table: Any, keys: Iterable[tuple[Any, Any]]) -> None:
    """Bring every partition map of the table up to date for items at these primary keys."""
    state: _TableState | None = table.__dict__.get(_STATE_ATTRIBUTE)
    if state is None or not state.indexes:
        return
    if state.items_ref is not table.items:
        table.__dict__.pop(_STATE_ATTRIBUTE, None)
        return
    for key in keys:
        item = _lookup(table, key)
        for index_map in state.indexes.values():
            index_map.discard(key)
            if item is not None:
                index_map.add(key, item)


def partitions_consistent(table: Any) -> bool:
    """True when every built partition map equals one built from the items now (for tests)."""
    state: _TableState | None = table.__dict__.get(_STATE_ATTRIBUTE)
    if state is None or state.items_ref is not table.items:
        return True
    for index_map in state.indexes.values():
        fresh = _IndexMap(index_map.hash_attributes)
        for primary_key, item in _stored_items(table):
            fresh.add(primary_key, item)
        if fresh.where != index_map.where:
            return False
    return True


def _key_of(table: Any, value: Any) -> Any:
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415 - heavy

    return value if isinstance(value, DynamoType) else DynamoType(value)


def _gsi_candidates(table: Any, index_name: str, hash_conditions: Any) -> list[Any] | None:
    """The items of one partition of a global secondary index, or None to run moto's code."""
    from moto.dynamodb.models.table import GlobalSecondaryIndex  # noqa: PLC0415 - heavy

    index = next((i for i in table.global_indexes or [] if i.name == index_name), None)
    if not isinstance(index, GlobalSecondaryIndex) or not hash_conditions:
        return None
    hash_attributes = tuple(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
    conditions = dict(hash_conditions)
    if not hash_attributes or set(conditions) != set(hash_attributes):
        return None
    partition = tuple(conditions[name] for name in hash_attributes)
    try:
        hash(partition)
    except TypeError:
        return None
    index_map = _index_map(table, index_name, hash_attributes)
    keys = list(index_map.partitions.get(partition, ()))
    keys += list(index_map.partitions.get(_UNHASHABLE, ()))
    return [item for item in (_lookup(table, key) for key in keys) if item is not None]


def _base_candidates(table: Any, hash_key: Any) -> list[Any] | None:
    if hash_key is None:
        return None
    try:
        stored = table.items.get(hash_key)
    except TypeError:
        return None
    if stored is None:
        return []
    if isinstance(stored, dict):
        return list(stored.values())
    return [stored]


def _candidates(table: Any, hash_key: Any, args: Any, kwargs: Any) -> list[Any] | None:
    """Table.query's candidates (its arguments after hash_key), None for moto's all_items()."""
    index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
    if index_name:
        return _gsi_candidates(table, index_name, kwargs.get("hash_key_conditions"))
    return _base_candidates(table, hash_key)


def patch_dynamodb_partitions(lock: threading.RLock) -> Callable[[], None]:
    """Apply the patch (see the module docstring) under `lock`; returns the undo callable."""
    global moto_query  # noqa: PLW0603 - one patch per process, undone by the callable
    from moto.dynamodb.models import DynamoDBBackend  # noqa: PLC0415 - heavy
    from moto.dynamodb.models.table import Table  # noqa: PLC0415 - heavy

    _check_moto_version()
    original_query = Table.query
    original_put = Table.put_item
    original_delete = Table.delete_item
    original_update = DynamoDBBackend.update_item
    moto_query = original_query

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            candidates = _candidates(self, hash_key, args, kwargs)
            if candidates is None:
                return original_query(self, hash_key, *args, **kwargs)
            self.__dict__["all_items"] = lambda: candidates
            try:
                return original_query(self, hash_key, *args, **kwargs)
            finally:
                self.__dict__.pop("all_items", None)

    def put_item(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        with lock:
            item = original_put(self, item_attrs, *args, **kwargs)
            reindex(self, [(item.hash_key, item.range_key)])
            return item

    def delete_item(self: Any, hash_key: Any, range_key: Any) -> Any:
        with lock:
            try:
                return original_delete(self, hash_key, range_key)
            finally:
                reindex(self, [(hash_key, range_key)])

    def update_item(self: Any, table_name: str, key: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            try:
                return original_update(self, table_name, key, *args, **kwargs)
            finally:
                table = self.tables.get(table_name)
                if table is not None:
                    reindex(table, _update_keys(table, key))

    replaced = [
        (Table, "query", query, original_query),
        (Table, "put_item", put_item, original_put),
        (Table, "delete_item", delete_item, original_delete),
        (DynamoDBBackend, "update_item", update_item, original_update),
    ]
    for owner, name, patched, _ in replaced:
        setattr(owner, name, patched)

    def undo() -> None:
        global moto_query  # noqa: PLW0603
        for owner, name, _, original in replaced:
            setattr(owner, name, original)
        moto_query = None

    return undo


def _check_moto_version() -> None:
    import moto  # noqa: PLC0415 - heavy
    from moto.dynamodb.models.table import Table  # noqa: PLC0415 - heavy

    if moto.__version__ != PINNED_MOTO_VERSION or not hasattr(Table, "all_items"):
        raise CloudError(
            f"lethe.localcloud.dynamodb_partitions is written for moto {PINNED_MOTO_VERSION} "
            f"(found {moto.__version__}): re-check moto/dynamodb/models/table.py Table.query, "
            "all_items and every path that writes items, and adjust"
        )


def _update_keys(table: Any, key: Any) -> list[tuple[Any, Any]]:
    """The primary key UpdateItem addressed, as moto's DynamoDBBackend.update_item reads it."""
    try:
        if isinstance(key, dict) and table.hash_key_attr in key:
            hash_value = _key_of(table, key[table.hash_key_attr])
            range_value = (
                _key_of(table, key[table.range_key_attr])
                if table.range_key_attr and table.range_key_attr in key
                else None
            )
            return [(hash_value, range_value)]
        return [(_key_of(table, key), None)]
    except Exception:  # a key moto refused wrote nothing
        return []
