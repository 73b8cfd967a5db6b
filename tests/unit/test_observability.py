"""The alarms and the dashboard of template.yaml (docs/OPERATIONS.md): each check returns the
offending resources, runs against the real template, and runs against a copy broken on purpose
to show that it can fail (as in test_template_policy).

Which metrics the code emits is read from the code: the literal names inside Powertools
`add_metric(...)` calls and `_COUNT_METRICS` tables of functions/*/app.py, the names
lethe_shared.erasure.request_ages publishes, the keys of the ingest job's `metric_counts` (EMF),
and the counts `lethe hold` publishes (lethe.commands.hold.HOLD_METRICS).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import pytest

from lethe.commands.hold import HOLD_METRICS
from lethe.localcloud.template import REPO_ROOT, TEMPLATE_PATH, load_template
from lethe_shared.erasure.request_ages import OPEN_STATUSES, RequestAges
from lethe_shared.erasure.requests import ErasureStatus
from tests.unit.template_rules import Template, first_of, properties_of, resources_of

pytestmark = pytest.mark.unit

TOPIC = {"Ref": "NotificationsTopic"}
ALARM = "AWS::CloudWatch::Alarm"
STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
UNSUCCESSFUL_EXECUTIONS = ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted")
# Alarms on a heartbeat: missing data is the failure they exist to report.
HEARTBEAT_ALARMS = {"ErasureMetricsMissingAlarm"}
# AWS metrics the dashboard may show, by namespace, and the dimension each is read by.
AWS_METRICS: dict[str, tuple[str, set[str]]] = {
    "AWS/States": ("StateMachineArn", {"ExecutionTime", *UNSUCCESSFUL_EXECUTIONS}),
    "AWS/SQS": (
        "QueueName",
        {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"},
    ),
    "AWS/Events": ("RuleName", {"TriggeredRules"}),
}
PARAMETER_ALARMS = {
    "ApprovalPendingAlarmHours": "OldestPendingApprovalAgeHours",
    "ErasureSlaHours": "OldestOpenErasureAgeHours",
}
ENGINE_EVENTS = {
    "UseEmrServerless": ("aws.emr-serverless", "EMR Serverless Job Run State Change"),
    "UseGlue": ("aws.glue", "Glue Job State Change"),
}


# ---------------------------------------------------------------------------------- helpers


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _alarm_metrics(props: dict[str, Any]) -> list[dict[str, Any]]:
    """Every metric an alarm reads: {Namespace, MetricName, Dimensions}."""
    if "MetricName" in props:
        return [{k: props.get(k) for k in ("Namespace", "MetricName", "Dimensions")}]
    return [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]


def _dimension(metric: dict[str, Any], name: str) -> Any:
    for dimension in metric.get("Dimensions") or []:
        if dimension.get("Name") == name:
            return dimension.get("Value")
    return None


def _alarm_name(props: dict[str, Any]) -> str:
    name = props.get("AlarmName")
    return name.get("Fn::Sub", "") if isinstance(name, dict) else str(name)


@cache
def emitted_lethe_metrics() -> frozenset[str]:
    names: set[str] = set()
    for app in sorted((REPO_ROOT / "functions").glob("*/app.py")):
        text = app.read_text()
        for call in re.findall(r"add_metric\((.*?)\)\n", text, flags=re.DOTALL):
            names |= set(re.findall(r'"([A-Z][A-Za-z_]+)"', call))
        for table in re.findall(r"_COUNT_METRICS = \{(.*?)\n\}", text, flags=re.DOTALL):
            names |= set(re.findall(r':\s*"([A-Z][A-Za-z_]+)"', table))
    names |= set(RequestAges().metrics())
    names |= set(HOLD_METRICS)  # `lethe hold add | remove` publish one count each
    ingest = (REPO_ROOT / "spark_jobs/lethe_jobs/ingest_core.py").read_text()
    body = ingest.split("def metric_counts", 1)[1].split("\n\n", 1)[0]
    names |= set(re.findall(r'"([A-Z][A-Za-z]+)":', body))
    return frozenset(names)


def _placeholders(text: str) -> str:
    """${Name} and ${Name.Attribute} of a Fn::Sub as __Name__ and __Name.Attribute__."""
    return re.sub(r"\$\{([^}]+)\}", r"__\1__", text)


def dashboard_metrics(template: Template) -> Iterator[tuple[str, list[Any]]]:
    for lid, resource in resources_of(template, "AWS::CloudWatch::Dashboard").items():
        body = properties_of(resource)["DashboardBody"]
        text = body["Fn::Sub"] if isinstance(body, dict) else body
        plain = re.sub(r":(\s*)\$\{([A-Za-z]+)\}", r':\1"__\2__"', text)  # bare numbers
        plain = _placeholders(plain)
        for widget in json.loads(plain)["widgets"]:
            for metric in widget.get("properties", {}).get("metrics", []):
                yield lid, metric


# ---------------------------------------------------------------------------------- checks


def state_machines_without_failure_alarm(template: Template) -> list[str]:
    """Each state machine: an alarm on its failed, timed out and aborted executions."""
    alarms = [properties_of(a) for a in resources_of(template, ALARM).values()]
    offenders = []
    for lid in resources_of(template, *STATE_MACHINE_TYPES):
        watched: set[str] = set()
        for props in alarms:
            for metric in _alarm_metrics(props):
                if metric.get("Namespace") == "AWS/States" and _dimension(
                    metric, "StateMachineArn"
                ) == {"Ref": lid}:
                    watched.add(metric.get("MetricName", ""))
        missing = [m for m in UNSUCCESSFUL_EXECUTIONS if m not in watched]
        if missing:
            offenders.append(f"{lid} (no alarm on {', '.join(missing)})")
    return offenders


def dead_letter_queues(template: Template) -> set[str]:
    """Queues named as a dead-letter target anywhere: redrive, rule or Lambda destinations."""
    found: set[str] = set()
    for key, value in _walk(template.get("Resources", {})):
        if key in ("deadLetterTargetArn", "DeadLetterConfig", "OnFailure"):
            for inner_key, inner in _walk({key: value}):
                if inner_key == "Fn::GetAtt":
                    target = inner if isinstance(inner, list) else str(inner).split(".")
                    found.add(target[0])
    queues = resources_of(template, "AWS::SQS::Queue")
    return {lid for lid in found if lid in queues}


def dead_letter_queues_without_depth_alarm(template: Template) -> list[str]:
    alarmed: set[str] = set()
    for resource in resources_of(template, ALARM).values():
        props = properties_of(resource)
        for metric in _alarm_metrics(props):
            queue = _dimension(metric, "QueueName")
            if (
                metric.get("Namespace") == "AWS/SQS"
                and metric.get("MetricName") == "ApproximateNumberOfMessagesVisible"
                and isinstance(queue, dict)
                and "Fn::GetAtt" in queue
                and props.get("ComparisonOperator") == "GreaterThanThreshold"
                and float(props.get("Threshold", -1)) == 0
            ):
                alarmed.add(queue["Fn::GetAtt"][0])
    queues = dead_letter_queues(template)
    return sorted(queues - alarmed) if queues else ["no dead-letter queue found"]


def alarms_not_to_the_topic(template: Template) -> list[str]:
    """Every alarm notifies the topic only, is named lethe-<stage>-..., treats missing data as
    fine (heartbeat alarms: as breaching) and says where the operator's guide is."""
    offenders = []
    for lid, resource in resources_of(template, ALARM).items():
        props = properties_of(resource)
        if props.get("AlarmActions") != [TOPIC]:
            offenders.append(f"{lid} (AlarmActions)")
        for key in ("OKActions", "InsufficientDataActions"):
            if key in props and props[key] != [TOPIC]:
                offenders.append(f"{lid} ({key})")
        if not _alarm_name(props).startswith("lethe-${Stage}-"):
            offenders.append(f"{lid} (AlarmName)")
        expected = "breaching" if lid in HEARTBEAT_ALARMS else "notBreaching"
        if props.get("TreatMissingData") != expected:
            offenders.append(f"{lid} (TreatMissingData)")
        if "docs/" not in str(props.get("AlarmDescription", "")):
            offenders.append(f"{lid} (AlarmDescription names no doc)")
    return offenders


