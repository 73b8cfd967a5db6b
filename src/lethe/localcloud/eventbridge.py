"""EventBridge delivery to Lambda and Step Functions targets, asynchronously.

moto's ``Rule.send_to_targets`` delivers to SQS, CloudWatch Logs, archives and other buses only:
a Lambda or Step Functions target raises NotImplementedError, which moto swallows and which stops
delivery to the rules after it. `install(dispatcher)` replaces that method (the one patch of
this module, reversible) so that every caller (``PutEvents``, archive replays, cross-bus
targets) only *queues* the rule and the event; `EventDispatcher`'s thread then, per rule:

- skips disabled rules and schedule-only rules (moto's matcher would match every event to a rule
  without a pattern);
- matches with moto's own matcher (``rule.event_pattern.matches_event``);
- per target, with errors logged and never stopping the other targets or rules:
  * ``arn:aws:lambda:...``: ``runtime.invoke_async(arn, input)`` (EventBridge invokes Lambda
    asynchronously; retries and the on-failure destination are the function's);
  * ``arn:aws:states:...``: ``StartExecution`` (boto3 against the local endpoint, name = a uuid,
    input = the target input);
  * ``arn:aws:sqs:...``: ``SendMessage`` of the target input as JSON (boto3 against the local
    endpoint; for a FIFO queue with ``SqsParameters.MessageGroupId`` and the event id as
    deduplication id, as EventBridge sends). moto's own SQS delivery ignores ``Input`` and
    ``InputPath`` and, for events put with PutEvents, drops the event's ``account``; a queue's
    event source mapping then hands the message to its function (lethe.localcloud.sqs);
  * anything else: moto's original code, for that one target.

The target input follows EventBridge: ``Input`` (constant JSON) or ``InputPath`` (JSONPath);
otherwise the whole event, with its ``time`` rendered as ISO-8601 (moto keeps epoch seconds
internally) and moto's internal ``ingestion-time`` removed. ``InputTransformer`` is not
emulated (template.yaml's rules do not use it): a target that carries one is refused with
`UnsupportedTargetError`, logged, and receives nothing.

AWS services' own events (S3 via `lethe.localcloud.s3events`) enter through
`EventDispatcher.dispatch(event)`, which matches them against the rules of the **default** bus of
the event's account and region: AWS delivers S3 (and other service) events to the default bus
only. moto's own S3 code tried every bus.

Each delivery is logged at INFO on the ``lethe.localcloud.events`` logger (rule, target, event id).
`EventDispatcher.wait_idle(timeout)` waits for the queue; `wait_settled(timeout)` also waits for
the Lambda invocations that deliveries started, for every source added with `add_source` (the
SQS event source mappings: their queues drained and no batch in flight), and for what those put
in turn, until one full pass sees no new activity.
"""

from __future__ import annotations

import copy
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from jsonpath_ng.ext.parser import parse as parse_json_path  # moto's own dependency
from moto.events.models import Rule, events_backends

from lethe.localcloud.lambdas import LambdaRuntime

logger = logging.getLogger("lethe.localcloud.events")

DEFAULT_BUS = "default"


class UnsupportedTargetError(ValueError):
    """A rule target asks for something the local cloud does not emulate."""


