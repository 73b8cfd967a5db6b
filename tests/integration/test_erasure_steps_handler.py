"""ErasureStepsFunction against moto, driven by the workflow step events in events/: the report
step reads the index and S3 and freezes the report in the reports bucket; the mark step records
a caught failure and returns the notification the workflow publishes; the index update step
removes the entries erasure made untrue and records the ones of a version it never saw."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    DynamoObjectCatalog,
    IngestionRecord,
    ObjectStatus,
    Zone,
)
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.authority import ErasureNotApprovedError
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureStatus,
    RequestNotFoundError,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from lethe_shared.subject_hashing.shown_keys import KeyNamer
from tests.conftest import REPO_ROOT, FakeLambdaContext, load_function_module
from tests.integration.conftest import LAKE, RAW, create_table_from_template

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
SECRET = "u-SECRET-1001"
HASH_KEY = b"h" * 64
KEY = key_fingerprint(HASH_KEY)  # the requests' key, and the key the datasets were indexed with
RID = "er-20261122T100000Z-0a1b2c3d"  # events/erasure_steps_*.json
REPORTS = "lethe-local-reports-123456789012-us-east-1"
LAKE_KEY = "reviews/review_date=2026-11-01/part-0.parquet"
RAW_KEY = "reviews/2026/11/01/upload.jsonl"


@pytest.fixture
def requests(lethe_tables: dict[str, Any], lethe_buckets: Callable[..., None]) -> Any:
    lethe_buckets()
    s3 = boto3.client("s3")
    # as template.yaml's ReportsBucket: versioned, with Object Lock (erasure/ is written locked)
    s3.create_bucket(Bucket=REPORTS, ObjectLockEnabledForBucket=True)
    s3.put_bucket_versioning(Bucket=REPORTS, VersioningConfiguration={"Status": "Enabled"})
    table = create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    requests = DynamoErasureRequests(table)
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 4711", "requested_by": "privacy@example.com"}
    )
    requests.create(new_request(RID, body, hash_subjects(body, HASH_KEY, []), key_fingerprint=KEY))
    return requests


@pytest.fixture
def app(requests: Any, handler_env: Callable[[str], None]) -> Any:
    handler_env("ErasureStepsFunction")
    # the subject hash key (events/env.json's HASH_KEY_SECRET_ARN): the requests' key is current
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=HASH_KEY.decode()
    )
    return load_function_module("erasure_steps")


def _rotate_key(secret: bytes) -> str:
    """An operator puts a new value in the key's secret; its fingerprint."""
    boto3.client("secretsmanager").put_secret_value(
        SecretId="lethe-local-subject-hash-key", SecretString=secret.decode()
    )
    return key_fingerprint(secret)


@pytest.fixture(autouse=True)
def _logs_hold_no_raw_id(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    caplog.set_level(logging.INFO)  # what Lambda logs
    yield
    out, err = capsys.readouterr()
    records = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for text in (out, err, caplog.text, records):
        assert SECRET.casefold() not in text.casefold()


def index_entry(url: str, zone: Zone, rows: int, version_id: str, etag: str) -> IndexEntry:
    return IndexEntry(
        subject_hash=hash_of_id(HASH_KEY, SECRET),
        object_url=url,
        dataset_id="reviews",
        zone=zone,
        format="parquet" if zone is Zone.LAKE else "jsonl",
        rows=rows,
        version_id=version_id,
        etag=etag,
    )


def test_the_report_step_freezes_the_report_of_the_indexed_objects(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given a lake object with two versions holding the subject (3 rows in the current one) and
    # a raw object with one version (1 row), both indexed
    s3 = boto3.client("s3")
    lake_v1 = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"older rows")["VersionId"]
    lake_v2 = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"current rows")
    raw_v1 = s3.put_object(Bucket=RAW, Key=RAW_KEY, Body=b"raw rows")
    index = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    lake_url, raw_url = s3_url(LAKE, LAKE_KEY), s3_url(RAW, RAW_KEY)
    index.replace_object(
        lake_url,
        [index_entry(lake_url, Zone.LAKE, 3, lake_v2["VersionId"], lake_v2["ETag"].strip('"'))],
    )
    index.replace_object(
        raw_url, [index_entry(raw_url, Zone.RAW, 1, raw_v1["VersionId"], raw_v1["ETag"].strip('"'))]
    )

    # When the workflow runs the report step
    result = app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())

    # Then the manifest in the reports bucket names both objects and all three versions, and
    # the step returns its hash
    manifest_body = s3.get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")["Body"].read()
    # locked as env.json's EVIDENCE_* settings say (lethe_shared.erasure.evidence)
    locked = s3.head_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")
    assert locked["ObjectLockMode"] == "GOVERNANCE"
    assert result == {
        "request_id": RID,
        "objects": 2,
        "sha256": hashlib.sha256(manifest_body).hexdigest(),
    }
    manifest = json.loads(manifest_body)
    assert [
        (o["object_url"], o["zone"], o["expected_rows"], [v["version_id"] for v in o["versions"]])
        for o in manifest["objects"]
    ] == [
        (lake_url, "lake", 3, [lake_v2["VersionId"], lake_v1]),
        (raw_url, "raw", 1, [raw_v1["VersionId"]]),
    ]
    listed = s3.list_objects_v2(Bucket=REPORTS, Prefix=f"erasure/{RID}/")["Contents"]
    assert sorted(o["Key"] for o in listed) == [
        f"erasure/{RID}/manifest.json",
        f"erasure/{RID}/summary.html",
        f"erasure/{RID}/summary.txt",
    ]
    for item in listed:
        text = s3.get_object(Bucket=REPORTS, Key=item["Key"])["Body"].read().decode()
        assert SECRET.casefold() not in text.casefold()
    record = requests.get(RID)
    assert record.status is ErasureStatus.REPORTED
    assert (record.report["objects"], record.report["versions"], record.report["rows"]) == (2, 3, 4)
    assert record.report["manifest_sha256"] == result["sha256"]
    assert record.report["manifest_url"] == f"s3://{REPORTS}/erasure/{RID}/manifest.json"