def lethe_metrics_nobody_emits(template: Template) -> list[str]:
    """Dashboard widgets and alarms read only metrics the code emits, with its dimension."""
    emitted = emitted_lethe_metrics()
    offenders = []
    for lid, row in dashboard_metrics(template):
        if row[0] == "Lethe" and (row[1] not in emitted or row[2:4] != ["service", "lethe"]):
            offenders.append(f"{lid} ({row[1]})")
    for lid, resource in resources_of(template, ALARM).items():
        for metric in _alarm_metrics(properties_of(resource)):
            if metric.get("Namespace") == "Lethe" and (
                metric.get("MetricName") not in emitted
                or metric.get("Dimensions") != [{"Name": "service", "Value": "lethe"}]
            ):
                offenders.append(f"{lid} ({metric.get('MetricName')})")
    return offenders


def dashboard_aws_metrics_of_nothing(template: Template) -> list[str]:
    """AWS metrics on the dashboard: a known metric of a resource this template creates."""
    resources = template.get("Resources", {})
    rule_names = {
        _placeholders(properties_of(r)["Name"]["Fn::Sub"])
        for r in resources_of(template, "AWS::Events::Rule").values()
        if isinstance(properties_of(r).get("Name"), dict)
    }
    offenders = []
    for lid, metric in dashboard_metrics(template):
        namespace, name = metric[0], metric[1]
        if namespace == "Lethe":
            continue
        dimension, names = AWS_METRICS.get(namespace, ("", set()))
        value = metric[3] if len(metric) > 3 and metric[2] == dimension else None
        target = re.fullmatch(r"__([A-Za-z]+)(?:\.\w+)?__", str(value))
        known = (
            name in names
            and value is not None
            and ((target is not None and target.group(1) in resources) or value in rule_names)
        )
        if not known:
            offenders.append(f"{lid} ({namespace} {name} {value})")
    return offenders


