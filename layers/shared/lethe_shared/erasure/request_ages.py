"""How many erasure requests are open, by status, and how old the oldest ones are.

ErasureMetricsFunction (functions/erasure_metrics) publishes these figures every five minutes as
CloudWatch metrics; the alarms on an approval pending too long and on an erasure older than its
SLA, and the dashboard, read them (docs/OPERATIONS.md). Only counts and ages leave this module:
never a request id, a subject hash or anything else of a request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from lethe_shared.erasure.requests import TERMINAL, ErasureRequest, ErasureRequests, ErasureStatus

OPEN_STATUSES: tuple[ErasureStatus, ...] = tuple(s for s in ErasureStatus if s not in TERMINAL)


@dataclass(frozen=True)
class RequestAges:
    """Open requests per status; ages in hours (0 when nothing is open or waiting)."""

    open_by_status: dict[ErasureStatus, int] = field(default_factory=dict)
    oldest_open_hours: float = 0.0
    oldest_awaiting_approval_hours: float = 0.0

    def metrics(self) -> dict[str, float]:
        """Metric name -> value, the names docs/OPERATIONS.md lists."""
        figures: dict[str, float] = {
            f"OpenErasureRequests_{status.value}": float(self.open_by_status.get(status, 0))
            for status in OPEN_STATUSES
        }
        figures["OpenErasureRequests"] = float(sum(self.open_by_status.values()))
        figures["OldestOpenErasureAgeHours"] = round(self.oldest_open_hours, 3)
        figures["OldestPendingApprovalAgeHours"] = round(self.oldest_awaiting_approval_hours, 3)
        return figures


def _parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def _hours(since: str, now: datetime) -> float:
    return max(0.0, (now - _parse(since)).total_seconds() / 3600)


def awaiting_since(request: ErasureRequest) -> str:
    """When the request last entered AWAITING_APPROVAL (its creation when history lacks it)."""
    entered = [e.at for e in request.history if e.status is ErasureStatus.AWAITING_APPROVAL]
    return entered[-1] if entered else request.created_at


def measure(requests: ErasureRequests, now: datetime) -> RequestAges:
    """Counts and ages of the open requests (every status not terminal), as of now."""
    by_status: dict[ErasureStatus, list[ErasureRequest]] = {
        status: list(requests.list(status)) for status in OPEN_STATUSES
    }
    return ages_of(by_status, now)


def ages_of(by_status: dict[ErasureStatus, list[ErasureRequest]], now: datetime) -> RequestAges:
    open_requests: Iterable[ErasureRequest] = [r for rs in by_status.values() for r in rs]
    oldest_open = max((_hours(r.created_at, now) for r in open_requests), default=0.0)
    waiting = by_status.get(ErasureStatus.AWAITING_APPROVAL, [])
    oldest_waiting = max((_hours(awaiting_since(r), now) for r in waiting), default=0.0)
    return RequestAges(
        open_by_status={status: len(rs) for status, rs in by_status.items()},
        oldest_open_hours=oldest_open,
        oldest_awaiting_approval_hours=oldest_waiting,
    )
