"""CloudWatch Embedded Metric Format for the Spark jobs, which cannot use Powertools.

A job writes one EMF line (a JSON object with an `_aws` member) to its driver's stderr, which
both engines ship to CloudWatch Logs (EMR Serverless: the stack's Spark log group; Glue: its
continuous-logging group); CloudWatch extracts the metrics from any log group. Namespace and
dimension match the functions' Powertools metrics (Lethe, service=lethe), so the dashboard reads
both the same way. Only counts: never an object key, a dataset's rows or a subject id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

NAMESPACE = "Lethe"
SERVICE = "lethe"


def emf_line(counts: Mapping[str, int], now: datetime) -> str:
    """One EMF document (no newline) publishing each count under its name."""
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(now.timestamp() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": [["service"]],
                        "Metrics": [{"Name": name, "Unit": "Count"} for name in counts],
                    }
                ],
            },
            "service": SERVICE,
            **{name: int(value) for name, value in counts.items()},
        },
        sort_keys=True,
    )
