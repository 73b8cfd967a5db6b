"""**Message move tasks.** moto 5.2.5 has no `StartMessageMoveTask`, `ListMessageMoveTasks` or
`CancelMessageMoveTask`; `install_message_move_tasks()` adds them to its SQS API (see its
docstring), so the runbook's `aws sqs start-message-move-task` works against the local cloud.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from lethe.localcloud.sqs.hooks import check_moto
from lethe.localcloud.sqs.poller import EmulationError


@dataclass
class _MoveTask:
    handle: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    started: int  # epoch milliseconds
    moved: int = 0
    to_move: int = 0
    status: str = "RUNNING"
    failure: str | None = None

    def describe(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "TaskHandle": self.handle,
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started,
        }
        if self.destination_arn:
            document["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            document["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure:
            document["FailureReason"] = self.failure
        return document


class _MoveTasks:
    """Tasks by source queue ARN, newest first (process-wide, like moto's backends)."""

    lock = threading.Lock()
    tasks: ClassVar[dict[str, list[_MoveTask]]] = {}
    installed = False


def _sqs_error(code: str, message: str) -> Exception:
    from moto.sqs.exceptions import SQSException  # noqa: PLC0415

    return SQSException(code, message)


def _queue_by_arn(backend: Any, arn: str) -> Any:
    for queue in backend.queues.values():
        if queue.queue_arn == arn:
            return queue
    raise _sqs_error("ResourceNotFoundException", f"The queue {arn} does not exist.")


def _move_destination(backend: Any, source: Any, destination_arn: str | None) -> Any:
    sources = [q for q in backend.queues.values() if q.dead_letter_queue is source]
    if not sources:
        raise _sqs_error(
            "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue."
        )
    if destination_arn:
        return _queue_by_arn(backend, destination_arn)
    if len(sources) > 1:
        raise _sqs_error(
            "InvalidParameterValue",
            "the local cloud cannot tell the source of each message of a dead-letter queue "
            "with several source queues: give DestinationArn",
        )
    return sources[0]


def _start_message_move_task(self: Any) -> Any:
    """SQSResponse.start_message_move_task (added): see install_message_move_tasks."""
    from moto.core.responses import ActionResult  # noqa: PLC0415

    backend = self.sqs_backend
    source_arn = str(self._get_param("SourceArn"))
    destination_arn = self._get_param("DestinationArn")
    rate = self._get_param("MaxNumberOfMessagesPerSecond")
    source = _queue_by_arn(backend, source_arn)
    destination = _move_destination(backend, source, destination_arn)
    with _MoveTasks.lock:
        if any(t.status == "RUNNING" for t in _MoveTasks.tasks.get(source_arn, [])):
            raise _sqs_error(
                "UnsupportedOperation", "There is already a task running on the source queue."
            )
        task = _MoveTask(
            handle=base64.b64encode(
                json.dumps({"taskId": str(uuid.uuid4()), "sourceArn": source_arn}).encode()
            ).decode(),
            source_arn=source_arn,
            destination_arn=str(destination_arn) if destination_arn else None,
            rate=int(rate) if rate is not None else None,
            started=int(time.time() * 1000),
        )
        _MoveTasks.tasks.setdefault(source_arn, []).insert(0, task)
    _move_all(backend, source, destination, task)
    return ActionResult({"TaskHandle": task.handle})


def _list_message_move_tasks(self: Any) -> Any:
    """SQSResponse.list_message_move_tasks (added)."""
    from moto.core.responses import ActionResult  # noqa: PLC0415

    source_arn = str(self._get_param("SourceArn"))
    _queue_by_arn(self.sqs_backend, source_arn)
    limit = max(1, min(int(self._get_param("MaxResults") or 1), 10))
    with _MoveTasks.lock:
        tasks = _MoveTasks.tasks.get(source_arn, [])[:limit]
        return ActionResult({"Results": [t.describe() for t in tasks]})


def _cancel_message_move_task(self: Any) -> Any:
    """SQSResponse.cancel_message_move_task (added): only a RUNNING task can be cancelled."""
    from moto.core.responses import ActionResult  # noqa: PLC0415

    handle = str(self._get_param("TaskHandle"))
    with _MoveTasks.lock:
        for task in (t for tasks in _MoveTasks.tasks.values() for t in tasks):
            if task.handle == handle and task.status == "RUNNING":
                task.status = "CANCELLED"
                return ActionResult({"ApproximateNumberOfMessagesMoved": task.moved})
    raise _sqs_error("ResourceNotFoundException", f"No running task with handle {handle}.")


_MOVE_TASK_METHODS: Final = {
    "start_message_move_task": _start_message_move_task,
    "list_message_move_tasks": _list_message_move_tasks,
    "cancel_message_move_task": _cancel_message_move_task,
}


def install_message_move_tasks() -> Callable[[], None]:
    """Add StartMessageMoveTask, ListMessageMoveTasks and CancelMessageMoveTask to moto's SQS.

    StartMessageMoveTask moves every message of the source queue (which must be the dead-letter
    queue of at least one queue, as on AWS) to DestinationArn or, without it, back to its source
    queue (locally: the one queue whose RedrivePolicy names the source; with several, the task
    needs a DestinationArn). Each message is sent again (new message id, receive count 0, same
    body and message attributes), as SQS's redrive does. The move runs to completion within the
    call, so the task is COMPLETED when ListMessageMoveTasks first sees it;
    MaxNumberOfMessagesPerSecond is recorded only. Returns the undo callable.
    """
    check_moto()
    from moto.sqs.responses import SQSResponse  # noqa: PLC0415

    with _MoveTasks.lock:
        if _MoveTasks.installed:
            raise RuntimeError("lethe.localcloud.sqs message move tasks are already installed")
        for name, method in _MOVE_TASK_METHODS.items():
            if hasattr(SQSResponse, name):
                raise EmulationError(f"moto's SQSResponse already has {name}: drop this hook")
            setattr(SQSResponse, name, method)
        _MoveTasks.installed = True
        _MoveTasks.tasks = {}

    def uninstall() -> None:
        with _MoveTasks.lock:
            for name in _MOVE_TASK_METHODS:
                if hasattr(SQSResponse, name):
                    delattr(SQSResponse, name)
            _MoveTasks.installed = False
            _MoveTasks.tasks = {}

    return uninstall


def _move_all(backend: Any, source: Any, destination: Any, task: _MoveTask) -> None:
    """Move the source queue's messages (visible or not) one by one; record the outcome."""
    with source._messages_lock:
        pending = list(source._messages)
    task.to_move = len(pending)
    for message in pending:
        if task.status != "RUNNING":
            return
        try:
            backend.send_message(
                queue_name=destination.name,
                message_body=message.body,
                message_attributes={
                    name: dict(value) for name, value in message.message_attributes.items()
                },
                group_id=message.group_id,
                deduplication_id=message.deduplication_id,
            )
        except Exception as error:  # recorded on the task, as SQS reports a failed move
            task.status, task.failure = "FAILED", f"{type(error).__name__}: {error}"
            return
        with source._messages_lock:
            if message in source._messages:
                source._messages.remove(message)
        source.pending_messages.discard(message)
        task.moved += 1
    task.status = "COMPLETED"
