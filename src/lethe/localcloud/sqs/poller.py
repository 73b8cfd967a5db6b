"""One poller per SQS event source mapping (`Poller`), as Lambda runs them, and all of a
deployment's mappings (`SqsEventSources`).

**Event source mappings.** An `AWS::Lambda::EventSourceMapping` on an SQS queue (what SAM's
`Type: SQS` event becomes) is created in moto by provisioning. moto 5.2.5 then invokes the
function itself *inside* `SendMessage`, one message per invocation, on the sender's thread and
with a canned record shape; `install()` detaches moto's trigger (the one internal it touches:
the queue's ``lambda_event_source_mappings``) and hands every SQS mapping to a `_Poller` thread
that does what Lambda's pollers do, through the SQS and Lambda APIs of the local endpoint:

- reads the mapping (`GetEventSourceMapping`) before each batch, so `UpdateEventSourceMapping`
  (Enabled, BatchSize, window) applies and a deleted mapping stops its poller;
- long-polls the queue (`ReceiveMessage`, up to 10 messages per call, the queue's visibility
  timeout; receives and deletes are signed with the function's role, as Lambda's pollers use
  it, so the IAM check of lethe.localcloud.iam sees them) and gathers up to `BatchSize`
  messages, until the batching window
  (`MaximumBatchingWindowInSeconds`, counted from the first message, capped locally by
  `max_batching_window`) ends or the payload nears Lambda's 6 MB limit; with no window it
  invokes as soon as it has messages;
- invokes the function synchronously (`LambdaRuntime.invoke`) with Lambda's SQS event: Records
  with messageId, receiptHandle, body, attributes (ApproximateReceiveCount, SentTimestamp,
  SenderId, ApproximateFirstReceiveTimestamp, ...), messageAttributes (Lambda's shape:
  stringValue / binaryValue (base64) / stringListValues / binaryListValues / dataType),
  md5OfBody, md5OfMessageAttributes when there are attributes, eventSource ``aws:sqs``,
  eventSourceARN and awsRegion;
- deletes what succeeded (`DeleteMessageBatch`): everything, or with `FunctionResponseTypes:
  [ReportBatchItemFailures]` everything but the response's ``batchItemFailures``. As on AWS, a
  function error (including a timeout) fails the whole batch, and so does a response Lambda
  would refuse (not a JSON object, a ``batchItemFailures`` that is not a list, an
  ``itemIdentifier`` that is missing, empty or not a message of the batch);
- leaves failed messages in the queue. They reappear after the queue's visibility timeout, or
  after `retry_visibility_seconds` when that is set (the local cloud shortens retries, as it
  shortens asynchronous Lambda retries); moto's `ReceiveMessage` moves a message whose receive
  count reached the RedrivePolicy's ``maxReceiveCount`` to the dead-letter queue instead of
  delivering it again, as SQS does.

One poller per mapping, so batches of one mapping run one after the other (Lambda runs several
pollers and scales them up to ScalingConfig.MaximumConcurrency). Each batch is logged on the
``lethe.localcloud.sqs`` logger.

`SqsEventSources.wait_idle(timeout)` waits until no mapping's queue has visible or delayed
messages and no poller holds a batch (gathering or invoking); messages that failed and are
waiting out their visibility timeout do not count. `activity` counts batches, for
`EventDispatcher.wait_settled`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from lethe.localcloud import iam
from lethe.localcloud.lambdas import LambdaRuntime
from lethe.localcloud.sqs.records import ALL_FAILED, failed_message_ids, sqs_record
from lethe_shared.aws.errors import is_lambda_not_found

logger = logging.getLogger("lethe.localcloud.sqs")


#: Longest single ReceiveMessage wait: stop requests and settle checks are seen between calls.
RECEIVE_WAIT_SECONDS: Final = 1
#: Lambda's synchronous payload limit; gathering stops while one more receive (10 messages of at
#: most 256 KiB) still fits.
PAYLOAD_LIMIT_BYTES: Final = 6 * 1024 * 1024
_RECEIVE_HEADROOM_BYTES: Final = 10 * 256 * 1024
#: How long an idle or disabled poller waits before it reads its mapping again.
_IDLE_SECONDS: Final = 0.5


class EmulationError(RuntimeError):
    """The local cloud cannot emulate this (the message says what and why)."""


@dataclass(frozen=True)
class MappingConfig:
    """The parts of an event source mapping the poller follows (GetEventSourceMapping)."""

    uuid: str
    function_arn: str
    queue_arn: str
    batch_size: int
    window_seconds: float
    report_item_failures: bool
    enabled: bool

    @classmethod
    def from_api(cls, document: Mapping[str, Any]) -> MappingConfig:
        return cls(
            uuid=str(document["UUID"]),
            function_arn=str(document["FunctionArn"]),
            queue_arn=str(document["EventSourceArn"]),
            batch_size=int(document.get("BatchSize") or 10),
            window_seconds=float(document.get("MaximumBatchingWindowInSeconds") or 0),
            report_item_failures="ReportBatchItemFailures"
            in (document.get("FunctionResponseTypes") or []),
            enabled=document.get("State", "Enabled") in {"Enabled", "Enabling", "Updating"},
        )

    @property
    def region(self) -> str:
        return self.queue_arn.split(":")[3]


def is_sqs_arn(arn: str) -> bool:
    parts = arn.split(":")
    return len(parts) >= 6 and parts[2] == "sqs"


class Poller:
    """Lambda's poller for one SQS event source mapping (see the module docstring)."""

    def __init__(self, sources: SqsEventSources, mapping_uuid: str, region: str) -> None:
        self.sources = sources
        self.uuid = mapping_uuid
        endpoints = sources.runtime.deployment.endpoints
        self._lambda = endpoints.client("lambda", region)
        self._sqs = endpoints.client("sqs", region)
        # receives and deletes as Lambda's pollers make them: with the function's role (its
        # credentials once the mapping is read; lethe.localcloud.iam checks them)
        self._poll_sqs = self._sqs
        self._poll_function = ""
        self._region = region
        self._queue_urls: dict[str, str] = {}
        self._cond = threading.Condition()
        self._receives_started = 0
        self._receives_finished = 0
        self._holding = False
        self._stop = threading.Event()
        self.config: MappingConfig | None = None
        self.batches = 0
        self._thread = threading.Thread(
            target=self._loop, name=f"sqs-esm-{mapping_uuid[:8]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    # -- loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                config = self._read_config()
            except ClientError as error:
                if is_lambda_not_found(error):
                    logger.info("event source mapping %s was deleted: poller stops", self.uuid)
                    return
                logger.warning("event source mapping %s unreadable: %s", self.uuid, error)
                self._stop.wait(_IDLE_SECONDS)
                continue
            except BotoCoreError as error:
                logger.warning("event source mapping %s unreadable: %s", self.uuid, error)
                self._stop.wait(_IDLE_SECONDS)
                continue
            if not config.enabled:
                self._stop.wait(_IDLE_SECONDS)
                continue
            try:
                self._cycle(config)
            except Exception:  # keep polling: one bad batch must not stop the mapping
                logger.exception("event source mapping %s: batch failed", self.uuid)
                self._release()
                self._stop.wait(_IDLE_SECONDS)

    def _read_config(self) -> MappingConfig:
        config = MappingConfig.from_api(self._lambda.get_event_source_mapping(UUID=self.uuid))
        self.config = config
        if config.function_arn != self._poll_function:
            credentials = iam.function_environment(config.function_arn)
            endpoints = self.sources.runtime.deployment.endpoints
            self._poll_sqs = endpoints.client("sqs", self._region, credentials=credentials)
            self._poll_function = config.function_arn
        return config

    def _cycle(self, config: MappingConfig) -> None:
        queue_url = self._queue_url(config.queue_arn)
        messages = self._gather(config, queue_url)
        if not messages:
            return
        if self._stop.is_set():  # stopping: the messages come back after their visibility timeout
            self._release()
            return
        try:
            self._deliver(config, queue_url, messages)
        finally:
            self._release()

    def _queue_url(self, queue_arn: str) -> str:
        if queue_arn not in self._queue_urls:
            _, _, _, _, account, name = queue_arn.split(":", 5)
            self._queue_urls[queue_arn] = self._sqs.get_queue_url(
                QueueName=name, QueueOwnerAWSAccountId=account
            )["QueueUrl"]
        return self._queue_urls[queue_arn]

    # -- gathering a batch

    def _gather(self, config: MappingConfig, queue_url: str) -> list[dict[str, Any]]:
        window = self.sources.effective_window(config.window_seconds)
        messages: list[dict[str, Any]] = []
        size = 0
        opened: float | None = None
        while not self._stop.is_set():
            wanted = min(10, config.batch_size - len(messages))
            if wanted <= 0 or size + _RECEIVE_HEADROOM_BYTES > PAYLOAD_LIMIT_BYTES:
                break
            if opened is None:
                wait = RECEIVE_WAIT_SECONDS
            else:
                remaining = opened + window - time.monotonic()
                if remaining <= 0:
                    break
                wait = RECEIVE_WAIT_SECONDS if remaining >= RECEIVE_WAIT_SECONDS else 0
            received = self._receive(queue_url, wanted, wait)
            if not received:
                if opened is None:
                    return []  # idle: read the mapping again
                if wait == 0:
                    self._stop.wait(min(0.1, max(0.0, opened + window - time.monotonic())))
                continue
            if opened is None:
                opened = time.monotonic()
            messages.extend(received)
            size += sum(len(m["Body"].encode()) + 512 for m in received)
            if window <= 0:
                break
        return _latest_receipts(messages)

    def _receive(self, queue_url: str, wanted: int, wait: int) -> list[dict[str, Any]]:
        with self._cond:
            self._receives_started += 1
        received: list[dict[str, Any]] = []
        try:
            received = self._poll_sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        except (BotoCoreError, ClientError) as error:
            logger.warning("event source mapping %s: ReceiveMessage failed: %s", self.uuid, error)
            self._stop.wait(_IDLE_SECONDS)
        finally:
            with self._cond:  # holding is set before the receive counts as finished
                if received and not self._holding:
                    self._holding = True
                    self.batches += 1
                self._receives_finished += 1
                self._cond.notify_all()
        return received

    def _release(self) -> None:
        with self._cond:
            self._holding = False
            self._cond.notify_all()

    # -- invoking and settling the batch

    def _deliver(
        self, config: MappingConfig, queue_url: str, messages: list[dict[str, Any]]
    ) -> None:
        records = [sqs_record(message, config.queue_arn) for message in messages]
        handles = {m["MessageId"]: m["ReceiptHandle"] for m in messages}
        payload = json.dumps({"Records": records}).encode("utf-8")
        try:
            result = self.sources.runtime.invoke(config.function_arn, payload)
        except (KeyError, RuntimeError) as error:  # not in the deployment, or shutting down
            logger.error(
                "event source mapping %s: cannot invoke %s: %s; %d messages stay in the queue",
                self.uuid,
                config.function_arn,
                error,
                len(messages),
            )
            return
        failed, reason = failed_message_ids(result, handles, config.report_item_failures)
        failed_ids = set(handles) if failed is ALL_FAILED else failed
        succeeded = [mid for mid in handles if mid not in failed_ids]
        self._delete(queue_url, [(mid, handles[mid]) for mid in succeeded])
        if failed_ids:
            self._retry_sooner(queue_url, [(mid, handles[mid]) for mid in failed_ids])
        logger.info(
            "event source mapping %s: %d messages from %s to %s: %d deleted, %d failed (%s)",
            self.uuid,
            len(messages),
            config.queue_arn.rsplit(":", 1)[-1],
            config.function_arn.rsplit(":", 1)[-1],
            len(succeeded),
            len(failed_ids),
            reason,
        )

    def _delete(self, queue_url: str, entries: list[tuple[str, str]]) -> None:
        for chunk in _chunks(entries, 10):
            response = self._poll_sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle} for i, (_, handle) in enumerate(chunk)
                ],
            )
            for failure in response.get("Failed", []):
                logger.warning(
                    "event source mapping %s: could not delete a message: %s", self.uuid, failure
                )

    def _retry_sooner(self, queue_url: str, entries: list[tuple[str, str]]) -> None:
        seconds = self.sources.retry_visibility_seconds
        if seconds is None:
            return
        for chunk in _chunks(entries, 10):
            self._sqs.change_message_visibility_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                    for i, (_, handle) in enumerate(chunk)
                ],
            )

    # -- settling

    def wait_idle(self, deadline: float) -> bool:
        """True once the queue has no visible or delayed message and no batch is held."""
        while True:
            config = self.config
            if config is None and self.running:  # starting: its mapping is not read yet
                if time.monotonic() >= deadline:
                    return False
                self._stop.wait(0.05)
                continue
            if config is None or not config.enabled or not self.running:
                return True
            try:
                waiting = self._waiting_messages(config.queue_arn)
            except (BotoCoreError, ClientError):
                waiting = 0  # the queue is gone: nothing to wait for
            with self._cond:
                in_flight = self._receives_started
                while self._receives_finished < in_flight and self.running:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                if not self._holding and waiting == 0:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.2))

    def _waiting_messages(self, queue_arn: str) -> int:
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self._queue_url(queue_arn),
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
        )["Attributes"]
        return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesDelayed", 0)
        )


