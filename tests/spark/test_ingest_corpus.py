"""The bad input corpus (tests/spark/corpus) through the real ingest job, in one batch.

Every file of the corpus is uploaded as a raw object of its dataset, and `spark_jobs/ingest.py`
runs once over the whole batch as its own process (`python spark_jobs/ingest.py ...`, as the
local cloud runs it), so that its stdout, its stderr and those of the JVM and the Python workers
it starts are all read, and a stall is a timeout, not a hung suite. Then, per case of
corpus.json: the outcome and counts in the job's summary and on the catalog item, exactly the
lake files and quarantine objects expected, each rejected row at its line (or row) with its
reason, the lake values the case names, conservation (rows read = rows in the lake + rows in
quarantine; a file quarantined whole is one document and its raw version stays), and that every
subject of every written row is found in the index by its keyed hash. Over the whole run: no
subject id appears in any log line, the summary, a quarantine reason, a catalog item or the index.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import requests

from lethe_jobs.layout import object_hash
from lethe_shared.subject_hashing.canonical import is_no_subject
from tests.conftest import REPO_ROOT
from tests.spark.cloud import LAKE, RAW, Cloud, batch_args, h, new_cloud
from tests.spark.conftest import TEST_CREDENTIALS, WORKER_PYTHONPATH
from tests.spark.corpus import build

CORPUS = json.loads(build.MANIFEST.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]
JOB_TIMEOUT_SECONDS = 480  # the whole batch; one to three minutes on two shared cores
pytestmark = pytest.mark.timeout(JOB_TIMEOUT_SECONDS + 120)  # the job is killed first
SUBJECT_MARK = "subj-"  # every subject id of the corpus starts so; no key or dataset id does
LOCAL_SPARK = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def corpus_bytes(case: dict[str, Any]) -> bytes:
    if "generate" in case:
        return build.generated(case["generate"])
    return (build.FILES / build.file_name(case["key"])).read_bytes()


@dataclass
class Run:
    cloud: Cloud
    versions: dict[str, str]  # key -> version id
    summary: dict[str, Any]
    outcomes: dict[str, dict[str, Any]]  # key -> the summary's outcome
    output: str  # everything the job's process tree printed, stdout and stderr


def _run_job(endpoint: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`python spark_jobs/ingest.py ARGS` in its own process group, killed whole on timeout."""
    env = {
        **os.environ,
        **TEST_CREDENTIALS,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": WORKER_PYTHONPATH,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "LETHE_SPARK_MASTER": "local[2]",
        "PYSPARK_SUBMIT_ARGS": " ".join(
            [*(f"--conf {k}={v}" for k, v in LOCAL_SPARK.items()), "pyspark-shell"]
        ),
    }
    env.pop("AWS_PROFILE", None)
    script = str(REPO_ROOT / "spark_jobs" / "ingest.py")
    process = subprocess.Popen(
        [sys.executable, script, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="backslashreplace",
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=JOB_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"the ingest job stalled: still running after {JOB_TIMEOUT_SECONDS} s")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.fixture(scope="module")
def run(moto_endpoint: str) -> Iterator[Run]:
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("AWS_PROFILE", raising=False)
        patch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        for name, value in TEST_CREDENTIALS.items():
            patch.setenv(name, value)
        cloud = new_cloud(moto_endpoint)
        for document in CORPUS["datasets"]:
            cloud.register(document)
        versions = {
            c["key"]: cloud.upload(c["key"], corpus_bytes(c), _dataset(c["key"])) for c in CASES
        }
        batch = [(_dataset(c["key"]), c["key"], versions[c["key"]]) for c in CASES]
        done = _run_job(moto_endpoint, batch_args(batch, "exec-corpus"))
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"the ingest job failed:\n{done.stderr[-5000:]}"
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, done.stdout[-2000:]
        summary = json.loads(lines[0])
        outcomes = {o["key"]: o for o in summary["objects"]}
        yield Run(cloud, versions, summary, outcomes, output)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal | dt.date):
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    return value


def _case_id(case: dict[str, Any]) -> str:
    return str(case["key"])