class SettleSource(Protocol):
    """Something `wait_settled` waits for (e.g. lethe.localcloud.sqs.SqsEventSources)."""

    @property
    def activity(self) -> int:
        """Grows whenever the source starts new work."""

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the source has nothing to do; False if `timeout` passed first."""


@dataclass
class _Work:
    event: dict[str, Any]
    rule: Any = None  # a moto Rule; None: match the default bus of the event's account/region
    transform_input: bool = False


class EventDispatcher:
    """Queue and thread that deliver events to rule targets (see the module docstring)."""

    def __init__(self, runtime: LambdaRuntime) -> None:
        self.runtime = runtime
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._pending = 0
        self._submitted = 0
        self._sources: list[SettleSource] = []
        self._sqs_clients: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._loop, name="eventbridge-dispatcher", daemon=True
        )
        self._stopped = False
        self._thread.start()

    # -- producers ---------------------------------------------------------------------------

    def dispatch(self, event: dict[str, Any]) -> None:
        """Queue an AWS service event for the default bus of its account and region."""
        self._put(_Work(event=copy.deepcopy(event)))

    def submit(self, rule: Any, event: dict[str, Any], transform_input: bool = True) -> None:
        """Queue one (rule, event) pair, as moto's send_to_targets receives it."""
        self._put(_Work(event=copy.deepcopy(event), rule=rule, transform_input=transform_input))

    def _put(self, work: _Work) -> None:
        if self._stopped:
            logger.warning("dispatcher stopped: dropping event %s", work.event.get("id"))
            return
        with self._cond:
            self._pending += 1
            self._submitted += 1
        self._queue.put(work)

    # -- waiting and stopping ----------------------------------------------------------------

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued event was delivered; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def add_source(self, source: SettleSource) -> None:
        """Make `wait_settled` also wait for `source`."""
        self._sources.append(source)

    def _activity(self) -> tuple[int, ...]:
        with self._cond:
            submitted = self._submitted
        return (submitted, self.runtime.activity, *(s.activity for s in self._sources))

    def wait_settled(self, timeout: float) -> bool:
        """Wait until the queue, the runtime's async invocations and every added source are
        idle, in a pass during which none of them started anything new."""
        deadline = time.monotonic() + timeout
        while True:
            if deadline - time.monotonic() <= 0:
                return False
            before = self._activity()
            waits = [self.wait_idle, self.runtime.wait_idle, *(s.wait_idle for s in self._sources)]
            for wait in waits:
                if not wait(max(0.0, deadline - time.monotonic())):
                    return False
            with self._cond:
                pending = self._pending
            if pending == 0 and self._activity() == before:
                return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread after the events already queued."""
        if self._stopped:
            return
        self._stopped = True
        self._queue.put(None)
        self._thread.join(timeout)

    # -- delivery ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                self._process(work)
            except Exception:
                logger.exception("delivery of event %s failed", work.event.get("id"))
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def _process(self, work: _Work) -> None:
        if work.rule is not None:
            self._deliver(work.rule, work.event, work.transform_input)
            return
        backend = events_backends[str(work.event["account"])][str(work.event["region"])]
        bus = backend.event_buses.get(DEFAULT_BUS)
        if bus is None:
            return
        for rule in list(bus.rules.values()):
            self._deliver(rule, copy.deepcopy(work.event), transform_input=False)

    def _deliver(self, rule: Any, event: dict[str, Any], transform_input: bool) -> None:
        if getattr(rule, "state", "ENABLED") != "ENABLED":
            return
        if getattr(rule, "scheduled_expression", None) and not rule.event_pattern.get_pattern():
            return
        if not rule.event_pattern.matches_event(event):
            return
        aws_event = to_aws_event(event)
        for target in list(rule.targets):
            arn = str(target["Arn"])
            service = arn.split(":")[2] if arn.count(":") >= 2 else ""
            try:
                refuse_unsupported(rule, target)
                if service == "lambda":
                    self.runtime.invoke_async(arn, target_input(target, aws_event))
                elif service == "states":
                    self._start_execution(arn, target_input(target, aws_event))
                elif service == "sqs":
                    self._send_to_queue(arn, target, target_input(target, aws_event), aws_event)
                else:
                    _moto_deliver(rule, target, event, transform_input)
            except Exception:
                logger.exception(
                    "rule %s: delivery of event %s to %s failed", rule.name, event.get("id"), arn
                )
                continue
            logger.info(
                "rule %s delivered event %s to target %s (%s)",
                rule.name,
                event.get("id"),
                target.get("Id"),
                arn,
            )

    def _start_execution(self, state_machine_arn: str, payload: Any) -> None:
        region = state_machine_arn.split(":")[3]
        sfn = self.runtime.deployment.endpoints.client("stepfunctions", region)
        sfn.start_execution(
            stateMachineArn=state_machine_arn, name=str(uuid.uuid4()), input=json.dumps(payload)
        )

    def _send_to_queue(
        self, queue_arn: str, target: dict[str, Any], payload: Any, event: dict[str, Any]
    ) -> None:
        _, _, _, region, account, name = queue_arn.split(":", 5)
        if region not in self._sqs_clients:  # deliveries run on this one thread
            self._sqs_clients[region] = self.runtime.deployment.endpoints.client("sqs", region)
        sqs = self._sqs_clients[region]
        url = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        params: dict[str, Any] = {"QueueUrl": url, "MessageBody": json.dumps(payload)}
        if name.endswith(".fifo"):
            group = target.get("SqsParameters", {}).get("MessageGroupId")
            if not group:
                raise UnsupportedTargetError(
                    f"target {target.get('Id')}: a FIFO queue needs SqsParameters.MessageGroupId"
                )
            params["MessageGroupId"] = group
            params["MessageDeduplicationId"] = str(event.get("id") or uuid.uuid4())
        sqs.send_message(**params)


# -- event shapes and target input -------------------------------------------------------------


def _iso_time(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def _epoch_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            parsed = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return value
        return parsed.timestamp()
    return value


def to_aws_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event as EventBridge hands it to a target: ISO time, no moto-internal fields."""
    result = {key: value for key, value in event.items() if key != "ingestion-time"}
    if "time" in result:
        result["time"] = _iso_time(result["time"])
    return result


