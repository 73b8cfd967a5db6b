"""The sample events in events/: one or more for every function of template.yaml, each parsed by
the same model or parsing function its handler uses, and events/env.json in step with the
template's environment variables.

`sam local invoke <FunctionLogicalId> -e events/<file> --env-vars events/env.json` runs these
files; so do the handler tests. This module keeps the three in step: the template's functions,
the files (and events/README.md's table of them), and env.json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from lethe.localcloud.template import load_template
from lethe_shared.config import ENDPOINT_OVERRIDE, Settings, load_settings
from lethe_shared.erasure.approval_links import is_approval_id
from lethe_shared.erasure.approval_pages import parse_decision_form
from lethe_shared.erasure.requests import ErasureRequestError, ErasureStatus, parse_request_body
from lethe_shared.errors import DatasetValidationError, MalformedEventError
from lethe_shared.ingestion.object_events import EventKind
from tests.conftest import EVENTS_DIR, load_function_module

pytestmark = pytest.mark.lambda_runtime

RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE = "lethe-local-lake-123456789012-us-east-1"
RID = "er-20261122T100000Z-0a1b2c3d"
SAMPLE_SUBJECT = "u-SECRET-1001"  # the sample subject id of the erasure events

# Every event file and the function (template.yaml logical id) it is an event of.
EVENT_FUNCTIONS: dict[str, str] = {
    "object_created_raw.json": "ObjectEventsFunction",
    "object_created_raw_outside_dataset.json": "ObjectEventsFunction",
    "object_created_lake.json": "ObjectEventsFunction",
    "object_deleted_raw.json": "ObjectEventsFunction",
    "object_delete_marker_raw.json": "ObjectEventsFunction",
    "object_created_malformed.json": "ObjectEventsFunction",
    "object_events_batch.json": "ObjectEventsFunction",
    "ingestion_steps_mark_ingesting.json": "IngestionStepsFunction",
    "ingestion_steps_read_outcome.json": "IngestionStepsFunction",
    "ingestion_steps_mark_failed.json": "IngestionStepsFunction",
    "datasets_api_put.json": "DatasetsApiFunction",
    "datasets_api_put_invalid.json": "DatasetsApiFunction",
    "datasets_api_get.json": "DatasetsApiFunction",
    "index_object_request.json": "IndexObjectFunction",
    "erasure_api_post.json": "ErasureApiFunction",
    "erasure_api_post_invalid.json": "ErasureApiFunction",
    "erasure_api_get.json": "ErasureApiFunction",
    "erasure_api_list.json": "ErasureApiFunction",
    "erasure_api_cancel.json": "ErasureApiFunction",
    "erasure_api_resume.json": "ErasureApiFunction",
    "erasure_requested_event.json": "ErasureApiFunction",
    "erasure_steps_report.json": "ErasureStepsFunction",
    "erasure_steps_mark_failed.json": "ErasureStepsFunction",
    "approval_request_task.json": "ApprovalRequestFunction",
    "approval_request_resend.json": "ApprovalRequestFunction",
    "approval_page_get.json": "ApprovalPageFunction",
    "approval_page_post.json": "ApprovalPageFunction",
    "erasure_metrics_schedule.json": "ErasureMetricsFunction",
    "retention_steps_plan.json": "RetentionStepsFunction",
}
ENV_FILE = "env.json"


# ------------------------------------------------------------------------------ template


@cache
def _template() -> dict[str, Any]:
    return load_template()


def template_functions() -> dict[str, dict[str, Any]]:
    """AWS::Serverless::Function resources by logical id: their Properties."""
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in _template()["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def template_environment(logical_id: str) -> set[str]:
    """The variables a function gets: Globals.Function's, then its own (SAM merges them)."""
    globals_env = _template().get("Globals", {}).get("Function", {}).get("Environment", {})
    own_env = template_functions()[logical_id].get("Environment", {})
    return set(globals_env.get("Variables", {})) | set(own_env.get("Variables", {}))


def api_routes(logical_id: str) -> set[tuple[str, str]]:
    """(METHOD, path) of the function's `Type: Api` events."""
    events = template_functions()[logical_id].get("Events", {})
    return {
        (e["Properties"]["Method"].upper(), e["Properties"]["Path"])
        for e in events.values()
        if e["Type"] == "Api"
    }


