"""The local cloud's ItemBatcher and ItemReader logic (lethe.localcloud.sfn_hooks P6/P7), as AWS
documents them ("ItemBatcher (Map)" and "ItemReader (Map)", Step Functions Developer Guide):
batches by count and by bytes (never above 256 KiB), BatchInput in every child input, the items
of an s3:listObjectsV2 listing, and the definition checks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from lethe.localcloud.sfn_hooks.item_batcher import (
    MAX_BATCH_BYTES,
    ItemBatcherError,
    batch_items,
    item_batcher_problems,
)
from lethe.localcloud.sfn_hooks.item_reader import s3_list_item
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

EIGHT = "abcdefgh"  # 10 bytes as JSON ("abcdefgh")
EMPTY = len(b'{"Items":[]}')  # 12


def _sizes(batches: list[dict[str, Any]]) -> list[int]:
    return [len(batch["Items"]) for batch in batches]


def _bytes(child_input: dict[str, Any]) -> int:
    return len(json.dumps(child_input, separators=(",", ":"), ensure_ascii=False).encode())


def test_batches_by_count_keep_the_item_order() -> None:
    items = [{"n": n} for n in range(5)]

    batches = batch_items(items, max_items=2, max_bytes=None)

    assert batches == [
        {"Items": [{"n": 0}, {"n": 1}]},
        {"Items": [{"n": 2}, {"n": 3}]},
        {"Items": [{"n": 4}]},
    ]


def test_the_documented_example_1130_items_by_100() -> None:
    """ "If you specify a maximum items value for each batch of 100, Step Functions creates 12
    batches. Of these, 11 batches contain 100 items each, while the twelfth ... 30 items.\""""
    batches = batch_items(list(range(1130)), max_items=100, max_bytes=None)

    assert _sizes(batches) == [100] * 11 + [30]


def test_an_empty_listing_makes_no_batch() -> None:
    assert batch_items([], max_items=2, max_bytes=None) == []
    assert (
        batch_items([], max_items=None, max_bytes=100, batch_input={}, has_batch_input=True) == []
    )


def test_batch_input_goes_into_every_child_input() -> None:
    batch_input = {"dataset_id": "reviews", "force": False}

    batches = batch_items(
        ["a", "b", "c"], max_items=2, max_bytes=None, batch_input=batch_input, has_batch_input=True
    )

    assert batches == [
        {"Items": ["a", "b"], "BatchInput": batch_input},
        {"Items": ["c"], "BatchInput": batch_input},
    ]


def test_a_null_batch_input_is_still_given() -> None:
    batches = batch_items(
        ["a"], max_items=1, max_bytes=None, batch_input=None, has_batch_input=True
    )

    assert batches == [{"Items": ["a"], "BatchInput": None}]


def test_batches_by_bytes_count_the_whole_child_input() -> None:
    # k items of 10 bytes: 12 + 10k + (k - 1) commas <= 55  ->  k <= 4
    batches = batch_items([EIGHT] * 9, max_items=None, max_bytes=55)

    assert _sizes(batches) == [4, 4, 1]
    assert [_bytes(b) for b in batches] == [55, 55, 22]  # a fifth item would need 11 more


def test_batch_input_counts_towards_the_bytes() -> None:
    batch_input = {"a": 1}  # ,"BatchInput":{"a":1} adds 21 bytes
    assert _bytes({"Items": [EIGHT], "BatchInput": batch_input}) == EMPTY + 21 + 10

    batches = batch_items(
        [EIGHT] * 3, max_items=None, max_bytes=45, batch_input=batch_input, has_batch_input=True
    )

    assert _sizes(batches) == [1, 1, 1]  # 43 bytes with one item, 54 with two


def test_utf8_bytes_not_characters() -> None:
    item = "é" * 4  # 4 characters, 8 bytes, 10 bytes as JSON
    batches = batch_items([item] * 9, max_items=None, max_bytes=55)

    assert _sizes(batches) == [4, 4, 1]
    assert _sizes(batch_items([item] * 9, max_items=None, max_bytes=54)) == [3, 3, 3]


def test_both_limits_the_smaller_batch_wins() -> None:
    assert _sizes(batch_items([EIGHT] * 9, max_items=3, max_bytes=55)) == [3, 3, 3]
    assert _sizes(batch_items([EIGHT] * 9, max_items=5, max_bytes=55)) == [4, 4, 1]


def test_a_batch_never_exceeds_256_kib() -> None:
    big = "x" * 10_240  # 10,242 bytes as JSON: 25 fit in 262,144 bytes
    expected = [25, 25, 25, 25]

    assert _sizes(batch_items([big] * 100, max_items=100, max_bytes=None)) == expected
    assert _sizes(batch_items([big] * 100, max_items=None, max_bytes=10**9)) == expected
    assert all(
        _bytes(b) <= MAX_BATCH_BYTES
        for b in batch_items([big] * 100, max_items=100, max_bytes=None)
    )


def test_an_item_bigger_than_a_batch_is_refused() -> None:
    with pytest.raises(ItemBatcherError, match="item 1 "):
        batch_items([EIGHT, "x" * 40], max_items=None, max_bytes=45)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_limits_must_be_positive_integers(limit: Any) -> None:
    with pytest.raises(ItemBatcherError, match="positive integer"):
        batch_items([1], max_items=limit, max_bytes=None)
    with pytest.raises(ItemBatcherError, match="positive integer"):
        batch_items([1], max_items=None, max_bytes=limit)


def test_a_batcher_needs_a_limit() -> None:
    with pytest.raises(ItemBatcherError, match="MaxItemsPerBatch or MaxInputBytesPerBatch"):
        batch_items([1], max_items=None, max_bytes=None)


def test_listing_items_have_the_documented_shape() -> None:
    modified = datetime(2022, 11, 17, 15, 44, 41, tzinfo=UTC)
    content = {
        "Key": "processData/images/n02085620_1073.jpg",
        "LastModified": modified,
        "ETag": '"05704fbdccb224cb01c59005bebbad28"',
        "Size": 34910,
        "StorageClass": "STANDARD",
        "ChecksumAlgorithm": ["CRC32"],
    }

    assert s3_list_item(content) == {
        "Etag": '"05704fbdccb224cb01c59005bebbad28"',
        "Key": "processData/images/n02085620_1073.jpg",
        "LastModified": 1668699881,
        "Size": 34910,
        "StorageClass": "STANDARD",
    }
    local = modified.astimezone(timezone(timedelta(hours=2)))
    assert s3_list_item({**content, "LastModified": local})["LastModified"] == 1668699881


def test_the_definition_checks() -> None:
    assert item_batcher_problems({"MaxItemsPerBatch": 10}, jsonata=False) == []
    assert (
        item_batcher_problems(
            {
                "MaxItemsPerBatchPath": "$.n",
                "MaxInputBytesPerBatch": 1024,
                "BatchInput": {"a.$": "$"},
            },
            jsonata=False,
        )
        == []
    )
    assert (
        item_batcher_problems(
            {"MaxItemsPerBatch": "{% $n %}", "BatchInput": "{% $states.input %}"}, jsonata=True
        )
        == []
    )
    assert item_batcher_problems({"BatchInput": {}}, jsonata=False) == [
        "ItemBatcher needs MaxItemsPerBatch(Path) or MaxInputBytesPerBatch(Path)"
    ]
    assert item_batcher_problems(
        {"MaxItemsPerBatch": 1, "MaxItemsPerBatchPath": "$.n"}, jsonata=False
    ) == ["ItemBatcher: MaxItemsPerBatch and MaxItemsPerBatchPath are exclusive"]
    assert item_batcher_problems({"MaxItemsPerBatchPath": "$.n"}, jsonata=True) == [
        "ItemBatcher: MaxItemsPerBatchPath is JSONPath only"
    ]
    assert item_batcher_problems({"MaxInputBytesPerBatch": 262_145}, jsonata=False) == [
        "ItemBatcher: MaxInputBytesPerBatch is at most 262144"
    ]
    assert item_batcher_problems({"MaxItemsPerBatch": "{% $n %}"}, jsonata=False) == [
        "ItemBatcher: MaxItemsPerBatch must be a positive integer"
    ]
    assert item_batcher_problems({"MaxItemsPerBatch": 0, "Extra": 1}, jsonata=False) == [
        "ItemBatcher: unknown field Extra",
        "ItemBatcher: MaxItemsPerBatch must be a positive integer",
    ]
    assert item_batcher_problems({"MaxItemsPerBatch": 1, "BatchInput": []}, jsonata=False) == [
        "ItemBatcher: BatchInput must be a payload template (an object)"
    ]
    assert item_batcher_problems([], jsonata=False) == ["ItemBatcher must be an object"]


def test_the_backfill_batcher_passes_the_checks() -> None:
    definition = json.loads((REPO_ROOT / "statemachines/index_backfill.asl.json").read_text())
    index_zone = definition["States"]["Index Zone"]

    assert index_zone["ItemReader"]["Resource"] == "arn:aws:states:::s3:listObjectsV2"
    assert index_zone["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert item_batcher_problems(index_zone["ItemBatcher"], jsonata=False) == []
    # The objects go to the job as one argument: a batch of at most 64 KiB keeps it bounded.
    assert index_zone["ItemBatcher"]["MaxInputBytesPerBatch"] == 64 * 1024
