"""The engine side of a batched Distributed Map, and one parse at a time (patches P6 and
P8, applied by `install()`; the batcher itself is `item_batcher`).

P6  ItemBatcher in a Distributed Map.
    Where: `AmazonStateLanguageParser.parse` (`asl/parse/asl_parser.py`, used by
           CreateStateMachine's validation and by every execution), `DistributedIterationComponent.
           _map_run` (`.../iteration/distributed_iteration_component.py`) and the `_eval_job` of
           `DistributedItemProcessorWorker` and `DistributedIteratorWorker`.
    Why:   moto's grammar has no ItemBatcher, so a definition with one is refused. `parse` takes
           every Map's ItemBatcher out of the definition, lets moto parse the rest, checks the
           batcher as AWS does and attaches an `ItemBatcherPlan` to the Map's iteration
           component (limits and BatchInput are evaluated by components moto parses from a Pass
           state holding the same fields). `_map_run` then applies ItemSelector to each item,
           cuts the selected items into `{"Items", "BatchInput"}` child inputs (`batch_items`)
           and runs one child per batch; `_eval_job` makes the Map Run's item counts count the
           items of each batch (DescribeMapRun: items in itemCounts, batches in
           executionCounts). The state machine's stored definition is unchanged.
P8  One parse at a time.
    Where: the same `AmazonStateLanguageParser.parse` wrapper as P6.
    Why:   moto's `Preprocessor` keeps its query language scope stack in a class attribute
           (`_query_language_per_scope = []`) that every parse shares, and every execution
           parses its definition in its own thread. Two executions of a JSONata machine with a
           JSONPath state (the erasure's approval wait) starting at once interleave their
           scopes and one fails "Cannot downgrade from JSONata context to a JSONPath context"
           in its thread: the execution stays RUNNING with no event. The wrapper holds a lock.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (  # noqa: E501
    DistributedIterationComponent as _DistributedIterationComponent,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.states import ItemData, MapData
from moto.stepfunctions.parser.asl.parse.asl_parser import ASLParserException as _ASLParserException

from lethe.localcloud.sfn_hooks.context import states_failure
from lethe.localcloud.sfn_hooks.item_batcher import (
    ItemBatcherError,
    ItemBatcherPlan,
    batch_items,
    item_batcher_plan,
    item_batcher_problems,
)

_PLAN_ATTRIBUTE: Final = "_lethe_item_batcher"  # on a Map's DistributedIterationComponent
_SIZES_ATTRIBUTE: Final = "_lethe_batch_sizes"  # on a Map Run record: items per child


def _nested_states(
    state: dict[str, Any], here: tuple[str, ...]
) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """The States blocks inside one state, with their paths."""
    for key in ("ItemProcessor", "Iterator"):
        if isinstance(state.get(key), dict):
            yield state[key].get("States"), (*here, key)
    for index, branch in enumerate(state.get("Branches") or []):
        if isinstance(branch, dict):
            yield branch.get("States"), (*here, "Branches", str(index))


def _take_item_batchers(document: Any) -> list[tuple[tuple[str, ...], Any]]:
    """Remove every Map state's ItemBatcher from the definition (moto's grammar has none) and
    return them with the path of their state: names, with ItemProcessor/Iterator or
    Branches/<i> between nesting levels."""
    found: list[tuple[tuple[str, ...], Any]] = []
    pending: list[tuple[Any, tuple[str, ...]]] = [
        (document.get("States") if isinstance(document, dict) else None, ())
    ]
    while pending:
        states, path = pending.pop()
        if not isinstance(states, dict):
            continue
        for name, state in states.items():
            if not isinstance(state, dict):
                continue
            here = (*path, name)
            if state.get("Type") == "Map" and "ItemBatcher" in state:
                found.append((here, state.pop("ItemBatcher")))
            pending.extend(_nested_states(state, here))
    return found


def _state_at(program: Any, path: tuple[str, ...]) -> Any:
    states = program.states.states
    position = 0
    while True:
        state = states[path[position]]
        position += 1
        if position == len(path):
            return state
        kind = path[position]
        position += 1
        if kind in ("ItemProcessor", "Iterator"):
            states = state.iteration_component._states.states
        else:  # Branches/<i>
            states = state.branches.programs[int(path[position])].states.states
            position += 1


# P8: moto's Preprocessor keeps its query language scopes in a list that is a class attribute
# (`Preprocessor._query_language_per_scope = []`), shared by every parse. Each execution parses
# its definition in its own thread, so two executions starting together interleave their
# scopes: a JSONata definition with one JSONPath state then fails "Cannot downgrade from JSONata
# context to a JSONPath context", in the execution's thread, and the execution stays RUNNING
# with no history (found by `make soak`: 50 erasure requests filed at once). One parse at a time.
_PARSE_LOCK = threading.RLock()


def make_parse(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(definition: str) -> Any:
        """P6: parse without the ItemBatchers, then attach each to its Map's iteration.
        P8: one parse at a time (moto's parser shares state between parses)."""
        with _PARSE_LOCK:
            return _parse(definition)

    def _parse(definition: str) -> Any:
        try:
            document = json.loads(definition)
        except ValueError:
            return original(definition)
        batchers = _take_item_batchers(document)
        if not batchers:
            return original(definition)
        program, tree = original(json.dumps(document))
        problems: list[str] = []
        for path, batcher in batchers:
            state = _state_at(program, path)
            name = "/".join(path)
            if not isinstance(state.iteration_component, _DistributedIterationComponent):
                problems.append(f"{name}: ItemBatcher needs a Map in DISTRIBUTED mode")
                continue
            jsonata = not state._is_language_query_jsonpath()
            found = item_batcher_problems(batcher, jsonata=jsonata)
            if found:
                problems += [f"{name}: {problem}" for problem in found]
                continue
            plan = item_batcher_plan(original, name, batcher, jsonata=jsonata)
            setattr(state.iteration_component, _PLAN_ATTRIBUTE, plan)
        if problems:
            raise _ASLParserException(errors=problems)
        return program, tree

    return cast(Callable[[str], Any], staticmethod(parse))


class _ScaledCounter:
    def __init__(self, counter: Any, factor: int):
        self._counter, self._factor = counter, factor

    def count(self, increment: int = 1) -> None:
        self._counter.count(increment * self._factor)

    def offset(self, offset: int) -> None:
        self._counter.offset(offset * self._factor)

    def get(self) -> int:
        return int(self._counter.get())


class _ScaledProgress:
    def __init__(self, progress: Any, factor: int):
        self._progress, self._factor = progress, factor

    def __getattr__(self, name: str) -> Any:
        return _ScaledCounter(getattr(self._progress, name), self._factor)


class _BatchRecordView:
    """The Map Run record as one batch's worker sees it: DescribeMapRun counts items (objects)
    in `itemCounts` and child executions (batches) in `executionCounts`, so an item count moto
    adds for a job counts every item of its batch."""

    def __init__(self, record: Any, batch_size: int):
        self._record = record
        self.item_counter = _ScaledProgress(record.item_counter, batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._record, name)


def make_map_run(original: Callable[..., None]) -> Callable[..., None]:
    def _map_run(self: Any, env: Environment, eval_input: Any) -> None:
        """P6: apply ItemSelector to each item, then cut the selected items into batches."""
        plan: ItemBatcherPlan | None = getattr(self, _PLAN_ATTRIBUTE, None)
        if plan is None:
            original(self, env, eval_input)
            return
        items = env.stack.pop()
        selector = eval_input.item_selector or eval_input.parameters
        if selector is not None:
            items = _select_items(env, selector, items)
        max_items, max_bytes, batch_input = plan.evaluate(env)
        try:
            batches = batch_items(
                items,
                max_items=max_items,
                max_bytes=max_bytes,
                batch_input=batch_input,
                has_batch_input=plan.has_batch_input,
            )
        except ItemBatcherError as exc:
            typ = (
                StatesErrorNameType.StatesQueryEvaluationError
                if plan.jsonata
                else StatesErrorNameType.StatesRuntime
            )
            raise states_failure(env, typ, f"{plan.state}: ItemBatcher: {exc}") from exc
        record = eval_input.map_run_record
        setattr(record, _SIZES_ATTRIBUTE, [len(batch["Items"]) for batch in batches])
        batched = copy.copy(eval_input)
        batched.item_selector = None  # applied above, item by item
        batched.parameters = None
        env.stack.append(batches)
        original(self, env, batched)

    return _map_run


def _select_items(env: Environment, selector: Any, items: list[Any]) -> list[Any]:
    """ItemSelector per item, with Map.Item.Index and Map.Item.Value in the context, as moto's
    workers apply it to one item per child."""
    selected = []
    frame = env.open_frame()
    try:
        map_input = env.states.get_input()
        for index, item in enumerate(items):
            frame.states.context_object.context_object_data["Map"] = MapData(
                Item=ItemData(Index=index, Value=item)
            )
            frame.states.reset(input_value=map_input)
            frame.stack.append(map_input)
            selector.eval(frame)
            selected.append(frame.stack.pop())
            frame.stack.clear()
    finally:
        env.delete_frame(frame)
    return selected


def make_eval_job(original: Callable[..., None]) -> Callable[..., None]:
    def _eval_job(self: Any, env: Environment, job: Any) -> None:
        """P6: item counts of a batch's child count its items (see `_BatchRecordView`)."""
        record = self._map_run_record
        sizes = getattr(record, _SIZES_ATTRIBUTE, None)
        if sizes is None or isinstance(record, _BatchRecordView):
            original(self, env, job)
            return
        self._map_run_record = _BatchRecordView(record, sizes[job.job_index])
        try:
            original(self, env, job)
        finally:
            self._map_run_record = record

    return _eval_job