def test_the_report_step_pins_the_request_s_key_and_each_dataset_s_definition(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given a request filed with HASH_KEY (its record names the key's fingerprint), reviews
    # registered, and the subject indexed in a raw object with the entry's pins
    requests.update(RID, {"key_fingerprint": key_fingerprint(HASH_KEY)})
    _register_reviews(lethe_tables)
    registration = DynamoDatasetRegistry(lethe_tables["DatasetsTable"]).registration("reviews")
    assert registration is not None
    raw = boto3.client("s3").put_object(Bucket=RAW, Key=RAW_KEY, Body=b"raw rows")
    raw_url = s3_url(RAW, RAW_KEY)
    entry = index_entry(raw_url, Zone.RAW, 1, raw["VersionId"], raw["ETag"].strip('"'))
    pinned = entry.model_copy(
        update={
            "matching_fingerprint": registration.matching_fingerprint,
            "key_fingerprint": key_fingerprint(HASH_KEY),
        }
    )
    DynamoSubjectIndex(lethe_tables["SubjectIndexTable"]).replace_object(raw_url, [pinned])

    # When the workflow runs the report step
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())

    # Then the frozen report records the key, the dataset's generation and fingerprint as the
    # registry holds them, and the entry's pins (what the erase job checks: erasure.pins)
    body = boto3.client("s3").get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")
    manifest = json.loads(body["Body"].read())
    assert manifest["key_fingerprint"] == key_fingerprint(HASH_KEY)
    assert manifest["dataset_pins"] == [
        {
            "dataset_id": "reviews",
            "matching_generation": registration.matching_generation,
            "matching_fingerprint": registration.matching_fingerprint,
        }
    ]
    (item,) = manifest["objects"]
    assert [(s["matching_fingerprint"], s["key_fingerprint"]) for s in item["subjects"]] == [
        (registration.matching_fingerprint, key_fingerprint(HASH_KEY))
    ]


def test_the_report_step_of_an_unknown_request_fails(app: Any, load_event: Event) -> None:
    event = {
        **load_event("erasure_steps_report.json"),
        "request_id": "er-20261122T100000Z-ffffffff",
    }

    with pytest.raises(RequestNotFoundError):
        app.handler(event, FakeLambdaContext())


def test_the_mark_failed_step_records_the_caught_error_and_notifies_it(
    app: Any, requests: Any, load_event: Event
) -> None:
    """The state machine's Mark Failed state sends the caught error as {"Error", "Cause"}; the
    record keeps it as {"error", "cause"} and the notification names the error."""
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow")

    note = app.handler(load_event("erasure_steps_mark_failed.json"), FakeLambdaContext())

    assert (note["request_id"], note["status"], note["outcome"]) == (RID, "FAILED", "FAILED")
    record = requests.get(RID)
    assert record.status is ErasureStatus.FAILED
    assert record.error == {
        "error": "States.TaskFailed",
        "cause": "the manifest is not the report that was approved",
    }
    assert note["error"] == "States.TaskFailed"


# a lake key of a dataset partitioned by its subject column: the subject id is in the key
PARTITIONED_URL = f"s3://{LAKE}/visits/user_id={SECRET}/part-0123456789abcdef.parquet"


def test_the_mark_failed_step_keeps_a_cause_scrubbed_of_keys_and_values(
    app: Any, requests: Any, load_event: Event
) -> None:
    """Issue 19: Step Functions hands Mark Failed the failed task's error text (a Lambda's error
    document, a job's message) which can name a partition-key subject id: the record (kept
    forever, shown by the API) keeps it scrubbed."""
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow")
    cause = json.dumps(
        {"errorMessage": f"{PARTITIONED_URL} changed 5 times while it was being erased",
         "errorType": "ConcurrentWritesError", "stackTrace": [f"  ValueError: '{SECRET}'"]}
    )  # fmt: skip
    event = load_event("erasure_steps_mark_failed.json")
    event["error"] = {"Error": "ConcurrentWritesError", "Cause": cause}

    app.handler(event, FakeLambdaContext())

    record = requests.get(RID)
    assert record.status is ErasureStatus.FAILED
    assert SECRET not in json.dumps(record.error)
    assert json.loads(record.error["cause"])["errorMessage"] == (
        f"s3://{LAKE}/visits/… changed 5 times while it was being erased"
    )
    assert record.error["error"] == "ConcurrentWritesError"


@pytest.mark.parametrize(
    "event",
    [
        {"step": "notification", "request_id": PARTITIONED_URL},  # RequestNotFoundError
        {"step": SECRET, "request_id": RID},  # pydantic's ValidationError quotes the input
    ],
    ids=["a-key-in-the-message", "a-value-in-the-message"],
)
def test_an_error_leaves_the_handler_scrubbed_with_its_type(
    app: Any, requests: Any, event: dict[str, Any]
) -> None:
    """Issue 19: what the handler raises is what Step Functions keeps (errorType, errorMessage):
    a real error naming a partition-key subject id leaves without it, under its own name (the
    state machine catches errors by name)."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is asserted by name
        app.handler(event, FakeLambdaContext())

    assert SECRET not in str(raised.value)
    assert SECRET not in repr(raised.value.args)
    expected = "RequestNotFoundError" if event["step"] == "notification" else "ValidationError"
    assert type(raised.value).__name__ == expected


def test_the_notification_step_reads_the_request_as_it_is(
    app: Any, requests: Any, load_event: Event
) -> None:
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow")
    event = {"step": "notification", "request_id": RID}

    note = app.handler(event, FakeLambdaContext())

    assert {
        k: note[k] for k in ("request_id", "status", "outcome", "subject_count", "objects")
    } == {
        "request_id": RID,
        "status": "REPORTED",
        "outcome": "REPORTED",
        "subject_count": 1,
        "objects": 0,
    }
    assert hash_of_id(HASH_KEY, SECRET) not in json.dumps(note)


def _erase_results(*objects: dict[str, Any], manifest_sha256: str = "ab" * 32) -> bytes:
    """results.json of the erase job (over the report of `manifest_sha256`: the approved one's
    where the certify step reads it)."""
    return json.dumps(
        {"request_id": RID, "manifest_sha256": manifest_sha256, "correlation_id": RID,
         "finished_at": "2026-11-22T12:00:00+00:00", "objects": list(objects)}
    ).encode()  # fmt: skip


def test_the_update_index_step_keeps_a_later_version_s_entries_and_records_them(
    app: Any, requests: Any, lethe_tables: dict[str, Any]
) -> None:
    # Given the lake key erasure rewrote (it read `read`, wrote `after`, purged `read`), then a
    # producer's `later` version indexed for the subject before the index update; and the raw
    # key erasure deleted, still indexed for the subject and another one
    s3 = boto3.client("s3")
    read = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"rows of the subject")
    after = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"rows of others")
    s3.delete_object(Bucket=LAKE, Key=LAKE_KEY, VersionId=read["VersionId"])
    later = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"a producer's rows")
    raw = s3.put_object(Bucket=RAW, Key=RAW_KEY, Body=b"raw rows")
    s3.delete_object(Bucket=RAW, Key=RAW_KEY, VersionId=raw["VersionId"])
    lake_url, raw_url = s3_url(LAKE, LAKE_KEY), s3_url(RAW, RAW_KEY)
    index = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    subject = hash_of_id(HASH_KEY, SECRET)
    raw_entry = index_entry(raw_url, Zone.RAW, 1, raw["VersionId"], raw["ETag"].strip('"'))
    index.replace_object(
        raw_url, [raw_entry, raw_entry.model_copy(update={"subject_hash": "f" * 64})]
    )
    index.replace_object(
        lake_url,
        [index_entry(lake_url, Zone.LAKE, 2, later["VersionId"], later["ETag"].strip('"'))],
    )

    def ref(answer: dict[str, Any]) -> dict[str, str]:
        return {"version_id": answer["VersionId"], "etag": answer["ETag"].strip('"')}

    s3.put_object(
        Bucket=REPORTS,
        Key=f"erasure/{RID}/results.json",
        Body=_erase_results(
            {"object_url": lake_url, "dataset_id": "reviews", "zone": "lake",
             "action": "rewritten", "versions_before": [ref(read)], "version_after": ref(after),
             "rows_before": 3, "rows_removed": 1, "rows_after": 2, "versions_purged": 1},
            {"object_url": raw_url, "dataset_id": "reviews", "zone": "raw", "action": "deleted",
             "versions_before": [ref(raw)], "version_after": None, "rows_before": 1,
             "rows_removed": 1, "rows_after": 0, "versions_purged": 1},
        ),
    )  # fmt: skip
    for status in ("REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(RID, ErasureStatus(status), by="test")
    event = {"step": "update_index", "request_id": RID}

    # When the workflow runs the index update, twice (a retry)
    first = app.handler(event, FakeLambdaContext())
    second = app.handler(event, FakeLambdaContext())

    # Then the raw key's entries go, the later version's entry stays and is named, the same
    # both times, on the step's result and on the request
    kept = [{"object_url": lake_url, "version_id": later["VersionId"], "dataset_id": "reviews",
             "rows": 2, "reason": "later_version"}]  # fmt: skip
    # the result (execution history) and the record name it by its shown key (no dataset is
    # registered here: the whole key hashed), the document by the real one
    shown = [{**kept[0], "object_url": KeyNamer(HASH_KEY, lambda _: None).url(lake_url)}]
    assert (first["entries_removed"], first["entries_kept"], first["kept"]) == (2, 1, shown)
    assert (second["entries_removed"], second["entries_kept"], second["kept"]) == (0, 1, shown)
    assert [(e.object_url, e.version_id) for e in index.lookup(subject)] == [
        (lake_url, later["VersionId"])
    ]
    assert index.subjects_of(raw_url) == set()
    record = requests.get(RID)
    assert record.status is ErasureStatus.ERASING
    assert (record.model_extra or {})["index"]["kept"] == shown
    document = s3.get_object(Bucket=REPORTS, Key=f"erasure/{RID}/index_update.json")
    text = document["Body"].read().decode()
    assert json.loads(text)["kept"] == kept
    assert subject not in text
    assert subject not in json.dumps(first)


# ------------------------------------------------------- the watermark and the report's scope

QUEUE = "lethe-local-object-events"  # events/env.json's OBJECT_EVENTS_QUEUE_URL


def _register_reviews(lethe_tables: dict[str, Any]) -> None:
    document = json.loads((REPO_ROOT / "samples/reviews.dataset.json").read_text())
    DynamoDatasetRegistry(lethe_tables["DatasetsTable"]).register(
        parse_dataset(document), key_fingerprint=KEY
    )


def _catalogued(
    lethe_tables: dict[str, Any], key: str, version: str, status: ObjectStatus, sequencer: int
) -> DynamoObjectCatalog:
    """The catalog item of a raw upload made a minute before the request."""
    catalog = DynamoObjectCatalog(lethe_tables["ObjectCatalogTable"])
    written = datetime.now(UTC) - timedelta(minutes=1)
    catalog.put_if_newer(
        CatalogItem(
            bucket=RAW, key=key, version_id=version, zone=Zone.RAW, status=status,
            sequencer=f"{sequencer:032X}", dataset_id="reviews",
            event_time=written.isoformat(),
        )
    )  # fmt: skip
    return catalog


def test_the_watch_ingestion_step_holds_the_report_while_an_older_upload_is_ingested(
    app: Any, requests: Any, lethe_tables: dict[str, Any]
) -> None:
    # Given an upload of the reviews dataset, made before the request, still INGESTING
    _register_reviews(lethe_tables)
    queue = boto3.client("sqs").create_queue(QueueName=QUEUE)["QueueUrl"]
    key = "reviews/2026/11/22/last.csv"
    version = boto3.client("s3").put_object(Bucket=RAW, Key=key, Body=b"x")["VersionId"]
    catalog = _catalogued(lethe_tables, key, version, ObjectStatus.INGESTING, 1)
    event = {
        "step": "watch_ingestion", "request_id": RID, "waited_seconds": 0,
        "max_wait_seconds": 600, "settle_seconds": 0,
    }  # fmt: skip

    # Then the step (through the catalog's by_dataset_status index) says wait, and the record
    # says what for, in counts
    assert app.handler(event, FakeLambdaContext()) == {
        "request_id": RID, "settled": False, "in_flight": 1,
    }  # fmt: skip
    wait = requests.get(RID).model_dump(mode="json")["ingestion_wait"]
    assert (wait["in_flight"], wait["settled"]) == ({"reviews": 1}, False)
    assert key not in json.dumps(wait)

    # When its ingestion finishes, the next poll settles (the object events queue is empty)
    catalog.record_ingestion(
        s3_url(RAW, key), version,
        IngestionRecord(
            ObjectStatus.INGESTED, 1, 1, 0, [], None, "ingest-1", datetime.now(UTC)
        ),
    )  # fmt: skip
    assert app.handler(event | {"waited_seconds": 30}, FakeLambdaContext())["settled"] is True
    # an event waiting in the queue (an upload not catalogued yet) holds a young request
    boto3.client("sqs").send_message(QueueUrl=queue, MessageBody="{}")
    young = event | {"settle_seconds": 3600}
    assert app.handler(young, FakeLambdaContext())["settled"] is False


def test_the_report_step_searches_a_failed_upload_and_names_one_in_flight(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    _register_reviews(lethe_tables)
    s3 = boto3.client("s3")
    failed_key, flying_key = "reviews/2026/11/22/failed.csv", "reviews/2026/11/22/last.csv"
    failed = s3.put_object(Bucket=RAW, Key=failed_key, Body=b"rows")["VersionId"]
    flying = s3.put_object(Bucket=RAW, Key=flying_key, Body=b"rows")["VersionId"]
    _catalogued(lethe_tables, failed_key, failed, ObjectStatus.FAILED, 1)
    _catalogued(lethe_tables, flying_key, flying, ObjectStatus.INGESTING, 2)

    result = app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())

    body = s3.get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")["Body"].read()
    manifest = json.loads(body)
    assert result["objects"] == 1
    assert [(o["object_url"], o["zone"]) for o in manifest["objects"]] == [
        (s3_url(RAW, failed_key), "raw")
    ]
    assert [(g["object_url"], g["version_id"], g["reason"]) for g in manifest["not_searched"]] == [
        (s3_url(RAW, flying_key), flying, "ingestion_in_flight")
    ]
    summary = s3.get_object(Bucket=REPORTS, Key=f"erasure/{RID}/summary.txt")["Body"].read()
    assert b"NOT SEARCHED" in summary
    assert requests.get(RID).report["not_searched"] == [
        {"dataset_id": "reviews", "reason": "ingestion_in_flight", "versions": 1}
    ]


def test_a_pending_reindex_holds_the_watch_step_and_is_named_by_the_report_step(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given reviews registered, then redefined (another subject column): matching generation 2,
    # its index still generation 1's (a re-index pending), in the datasets table
    _register_reviews(lethe_tables)
    document = json.loads((REPO_ROOT / "samples/reviews.dataset.json").read_text())
    registry = DynamoDatasetRegistry(lethe_tables["DatasetsTable"])
    registry.put(parse_dataset(document | {"subject_columns": ["text"]}))
    boto3.client("sqs").create_queue(QueueName=QUEUE)
    event = {
        "step": "watch_ingestion", "request_id": RID, "waited_seconds": 0,
        "max_wait_seconds": 600, "settle_seconds": 0,
    }  # fmt: skip

    # Then the watch step holds the report, and the record says for which dataset, in
    # generations; at the end of the wait it settles with the re-index still pending
    assert app.handler(event, FakeLambdaContext())["settled"] is False
    wait = requests.get(RID).model_dump(mode="json")["ingestion_wait"]
    assert wait["reindex_pending"] == {
        "reviews": {"matching_generation": 2, "indexed_generation": 1}
    }
    assert app.handler(event | {"waited_seconds": 600}, FakeLambdaContext())["settled"] is True

    # and the report step names the dataset, by its raw prefix, as not searched
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())
    body = boto3.client("s3").get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")
    manifest = json.loads(body["Body"].read())
    assert [
        (g["object_url"], g["version_id"], g["dataset_id"], g["reason"])
        for g in manifest["not_searched"]
    ] == [(s3_url(RAW, "reviews/"), "", "reviews", "reindex_pending")]
    assert requests.get(RID).report["not_searched"] == [
        {"dataset_id": "reviews", "reason": "reindex_pending", "versions": 1}
    ]

    # and once the re-index of generation 2 succeeded (its last step records it), nothing holds
    lethe_tables["DatasetsTable"].update_item(
        Key={"dataset_id": "reviews"},
        UpdateExpression="SET indexed_generation = :g",
        ExpressionAttributeValues={":g": 2},
    )
    assert app.handler(event, FakeLambdaContext())["settled"] is True


def test_a_dataset_indexed_with_another_key_holds_the_watch_and_is_named_by_the_report(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given reviews indexed with the key the request was hashed with, then the key rotated
    # (the request is filed with the new key: its record says so), before any re-index
    _register_reviews(lethe_tables)
    rotated = _rotate_key(b"r" * 64)
    requests.update(RID, {"key_fingerprint": rotated})
    boto3.client("sqs").create_queue(QueueName=QUEUE)
    event = {
        "step": "watch_ingestion", "request_id": RID, "waited_seconds": 0,
        "max_wait_seconds": 600, "settle_seconds": 0,
    }  # fmt: skip

    # Then the watch step holds the report, exactly as for a pending re-index, and the record
    # names both keys by their fingerprints
    assert app.handler(event, FakeLambdaContext())["settled"] is False
    wait = requests.get(RID).model_dump(mode="json")["ingestion_wait"]
    assert wait["reindex_pending"] == {
        "reviews": {
            "matching_generation": 1,
            "indexed_generation": 1,
            "key_fingerprint": rotated,
            "indexed_key_fingerprint": KEY,
        }
    }
    assert app.handler(event | {"waited_seconds": 600}, FakeLambdaContext())["settled"] is True

    # and the report names the dataset reindex_pending, saying the key changed and what to do
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())
    body = boto3.client("s3").get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")
    manifest = json.loads(body["Body"].read())
    (gap,) = manifest["not_searched"]
    assert (gap["object_url"], gap["reason"]) == (s3_url(RAW, "reviews/"), "reindex_pending")
    assert "the subject hash key changed" in gap["detail"]
    assert f"hashed with key {rotated}" in gap["detail"]
    assert f"last built with key {KEY}" in gap["detail"]
    assert "`lethe datasets reindex reviews`" in gap["detail"]
    assert HASH_KEY.decode() not in json.dumps(manifest)

    # and once the re-index with the new key succeeded (its last step records the key), the
    # watch settles at once
    lethe_tables["DatasetsTable"].update_item(
        Key={"dataset_id": "reviews"},
        UpdateExpression="SET indexed_key_fingerprint = :k",
        ExpressionAttributeValues={":k": rotated},
    )
    assert app.handler(event, FakeLambdaContext())["settled"] is True


def test_a_request_hashed_with_a_key_no_longer_current_is_held_and_named(
    app: Any, requests: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given reviews indexed with the request's key, and then the key rotated before the report
    # (the erase job would hash rows with the new key: the request's hashes match nothing)
    _register_reviews(lethe_tables)
    rotated = _rotate_key(b"r" * 64)
    boto3.client("sqs").create_queue(QueueName=QUEUE)
    event = {
        "step": "watch_ingestion", "request_id": RID, "waited_seconds": 0,
        "max_wait_seconds": 600, "settle_seconds": 0,
    }  # fmt: skip

    assert app.handler(event, FakeLambdaContext())["settled"] is False
    pending = requests.get(RID).model_dump(mode="json")["ingestion_wait"]["reindex_pending"]
    assert pending["reviews"]["current_key_fingerprint"] == rotated
    reviews = pending["reviews"]
    assert (reviews["key_fingerprint"], reviews["indexed_key_fingerprint"]) == (KEY, KEY)

    app.handler(event | {"waited_seconds": 600}, FakeLambdaContext())
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())
    body = boto3.client("s3").get_object(Bucket=REPORTS, Key=f"erasure/{RID}/manifest.json")
    (gap,) = json.loads(body["Body"].read())["not_searched"]
    assert gap["reason"] == "reindex_pending"
    assert f"the current key is key {rotated}" in gap["detail"]
    assert gap["detail"].endswith("File the request again")


def test_a_request_or_dataset_whose_key_is_unknown_counts_as_another_key(
    app: Any, requests: Any, lethe_tables: dict[str, Any]
) -> None:
    # Given a dataset item written before key fingerprints (none recorded) and the request
    document = json.loads((REPO_ROOT / "samples/reviews.dataset.json").read_text())
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(document)}
    )
    boto3.client("sqs").create_queue(QueueName=QUEUE)
    event = {
        "step": "watch_ingestion", "request_id": RID, "waited_seconds": 0,
        "max_wait_seconds": 600, "settle_seconds": 0,
    }  # fmt: skip

    assert app.handler(event, FakeLambdaContext())["settled"] is False
    pending = requests.get(RID).model_dump(mode="json")["ingestion_wait"]["reindex_pending"]
    assert pending["reviews"]["indexed_key_fingerprint"] == ""

    # the dataset re-indexed with the request's key, but a request filed by an older Lethe
    # (no fingerprint on its record) still cannot be matched with it
    lethe_tables["DatasetsTable"].update_item(
        Key={"dataset_id": "reviews"},
        UpdateExpression="SET indexed_key_fingerprint = :k",
        ExpressionAttributeValues={":k": KEY},
    )
    assert app.handler(event, FakeLambdaContext())["settled"] is True
    requests.update(RID, {"key_fingerprint": ""})
    assert app.handler(event, FakeLambdaContext())["settled"] is False


def test_an_entry_indexed_after_the_report_is_named_by_the_certify_step(
    app: Any,
    requests: Any,
    lethe_tables: dict[str, Any],
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the report frozen over a lake object indexed for the subject, which the erase job
    # then rewrote (and verified), and an object holding the subject indexed after the report
    s3 = boto3.client("s3")
    read = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"rows of the subject")
    lake_url = s3_url(LAKE, LAKE_KEY)
    index = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    index.replace_object(
        lake_url, [index_entry(lake_url, Zone.LAKE, 3, read["VersionId"], read["ETag"].strip('"'))]
    )
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())
    # certify refuses a request without a recorded approval decision (who and when)
    decision = {
        "approval": {"decided_by": "dpo@example.com", "decided_at": "2026-11-22T11:00:00+00:00"}
    }
    for status in ("AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(
            RID,
            ErasureStatus(status),
            by="test",
            updates=decision if status == "APPROVED" else None,
        )
    after = s3.put_object(Bucket=LAKE, Key=LAKE_KEY, Body=b"rows of others")
    s3.delete_object(Bucket=LAKE, Key=LAKE_KEY, VersionId=read["VersionId"])
    ref = {"version_id": read["VersionId"], "etag": read["ETag"].strip('"')}
    left = {"version_id": after["VersionId"], "etag": after["ETag"].strip('"')}
    s3.put_object(
        Bucket=REPORTS, Key=f"erasure/{RID}/results.json",
        Body=_erase_results(
            {"object_url": lake_url, "dataset_id": "reviews", "zone": "lake",
             "action": "rewritten", "versions_before": [ref], "version_after": left,
             "rows_before": 5, "rows_removed": 3, "rows_after": 2, "versions_purged": 1},
            manifest_sha256=requests.get(RID).report["manifest_sha256"],
        ),
    )  # fmt: skip
    s3.put_object(
        Bucket=REPORTS, Key=f"erasure/{RID}/verification.json",
        Body=json.dumps(
            {"request_id": RID, "correlation_id": RID, "verified_at": "2026-11-22T12:05:00+00:00",
             "objects": [{"object_url": lake_url, "ok": True, "matching_rows": 0, "rows": 2,
                          "versions_left": 1}]}
        ).encode(),
    )  # fmt: skip
    later = s3_url(LAKE, "reviews/review_date=2026-11-23/part-0.parquet")
    index.replace_object(later, [index_entry(later, Zone.LAKE, 2, "v7", "e7")])
    key = boto3.client("kms").create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")
    monkeypatch.setenv("CERTIFICATE_KEY_ARN", key["KeyMetadata"]["Arn"])
    app = load_function_module("erasure_steps")  # its settings read at the first invocation

    # When the workflow runs Update Index, then Certify
    updated = app.handler({"step": "update_index", "request_id": RID}, FakeLambdaContext())
    note = app.handler({"step": "certify", "request_id": RID}, FakeLambdaContext())

    # Then the index update kept the later object's entry, and the certificate names it: the
    # request is FAILED, outcome INCOMPLETE
    # (by its shown key, in the step's result and the certificate: `part-0.parquet` is not
    # the lake layout, so the whole key is hashed)
    shown = KeyNamer(HASH_KEY, lambda _: None).url(later)
    assert [(k["object_url"], k["reason"]) for k in updated["kept"]] == [
        (shown, "object_not_erased")
    ]
    assert (note["status"], note["outcome"], note["error"]) == (
        "FAILED", "INCOMPLETE", "ErasureIncomplete",
    )  # fmt: skip
    body = s3.get_object(Bucket=REPORTS, Key=f"erasure/{RID}/certificate.json")["Body"].read()
    certificate = json.loads(body)["certificate"]
    assert certificate["complete"] is False
    assert [
        (f"s3://{g['bucket']}/{g['key']}", g["version_id"], g["reason"], g["count"])
        for g in certificate["not_searched"]
    ] == [(shown, "v7", "appeared_after_erase", 2)]
    record = requests.get(RID)
    assert (record.status, record.outcome) == (ErasureStatus.FAILED, "INCOMPLETE")
    listed = s3.list_objects_v2(Bucket=REPORTS, Prefix=f"erasure/{RID}/")["Contents"]
    assert f"erasure/{RID}/after.json" not in {o["Key"] for o in listed}  # one mechanism


def test_a_look_up_again_step_is_no_step(app: Any, requests: Any) -> None:
    """The re-lookup is the index update's final look-up: the handler has no step of its own."""
    # (its validation error quotes the step's value: scrubbed, as every quoted value)
    with pytest.raises(ValueError, match="validation error for StepEvent"):
        app.handler({"step": "look_up_again", "request_id": RID}, FakeLambdaContext())


def test_a_failed_run_is_certified_partially_then_resumed_by_its_execution_only(
    app: Any, requests: Any, load_event: Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a frozen, approved report whose erase run failed (Mark Failed recorded it)
    app.handler(load_event("erasure_steps_report.json"), FakeLambdaContext())
    decided = datetime.now(UTC).isoformat()
    approval = {"approvers": ["dpo@example.com"], "decision": "approve",
                "decided_by": "dpo@example.com", "decided_at": decided}  # fmt: skip
    for status in ("AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(
            RID, ErasureStatus(status), by="test",
            updates={"approval": approval} if status == "APPROVED" else None,
        )  # fmt: skip
    failure = {"Error": "States.TaskFailed", "Cause": '{"Id": "jr_1", "JobRunState": "FAILED"}'}
    app.handler(
        {"step": "mark", "request_id": RID, "status": "FAILED", "error": failure},
        FakeLambdaContext(),
    )
    key = boto3.client("kms").create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")
    monkeypatch.setenv("CERTIFICATE_KEY_ARN", key["KeyMetadata"]["Arn"])
    app = load_function_module("erasure_steps")

    # When Record Failure runs, with the Spark runs the workflow saw
    note = app.handler(
        {"step": "certify_failure", "request_id": RID, "error": failure,
         "job_runs": [{"mode": "erase", "engine": "GLUE", "run_id": "jr_1"}]},
        FakeLambdaContext(),
    )  # fmt: skip

    # Then the request is FAILED with a partial certificate naming the run
    assert (note["status"], note["partial_certificate"]) == (
        "FAILED", f"s3://{REPORTS}/erasure/{RID}/failed-run-1/certificate.json",
    )  # fmt: skip
    body = (
        boto3.client("s3")
        .get_object(Bucket=REPORTS, Key=f"erasure/{RID}/failed-run-1/certificate.json")["Body"]
        .read()
    )
    certificate = json.loads(body)["certificate"]
    assert certificate["partial"]["cause"] == "States.TaskFailed: Spark job run jr_1 ended FAILED"
    assert certificate["statement"]["tool"]["job_runs"] == [
        {"mode": "erase", "engine": "GLUE", "run_id": "jr_1"}
    ]
    # and Mark Erasing of a run no resume recorded leaves it FAILED
    with pytest.raises(ErasureNotApprovedError):
        app.handler(
            {"step": "mark", "request_id": RID, "status": "ERASING",
             "resume_execution": f"erasure-{RID}-resume-1",
             "approval_validity_seconds": 3600},
            FakeLambdaContext(),
        )  # fmt: skip
    assert requests.get(RID).status is ErasureStatus.FAILED
