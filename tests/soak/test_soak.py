"""Load on the running local cloud (issue 11, item 7; `make soak`, never part of `make test`).

Phase 1: 1,000 small CSV objects uploaded in a burst (16 threads) under two datasets; every
version must be ingested exactly once: catalogued INGESTED, its rows in the lake exactly once
(count and checksum of every lake row against what was uploaded, one version of each lake file),
and named by exactly one ingestion execution and one Spark ingest run.

Phase 2: 50 erasure requests filed at once (50 `lethe erasure request` processes; one in five
through a connection that loses every second answer after the API has filed the request, with
no --idempotency-key given: each must be filed exactly once), whose subjects
share objects: ten "hot" objects each hold eight of the erased subjects, so 8 to 17 requests
rewrite each of them, and ten requests name a subject an earlier request names too.
All are approved through the approval page over HTTP (GET the link, read the code and the CSRF
token, POST). Every request must end COMPLETED; no stored version of any object (raw and lake,
every version) may hold an erased subject's row; every other row must be intact (each raw object
byte for byte the upload minus the erased subjects' lines, the lake's rows the uploaded rows minus
theirs); and the requests touching one object must have been serialised: its final version
holds no erased row and all the others, and the catalog holds one written raw version per
request that removed rows from it (`results.json`), none lost to a concurrent write.

`--quick` runs a development size (120 objects, 12 requests) with the same shape. Subjects
(`sb-*`, `se-*`) and datasets (`soak-a`, `soak-b`) are this module's own. Figures (times per
phase, counts, load average) are printed at the end (conftest.py)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from lethe.target import Target, from_state_file
from tests.localcloud_support import (
    LocalCloud,
    cli,
    decide_on_approval_page,
    quiet,
    sample_dataset_as,
    wait_for,
)
from tests.soak.conftest import FIGURES
from tests.soak.flaky_proxy import FlakyProxy

pytestmark = pytest.mark.soak

DATASETS = ("soak-a", "soak-b")
HEADER = ["user_id", "review_date", "stars", "text"]
INGEST_TERMINAL = {"INGESTED", "QUARANTINED", "SUPERSEDED", "FAILED"}
ERASURE_TERMINAL = {"COMPLETED", "REJECTED", "EXPIRED", "FAILED"}
UPLOAD_THREADS = 16
FLAKY_SHARE = 5  # one filing in five goes through a connection that loses answers
Row = tuple[str, str, int, str]


@dataclass(frozen=True)
class Plan:
    """What is uploaded and what is erased, derived from the sizes alone."""

    objects: dict[str, list[Row]]  # raw key -> rows, in upload order
    requests: list[list[str]]  # the subjects of each request, in filing order
    hot: list[str]  # the raw keys many requests share

    @property
    def erased(self) -> set[str]:
        return {s for subjects in self.requests for s in subjects}

    def touching(self, key: str) -> int:
        """How many requests name a subject of this object."""
        held = {row[0] for row in self.objects[key]}
        return sum(1 for subjects in self.requests if held & set(subjects))


def make_plan(objects: int, requests: int) -> Plan:
    distinct = requests * 4 // 5  # subjects of their own: se-000 ...
    hot_count = max(2, distinct // 4)
    keys = [
        f"{DATASETS[i % 2]}/2026/11/{i % 28 + 1:02d}/upload-{i:04d}.csv" for i in range(objects)
    ]
    rows: dict[str, list[Row]] = {}
    for i, key in enumerate(keys):
        date = f"2026-11-{i % 28 + 1:02d}"
        rows[key] = [
            (f"sb-{i:04d}-{j}", date, 1 + (i + j) % 5, f"object {i}, row {j}") for j in range(3)
        ]
    hot = keys[:hot_count]
    for k in range(distinct):
        subject = f"se-{k:03d}"
        # two hot objects (each holds eight erased subjects) and one object of its own
        own = keys[hot_count + 7 * k]
        for key in (hot[(k // 4) % hot_count], hot[(k // 4 + 1) % hot_count], own):
            i = keys.index(key)
            date = f"2026-11-{i % 28 + 1:02d}"
            rows[key].insert(1, (subject, date, 1 + k % 5, f'erase me {k}, "{key[-8:-4]}"'))
    plan_requests = [[f"se-{k:03d}"] for k in range(distinct)]
    for r in range(requests - distinct):  # a subject named before, and another one with it
        plan_requests.append([f"se-{r:03d}", f"se-{(3 * r + 1) % distinct:03d}"])
    return Plan(objects=rows, requests=plan_requests, hot=hot)


def csv_bytes(rows: list[Row]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    return out.getvalue().encode()


def rows_checksum(rows: list[tuple[str, str, int, str]]) -> str:
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update(json.dumps(list(row)).encode() + b"\n")
    return digest.hexdigest()


class LoadSampler:
    """The 1-minute load average every 5 s, per phase."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.phase = "setup"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-load")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(5):
            self.samples[self.phase].append(os.getloadavg()[0])

    def summary(self) -> dict[str, Any]:
        return {
            phase: {"mean": round(sum(v) / len(v), 2), "max": round(max(v), 2), "samples": len(v)}
            for phase, v in self.samples.items()
            if v
        }

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Clock:
    sampler: LoadSampler
    times: dict[str, float] = field(default_factory=dict)

    def phase(self, name: str) -> Callable[[], None]:
        self.sampler.phase = name
        started = time.monotonic()

        def done() -> None:
            self.times[name] = round(time.monotonic() - started, 1)
            FIGURES["seconds"] = dict(self.times)
            FIGURES["load_average_1m"] = self.sampler.summary()

        return done


