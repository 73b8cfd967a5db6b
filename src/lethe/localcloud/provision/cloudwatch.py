"""AWS::CloudWatch::Alarm and AWS::CloudWatch::Dashboard in moto's CloudWatch."""

from __future__ import annotations

import json
from typing import Any

from lethe.localcloud.provision.coercion import pick, tag_list
from lethe.localcloud.provision.stack import Created, ProvisionError, Stack, handles

_ALARM_PARAMETERS = (
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "OKActions",
    "AlarmActions",
    "InsufficientDataActions",
    "MetricName",
    "Namespace",
    "Statistic",
    "ExtendedStatistic",
    "Dimensions",
    "Period",
    "Unit",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "Threshold",
    "ComparisonOperator",
    "TreatMissingData",
    "EvaluateLowSampleCountPercentile",
    "Metrics",
    "ThresholdMetricId",
)


@handles("AWS::CloudWatch::Alarm")
def _alarm(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("AlarmName"), 255)
    params = {**pick(props, _ALARM_PARAMETERS), "AlarmName": name}
    if "Tags" in props:
        params["Tags"] = tag_list(props["Tags"])
    stack.call("cloudwatch", "put_metric_alarm", **params)
    stack.warn_unhandled(lid, props, {*_ALARM_PARAMETERS, "Tags"})
    return Created(name, {"Arn": stack.arn("cloudwatch", f"alarm:{name}")})


@handles("AWS::CloudWatch::Dashboard")
def _dashboard(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    """Stored by moto (nothing draws it locally); the body must at least be JSON, as on AWS."""
    name = stack.name(lid, props.get("DashboardName"), 255)
    body = props["DashboardBody"]
    try:
        json.loads(body)
    except (TypeError, ValueError) as error:
        raise ProvisionError(f"{lid}: DashboardBody is not JSON: {error}") from None
    stack.call("cloudwatch", "put_dashboard", DashboardName=name, DashboardBody=body)
    stack.warn_unhandled(lid, props, {"DashboardName", "DashboardBody"})
    return Created(name, {})
