"""A Distributed Map's batches (ItemBatcher; patch P6, with `distributed_map`).

AWS documents it in the Step Functions Developer Guide, "ItemBatcher (Map)", and the
States Language specification ("Selecting Items", "Batching Items", "Processing
Items"): the Map reads its items, applies ItemSelector to each (with Map.Item.Index and
Map.Item.Value in the context), then cuts the selected items into batches; each child
execution gets {"Items": [...]} plus "BatchInput" when given, and the Map's result has
one element per batch. This module is the batcher itself: the checks AWS makes on a
definition's ItemBatcher, its plan, and the cutting into batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from moto.stepfunctions.parser.asl.eval.environment import Environment

ITEM_BATCHER_FIELDS: Final = frozenset(
    {
        "BatchInput",
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
    }
)
# "MaxInputBytesPerBatch: the maximum size of a batch in bytes, up to 256 KiB"; without it "the
# interpreter processes as many items it can process up to 256 KiB in each child workflow
# execution" (ItemBatcher (Map)). 256 KiB is also the limit of an execution's input.
MAX_BATCH_BYTES: Final = 256 * 1024
_BATCHER_STATE: Final = "ItemBatcher"


class ItemBatcherError(ValueError):
    """A batch limit that is no positive integer, or an item bigger than the byte limit."""


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def batch_items(
    items: list[Any],
    *,
    max_items: int | None,
    max_bytes: int | None,
    batch_input: Any = None,
    has_batch_input: bool = False,
) -> list[dict[str, Any]]:
    """The child inputs of a batched Map: `{"Items": [...]}` (plus `"BatchInput"` when the
    ItemBatcher has one), in item order. A batch holds at most `max_items` items and at most
    `max_bytes` bytes (never more than 256 KiB), counted as the child input's compact UTF-8 JSON,
    BatchInput included: AWS does not say whether BatchInput counts, so the stricter reading.
    An item that cannot fit a batch on its own is an error (no child could start with it)."""
    for name, limit in (("MaxItemsPerBatch", max_items), ("MaxInputBytesPerBatch", max_bytes)):
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ItemBatcherError(f"{name} must be a positive integer, not {limit!r}")
    if max_items is None and max_bytes is None:
        raise ItemBatcherError("an ItemBatcher needs MaxItemsPerBatch or MaxInputBytesPerBatch")
    byte_limit = min(max_bytes or MAX_BATCH_BYTES, MAX_BATCH_BYTES)
    envelope: dict[str, Any] = {"Items": []}
    if has_batch_input:
        envelope["BatchInput"] = batch_input
    empty_size = _json_size(envelope)
    batches: list[list[Any]] = []
    current: list[Any] = []
    size = empty_size
    for index, item in enumerate(items):
        item_size = _json_size(item)
        if empty_size + item_size > byte_limit:
            raise ItemBatcherError(
                f"item {index} ({item_size} bytes) does not fit a batch of {byte_limit} bytes"
            )
        full = max_items is not None and len(current) >= max_items
        if current and (full or size + 1 + item_size > byte_limit):
            batches.append(current)
            current, size = [], empty_size
        size += item_size + (1 if current else 0)
        current.append(item)
    if current:
        batches.append(current)
    return [{**envelope, "Items": batch} for batch in batches]


@dataclass(frozen=True)
class ItemBatcherPlan:
    """One Map state's ItemBatcher: literal limits, and the rest evaluated at run time by a
    component moto parsed from a Pass state that holds the same fields (so paths, payload
    templates, intrinsic functions, JSONata and variables mean what they mean elsewhere)."""

    state: str
    max_items: int | None
    max_bytes: int | None
    has_batch_input: bool
    dynamic: Any | None  # the evaluator component, or None when everything is literal
    jsonata: bool

    def evaluate(self, env: Environment) -> tuple[int | None, int | None, Any]:
        values: dict[str, Any] = {}
        if self.dynamic is not None:
            frame = env.open_frame()
            try:
                map_input = env.states.get_input()
                frame.states.reset(input_value=map_input)
                frame.stack.append(map_input)  # JSONPath paths read the top of the stack
                context = cast(dict[str, Any], env.states.context_object.context_object_data)
                frame_context = cast(
                    dict[str, Any], frame.states.context_object.context_object_data
                )
                for key in ("State", "Map"):  # $$.State.EnteredTime and the like
                    if key in context:
                        frame_context[key] = context[key]
                self.dynamic.eval(frame)
                values = dict(frame.stack.pop())
            finally:
                env.delete_frame(frame)
        max_items = values.get("max_items", self.max_items)
        max_bytes = values.get("max_bytes", self.max_bytes)
        return max_items, max_bytes, values.get("batch_input")


def item_batcher_problems(batcher: Any, *, jsonata: bool) -> list[str]:
    """What AWS's definition checks refuse in an ItemBatcher (ItemBatcher (Map); the States
    Language's "Batching Items")."""
    if not isinstance(batcher, dict):
        return ["ItemBatcher must be an object"]
    problems = [
        f"ItemBatcher: unknown field {k}" for k in sorted(set(batcher) - ITEM_BATCHER_FIELDS)
    ]
    if not {
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
    } & set(batcher):
        problems.append("ItemBatcher needs MaxItemsPerBatch(Path) or MaxInputBytesPerBatch(Path)")
    for name in ("MaxItemsPerBatch", "MaxInputBytesPerBatch"):
        if name in batcher and f"{name}Path" in batcher:
            problems.append(f"ItemBatcher: {name} and {name}Path are exclusive")
        if jsonata and f"{name}Path" in batcher:
            problems.append(f"ItemBatcher: {name}Path is JSONPath only")
        value = batcher.get(name)
        if value is None or (jsonata and _is_jsonata(value)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"ItemBatcher: {name} must be a positive integer")
        elif name == "MaxInputBytesPerBatch" and value > MAX_BATCH_BYTES:
            problems.append(f"ItemBatcher: MaxInputBytesPerBatch is at most {MAX_BATCH_BYTES}")
    if not jsonata and "BatchInput" in batcher and not isinstance(batcher["BatchInput"], dict):
        problems.append("ItemBatcher: BatchInput must be a payload template (an object)")
    return problems


