"""Erasure end to end on the local cloud, as its users do it: a producer uploads and overwrites
files, a privacy officer files a request through the CLI, the approver reads the email, opens the
link in a real browser (Chromium), types the code and approves; then no stored version of any
object holds the subjects' rows, every other row is intact, the index forgets them, SNS and
EventBridge were told, and the certificate verifies. A rejected request changes no byte.

The datasets (`erasure-reviews`, `erasure-orders`: the samples' documents under other ids;
`erasure-visits`: the reviews document partitioned by its subject column, so that its lake keys
hold subject ids) and the subjects (`ea-*`, `kc-*`) are this module's own, so the other e2e
modules' data, lookups and reconcile reports are untouched whatever order the modules run in."""

from __future__ import annotations

import gzip
import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
import requests

from lethe_shared.subject_hashing.keys import hash_of_id, load_hash_key
from tests.browser import chromium, outcome
from tests.localcloud_support import (
    LocalCloud,
    capture_queue,
    catalog_items,
    cli,
    decide_on_approval_page,
    sample_dataset_as,
    wait_for,
)

ERASED = ("ea-1001", "ea-2002")
KEPT = "kc-3003"
REVIEWS, ORDERS_DATASET = "erasure-reviews", "erasure-orders"
REVIEWS_KEY = f"{REVIEWS}/2026/11/batch-1.csv"
ORDERS_KEY = f"{ORDERS_DATASET}/2026/11/orders-1"
REVIEWS_V1 = (
    b"user_id,review_date,stars,text\r\n"
    b'ea-1001,2026-11-20,5,"fine, thanks"\r\n'
    b'ea-2002,2026-11-21,4,"two\r\nlines"\r\n'
    b"kc-3003,2026-11-21,3,ok\r\n"
    b"ea-1001,2026-11-22,2,again\r\n"
)
# version 2 of the same key: ea-2002 is gone from the current version (its row stays in v1)
REVIEWS_V2 = (
    b"user_id,review_date,stars,text\r\n"
    b'ea-1001,2026-11-20,5,"fine, thanks"\r\n'
    b"kc-3003,2026-11-21,3,ok\r\n"
    b"kc-3003,2026-11-23,4,new\r\n"
    b"ea-1001,2026-11-22,2,again\r\n"
)
REVIEWS_AFTER = (
    b"user_id,review_date,stars,text\r\nkc-3003,2026-11-21,3,ok\r\nkc-3003,2026-11-23,4,new\r\n"
)
VISITS = "erasure-visits"  # partitioned by its subject column: lake keys hold the ids
VISITS_KEY = f"{VISITS}/2026/11/visits-1.csv"
VISITS_BODY = (
    b"user_id,review_date,stars,text\r\n"
    b"ea-1001,2026-11-20,5,first visit\r\n"
    b"kc-3003,2026-11-21,3,kept visit\r\n"
    b"ea-2002,2026-11-22,4,second visit\r\n"
)
ORDERS = [
    {"order_id": 11, "order_date": "2026-11-20", "customer": {"id": "ea-1001", "country": "NL"},
     "total": "1.00", "items": ["a"]},
    {"order_id": 12, "order_date": "2026-11-20", "customer": {"id": KEPT, "country": "DE"},
     "total": "2.00", "items": []},
    {"order_id": 13, "order_date": "2026-11-21", "customer": {"id": "ea-2002", "country": "FR"},
     "total": "3.00", "items": ["b", "c"]},
    {"order_id": 14, "order_date": "2026-11-21", "customer": None, "total": "4.00", "items": []},
]  # fmt: skip
TERMINAL = {"INGESTED", "QUARANTINED", "FAILED"}


