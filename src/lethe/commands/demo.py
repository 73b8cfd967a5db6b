"""`lethe demo`: the end-to-end scenario on the local cloud (what `make demo` runs).

Starts the local cloud, registers the sample datasets (samples/), looks a subject up in the
index (nothing yet), uploads clean and dirty files to the raw bucket, waits until ingestion has
settled every upload, prints the catalog, the quarantine with its reasons and the subject's
objects, and stops the cloud (unless --keep).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lethe.target import Target, from_state_file

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLES = REPO_ROOT / "samples"
DATASETS = ("reviews", "orders", "clicks")
UPLOADS = (  # (sample file, raw key): keys say nothing of the format on purpose
    ("reviews-2026-11-21.csv", "reviews/2026/11/21/batch-001.csv"),
    ("reviews-dirty.csv", "reviews/2026/11/22/batch-002.csv"),
    ("orders-2026-11-21.jsonl.gz.bin", "orders/2026/11/21/orders-0001"),
    ("clicks-2026-11-21.parquet", "clicks/2026/11/21/part-0001.parquet"),
    ("clicks-broken.parquet", "clicks/2026/11/21/part-0002.parquet"),
    ("README.md", "scratch/not-a-dataset.md"),
)
TERMINAL = {"INGESTED", "QUARANTINED", "FAILED", "IGNORED", "DELETED"}
SETTLE_TIMEOUT_SECONDS = 600
DEMO_SUBJECT = "u-1001"  # in the reviews CSV and, as a customer, in the orders


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("demo", help="run the end-to-end scenario on the local cloud")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=REPO_ROOT / ".lethe" / "demo.json",
        help="where the demo's local cloud keeps its state (default: .lethe/demo.json)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the local cloud running")
    parser.set_defaults(func=run_demo)


def _cli(*args: str) -> None:
    # Our own CLI, with arguments this module builds: no untrusted input reaches the command.
    subprocess.run([sys.executable, "-m", "lethe", *args], check=True)  # noqa: S603


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    state_file: Path = args.state_file
    _step("starting the local cloud (moto server, template.yaml deployed, handlers, Spark)")
    _cli("local", "down", "--state-file", str(state_file))
    _cli("local", "up", "--detach", "--state-file", str(state_file))
    try:
        target = from_state_file(state_file)
        _register(target)
        _lookup(state_file, "before ingestion: nobody is indexed yet")
        _upload(target)
        statuses = _wait_until_settled(target)
        _show_objects(state_file)
        _show_quarantine(target)
        _lookup(state_file, "after ingestion: every object holding the subject, by keyed hash")
        failed = [key for key, status in statuses.items() if status == "FAILED"]
        if failed:
            print(
                f"\ningestion FAILED for: {', '.join(failed)}; see the logs under "
                f"{state_file}.d/logs",
                file=sys.stderr,
            )
            return 1
        print("\ndemo finished: every upload was catalogued and ingested or quarantined.")
        return 0
    finally:
        if args.keep:
            print(f"\nthe local cloud keeps running: lethe local down --state-file {state_file}")
        else:
            _step("stopping the local cloud")
            _cli("local", "down", "--state-file", str(state_file))


def _register(target: Target) -> None:
    _step("registering datasets through the REST API (IAM-signed)")
    for name in DATASETS:
        document = json.loads((SAMPLES / f"{name}.dataset.json").read_text())
        status, body = target.call_api("PUT", f"/datasets/{name}", document)
        if status >= 400:
            raise SystemExit(f"registering {name} failed ({status}): {body}")
        print(
            f"  {name}: {document['format']}, subjects {document['subject_columns']}, "
            f"partitioned by {document['partition_by'] or 'nothing'}"
        )


def _upload(target: Target) -> None:
    raw = target.output("RawBucketName")
    _step(f"uploading samples to s3://{raw}/")
    s3 = target.client("s3")
    for sample, key in UPLOADS:
        s3.put_object(Bucket=raw, Key=key, Body=(SAMPLES / sample).read_bytes())
        print(f"  {sample:34} -> {key}")


def _raw_statuses(target: Target) -> dict[str, str]:
    raw = target.output("RawBucketName")
    table = target.resource("dynamodb").Table(target.output("ObjectCatalogTableName"))
    statuses: dict[str, str] = {}
    for _, key in UPLOADS:
        items = table.query(
            KeyConditionExpression="object_url = :u",
            ExpressionAttributeValues={":u": f"s3://{raw}/{key}"},
            ConsistentRead=True,
        )["Items"]
        if items:
            statuses[key] = str(max(items, key=lambda i: i["sequencer"])["status"])
    return statuses


def _wait_until_settled(target: Target) -> dict[str, str]:
    _step("waiting for the ingestion state machine and the Spark ingest job")
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    last: dict[str, str] = {}
    while time.monotonic() < deadline:
        statuses = _raw_statuses(target)
        if statuses != last:
            summary = ", ".join(f"{k.split('/')[0]}:{v}" for k, v in sorted(statuses.items()))
            print(f"  {summary}", flush=True)
            last = statuses
        if len(statuses) == len(UPLOADS) and set(statuses.values()) <= TERMINAL:
            return statuses
        time.sleep(2)
    raise SystemExit(f"ingestion did not settle within {SETTLE_TIMEOUT_SECONDS} s: {last}")


def _lookup(state_file: Path, when: str) -> None:
    # The id is the operator's input; what Lethe prints about the subject is its keyed hash.
    _step(f"lethe index lookup --subject <a reviewer of the samples>   ({when})")
    _cli("index", "lookup", "--subject", DEMO_SUBJECT, "--state-file", str(state_file))


def _show_objects(state_file: Path) -> None:
    for name in DATASETS:
        _step(f"lethe objects list --dataset {name}")
        _cli("objects", "list", "--dataset", name, "--state-file", str(state_file))


def _show_quarantine(target: Target) -> None:
    lake = target.output("LakeBucketName")
    s3 = target.client("s3")
    _step("quarantine: what was rejected, where it came from, and why")
    for name in DATASETS:
        listing = s3.list_objects_v2(Bucket=lake, Prefix=f"{name}/_quarantine/")
        for entry in listing.get("Contents", []):
            body = s3.get_object(Bucket=lake, Key=entry["Key"])["Body"].read().decode()
            for record in _quarantine_records(entry["Key"], body):
                print(f"  {name}: {record}")


def _quarantine_records(key: str, body: str) -> list[str]:
    if key.endswith(".file.json"):
        doc: dict[str, Any] = json.loads(body)
        return [f"{doc['source']['object']} (whole file): {doc['reason']}"]
    lines = []
    for line in body.splitlines():
        row = json.loads(line)
        source = row["source"]
        where = f"line {source['line']}" if "line" in source else f"row {source.get('row')}"
        lines.append(f"{source['object']} {where}: {'; '.join(row['reasons'])}")
    return lines
