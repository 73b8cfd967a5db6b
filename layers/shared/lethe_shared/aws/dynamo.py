"""Paging through DynamoDB: the one loop over `LastEvaluatedKey` and `UnprocessedKeys`.

The table adapters (catalog, registry, subject index, erasure requests) use boto3's Table
resource, whose query and scan have no paginator: these helpers are that paginator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

BATCH_GET_LIMIT = 100  # keys per BatchGetItem request (DynamoDB's limit)


def query_all(table: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item a Query returns, page after page."""
    yield from _pages(table.query, kwargs)


def scan_all(table: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item a Scan returns, page after page."""
    yield from _pages(table.scan, kwargs)


def _pages(call: Any, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    while True:
        page = call(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs = {**kwargs, "ExclusiveStartKey": page["LastEvaluatedKey"]}


def batch_get_all(
    table: Any, keys: Sequence[Mapping[str, Any]], **options: Any
) -> Iterator[dict[str, Any]]:
    """The items of `keys` that exist, in batches of 100, resending unprocessed keys.

    A Table resource has no BatchGetItem; its client (`table.meta.client`) has, and converts
    keys and items to and from DynamoDB's types as the resource does."""
    client, name = table.meta.client, table.name
    for start in range(0, len(keys), BATCH_GET_LIMIT):
        batch = [dict(k) for k in keys[start : start + BATCH_GET_LIMIT]]
        request: dict[str, Any] = {name: {"Keys": batch, **options}}
        while request:
            answer = client.batch_get_item(RequestItems=request)
            yield from answer.get("Responses", {}).get(name, [])
            request = answer.get("UnprocessedKeys") or {}