def spark_failures_not_notified(template: Template) -> list[str]:
    """Per engine, a rule sends failed Spark job runs to the topic as a constant message (an
    event's error text may quote data: nothing of the event is forwarded)."""
    offenders = []
    rules = resources_of(template, "AWS::Events::Rule")
    for condition, (source, detail_type) in ENGINE_EVENTS.items():
        good = [
            lid
            for lid, rule in rules.items()
            if rule.get("Condition") == condition
            and properties_of(rule).get("EventPattern", {}).get("source") == [source]
            and properties_of(rule)["EventPattern"].get("detail-type") == [detail_type]
            and "FAILED" in properties_of(rule)["EventPattern"].get("detail", {}).get("state", [])
            and any(
                t.get("Arn") == TOPIC and "Input" in t and "InputPath" not in t
                for t in properties_of(rule).get("Targets", [])
            )
        ]
        if not good:
            offenders.append(f"{condition} ({detail_type})")
    return offenders


def request_age_alarms_missing(template: Template) -> list[str]:
    """An alarm on each request age, at the threshold its parameter sets; the parameters are
    validated numbers."""
    offenders = []
    parameters = template.get("Parameters", {})
    alarms = [properties_of(a) for a in resources_of(template, ALARM).values()]
    for parameter, metric_name in PARAMETER_ALARMS.items():
        spec = parameters.get(parameter, {})
        if spec.get("Type") != "Number" or "MinValue" not in spec or "MaxValue" not in spec:
            offenders.append(f"{parameter} (not a validated Number)")
        if not any(
            a.get("Threshold") == {"Ref": parameter}
            and a.get("MetricName") == metric_name
            and a.get("ComparisonOperator") == "GreaterThanThreshold"
            for a in alarms
        ):
            offenders.append(f"{parameter} (no alarm on {metric_name})")
    return offenders


CHECKS: dict[str, Callable[[Template], list[str]]] = {
    "state_machines_without_failure_alarm": state_machines_without_failure_alarm,
    "dead_letter_queues_without_depth_alarm": dead_letter_queues_without_depth_alarm,
    "alarms_not_to_the_topic": alarms_not_to_the_topic,
    "lethe_metrics_nobody_emits": lethe_metrics_nobody_emits,
    "dashboard_aws_metrics_of_nothing": dashboard_aws_metrics_of_nothing,
    "spark_failures_not_notified": spark_failures_not_notified,
    "request_age_alarms_missing": request_age_alarms_missing,
}


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE_PATH)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_template_keeps_its_alarms_and_dashboard(template: Template, check: str) -> None:
    offenders = CHECKS[check](template)
    assert offenders == [], f"{check}: {offenders}"


