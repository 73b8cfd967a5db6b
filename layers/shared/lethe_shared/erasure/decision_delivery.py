"""Handing an approver's recorded decision to the waiting erasure workflow (its task token).

Apart from lethe_shared.erasure.approval_flow (which re-exports both functions) so that the
erasure API, which hands over a decision whose first hand-over failed, imports neither the
approval pages nor the approval e-mail.
"""

from __future__ import annotations

import logging
import time

from lethe_shared.erasure.requests import ErasureRequest, ErasureRequests, ErasureStatus
from lethe_shared.erasure.task_callbacks import TaskCallbacks, TaskGoneError

LOG = logging.getLogger("lethe.approval")
DELIVERY_ATTEMPTS = 3  # SendTask calls per hand-over, with DELIVERY_PAUSE_SECONDS doubling
DELIVERY_PAUSE_SECONDS = 0.2


def pending_delivery(record: ErasureRequest) -> bool:
    """Whether an approver's decision is recorded and not yet handed to the workflow: decided,
    and the task token still on the record."""
    return (
        record.status in (ErasureStatus.APPROVED, ErasureStatus.REJECTED)
        and bool(record.approval.get("decision"))
        and bool(record.task_token)
    )


def deliver_decision(
    record: ErasureRequest,
    *,
    requests: ErasureRequests,
    callbacks: TaskCallbacks,
    attempts: int = DELIVERY_ATTEMPTS,
    pause: float = DELIVERY_PAUSE_SECONDS,
) -> bool:
    """Hand the recorded decision of `record` to the waiting workflow through its task token,
    then remove the token (only if it is still that one). True when handed over or the task
    has ended (TaskGoneError: nothing can take it any more); False when every attempt failed:
    the token stays for a later hand-over. Sends nothing when nothing is pending."""
    if not pending_delivery(record):
        return True
    approval, token = record.approval, record.task_token
    decided_by = str(approval.get("decided_by", ""))
    for attempt in range(attempts):
        try:
            if approval["decision"] == "approve":
                output = {
                    "decision": "approve",
                    "decided_by": decided_by,
                    "decided_at": str(approval.get("decided_at", "")),
                }
                callbacks.success(token, output)
            else:
                callbacks.failure(token, "ErasureRejected", f"rejected by {decided_by}")
        except TaskGoneError:
            LOG.warning(
                "request %s: the approval task ended before the decision", record.request_id
            )
            requests.clear_task_token(record.request_id, token)
            raise
        except Exception as exc:  # throttled, a network error: the decision stays recorded
            LOG.warning(
                "request %s: handing the decision over failed (attempt %d of %d): %s",
                record.request_id, attempt + 1, attempts, type(exc).__name__,
            )  # fmt: skip
            if attempt + 1 < attempts:
                time.sleep(pause * 2**attempt)
            continue
        requests.clear_task_token(record.request_id, token)
        return True
    LOG.error("request %s: the decision is recorded, not yet handed over", record.request_id)
    return False