def _latest_receipts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per message id, its latest receipt: a window longer than the queue's visibility
    timeout receives a message again (the earlier receipt handle is then stale)."""
    latest = {m["MessageId"]: m for m in messages}
    return [latest[mid] for mid in dict.fromkeys(m["MessageId"] for m in messages)]


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqsEventSources:
    """The pollers of every SQS event source mapping of the local cloud."""

    def __init__(
        self,
        runtime: LambdaRuntime,
        *,
        max_batching_window: float | None = None,
        retry_visibility_seconds: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.max_batching_window = max_batching_window
        self.retry_visibility_seconds = retry_visibility_seconds
        self._lock = threading.Lock()
        self._pollers: dict[str, Poller] = {}
        self._stopped = False

    def effective_window(self, configured: float) -> float:
        if self.max_batching_window is None:
            return configured
        return min(configured, self.max_batching_window)

    def watch(self, mapping_uuid: str, region: str) -> bool:
        """Start polling a mapping (once); False if already polled or stopped."""
        with self._lock:
            if self._stopped or mapping_uuid in self._pollers:
                return False
            poller = Poller(self, mapping_uuid, region)
            self._pollers[mapping_uuid] = poller
        poller.start()
        logger.info("polling SQS event source mapping %s", mapping_uuid)
        return True

    @property
    def mappings(self) -> list[str]:
        with self._lock:
            return list(self._pollers)

    @property
    def activity(self) -> int:
        """Batches gathered so far (grows whenever a poller takes messages)."""
        with self._lock:
            pollers = list(self._pollers.values())
        return sum(p.batches for p in pollers)

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            pollers = list(self._pollers.values())
        return all(poller.wait_idle(deadline) for poller in pollers)

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopped = True
            pollers = list(self._pollers.values())
        for poller in pollers:
            poller._stop.set()
        for poller in pollers:
            poller.stop(timeout)