def test_the_template_has_the_dead_letter_queues_it_should(template: Template) -> None:
    assert dead_letter_queues(template) == {
        "ObjectEventsDeadLetterQueue",
        "WorkflowDeadLetterQueue",
    }


def test_the_dashboard_shows_each_kind_of_figure(template: Template) -> None:
    shown = {metric[1] for _, metric in dashboard_metrics(template)}
    for name in (
        "ObjectsIngested",
        "ObjectsQuarantined",
        "RowsWritten",
        "RowsQuarantined",
        "OpenErasureRequests_AWAITING_APPROVAL",
        "OldestPendingApprovalAgeHours",
        "ExecutionTime",
        "TriggeredRules",
        "ApproximateNumberOfMessagesVisible",
    ):
        assert name in shown, name


def test_emitted_metrics_are_read_from_the_code() -> None:
    emitted = emitted_lethe_metrics()
    # one of each source: a literal, a _COUNT_METRICS table, request ages, the ingest job's EMF
    for name in ("ErasuresCompleted", "ObjectEventsRecorded", "OldestOpenErasureAgeHours"):
        assert name in emitted, name
    assert {"RowsWritten", "RowsQuarantined", "ObjectsIngested"} <= emitted
    assert "NoSuchMetric" not in emitted


# ---------------------------------------------------------------------------------- breakers


def _alarm_on_state_machine(t: Template, lid: str) -> str:
    for alarm_id, alarm in resources_of(t, ALARM).items():
        for metric in _alarm_metrics(properties_of(alarm)):
            if _dimension(metric, "StateMachineArn") == {"Ref": lid}:
                return alarm_id
    raise AssertionError(f"no alarm on {lid}")


def _break_state_machine_alarm(t: Template) -> str:
    lid = first_of(t, *STATE_MACHINE_TYPES)
    del t["Resources"][_alarm_on_state_machine(t, lid)]
    return lid


def _break_dlq_alarm(t: Template) -> str:
    del t["Resources"]["WorkflowDeadLetterAlarm"]
    return "WorkflowDeadLetterQueue"


def _break_alarm_actions(t: Template) -> str:
    lid = first_of(t, ALARM)
    t["Resources"][lid]["Properties"]["OKActions"] = ["arn:aws:sns:us-east-1:123456789012:other"]
    return lid


def _break_lethe_metric(t: Template) -> str:
    lid = first_of(t, "AWS::CloudWatch::Dashboard")
    body = t["Resources"][lid]["Properties"]["DashboardBody"]
    body["Fn::Sub"] = body["Fn::Sub"].replace('"RowsWritten"', '"RowsWrittenTypo"', 1)
    return "RowsWrittenTypo"


def _break_aws_metric(t: Template) -> str:
    lid = first_of(t, "AWS::CloudWatch::Dashboard")
    body = t["Resources"][lid]["Properties"]["DashboardBody"]
    body["Fn::Sub"] = body["Fn::Sub"].replace("${WorkflowDeadLetterQueue.", "${GoneQueue.", 1)
    return "GoneQueue"


def _break_spark_rules(t: Template) -> str:
    for rule in resources_of(t, "AWS::Events::Rule").values():
        for target in properties_of(rule).get("Targets", []):
            if target.get("Arn") == TOPIC:
                target.pop("Input", None)
                target["InputPath"] = "$.detail"
    return "UseGlue"


def _break_request_ages(t: Template) -> str:
    t["Resources"]["ErasureSlaAlarm"]["Properties"]["Threshold"] = 720
    return "ErasureSlaHours"


BREAKERS: dict[str, Callable[[Template], str]] = {
    "state_machines_without_failure_alarm": _break_state_machine_alarm,
    "dead_letter_queues_without_depth_alarm": _break_dlq_alarm,
    "alarms_not_to_the_topic": _break_alarm_actions,
    "lethe_metrics_nobody_emits": _break_lethe_metric,
    "dashboard_aws_metrics_of_nothing": _break_aws_metric,
    "spark_failures_not_notified": _break_spark_rules,
    "request_age_alarms_missing": _break_request_ages,
}