CLI_TIMEOUT = 300.0
POLL_SECONDS = 5.0  # a probe scans the catalog or lists every request: not more often


def _scan(cloud: LocalCloud, output: str) -> list[dict[str, Any]]:
    table = cloud.table(output)
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"ConsistentRead": True}
    while True:
        page = table.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _quiet(cloud: LocalCloud) -> bool:
    """No object event left to deliver, no ingestion or erasure execution running."""
    return quiet(cloud, machines=("IngestionStateMachineArn", "ErasureStateMachineArn"))


def _versions(cloud: LocalCloud, bucket: str) -> Iterator[dict[str, Any]]:
    s3 = cloud.client("s3")
    for dataset in DATASETS:
        for page in s3.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=f"{dataset}/"
        ):
            yield from page.get("Versions", [])
            yield from ({**m, "DeleteMarker": True} for m in page.get("DeleteMarkers", []))


def _read_all(cloud: LocalCloud, bucket: str) -> dict[tuple[str, str], bytes]:
    """(key, version) -> bytes of every stored version under the soak datasets."""
    listed = [v for v in _versions(cloud, bucket) if not v.get("DeleteMarker")]
    local = threading.local()

    def get(v: dict[str, Any]) -> tuple[tuple[str, str], bytes]:
        if not hasattr(local, "s3"):
            local.s3 = cloud.client("s3")
        body = local.s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
        return (v["Key"], v["VersionId"]), body["Body"].read()

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(get, listed))


def _lake_rows(key: str, body: bytes) -> list[tuple[str, str, int, str]]:
    """A lake file's rows as uploaded: review_date comes from its partition folder."""
    date = re.search(r"review_date=([0-9-]+)/", key)
    assert date, key
    return [
        (r["user_id"], date.group(1), int(r["stars"]), r["text"])
        for r in pq.read_table(io.BytesIO(body)).to_pylist()
    ]


def _register(cloud: LocalCloud, folder: Path) -> None:
    for dataset_id in DATASETS:
        path = sample_dataset_as("reviews", dataset_id, folder)
        put = cli(cloud, "datasets", "put", str(path), timeout=CLI_TIMEOUT)
        assert put.returncode == 0, put.stderr