def _upload_and_ingest(cloud: LocalCloud, *uploads: tuple[str, bytes]) -> None:
    """Upload (key, body) pairs together (ingestion may batch them into one run), then wait
    until each is ingested."""
    raw = cloud.outputs["RawBucketName"]
    s3 = cloud.client("s3")
    versions = {
        key: str(s3.put_object(Bucket=raw, Key=key, Body=body)["VersionId"])
        for key, body in uploads
    }
    catalog = cloud.table("ObjectCatalogTableName")

    def ingested() -> bool:
        for key, version in versions.items():
            item = catalog.get_item(
                Key={"object_url": f"s3://{raw}/{key}", "version_id": version}, ConsistentRead=True
            ).get("Item")
            if item is None or item["status"] not in TERMINAL:
                return False
        return True

    wait_for(ingested, timeout=300, what=f"{', '.join(versions)} to be ingested")


def _every_version(cloud: LocalCloud) -> dict[tuple[str, str, str], bytes]:
    """(bucket, key, version) -> bytes of every stored version under the two datasets."""
    s3 = cloud.client("s3")
    found: dict[tuple[str, str, str], bytes] = {}
    for bucket in (cloud.outputs["RawBucketName"], cloud.outputs["LakeBucketName"]):
        for prefix in (f"{REVIEWS}/", f"{ORDERS_DATASET}/", f"{VISITS}/"):
            pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for v in page.get("Versions", []):
                    body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
                    found[(bucket, v["Key"], v["VersionId"])] = body["Body"].read()
    return found


def _index_objects(cloud: LocalCloud) -> dict[tuple[str, str], bytes]:
    """(key, version) -> bytes of every object version of the index bucket (the segments)."""
    s3, bucket = cloud.client("s3"), cloud.outputs["IndexBucketName"]
    found: dict[tuple[str, str], bytes] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
            found[(v["Key"], v["VersionId"])] = body["Body"].read()
    return found


def _texts(key: str, body: bytes) -> str:
    """Everything an object version says, as text: gzip opened, Parquet read row by row."""
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    if key.endswith(".parquet"):
        return json.dumps(pq.read_table(io.BytesIO(body)).to_pylist(), default=str)
    return body.decode("utf-8", "replace")


def _published(cloud: LocalCloud, queue: str, request_id: str) -> list[Any]:
    sqs = cloud.client("sqs")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        found = [json.loads(m["Body"]) for m in got.get("Messages", [])]
        mine = [m for m in found if request_id in json.dumps(m)]
        if mine:
            return mine
    return []


def _capture(cloud: LocalCloud, name: str, *, topic: str | None = None) -> str:
    url, arn = capture_queue(cloud, name)
    if topic:
        cloud.client("sns").subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
        )
    else:
        events = cloud.client("events")
        events.put_rule(Name=name, EventPattern=json.dumps({"source": ["lethe.erasure"]}))
        events.put_targets(Rule=name, Targets=[{"Id": "capture", "Arn": arn}])
    return url


def _email(cloud: LocalCloud, request_id: str) -> dict[str, Any]:
    mail = json.loads(cli(cloud, "local", "mail", "--json").stdout)
    (email,) = [m for m in mail if request_id in m["subject"]]
    return dict(email)


