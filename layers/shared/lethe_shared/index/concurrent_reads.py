"""Reads of one lookup run concurrently: a bounded thread pool that fails closed (`run_all`),
and a Table resource's reads through its client (`ClientTable`).

boto3 clients are thread-safe, resources are not: a read run from the pool goes through
`table.meta.client`, which converts values to and from DynamoDB's types as the resource does
(the resource registers that conversion on its client). Used by both subject index stores'
`lookup_many` (`segments.lookup` for the segment index, `subject_index.DynamoSubjectIndex`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, TypeVar

READ_THREADS = 8  # concurrent reads of one lookup (manifest or index Queries, segment reads)
T = TypeVar("T")


def run_all(tasks: Sequence[Callable[[], T]], threads: int = READ_THREADS) -> list[T]:
    """Every task's result, in the tasks' order, the tasks run in a pool of at most `threads`
    threads (one task, or `threads` <= 1: in this thread, one after the other).

    Fail closed, as the loop `[t() for t in tasks]` would: when a task raises, the tasks not
    yet started are cancelled, the running ones are waited for (none is left running when this
    returns or raises), and the exception of the earliest failing task in `tasks`' order is
    raised; never a partial list. The pool starts tasks in order, so every task before a
    started one has started too: the loop would have raised that same exception."""
    if threads <= 1 or len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(
        max_workers=min(threads, len(tasks)), thread_name_prefix="lethe-lookup"
    ) as pool:
        futures = [pool.submit(task) for task in tasks]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            for future in futures:
                future.cancel()
    for future in futures:
        if future.cancelled():
            continue
        error = future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]


class ClientTable:
    """A Table resource's Query and GetItem through its client (safe from any thread;
    `lethe_shared.aws.dynamo.query_all` pages it as it pages the resource)."""

    def __init__(self, table: Any) -> None:
        self._client, self._name = table.meta.client, table.name

    def query(self, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.query(TableName=self._name, **kwargs)
        return answer

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.get_item(TableName=self._name, **kwargs)
        return answer