def _spark_runs(logs_dir: Path) -> list[dict[str, Any]]:
    """Every local Spark run: its job, its args and how long it took (from the log's header and
    its last line)."""
    runs = []
    for path in sorted(logs_dir.glob("spark-*.log")):
        if path.name.startswith("spark-driver-"):  # a warm driver's own log, not a run
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        args_line = re.search(r"^# args (\[.*\])$", text, re.M)
        script = re.search(r"^# script (\S+)$", text, re.M)
        took = re.search(r"^# exit code (-?\d+) after ([0-9.]+) s$", text, re.M)
        args = json.loads(args_line.group(1).replace("'", '"')) if args_line else []
        runs.append(
            {
                "log": path.name,
                "job": Path(script.group(1)).stem if script else "?",
                "mode": args[args.index("--mode") + 1] if "--mode" in args else "",
                "args": args,
                "exit_code": int(took.group(1)) if took else None,
                "seconds": float(took.group(2)) if took else None,
            }
        )
    return runs


def _spark_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        by_kind[f"{run['job']}{'-' + run['mode'] if run['mode'] else ''}"].append(
            run["seconds"] or 0.0
        )
    return {
        kind: {
            "runs": len(seconds),
            "median_s": sorted(seconds)[len(seconds) // 2],
            "max_s": max(seconds),
            "total_s": round(sum(seconds), 1),
        }
        for kind, seconds in sorted(by_kind.items())
    }


# ---------------------------------------------------------------------------------- phase 1


@pytest.fixture(scope="module")
def sampler() -> Iterator[LoadSampler]:
    running = LoadSampler()
    FIGURES["cpus"] = os.cpu_count()
    yield running
    running.stop()
    FIGURES["load_average_1m"] = running.summary()


@pytest.fixture(scope="module")
def plan(sizes: dict[str, int]) -> Plan:
    return make_plan(sizes["objects"], sizes["requests"])


@pytest.fixture(scope="module")
def ingested(
    soak_cloud: LocalCloud,
    plan: Plan,
    sampler: LoadSampler,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    cloud, clock = soak_cloud, Clock(sampler)
    _register(cloud, tmp_path_factory.mktemp("soak-datasets"))
    raw = cloud.outputs["RawBucketName"]
    local = threading.local()

    def upload(item: tuple[str, list[Row]]) -> tuple[str, str]:
        if not hasattr(local, "s3"):
            local.s3 = cloud.client("s3")
        key, rows = item
        put = local.s3.put_object(Bucket=raw, Key=key, Body=csv_bytes(rows))
        return key, str(put["VersionId"])

    done = clock.phase("1 upload burst")
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        versions = dict(pool.map(upload, plan.objects.items()))
    done()

    done = clock.phase("1 ingestion to quiet")
    urls = {f"s3://{raw}/{key}": (key, version) for key, version in versions.items()}

    def catalogued() -> list[dict[str, Any]]:
        return [i for i in _scan(cloud, "ObjectCatalogTableName") if i["object_url"] in urls]

    def settled() -> bool:
        items = catalogued()
        done_items = [i for i in items if i["status"] in INGEST_TERMINAL]
        FIGURES["phase1_progress"] = f"{len(done_items)} of {len(urls)} versions terminal"
        return len(done_items) == len(urls) and _quiet(cloud)

    wait_for(settled, timeout=1500, what="every upload to be ingested", every=POLL_SECONDS)
    done()
    return {"cloud": cloud, "versions": versions, "catalog": catalogued(), "clock": clock}


def test_phase1_every_upload_is_catalogued_ingested(ingested: dict[str, Any], plan: Plan) -> None:
    statuses = Counter(i["status"] for i in ingested["catalog"])
    FIGURES["phase1_catalog"] = dict(statuses)
    assert len(ingested["catalog"]) == len(plan.objects)
    assert statuses == {"INGESTED": len(plan.objects)}
    raw = ingested["cloud"].outputs["RawBucketName"]
    assert {(i["object_url"], i["version_id"]) for i in ingested["catalog"]} == {
        (f"s3://{raw}/{key}", version) for key, version in ingested["versions"].items()
    }


def test_phase1_the_lake_holds_every_row_exactly_once(ingested: dict[str, Any], plan: Plan) -> None:
    cloud = ingested["cloud"]
    lake = _read_all(cloud, cloud.outputs["LakeBucketName"])
    assert not [k for k, _ in lake if "/_quarantine/" in k]
    per_key = Counter(k for k, _ in lake)
    assert max(per_key.values()) == 1  # no lake file written twice (a second ingestion)
    assert len(per_key) == len(plan.objects)  # one date per object: one lake file each
    got = [row for (key, _), body in lake.items() for row in _lake_rows(key, body)]
    uploaded = [row for rows in plan.objects.values() for row in rows]
    FIGURES["phase1_lake"] = {"files": len(per_key), "rows": len(got), "uploaded": len(uploaded)}
    assert len(got) == len(uploaded)
    assert rows_checksum(got) == rows_checksum(uploaded)


def test_phase1_each_version_went_through_one_execution_and_one_spark_run(
    ingested: dict[str, Any], plan: Plan
) -> None:
    cloud = ingested["cloud"]
    sfn, s3 = cloud.client("stepfunctions"), cloud.client("s3")
    executions = [
        e
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=cloud.outputs["IngestionStateMachineArn"]
        )
        for e in page["executions"]
    ]
    in_executions: Counter[tuple[str, str]] = Counter()
    for execution in executions:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        assert described["status"] == "SUCCEEDED", execution["name"]
        for obj in json.loads(described["input"])["objects"]:
            in_executions[(obj["key"], obj["version_id"])] += 1
    in_runs: Counter[tuple[str, str]] = Counter()
    runs = [r for r in _spark_runs(Path(cloud.state["logs_dir"])) if r["job"] == "ingest"]
    for run in runs:
        bucket, _, key = run["args"][run["args"].index("--objects-manifest") + 1][5:].partition("/")
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        for obj in manifest:
            in_runs[(obj["key"], obj["version_id"])] += 1
    expected = {(key, version): 1 for key, version in ingested["versions"].items()}
    FIGURES["phase1_runs"] = {
        "ingestion_executions": len(executions),
        "spark_ingest_runs": len(runs),
        "versions_per_execution_max": max(
            len(
                json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"])[
                    "objects"
                ]
            )
            for e in executions[:50]
        ),
    }
    assert dict(in_executions) == expected
    assert dict(in_runs) == expected