def _load_handler(logical_id: str) -> ModuleType:
    """The function's app.py, loaded from the template's CodeUri as Lambda loads it."""
    code_uri = template_functions()[logical_id]["CodeUri"]  # e.g. functions/object_events/
    match = re.fullmatch(r"(?:\./)?functions/([a-z_]+)/?", code_uri)
    assert match, f"{logical_id}: unexpected CodeUri {code_uri!r}"
    module = load_function_module(match.group(1))
    assert module.__file__ is not None
    assert module.__file__.endswith(f"functions/{match.group(1)}/app.py")
    return module


# Loaded at collection, as the other handler tests do: importing a handler builds its Tracer,
# whose X-Ray emitter opens a UDP socket, and the unit tests themselves run without sockets.
HANDLERS = {logical_id: _load_handler(logical_id) for logical_id in sorted(template_functions())}


def handler_module(logical_id: str) -> ModuleType:
    return HANDLERS[logical_id]


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS_DIR / name).read_text())
    return event


# ------------------------------------------------------------------------------ mapping


def test_every_function_of_the_template_has_an_event() -> None:
    functions = set(template_functions())
    assert len(functions) == 10
    assert set(EVENT_FUNCTIONS.values()) == functions


def test_every_event_file_is_mapped_to_a_function() -> None:
    files = {path.name for path in EVENTS_DIR.glob("*.json")} - {ENV_FILE}
    assert files == set(EVENT_FUNCTIONS)
    assert not {p.name for p in EVENTS_DIR.iterdir()} - files - {ENV_FILE, "README.md"}