EXPECTED_STATUS = {
    "INGESTED": "INGESTED",
    "PARTIAL": "INGESTED",
    "QUARANTINED": "QUARANTINED",
    "QUARANTINED_FILE": "QUARANTINED",
}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_each_case_ends_as_the_corpus_expects(run: Run, case: dict[str, Any]) -> None:
    key, dataset = case["key"], _dataset(case["key"])
    version = run.versions[key]
    outcome = run.outcomes[key]
    digest = object_hash(RAW, key)
    lake_key = f"{dataset}/part-{digest}.parquet"
    rows_key = f"{dataset}/_quarantine/{digest}.jsonl"
    file_key = f"{dataset}/_quarantine/{digest}.file.json"
    whole_file = case["outcome"] == "QUARANTINED_FILE"

    # the outcome, as the summary and the catalog item say it
    counts = (outcome["rows_read"], outcome["rows_written"], outcome["rows_quarantined"])
    expected_counts = (case["rows_read"], case["rows_written"], case["rows_quarantined"])
    assert (outcome["status"], counts) == (EXPECTED_STATUS[case["outcome"]], expected_counts)
    assert outcome["error"] is None
    item = run.cloud.catalog_item(key, version)
    assert item["status"] == outcome["status"]
    assert (item["rows_read"], item["rows_written"], item["rows_quarantined"]) == counts

    # conservation: every row read is in the lake or in quarantine, and nowhere twice
    assert case["rows_read"] == case["rows_written"] + case["rows_quarantined"]

    # exactly the lake objects of the case
    mine = {k for k in run.cloud.lake_keys() if digest in k}
    expected_keys = (
        {file_key}
        if whole_file
        else {k for k, n in ((lake_key, counts[1]), (rows_key, counts[2])) if n}
    )
    assert mine == expected_keys
    assert outcome["lake_objects"] == ([f"s3://{LAKE}/{lake_key}"] if counts[1] else [])
    quarantine = file_key if whole_file else rows_key if counts[2] else None
    assert outcome["quarantine_object"] == (quarantine and f"s3://{LAKE}/{quarantine}")

    raw_url = f"s3://{RAW}/{key}"
    source = {"object": raw_url, "version_id": version}
    if whole_file:
        report = json.loads(run.cloud.lake_object(file_key))
        assert report["source"] == source
        assert case["file_reason"] in report["reason"]
        # nothing lost: the raw version the report points at is still there, whole
        raw = run.cloud.s3.get_object(Bucket=RAW, Key=key, VersionId=version)["Body"].read()
        assert raw == corpus_bytes(case)
        return

    # every rejected row at its coordinate, with its reason, in source order
    coordinate = "row" if dataset == "parquet" else "line"
    rejected = (
        [json.loads(line) for line in run.cloud.lake_object(rows_key).splitlines()]
        if counts[2]
        else []
    )
    assert len(rejected) == counts[2]
    found = [(r["source"][coordinate], r["reasons"]) for r in rejected]
    assert [position for position, _ in found] == [p for p, _ in case["quarantined"]]
    for (position, reasons), (_, expected) in zip(found, case["quarantined"], strict=True):
        assert any(expected in reason for reason in reasons), (position, reasons, expected)
    assert all(r["source"] == {**source, coordinate: r["source"][coordinate]} for r in rejected)
    assert all(r["record"] for r in rejected)  # each keeps the record as read, not "{}"

    # the lake rows: as many as written, with the values the case names
    lake_rows = run.cloud.lake_parquet(lake_key).to_pylist() if counts[1] else []
    assert len(lake_rows) == counts[1]
    if "lake" in case:
        assert len(lake_rows) == len(case["lake"])
        pairs = zip(lake_rows, case["lake"], strict=True)
        assert [{k: _jsonable(row[k]) for k in want} for row, want in pairs] == case["lake"]

    # every subject written is found by its keyed hash, in the lake file, in quarantine and
    # in the raw object
    # (a blank value names nobody, the one subject-id rule: it is never indexed, not even under
    # the hash of its own text)
    for row in lake_rows:
        objects = {e[1] for e in run.cloud.lookup(h(row["user_id"]))}
        if is_no_subject(row["user_id"]):
            assert {f"s3://{LAKE}/{lake_key}", raw_url}.isdisjoint(objects)
            continue
        assert {f"s3://{LAKE}/{lake_key}", raw_url} <= objects
    for record in (r["record"] for r in rejected):
        if isinstance(record.get("user_id"), str):
            objects = {e[1] for e in run.cloud.lookup(h(record["user_id"]))}
            if is_no_subject(record["user_id"]):
                assert {f"s3://{LAKE}/{rows_key}", raw_url}.isdisjoint(objects)
                continue
            assert {f"s3://{LAKE}/{rows_key}", raw_url} <= objects


def test_the_corpus_is_one_batch_of_at_least_forty_cases_with_every_outcome(run: Run) -> None:
    assert len(CASES) >= 40
    assert len({c["key"] for c in CASES}) == len(CASES)
    assert [o["key"] for o in run.summary["objects"]] == [c["key"] for c in CASES]
    assert {c["outcome"] for c in CASES} == set(EXPECTED_STATUS)
    assert sum(run.summary["counts"].values()) == len(CASES)
    # nothing else was written to the lake
    digests = {object_hash(RAW, c["key"]) for c in CASES}
    assert all(any(d in k for d in digests) for k in run.cloud.lake_keys())


def test_no_subject_id_is_logged_or_stored_outside_the_rows_themselves(run: Run) -> None:
    # the corpus's subjects are real: they are in the lake files and in quarantine records
    rows = run.cloud.lake_parquet(_lake_key("csv/bom.csv")).to_pylist()
    assert SUBJECT_MARK in json.dumps(rows, default=str)
    # and in no line the job or Spark printed, nor in the summary
    leaked = [line for line in run.output.splitlines() if SUBJECT_MARK in line]
    assert leaked == []
    # nor in a quarantine reason or a report of an unreadable file
    for key in run.cloud.lake_keys():
        if key.endswith(".file.json"):
            assert SUBJECT_MARK not in json.loads(run.cloud.lake_object(key))["reason"]
        elif key.endswith(".jsonl"):
            for line in run.cloud.lake_object(key).decode().splitlines():
                assert SUBJECT_MARK not in json.dumps(json.loads(line)["reasons"])
    # nor in the catalog or the index, which hold hashes only
    assert SUBJECT_MARK not in json.dumps(run.cloud.catalog.scan()["Items"], default=str)
    assert SUBJECT_MARK not in json.dumps(sorted(run.cloud.entries()))


def _lake_key(key: str) -> str:
    return f"{_dataset(key)}/part-{object_hash(RAW, key)}.parquet"


def _dataset(key: str) -> str:
    return key.partition("/")[0]


def test_the_committed_files_are_what_the_builder_writes() -> None:
    committed = build.committed()
    on_disk = {str(p.relative_to(build.FILES)) for p in build.FILES.rglob("*") if p.is_file()}
    assert on_disk == {build.file_name(k) for k in committed}
    for key, data in committed.items():
        assert (build.FILES / build.file_name(key)).read_bytes() == data, key
    assert {c["key"] for c in CASES if "generate" not in c} == set(committed)
    assert all(re.fullmatch(r"(csv|jsonl|parquet)/.+", c["key"]) for c in CASES)