# ---------------------------------------------------------------------------------- phase 2


def _approve(link: str) -> str:
    answer = decide_on_approval_page(link, "approve", timeout=60)
    found = re.search(r'data-outcome="([a-z-]+)"', answer.text)
    return found.group(1) if found else f"HTTP {answer.status_code}"


def _records(target: Target, ids: set[str] | None) -> dict[str, dict[str, Any]]:
    """The listed requests (all of them when `ids` is None)."""
    status, answer = target.call_api("GET", "/erasure-requests")
    assert status == 200, answer
    return {r["request_id"]: r for r in answer["requests"] if ids is None or r["request_id"] in ids}


@pytest.fixture(scope="module")
def erased(ingested: dict[str, Any], plan: Plan) -> dict[str, Any]:
    cloud, clock = ingested["cloud"], ingested["clock"]
    target = from_state_file(cloud.state_file)
    raw = cloud.outputs["RawBucketName"]
    before = {
        "raw": _read_all(cloud, raw),
        "catalog": {(i["object_url"], i["version_id"]) for i in ingested["catalog"]},
    }

    # every FLAKY_SHARE-th filing goes through a connection that loses every second POST's
    # answer after the API has filed it; the CLI is given no --idempotency-key (it makes one)
    proxy = FlakyProxy(cloud.state["api_url"], drop_every=2).start()
    flaky_state = cloud.state_file.with_name("flaky.json")
    flaky_state.write_text(json.dumps({**cloud.state, "api_url": proxy.url}))
    flaky = replace(cloud, state_file=flaky_state)

    def file(numbered: tuple[int, list[str]]) -> str:
        number, subjects = numbered
        args = [a for s in subjects for a in ("--subject", s)]
        via = flaky if number % FLAKY_SHARE == 0 else cloud
        filed = cli(via, "erasure", "request", *args, "--requested-by", "soak@example.com",
                    "--reason", "soak test", timeout=CLI_TIMEOUT)  # fmt: skip
        assert filed.returncode == 0, filed.stderr
        return filed.stdout.strip()

    done = clock.phase("2 filing (50 at once)")
    try:
        with ThreadPoolExecutor(len(plan.requests)) as pool:
            ids = list(pool.map(file, enumerate(plan.requests)))
    finally:
        proxy.stop()
    done()
    assert len(set(ids)) == len(plan.requests)
    wanted = set(ids)
    # exactly one request per filing, the ones whose answer was lost included
    filed = [r for r in _records(target, None).values() if r.get("reason") == "soak test"]
    FIGURES["phase2_filing"] = {
        "through_flaky_connection": len(plan.requests[::FLAKY_SHARE]),
        "answers_lost": proxy.dropped,
        "requests_recorded": len(filed),
    }
    assert proxy.dropped >= 1
    assert sorted(r["request_id"] for r in filed) == sorted(wanted)

    done = clock.phase("2 reports to awaiting approval")

    def awaiting() -> bool:
        records = _records(target, wanted)
        states = Counter(r["status"] for r in records.values())
        FIGURES["phase2_progress"] = dict(states)
        return states.get("AWAITING_APPROVAL", 0) == len(wanted)

    wait_for(awaiting, timeout=900, what="every request to await approval", every=POLL_SECONDS)
    done()

    done = clock.phase("2 approval over HTTP")
    mail = json.loads(cli(cloud, "local", "mail", "--json", timeout=CLI_TIMEOUT).stdout)
    links = {}
    for request_id in ids:
        (message,) = [m for m in mail if request_id in m["subject"]]
        (links[request_id],) = message["links"]
    with ThreadPoolExecutor(8) as pool:
        outcomes = dict(zip(ids, pool.map(_approve, [links[i] for i in ids]), strict=True))
    done()

    done = clock.phase("2 erasure to terminal")

    def terminal() -> bool:
        records = _records(target, wanted)
        states = Counter(r["status"] for r in records.values())
        FIGURES["phase2_progress"] = dict(states)
        return sum(states[s] for s in ERASURE_TERMINAL) == len(wanted)

    wait_for(terminal, timeout=2400, what="every request to end", every=2 * POLL_SECONDS)
    wait_for(
        lambda: _quiet(cloud), timeout=300, what="the pipeline to be quiet", every=POLL_SECONDS
    )
    done()

    done = clock.phase("2 reading back")
    records = {}
    for request_id in ids:
        status, record = target.call_api("GET", f"/erasure-requests/{request_id}")
        assert status == 200, record
        records[request_id] = record
    s3, reports = cloud.client("s3"), cloud.outputs["ReportsBucketName"]
    results: dict[str, list[dict[str, Any]]] = {}
    for request_id in ids:
        try:
            body = s3.get_object(Bucket=reports, Key=f"erasure/{request_id}/results.json")
        except s3.exceptions.NoSuchKey:
            continue
        document = json.loads(body["Body"].read())
        results[request_id] = list(document["objects"])
    after = {
        "raw": _read_all(cloud, raw),
        "lake": _read_all(cloud, cloud.outputs["LakeBucketName"]),
        "catalog": [
            i for i in _scan(cloud, "ObjectCatalogTableName")
            if i["object_url"].startswith(tuple(f"s3://{raw}/{d}/" for d in DATASETS))
        ],
    }  # fmt: skip
    done()
    runs = _spark_runs(Path(cloud.state["logs_dir"]))
    FIGURES["spark_runs"] = _spark_summary(runs)
    return {
        "cloud": cloud,
        "ids": ids,
        "subjects": dict(zip(ids, plan.requests, strict=True)),
        "outcomes": outcomes,
        "records": records,
        "results": results,
        "before": before,
        "after": after,
    }