def _is_jsonata(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("{%") and value.endswith("%}")


def item_batcher_plan(
    original_parse: Callable[[str], Any], state: str, batcher: dict[str, Any], *, jsonata: bool
) -> ItemBatcherPlan:
    literal_items = batcher.get("MaxItemsPerBatch")
    literal_bytes = batcher.get("MaxInputBytesPerBatch")
    dynamic: dict[str, Any] = {}
    if jsonata:
        for key, field in (
            ("max_items", "MaxItemsPerBatch"),
            ("max_bytes", "MaxInputBytesPerBatch"),
        ):
            if _is_jsonata(batcher.get(field)):
                dynamic[key] = batcher[field]
        if "BatchInput" in batcher:
            dynamic["batch_input"] = batcher["BatchInput"]
        wrapper = {"QueryLanguage": "JSONata", "Type": "Pass", "Output": dynamic, "End": True}
    else:
        for key, field in (
            ("max_items", "MaxItemsPerBatchPath"),
            ("max_bytes", "MaxInputBytesPerBatchPath"),
        ):
            if field in batcher:
                dynamic[f"{key}.$"] = batcher[field]
        if "BatchInput" in batcher:
            dynamic["batch_input"] = batcher["BatchInput"]
        wrapper = {"Type": "Pass", "Parameters": dynamic, "End": True}
    component = None
    if dynamic:
        program, _ = original_parse(
            json.dumps({"StartAt": _BATCHER_STATE, "States": {_BATCHER_STATE: wrapper}})
        )
        pass_state = program.states.states[_BATCHER_STATE]
        component = pass_state.output.jsonata_template_value if jsonata else pass_state.parameters
    return ItemBatcherPlan(
        state=state,
        max_items=None if _is_jsonata(literal_items) else literal_items,
        max_bytes=None if _is_jsonata(literal_bytes) else literal_bytes,
        has_batch_input="BatchInput" in batcher,
        dynamic=component,
        jsonata=jsonata,
    )