def test_every_check_has_a_breaker() -> None:
    assert sorted(BREAKERS) == sorted(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_names_the_resource_a_broken_template_breaks(template: Template, check: str) -> None:
    broken = copy.deepcopy(template)
    culprit = BREAKERS[check](broken)
    offenders = CHECKS[check](broken)
    assert any(culprit in offender for offender in offenders), (check, culprit, offenders)


def test_a_treat_missing_data_change_is_caught(template: Template) -> None:
    broken = copy.deepcopy(template)
    broken["Resources"]["ErasureSlaAlarm"]["Properties"]["TreatMissingData"] = "breaching"
    assert "ErasureSlaAlarm (TreatMissingData)" in alarms_not_to_the_topic(broken)


def test_every_open_status_has_a_count_metric() -> None:
    figures = RequestAges(open_by_status={ErasureStatus.ERASING: 2}).metrics()
    assert {f"OpenErasureRequests_{s.value}" for s in OPEN_STATUSES} <= set(figures)
    assert figures["OpenErasureRequests"] == 2


# ------------------------------------------------- Spark failures reach the failed-executions alarm


def _states(definition: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str | None]]:
    """Every state by name, with the Next of the Map or Parallel state it runs inside (where an
    inner state that ends continues)."""
    found: dict[str, tuple[dict[str, Any], str | None]] = {}

    def collect(states: dict[str, Any], after: str | None) -> None:
        for name, state in states.items():
            found[name] = (state, after)
            outer_next = state.get("Next", after)
            if state["Type"] == "Map":
                inner = state.get("ItemProcessor") or state.get("Iterator")
                collect(inner["States"], outer_next)
            for branch in state.get("Branches", []):
                collect(branch["States"], outer_next)

    collect(definition["States"], None)
    return found


def _successors(state: dict[str, Any], after: str | None) -> list[str]:
    nexts = [state["Next"]] if "Next" in state else []
    nexts += [c["Next"] for c in state.get("Choices", [])]
    nexts += [state["Default"]] if "Default" in state else []
    nexts += [c["Next"] for c in state.get("Catch", [])]
    if state.get("End") and after is not None:
        nexts.append(after)
    return nexts


def spark_failures_not_failing_executions(definitions: dict[str, dict[str, Any]]) -> list[str]:
    """Each Spark task's Catch leads to a Fail state, so a failed run (after its retries) is an
    ExecutionsFailed datum the machine's alarm sees."""
    offenders = []
    for file, definition in definitions.items():
        states = _states(definition)
        for name, (state, _) in states.items():
            if "startJobRun" not in str(state.get("Resource", "")):
                continue
            for catch in state.get("Catch", [{"Next": None}]):
                seen: set[str] = set()
                todo = [catch["Next"]] if catch["Next"] else []
                while todo:
                    current = todo.pop()
                    if current in seen or current not in states:
                        continue
                    seen.add(current)
                    todo += _successors(*states[current])
                if not any(states[s][0]["Type"] == "Fail" for s in seen):
                    offenders.append(f"{file}: {name}")
    return offenders


def _definitions() -> dict[str, dict[str, Any]]:
    return {
        path.name: json.loads(path.read_text())
        for path in sorted((REPO_ROOT / "statemachines").glob("*.asl.json"))
    }


def test_every_spark_failure_fails_its_execution() -> None:
    definitions = _definitions()
    spark_tasks = [
        name
        for definition in definitions.values()
        for name, (state, _) in _states(definition).items()
        if "startJobRun" in str(state.get("Resource", ""))
    ]
    assert len(spark_tasks) >= 8  # both engines, four machines
    assert spark_failures_not_failing_executions(definitions) == []


def test_a_spark_failure_caught_into_success_is_named() -> None:
    definitions = copy.deepcopy(_definitions())
    reconcile = definitions["index_reconcile.asl.json"]
    reconcile["States"]["Reconcile On Glue"]["Catch"] = [
        {"ErrorEquals": ["States.ALL"], "Next": "Reconciled"}
    ]
    assert spark_failures_not_failing_executions(definitions) == [
        "index_reconcile.asl.json: Reconcile On Glue"
    ]