def test_phase2_every_request_was_approved_and_completed(erased: dict[str, Any]) -> None:
    outcomes = Counter(erased["outcomes"].values())
    statuses = Counter(r["status"] for r in erased["records"].values())
    FIGURES["phase2_requests"] = {"approval_pages": dict(outcomes), "statuses": dict(statuses)}
    failed = {
        i: (r.get("result") or {}).get("error") or r.get("error") or r.get("history", [])[-1:]
        for i, r in erased["records"].items()
        if r["status"] != "COMPLETED"
    }
    assert outcomes == {"approved": len(erased["ids"])}
    assert failed == {}
    for record in erased["records"].values():
        assert [h["status"] for h in record["history"]] == [
            "RECEIVED", "REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING", "COMPLETED",
        ]  # fmt: skip


def test_phase2_no_stored_version_holds_an_erased_subject(
    erased: dict[str, Any], plan: Plan
) -> None:
    pattern = re.compile(r"se-\d{3}")
    assert any(pattern.search(b.decode()) for b in erased["before"]["raw"].values())
    found = []
    for zone in ("raw", "lake"):
        for (key, version), body in erased["after"][zone].items():
            text = (
                json.dumps(pq.read_table(io.BytesIO(body)).to_pylist(), default=str)
                if key.endswith(".parquet")
                else body.decode("utf-8", "replace")
            )
            if pattern.search(text):
                found.append((zone, key, version))
    FIGURES["phase2_versions_after"] = {z: len(erased["after"][z]) for z in ("raw", "lake")}
    assert found == []