def _json_path(path: str, event: Any) -> Any:
    matches = parse_json_path(path).find(event)
    return matches[0].value if matches else None


def refuse_unsupported(rule: Any, target: dict[str, Any]) -> None:
    """Raise UnsupportedTargetError for a target the local cloud would deliver wrongly."""
    if target.get("InputTransformer"):
        raise UnsupportedTargetError(
            f"rule {getattr(rule, 'name', '?')}: target {target.get('Id')} uses "
            "InputTransformer, which the local cloud does not emulate (use Input or InputPath)"
        )


def target_input(target: dict[str, Any], event: dict[str, Any]) -> Any:
    """What a target receives: Input, InputPath, or the event."""
    if target.get("Input") is not None:
        return json.loads(target["Input"])
    if target.get("InputPath"):
        return _json_path(target["InputPath"], event)
    return event


# -- moto hook ---------------------------------------------------------------------------------


class _Hook:
    """moto's original send_to_targets while installed (one install per process)."""

    lock = threading.Lock()
    original: Callable[..., None] | None = None


def _moto_deliver(
    rule: Any, target: dict[str, Any], event: dict[str, Any], transform: bool
) -> None:
    """moto's original delivery, for one target, with the epoch time moto's code expects."""
    original: Callable[..., None] = _Hook.original or Rule.send_to_targets
    single = copy.copy(rule)
    single.targets = [target]
    moto_event = copy.deepcopy(event)
    if "time" in moto_event:
        moto_event["time"] = _epoch_time(moto_event["time"])
    if transform and "ingestion-time" not in moto_event:
        moto_event["ingestion-time"] = time.time()
    original(single, moto_event, transform_input=transform)


def install(dispatcher: EventDispatcher) -> Callable[[], None]:
    """Patch ``moto.events.models.Rule.send_to_targets`` to queue on `dispatcher`.

    Returns a callable that restores moto's method. Raises RuntimeError if already installed.
    """
    with _Hook.lock:
        if _Hook.original is not None:
            raise RuntimeError("lethe.localcloud.eventbridge is already installed")
        original = Rule.send_to_targets

        def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
            dispatcher.submit(self, dict(original_event), transform_input)

        _Hook.original = original
        Rule.send_to_targets = send_to_targets  # type: ignore[method-assign]

    def uninstall() -> None:
        with _Hook.lock:
            if _Hook.original is original:
                Rule.send_to_targets = original  # type: ignore[method-assign]
                _Hook.original = None

    return uninstall
