"""`install()`: take SQS event source mappings away from moto, which would invoke the function
inside SendMessage, and hand them to `SqsEventSources`; pinned to moto 5.2.5.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

from lethe.localcloud.sqs.poller import EmulationError, SqsEventSources, is_sqs_arn

PINNED_MOTO_VERSION: Final = "5.2.5"


def check_moto() -> None:
    import moto  # noqa: PLC0415 - moto is imported where the hooks are installed

    if moto.__version__ != PINNED_MOTO_VERSION:
        raise EmulationError(
            f"lethe.localcloud.sqs is written for moto {PINNED_MOTO_VERSION} (found "
            f"{moto.__version__}): re-check moto/sqs/models.py Queue.add_message (its inline "
            "event source mapping trigger) and moto/sqs/responses.py, and adjust"
        )


def _moto_queue(account: str, region: str, queue_arn: str) -> Any:
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    for queue in list(sqs_backends[account][region].queues.values()):
        if queue.queue_arn == queue_arn:
            return queue
    return None


class _Takeover:
    """The mappings taken from moto's inline trigger, to give back on uninstall."""

    def __init__(self, sources: SqsEventSources) -> None:
        self.sources = sources
        self.detached: list[tuple[str, str, str, str, Any]] = []

    def take(
        self, account: str, region: str, uuid_: str, queue_arn: str, function_arn: str
    ) -> None:
        queue = _moto_queue(account, region, queue_arn)
        removed = queue.lambda_event_source_mappings.pop(function_arn, None) if queue else None
        if removed is not None:
            self.detached.append((account, region, queue_arn, function_arn, removed))
        self.sources.watch(uuid_, region)

    def give_back(self) -> None:
        for account, region, queue_arn, function_arn, esm in self.detached:
            queue = _moto_queue(account, region, queue_arn)
            if queue is not None:
                queue.lambda_event_source_mappings.setdefault(function_arn, esm)
        self.detached.clear()


class _Hook:
    lock = threading.Lock()
    sources: SqsEventSources | None = None


def install(sources: SqsEventSources) -> Callable[[], None]:
    """Take over every SQS event source mapping from moto: existing ones now, new ones as
    `CreateEventSourceMapping` creates them (the one patch: moto's
    ``LambdaBackend.create_event_source_mapping``). Returns the undo callable, which stops the
    pollers and gives moto its triggers back. Raises RuntimeError if already installed."""
    check_moto()
    from moto.awslambda.models import LambdaBackend  # noqa: PLC0415

    takeover = _Takeover(sources)
    with _Hook.lock:
        if _Hook.sources is not None:
            raise RuntimeError("lethe.localcloud.sqs is already installed")
        original = LambdaBackend.create_event_source_mapping

        def create_event_source_mapping(self: Any, spec: dict[str, Any]) -> Any:
            esm = original(self, spec)
            if is_sqs_arn(str(esm.event_source_arn)):
                takeover.take(
                    self.account_id,
                    self.region_name,
                    esm.uuid,
                    esm.event_source_arn,
                    esm.function_arn,
                )
            return esm

        LambdaBackend.create_event_source_mapping = create_event_source_mapping  # type: ignore[method-assign]
        _Hook.sources = sources

    endpoints = sources.runtime.deployment.endpoints
    pages = endpoints.client("lambda").get_paginator("list_event_source_mappings").paginate()
    for entry in (e for page in pages for e in page.get("EventSourceMappings", [])):
        if is_sqs_arn(str(entry.get("EventSourceArn", ""))):
            takeover.take(
                endpoints.account_id,
                endpoints.region,
                str(entry["UUID"]),
                str(entry["EventSourceArn"]),
                str(entry["FunctionArn"]),
            )

    def uninstall() -> None:
        sources.stop()
        with _Hook.lock:
            if _Hook.sources is sources:
                LambdaBackend.create_event_source_mapping = original  # type: ignore[method-assign]
                _Hook.sources = None
        takeover.give_back()

    return uninstall
