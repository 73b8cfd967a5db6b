"""All of a deployment's SQS event source mappings (`SqsEventSources`).

`SqsEventSources.wait_idle(timeout)` waits until no mapping's queue has visible or delayed
messages and no poller holds a batch (gathering or invoking); messages that failed and are
waiting out their visibility timeout do not count. `activity` counts batches, for
`EventDispatcher.wait_settled`.
"""

from __future__ import annotations

import logging
import threading
import time

from lethe.localcloud.lambdas import LambdaRuntime
from lethe.localcloud.sqs.poller import Poller

logger = logging.getLogger("lethe.localcloud.sqs")


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