def _readme_table() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in (EVENTS_DIR / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and cells[0].endswith(".json"):
            assert cells[0] not in rows, f"{cells[0]} is listed twice in events/README.md"
            rows[cells[0]] = cells[1]
    return rows


def test_the_readme_table_agrees_with_the_mapping() -> None:
    table = _readme_table()
    assert table.pop(ENV_FILE) == "all"
    assert table == EVENT_FUNCTIONS


# ------------------------------------------------------------------------------ env.json


def test_env_json_gives_every_function_every_variable_of_the_template() -> None:
    env = load(ENV_FILE)
    assert set(env) == set(template_functions())
    for logical_id, variables in env.items():
        assert set(variables) == template_environment(logical_id), logical_id
        # LETHE_ENDPOINT_URL is empty, as deployed; `lethe local sam-env` writes the file that
        # sets it to the local cloud's endpoint
        assert variables.pop(ENDPOINT_OVERRIDE) == "", logical_id
        assert all(isinstance(value, str) and value for value in variables.values()), logical_id


def test_env_json_values_are_those_of_a_local_stage() -> None:
    env = load(ENV_FILE)
    for logical_id, variables in env.items():
        assert variables["STAGE"] == "local", logical_id
        for name, value in variables.items():
            if name.endswith(("_TABLE", "_BUCKET", "_STATE_MACHINE_ARN", "_FUNCTION_NAME")):
                assert "lethe-local-" in value, (logical_id, name, value)


def test_every_handler_settings_model_accepts_its_env_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """env.json's values pass each handler's own settings validation (lethe_shared.config)."""
    env = load(ENV_FILE)
    for logical_id, variables in env.items():
        module = handler_module(logical_id)
        (settings_model,) = [
            value
            for name, value in vars(module).items()
            if name.endswith("Settings")
            and isinstance(value, type)
            and issubclass(value, Settings)
            and value is not Settings
        ]
        with monkeypatch.context() as patch:
            for name, value in variables.items():
                patch.setenv(name, value)
            load_settings(settings_model)


# ------------------------------------------------------------------------------ parsing
# One check per file, keyed by file name: each parses the file with its handler's own model or
# parsing function and asserts what events/README.md says the file is.


def _object_events(event: dict[str, Any]) -> list[Any]:
    """What ObjectEventsFunction makes of each record: an ObjectEvent or the MalformedEventError
    that reports it in batchItemFailures."""
    app = handler_module("ObjectEventsFunction")
    parsed: list[Any] = []
    for raw in app.sqs_records(event):
        record = SQSRecord(raw)  # the BatchProcessor's record type (EventType.SQS)
        assert record.event_source_arn.endswith(":lethe-local-object-events")
        try:
            parsed.append(app.to_object_event(app.event_of_body(record.body)))
        except MalformedEventError as exc:
            parsed.append(exc)
    return parsed


def _summary(parsed: Any) -> tuple[str, ...]:
    if isinstance(parsed, MalformedEventError):
        return ("malformed", str(parsed).split(":")[0])
    return (parsed.kind.value, parsed.bucket, parsed.key)


CREATED, DELETED = EventKind.CREATED.value, EventKind.DELETED.value
REVIEWS_001 = "reviews/2026/11/22/reviews-001.jsonl"
LAKE_OBJECT = "reviews/review_date=2026-11-22/part-00000-3f2a.parquet"
OBJECT_EVENTS: dict[str, list[tuple[str, ...]]] = {
    "object_created_raw.json": [(CREATED, RAW, REVIEWS_001)],
    "object_created_raw_outside_dataset.json": [(CREATED, RAW, "scratch/notes.txt")],
    "object_created_lake.json": [(CREATED, LAKE, LAKE_OBJECT)],
    "object_deleted_raw.json": [(DELETED, RAW, REVIEWS_001)],
    "object_delete_marker_raw.json": [(DELETED, RAW, REVIEWS_001)],
    "object_events_batch.json": [
        (CREATED, RAW, REVIEWS_001),
        (CREATED, RAW, REVIEWS_001),
        (CREATED, RAW, "orders/2026/11/22/orders-001.csv"),
        (CREATED, LAKE, LAKE_OBJECT),
        (CREATED, RAW, "scratch/notes.txt"),
        ("malformed", "the record body is not JSON"),
    ],
}
DELETION_TYPES = {
    "object_deleted_raw.json": "Permanently Deleted",
    "object_delete_marker_raw.json": "Delete Marker Created",
}


def check_object_events(name: str) -> None:
    parsed = _object_events(load(name))
    assert [_summary(p) for p in parsed] == OBJECT_EVENTS[name]
    if name in DELETION_TYPES:
        assert parsed[0].deletion_type == DELETION_TYPES[name]
    if name == "object_events_batch.json":  # two versions of one key, then others
        assert parsed[0].version_id != parsed[1].version_id


def check_object_created_malformed(name: str) -> None:
    (parsed,) = _object_events(load(name))
    assert isinstance(parsed, MalformedEventError)
    assert str(parsed) == "not an S3 EventBridge event: detail.object.key: Field required"


def _api_event(name: str) -> APIGatewayProxyEvent:
    """An API Gateway proxy event, as the function's APIGatewayRestResolver reads it, whose
    method and resource are a `Type: Api` event of the function it is mapped to."""
    event = APIGatewayProxyEvent(load(name))
    route = (event.http_method, event.resource)
    assert route in api_routes(EVENT_FUNCTIONS[name]), f"{name}: {route} is not a route"
    assert event.request_context.stage == "local"
    return event


def check_datasets_api_put(name: str) -> None:
    app = handler_module("DatasetsApiFunction")
    event = _api_event(name)
    dataset = app.dataset_of_request(event.path_parameters["dataset_id"], event.body)
    assert dataset.dataset_id == "reviews"


def check_datasets_api_put_invalid(name: str) -> None:
    app = handler_module("DatasetsApiFunction")
    event = _api_event(name)
    with pytest.raises(DatasetValidationError) as raised:
        app.dataset_of_request(event.path_parameters["dataset_id"], event.body)
    assert raised.value.errors == [
        "schema[0].type: 'strng' is not a valid type (unknown type 'strng')"
    ]


def check_datasets_api_get(name: str) -> None:
    event = _api_event(name)
    assert (event.http_method, event.path_parameters) == ("GET", {"dataset_id": "reviews"})
    assert event.body is None


def check_erasure_api_post(name: str) -> None:
    app = handler_module("ErasureApiFunction")
    assert not app.is_request_event(load(name))
    event = _api_event(name)
    body = parse_request_body(app.document_of_body(event.body))
    assert body.subject_ids == [SAMPLE_SUBJECT]


def check_erasure_api_post_invalid(name: str) -> None:
    app = handler_module("ErasureApiFunction")
    event = _api_event(name)
    with pytest.raises(ErasureRequestError) as raised:
        parse_request_body(app.document_of_body(event.body))
    assert raised.value.problems == [
        "subject_ids: Value error, subject_ids[1] must have 1 to 512 characters",
        "subject_keys: Value error, subject_keys[0] names no column",
        "requested_by: Field required",
    ]
    assert SAMPLE_SUBJECT not in str(raised.value)  # fields are named, values never echoed


def check_erasure_api_get(name: str) -> None:
    assert _api_event(name).path_parameters == {"request_id": RID}


def check_erasure_api_list(name: str) -> None:
    app = handler_module("ErasureApiFunction")
    status = app.status_filter(_api_event(name).get_query_string_value("status"))
    assert status is ErasureStatus.RECEIVED


def check_erasure_api_cancel(name: str) -> None:
    app = handler_module("ErasureApiFunction")
    event = _api_event(name)
    assert event.path_parameters == {"request_id": RID}
    caller = event.request_context.identity.user_arn or "unknown caller"
    assert app.canceller_of(event.body, caller)


def check_erasure_api_resume(name: str) -> None:
    event = _api_event(name)
    assert event.path_parameters == {"request_id": RID}
    assert event.path.endswith(f"/{RID}/resume")
    assert event.http_method == "POST"
    assert event.request_context.identity.user_arn  # the IAM caller a resume is checked against


def check_erasure_requested_event(name: str) -> None:
    app = handler_module("ErasureApiFunction")
    event = load(name)
    assert app.is_request_event(event)
    detail, key = app.request_of_event(event)
    assert key == event["id"]
    body = parse_request_body(detail)
    assert (body.subject_ids, body.requested_by) == ([SAMPLE_SUBJECT], "privacy@example.com")


def _ingestion_step(name: str) -> Any:
    """The step as IngestionStepsFunction validates it; its objects are raw versions."""
    step = handler_module("IngestionStepsFunction").StepEvent.validate_python(load(name))
    versions = step.objects if hasattr(step, "objects") else [step.object]
    assert all(v.object_url.startswith(f"s3://{RAW}/") for v in versions)
    assert ":execution:lethe-local-ingestion:" in step.execution
    return step


def check_ingestion_steps_mark_ingesting(name: str) -> None:
    step = _ingestion_step(name)
    assert (step.step, len(step.objects)) == ("mark_ingesting", 2)


def check_ingestion_steps_read_outcome(name: str) -> None:
    step = _ingestion_step(name)
    assert (step.step, step.object.version_id) == (
        "read_outcome",
        "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
    )


def check_ingestion_steps_mark_failed(name: str) -> None:
    step = _ingestion_step(name)
    assert (step.step, len(step.objects)) == ("mark_failed", 2)
    assert step.error.startswith("States.TaskFailed: ")


def check_erasure_steps_report(name: str) -> None:
    step = parse(event=load(name), model=handler_module("ErasureStepsFunction").StepEvent)
    assert (step.step, step.request_id) == ("report", RID)


def check_erasure_steps_mark_failed(name: str) -> None:
    step = parse(event=load(name), model=handler_module("ErasureStepsFunction").StepEvent)
    assert (step.step, step.request_id, step.status) == ("mark", RID, ErasureStatus.FAILED)
    assert step.error is not None
    assert step.error.Error == "States.TaskFailed"


def check_approval_request_task(name: str) -> None:
    task = parse(event=load(name), model=handler_module("ApprovalRequestFunction").ApprovalTask)
    assert task.request_id == RID
    assert task.task_token


def check_approval_request_resend(name: str) -> None:
    """`lethe erasure resend` invokes the function with this event (functions/approval_request)."""
    app = handler_module("ApprovalRequestFunction")
    task = parse(event=load(name), model=app.ResendTask)
    assert (task.action, task.request_id, task.approver) == (
        "resend",
        RID,
        "approver@example.com",
    )
    assert task.approver in load(ENV_FILE)["ApprovalRequestFunction"]["APPROVER_EMAILS"]


def check_retention_steps_plan(name: str) -> None:
    step = parse(event=load(name), model=handler_module("RetentionStepsFunction").StepEvent)
    assert (step.step, step.dataset_ids) == ("plan", ("orders",))


def check_erasure_metrics_schedule(name: str) -> None:
    """The handler reads nothing of the event: what matters is that it is the EventBridge
    schedule the template gives the function (Stage=local)."""
    event = parse(event=load(name), model=EventBridgeModel)
    assert (event.source, event.detail_type) == ("aws.events", "Scheduled Event")
    (schedule,) = [
        e["Properties"]
        for e in template_functions()["ErasureMetricsFunction"]["Events"].values()
        if e["Type"] == "Schedule"
    ]
    rule = schedule["Name"]["Fn::Sub"].replace("${Stage}", "local")
    assert event.resources == [f"arn:aws:events:us-east-1:123456789012:rule/{rule}"]


def check_index_object_request(name: str) -> None:
    app = handler_module("IndexObjectFunction")
    request = parse(event=load(name), model=app.IndexObjectRequest)
    assert (request.dataset_id, request.bucket) == ("reviews", LAKE)
    # the handler indexes only objects of its LAKE_BUCKET
    assert request.bucket == load(ENV_FILE)["IndexObjectFunction"]["LAKE_BUCKET"]


def _approval_request(name: str) -> Any:
    event = _api_event(name)
    app = handler_module("ApprovalPageFunction")
    request = app.http_request_of(event, event.path_parameters["approval_id"])
    assert is_approval_id(request.approval_id)
    assert set(request.query) == {"e", "s"}
    return request


def check_approval_page_get(name: str) -> None:
    assert _approval_request(name).body is None


def check_approval_page_post(name: str) -> None:
    request = _approval_request(name)
    assert request.cookie
    assert request.cookie.startswith("lethe_csrf=")
    form = parse_decision_form(request.body, request.is_base64, content_type=request.content_type)
    assert form.decision == "approve"


CHECKS: dict[str, Callable[[str], None]] = {
    **{name: check_object_events for name in OBJECT_EVENTS},
    "object_created_malformed.json": check_object_created_malformed,
    "datasets_api_put.json": check_datasets_api_put,
    "datasets_api_put_invalid.json": check_datasets_api_put_invalid,
    "datasets_api_get.json": check_datasets_api_get,
    "index_object_request.json": check_index_object_request,
    "ingestion_steps_mark_ingesting.json": check_ingestion_steps_mark_ingesting,
    "ingestion_steps_read_outcome.json": check_ingestion_steps_read_outcome,
    "ingestion_steps_mark_failed.json": check_ingestion_steps_mark_failed,
    "erasure_api_post.json": check_erasure_api_post,
    "erasure_api_post_invalid.json": check_erasure_api_post_invalid,
    "erasure_api_get.json": check_erasure_api_get,
    "erasure_api_list.json": check_erasure_api_list,
    "erasure_api_cancel.json": check_erasure_api_cancel,
    "erasure_api_resume.json": check_erasure_api_resume,
    "erasure_requested_event.json": check_erasure_requested_event,
    "erasure_steps_report.json": check_erasure_steps_report,
    "erasure_steps_mark_failed.json": check_erasure_steps_mark_failed,
    "approval_request_task.json": check_approval_request_task,
    "approval_request_resend.json": check_approval_request_resend,
    "approval_page_get.json": check_approval_page_get,
    "approval_page_post.json": check_approval_page_post,
    "erasure_metrics_schedule.json": check_erasure_metrics_schedule,
    "retention_steps_plan.json": check_retention_steps_plan,
}
REJECTED = {
    "object_created_malformed.json",
    "datasets_api_put_invalid.json",
    "erasure_api_post_invalid.json",
}


def test_every_event_file_has_a_check() -> None:
    assert set(CHECKS) == set(EVENT_FUNCTIONS)
    assert {n for n in EVENT_FUNCTIONS if n.endswith("_invalid.json")} <= REJECTED


@pytest.mark.parametrize("name", sorted(EVENT_FUNCTIONS))
def test_event_parses_with_its_handlers_model(name: str) -> None:
    CHECKS[name](name)
