"""ErasureMetricsFunction: the open erasure requests as CloudWatch metrics, every five minutes.

Invoked by an EventBridge schedule (the `Measure` event of ErasureMetricsFunction in
template.yaml; events/erasure_metrics_schedule.json). Reads the open requests through the
`by_status` index of ErasureRequestsTable and publishes, with Powertools Metrics (namespace
Lethe, dimension service=lethe): OpenErasureRequests and OpenErasureRequests_<STATUS> per open
status, OldestOpenErasureAgeHours (alarm: ErasureSlaHours) and OldestPendingApprovalAgeHours
(alarm: ApprovalPendingAlarmHours). Counts and ages only: no request id, no subject hash.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.config import Settings
from lethe_shared.erasure.request_ages import measure
from lethe_shared.erasure.requests import DynamoErasureRequests

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class ErasureMetricsSettings(Settings):
    requests_table: str = Field(alias="ERASURE_REQUESTS_TABLE", min_length=1)


def _build(settings: ErasureMetricsSettings, aws: Aws) -> DynamoErasureRequests:
    return DynamoErasureRequests(aws.table(settings.requests_table))


_requests = wiring(ErasureMetricsSettings, _build)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, float]:
    figures = measure(_requests(), datetime.now(UTC)).metrics()
    for name, value in figures.items():
        unit = MetricUnit.Count if name.startswith("OpenErasureRequests") else MetricUnit.NoUnit
        metrics.add_metric(name=name, unit=unit, value=value)
    logger.info("open erasure requests measured", extra=figures)
    return figures