def test_phase2_every_other_row_is_intact(erased: dict[str, Any], plan: Plan) -> None:
    erased_subjects = plan.erased
    raw_after = erased["after"]["raw"]
    assert Counter(k for k, _ in raw_after) == Counter({k: 1 for k in plan.objects})
    for (key, version), body in raw_after.items():
        kept = [row for row in plan.objects[key] if row[0] not in erased_subjects]
        assert body == csv_bytes(kept), key
        if len(kept) == len(plan.objects[key]):  # untouched: still the uploaded version
            assert ((key, version)) in erased["before"]["raw"], key
    lake_after = erased["after"]["lake"]
    got = [row for (key, _), body in lake_after.items() for row in _lake_rows(key, body)]
    expected = [r for rows in plan.objects.values() for r in rows if r[0] not in erased_subjects]
    uploaded = sum(len(rows) for rows in plan.objects.values())
    FIGURES["phase2_rows"] = {
        "kept": len(got), "expected": len(expected), "erased": uploaded - len(expected),
    }  # fmt: skip
    assert len(got) == len(expected)
    assert rows_checksum(got) == rows_checksum(expected)


def test_phase2_requests_touching_one_object_were_serialised(
    erased: dict[str, Any], plan: Plan
) -> None:
    """Each raw object's catalog holds one version per request whose erase job wrote it
    (results.json): the uploaded one, then one per rewrite (REWRITTEN while current; a later
    erasure's purge marks it DELETED), none lost to a concurrent write; and the hot objects were
    shared by several requests."""
    cloud = erased["cloud"]
    raw = cloud.outputs["RawBucketName"]
    uploaded = erased["before"]["catalog"]
    written_versions = [
        i for i in erased["after"]["catalog"] if (i["object_url"], i["version_id"]) not in uploaded
    ]
    rewritten: Counter[str] = Counter(i["object_url"] for i in written_versions)
    FIGURES["phase2_rewritten_versions"] = dict(Counter(i["status"] for i in written_versions))
    written_by: dict[str, list[str]] = defaultdict(list)
    attempts: Counter[int] = Counter()
    for request_id, objects in erased["results"].items():
        for obj in objects:
            attempts[int(obj.get("attempts", 1))] += 1
            if obj["object_url"].startswith(f"s3://{raw}/") and obj.get("rows_removed"):
                written_by[obj["object_url"]].append(request_id)
    hot_touching = {key: plan.touching(key) for key in plan.hot}
    FIGURES["phase2_serialisation"] = {
        "hot_objects": len(plan.hot),
        "requests_per_hot_object": sorted(hot_touching.values()),
        "rewrites_per_hot_object": sorted(rewritten[f"s3://{raw}/{k}"] for k in plan.hot),
        "erase_attempts_per_object": dict(sorted(attempts.items())),
    }
    assert min(hot_touching.values()) >= 4
    assert len(erased["results"]) == len(erased["ids"])
    for url in {*rewritten, *written_by}:
        assert rewritten[url] == len(written_by[url]), url
    for key in plan.hot:
        assert rewritten[f"s3://{raw}/{key}"] >= 2, key