@pytest.fixture(scope="module")
def ingested(local_cloud: LocalCloud, tmp_path_factory: pytest.TempPathFactory) -> LocalCloud:
    """This module's three datasets registered, their files uploaded and ingested, then the
    reviews file overwritten."""
    registered = local_cloud
    folder = tmp_path_factory.mktemp("erasure-datasets")
    for sample, dataset_id in (("reviews", REVIEWS), ("orders", ORDERS_DATASET)):
        path = sample_dataset_as(sample, dataset_id, folder)
        assert cli(registered, "datasets", "put", str(path)).returncode == 0
    visits = sample_dataset_as("reviews", VISITS, folder)
    visits.write_text(json.dumps({**json.loads(visits.read_text()), "partition_by": ["user_id"]}))
    assert cli(registered, "datasets", "put", str(visits)).returncode == 0
    orders = "".join(json.dumps(o) + "\n" for o in ORDERS).encode()
    _upload_and_ingest(
        registered,
        (REVIEWS_KEY, REVIEWS_V1),
        (ORDERS_KEY, gzip.compress(orders)),
        (VISITS_KEY, VISITS_BODY),
    )
    _upload_and_ingest(registered, (REVIEWS_KEY, REVIEWS_V2))
    return registered


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def erased(ingested: LocalCloud, browser: Any) -> dict[str, Any]:
    """The request for ea-1001 and ea-2002, approved in the browser, followed to its end."""
    cloud = ingested
    queues = {
        "sns": _capture(cloud, "e2e-erasure-sns", topic=cloud.outputs["NotificationsTopicArn"]),
        "events": _capture(cloud, "e2e-erasure-events"),
    }
    before = _every_version(cloud)
    index_before = _index_objects(cloud)
    filed = cli(
        cloud, "erasure", "request", *[a for s in ERASED for a in ("--subject", s)],
        "--requested-by", "privacy@example.com", "--reason", "GDPR article 17",
    )  # fmt: skip
    assert filed.returncode == 0, filed.stderr
    request_id = filed.stdout.strip()
    waited = cli(
        cloud, "erasure", "status", request_id, "--wait", "--until", "AWAITING_APPROVAL",
        "--timeout", "300",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    email = _email(cloud, request_id)
    (link,) = email["links"]

    # A mail scanner opens the link first: nothing changes
    scanned = requests.get(link, timeout=30)
    after_scan = json.loads(cli(cloud, "erasure", "status", request_id, "--json").stdout)

    # The approver reads the page, types the code and approves
    page = browser.new_context().new_page()
    page.set_default_timeout(30_000)
    page.goto(link)
    summary = page.locator("main").inner_text()
    code = page.locator("code#confirmation-code").inner_text()
    form = page.locator("form:has(button[value=approve])")
    form.locator("input[name=confirmation]").fill(code)
    form.locator("button[value=approve]").click()
    decided = outcome(page)
    page.context.close()

    finished = cli(cloud, "erasure", "status", request_id, "--wait", "--timeout", "600")
    record = json.loads(cli(cloud, "erasure", "status", request_id, "--json").stdout)
    return {
        "request_id": request_id,
        "email": email,
        "scanned": scanned,
        "after_scan": after_scan,
        "summary": summary,
        "decided": decided,
        "finished": finished,
        "record": record,
        "before": before,
        "after": _every_version(cloud),
        "index_before": index_before,
        "index_after": _index_objects(cloud),
        "sns": _published(cloud, queues["sns"], request_id),
        "events": _published(cloud, queues["events"], request_id),
    }


def test_the_approver_reads_counts_and_decides_in_the_browser(erased: dict[str, Any]) -> None:
    email = erased["email"]
    assert email["to"] == ["approver@example.com"]
    assert erased["record"]["report"]["manifest_sha256"] in email["text"]
    assert erased["scanned"].status_code == 200
    assert erased["after_scan"]["status"] == "AWAITING_APPROVAL"  # the GET changed nothing
    assert erased["record"]["report"]["manifest_sha256"] in erased["summary"]
    assert erased["decided"] == "approved"
    for raw_id in ERASED:
        assert raw_id not in json.dumps(email)
        assert raw_id not in erased["summary"]


def test_the_request_completes_with_every_step_in_its_history(erased: dict[str, Any]) -> None:
    assert erased["finished"].returncode == 0, erased["finished"].stderr
    record = erased["record"]
    assert record["status"] == "COMPLETED"
    assert [h["status"] for h in record["history"]] == [
        "RECEIVED", "REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING", "COMPLETED",
    ]  # fmt: skip
    assert record["approval"]["decided_by"] == "approver@example.com"
    # raw reviews (both versions), raw orders, the lake files holding them (8); the raw visits
    # file's two rows and the two lake files of the erased subjects' partitions (4)
    assert record["result"]["rows_removed"] == 12
    assert all(raw_id not in json.dumps(record) for raw_id in ERASED)


def test_no_stored_version_holds_the_erased_subjects(erased: dict[str, Any]) -> None:
    before, after = erased["before"], erased["after"]
    assert any(ERASED[1] in _texts(k, b) for (_, k, _), b in before.items())  # it was there
    for (bucket, key, version), body in after.items():
        text = _texts(key, body)
        for raw_id in ERASED:
            assert raw_id not in text, f"{raw_id} in s3://{bucket}/{key} version {version}"


def test_every_other_row_is_intact(ingested: LocalCloud, erased: dict[str, Any]) -> None:
    s3 = ingested.client("s3")
    raw, lake = ingested.outputs["RawBucketName"], ingested.outputs["LakeBucketName"]
    current = s3.get_object(Bucket=raw, Key=REVIEWS_KEY)["Body"].read()
    assert current == REVIEWS_AFTER  # byte for byte, CRLF and all
    orders = gzip.decompress(s3.get_object(Bucket=raw, Key=ORDERS_KEY)["Body"].read())
    assert [json.loads(line)["order_id"] for line in orders.splitlines()] == [12, 14]
    kept_rows = [
        row
        for (bucket, key, _), body in erased["after"].items()
        if bucket == lake and key.endswith(".parquet")
        for row in pq.read_table(io.BytesIO(body)).to_pylist()
        if KEPT in json.dumps(row, default=str)
    ]
    assert len(kept_rows) == 3  # two reviews and one order


def test_the_index_forgets_the_erased_subjects_only(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    gone = cli(
        ingested, "index", "lookup", "--all", "--json",
        *[a for s in ERASED for a in ("--subject", s)],
    )  # fmt: skip
    assert json.loads(gone.stdout) == []
    kept = json.loads(cli(ingested, "index", "lookup", "--subject", KEPT, "--json").stdout)
    assert sorted((e["dataset"], e["zone"]) for e in kept) == [
        (ORDERS_DATASET, "lake"), (ORDERS_DATASET, "raw"), (REVIEWS, "lake"), (REVIEWS, "lake"),
        (REVIEWS, "raw"), (VISITS, "lake"), (VISITS, "raw"),
    ]  # fmt: skip


def test_no_index_segment_holds_the_erased_hashes(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    """The segment index (the deployed default, 48-bit prefixes): the erased subjects' keyed
    hashes, and their 6-byte prefixes, are in no object version of the index bucket any more
    (the bucket keeps no older version) unless the certificate names a row another subject
    shares, and the certificate cites the segments rewritten and says the hashes left the
    index."""
    key = load_hash_key(
        ingested.client("secretsmanager"), ingested.outputs["SubjectHashKeySecretArn"]
    )
    digests = [bytes.fromhex(hash_of_id(key, raw_id)) for raw_id in ERASED]
    # the deployed default stores 48-bit prefixes (hash_bytes=6): the first 6 bytes of each
    prefixes = [digest[:6] for digest in digests]
    assert ingested.outputs["IndexStore"] == "segments"
    before, after = erased["index_before"], erased["index_after"]
    assert any(p in body for body in before.values() for p in prefixes)  # they were there
    assert after
    assert all(version == "null" for _, version in after)
    url = erased["record"]["certificate"]["url"]
    bucket, _, certificate_key = url.removeprefix("s3://").partition("/")
    envelope = json.loads(
        ingested.client("s3").get_object(Bucket=bucket, Key=certificate_key)["Body"].read()
    )
    cited = envelope["certificate"]["index_erasure"]
    # a prefix may stay only in a row another subject shares, which the certificate then names
    shared_named = cited.get("prefix_rows_kept", 0) > 0
    for (key_name, _), body in after.items():
        for digest in digests:
            assert digest not in body, key_name
            assert digest.hex().encode() not in body, key_name
        for prefix in prefixes:
            assert prefix not in body or shared_named, key_name
            assert prefix.hex().encode() not in body, key_name
    assert cited["hashes_left_index"] is (not shared_named)
    assert cited["hashes_left_index"] is True  # no two of these subjects share a prefix
    assert cited["segments_rewritten"] >= 1
    assert cited["old_files_checked_gone"] >= 2 * cited["segments_rewritten"]


def test_sns_and_eventbridge_were_told(erased: dict[str, Any]) -> None:
    (message,) = erased["sns"]
    assert (message["status"], message["request_id"]) == ("COMPLETED", erased["request_id"])
    (event,) = erased["events"]
    assert event["detail-type"] == "Erasure COMPLETED"
    assert all(raw_id not in json.dumps(erased["sns"] + erased["events"]) for raw_id in ERASED)


def test_the_certificate_verifies_with_kms_and_offline(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    for extra in ((), ("--offline",)):
        checked = cli(ingested, "erasure", "certificate", erased["request_id"], "--verify", *extra)
        assert checked.returncode == 0, checked.stderr
        assert "certificate verifies: signed by arn:aws:kms:" in checked.stdout + checked.stderr


def test_a_rejected_request_changes_no_byte(ingested: LocalCloud, erased: dict[str, Any]) -> None:
    before = _every_version(ingested)
    filed = cli(
        ingested, "erasure", "request", "--subject", KEPT, "--requested-by", "dpo@example.com"
    )
    request_id = filed.stdout.strip()
    cli(ingested, "erasure", "status", request_id, "--wait", "--until", "AWAITING_APPROVAL")
    (link,) = _email(ingested, request_id)["links"]

    answer = decide_on_approval_page(link, "reject", timeout=30)

    assert 'data-outcome="rejected"' in answer.text
    waited = cli(ingested, "erasure", "status", request_id, "--wait", "--timeout", "120")
    assert waited.returncode == 5  # REJECTED: ExitCode.NOT_ERASED
    assert _every_version(ingested) == before


def test_the_erasures_rewrite_is_not_ingested_but_a_copy_of_it_is_ingested_and_indexed(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    """Issue 18: Lethe knows its own writes from its writes ledger, never from metadata. The
    erasure's rewrite of the raw object is REWRITTEN (not ingested again); a copy of it under
    another key carries its `lethe-producer: erase` metadata (CopyObject copies metadata) and
    is ingested and indexed like any upload, so that it can be found and erased in turn."""
    s3, raw = ingested.client("s3"), ingested.outputs["RawBucketName"]
    current = s3.head_object(Bucket=raw, Key=REVIEWS_KEY)
    rewritten = {i["version_id"]: i["status"] for i in catalog_items(ingested, REVIEWS_KEY)}
    assert rewritten[current["VersionId"]] == "REWRITTEN"
    copy_key = f"{REVIEWS}/2026/12/copy-of-batch-1.csv"

    copied = s3.copy_object(
        Bucket=raw, Key=copy_key, CopySource={"Bucket": raw, "Key": REVIEWS_KEY}
    )

    assert s3.head_object(Bucket=raw, Key=copy_key)["Metadata"]["lethe-producer"] == "erase"
    version = copied["VersionId"]

    def ingested_copy() -> str | None:
        found = [i for i in catalog_items(ingested, copy_key) if i["version_id"] == version]
        return found[0]["status"] if found and found[0]["status"] in TERMINAL else None

    assert wait_for(ingested_copy, timeout=300, what="the copy to be ingested") == "INGESTED"
    found = json.loads(cli(ingested, "index", "lookup", "--subject", KEPT, "--json").stdout)
    assert {(e["zone"], e["key"]) for e in found if e["key"] == copy_key} == {("raw", copy_key)}
    assert sum(e["dataset"] == REVIEWS and e["zone"] == "lake" for e in found) > 2  # its lake rows
    # and the rewrite still was not ingested
    after = {i["version_id"]: i["status"] for i in catalog_items(ingested, REVIEWS_KEY)}
    assert after[current["VersionId"]] == "REWRITTEN"


def test_trace_of_the_request_id_finds_its_execution_and_its_spark_jobs(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    request_id = erased["request_id"]
    traced = cli(ingested, "trace", request_id, "--json")
    assert traced.returncode == 0, traced.stderr
    story = json.loads(traced.stdout)

    (run,) = story["executions"]
    assert (run["name"], run["status"]) == (f"erasure-{request_id}", "SUCCEEDED")
    assert len(run["job_runs"]) == 2  # the erase job and the verify job
    sources = {line["source"] for line in story["lines"]}
    spark = {s for s in sources if s.startswith("spark-")}
    assert len(spark) == 2, sources  # both runs' logs, whole
    texts = [line["text"] for line in story["lines"]]
    assert any("erasure request filed" in t for t in texts)  # the erasure API
    assert any(f"[erasure-{request_id}]" in t for t in texts)  # the Spark jobs' lines
    # the story's lines carry hashes only: no raw subject id of the request
    assert not any(subject in t for t in texts for subject in ERASED)


def _partition_subjects(key: str, columns: list[str]) -> set[str]:
    """The subject ids a lake key holds in its partitions (a subject column partitioned by)."""
    found = set()
    for segment in key.split("/")[1:-1]:
        name, _, value = segment.partition("=")
        if name in columns and len(value) >= 4:
            found.add(unquote(value))
    return found


def _lake_subjects(cloud: LocalCloud) -> set[str]:
    """Every subject id the lake holds now, read from the subject columns of every dataset's
    current lake Parquet objects (so other e2e modules' subjects are swept too when they ran)."""
    s3, lake = cloud.client("s3"), cloud.outputs["LakeBucketName"]
    datasets = json.loads(cli(cloud, "datasets", "list", "--json").stdout)
    found: set[str] = set()
    for dataset in datasets:
        columns = [str(c) for c in dataset["subject_columns"]]
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=lake, Prefix=f"{dataset['dataset_id']}/"
        )
        for page in pages:
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith(".parquet"):
                    continue
                body = s3.get_object(Bucket=lake, Key=obj["Key"])["Body"].read()
                table = pq.read_table(io.BytesIO(body))
                found |= _partition_subjects(obj["Key"], columns)
                for column in columns:
                    head, *path = column.split(".")
                    if head not in table.column_names:
                        continue
                    for row in table.column(head).to_pylist():
                        value = row
                        for part in path:
                            value = value.get(part) if isinstance(value, dict) else None
                        if isinstance(value, str) and len(value) >= 4:
                            found.add(value)
    return found


def _binary_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(f"{type(value).__name__} in a DynamoDB item")


def _swept_texts(cloud: LocalCloud, erased: dict[str, Any]) -> dict[str, str]:
    """Every record Lethe keeps or sends about the scenario, as text, by where it came from:
    log lines, state machine histories, emails, reports (manifests, certificates), DynamoDB
    items and the SNS and EventBridge messages it published."""
    texts: dict[str, str] = {}
    logs_dir = cloud.state["logs_dir"]
    for path in sorted(Path(logs_dir).glob("*.log")):
        if path.name != "moto.log":  # the emulator's wire log: uploads carry the data itself
            texts[f"log {path.name}"] = path.read_text(encoding="utf-8", errors="replace")
    sfn = cloud.client("stepfunctions")
    for output, machine in cloud.outputs.items():
        if not output.endswith("StateMachineArn"):
            continue
        for execution in sfn.list_executions(stateMachineArn=machine)["executions"]:
            history = sfn.get_execution_history(executionArn=execution["executionArn"])
            texts[f"history {execution['name']}"] = json.dumps(history["events"], default=str)
    texts["mail"] = cli(cloud, "local", "mail", "--json").stdout
    s3, reports = cloud.client("s3"), cloud.outputs["ReportsBucketName"]
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=reports):
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=reports, Key=v["Key"], VersionId=v["VersionId"])
            texts[f"report {v['Key']}"] = _texts(v["Key"], body["Body"].read())
    dynamodb = cloud.client("dynamodb")
    for name in dynamodb.list_tables()["TableNames"]:
        items = dynamodb.get_paginator("scan").paginate(TableName=name)
        # binary attributes (the index manifest's digests of object URLs) as their bytes, so
        # that a raw id held in one would still be found
        texts[f"table {name}"] = json.dumps(
            [i for page in items for i in page["Items"]], default=_binary_text
        )
    texts["sns"] = json.dumps(erased["sns"])
    texts["eventbridge"] = json.dumps(erased["events"])
    return texts


# Where Lethe keeps real object keys by design (docs/SECURITY.md): the frozen report and the
# erase job's documents (the jobs and `--verify` need them), the object catalog and the subject
# index (by key), and the run manifests of ingestion. There a lake key of a dataset partitioned
# by its subject column holds the id; nowhere else.
_REAL_KEYS = re.compile(
    r"^(table lethe-[a-z0-9-]*(catalog|index)[a-z0-9-]*"
    r"|report erasure/[^/]+/(manifest|results|verification|index_update)\.json"
    r"|report erasure/[^/]+/progress/.*|report manifests/.*)$"
)
_SUBJECT_PARTITION = re.compile(rf"{VISITS}/user_id=[^/\s\"\\]+/")


def _outside_keys(where: str, text: str) -> str:
    """`text`, with the subject partitions of real lake keys blanked where real keys are kept by
    design (`_REAL_KEYS`): an id anywhere else in those texts is still found."""
    return (
        _SUBJECT_PARTITION.sub(f"{VISITS}/user_id=<key>/", text)
        if _REAL_KEYS.match(where)
        else text
    )


def test_privacy_sweep_no_raw_subject_id_outside_the_data(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    """Issue 11, privacy: after the scenario (uploads, an approved erasure, a rejected one),
    no log line, history, email, report, certificate, audit record, DynamoDB item or published
    message holds a raw subject id of it; the data buckets are the only place they live.
    Issue 19: with a dataset partitioned by its subject column, whose lake keys hold the ids,
    too: certificates, audit records, request records, summaries, logs, execution histories and
    messages name its objects by shown keys; real keys stay only where they are kept by design
    (`_REAL_KEYS`)."""
    subjects = {*ERASED, KEPT, *_lake_subjects(ingested)}
    texts = {
        where: _outside_keys(where, text) for where, text in _swept_texts(ingested, erased).items()
    }
    # the partitioned dataset's keys held the ids, and its objects were certified
    partition_keys = [
        t for w, t in texts.items() if w.startswith("table ") and f"{VISITS}/user_id=<key>/" in t
    ]
    assert partition_keys
    (certificate,) = [
        t
        for w, t in texts.items()
        if w == f"report erasure/{erased['request_id']}/certificate.json"
    ]
    assert f"{VISITS}/user_id=~" in certificate

    assert KEPT in _lake_subjects(ingested)  # the sweep's subject list is real
    assert len(texts) > 20
    assert any(k.startswith("history erasure-") for k in texts)
    assert any(k.startswith("report ") for k in texts)
    leaks = sorted(
        (where, subject) for where, text in texts.items() for subject in subjects if subject in text
    )
    seen = {where: texts[where] for where, _ in leaks}  # the first line of each, to look at
    assert leaks == [], [
        next(line for line in text.splitlines() if any(s in line for s in subjects))[:300]
        for text in seen.values()
    ]


def test_an_operator_finds_the_real_key_of_an_object_the_certificate_shows(
    ingested: LocalCloud, erased: dict[str, Any]
) -> None:
    """Issue 19: the certificate names the partitioned dataset's lake objects by shown keys (the
    subject's partition value keyed-hashed); `lethe objects shown` gives the operator, who may
    read the hash key, the real key of each."""
    s3, reports = ingested.client("s3"), ingested.outputs["ReportsBucketName"]
    body = s3.get_object(Bucket=reports, Key=f"erasure/{erased['request_id']}/certificate.json")
    objects = json.loads(body["Body"].read())["certificate"]["objects"]
    shown = sorted(o["key"] for o in objects if o["key"].startswith(f"{VISITS}/user_id="))
    assert len(shown) == 2  # the two erased subjects' partitions
    assert not any(subject in key for key in shown for subject in ERASED)

    found = cli(ingested, "objects", "shown", "--dataset", VISITS, *shown, "--json")

    assert found.returncode == 0, found.stderr
    real = sorted(row["object_url"].split("/", 3)[3] for row in json.loads(found.stdout))
    assert [key.split("/")[1] for key in real] == [f"user_id={s}" for s in sorted(ERASED)]
