"""`lethe demo`: the end-to-end scenario on the local cloud (what `make demo` runs).

Starts the local cloud, registers the sample datasets (samples/), looks a subject up in the
index (nothing yet), uploads clean and dirty files to the raw bucket, waits until ingestion has
settled every upload, prints the catalog, the quarantine with its reasons and the subject's
objects. Then the erasure story: a producer overwrites a file (the subject stays in its older
version), a privacy officer files a request for two subjects, the approver's email arrives, the
approver opens the link, types the code and approves (scripted here; the e2e tests do it in a
browser), and the request runs to COMPLETED: the demo prints what was touched, the rows removed,
the versions purged, the time taken and where the certificate is, verifies the certificate and
looks the subject up again (nothing). It stops the cloud (unless --keep).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from lethe.adapters import object_catalog
from lethe.progress import Waiting
from lethe.target import Target, from_state_file
from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import latest

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
ERASURE_TIMEOUT_SECONDS = 900
DEMO_SUBJECT = "u-1001"  # in the reviews CSV and, as a customer, in the orders
SECOND_SUBJECT = "u-1002"  # a multi-line review, and an order
OVERWRITE = (
    "reviews/2026/11/21/batch-001.csv",
    b"\xef\xbb\xbfuser_id,review_date,stars,text\r\n"
    b'u-1001,2026-11-21,3,ok\r\nu-2002,2026-11-22,5,"new reviewer"\r\n',
)
REQUESTER = "privacy@example.com"


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
        statuses = _wait_until_settled(target, quiet=bool(getattr(args, "quiet", False)))
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
        print("\nevery upload was catalogued and ingested or quarantined.")
        return _erasure_story(target, state_file) or _iam_verdict(state_file)
    finally:
        if args.keep:
            print(f"\nthe local cloud keeps running: lethe local down --state-file {state_file}")
        else:
            _step("stopping the local cloud")
            _cli("local", "down", "--state-file", str(state_file))


def _iam_verdict(state_file: Path) -> int:
    """The local IAM check's verdict (lethe.localcloud.iam): 1 if any call was denied."""
    from lethe.localcloud import iam_log  # noqa: PLC0415 - only the demo reads it

    decisions, _ = iam_log.read_decisions(Path(f"{state_file}.d") / "logs")
    denied = iam_log.distinct_denials(decisions)
    if denied:
        print("\ncalls the template's IAM policies do not allow:", file=sys.stderr)
        for line in denied:
            print(f"  {line}", file=sys.stderr)
        return 1
    checked = len(decisions)
    print(f"\nIAM: {checked} calls checked against the template's policies, none denied.")
    return 0


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
    catalog = object_catalog(target)
    statuses: dict[str, str] = {}
    for _, key in UPLOADS:
        current = latest(catalog.versions_of(s3_url(raw, key)))
        if current is not None:
            statuses[key] = current.status.value
    return statuses


def _wait_until_settled(target: Target, *, quiet: bool = False) -> dict[str, str]:
    _step("waiting for the ingestion state machine and the Spark ingest job")
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    last: dict[str, str] = {}
    # The statuses are the demo's story (stdout); a terminal also gets a spinner on stderr.
    with Waiting("ingestion", quiet=quiet or not sys.stderr.isatty()) as spinner:
        while time.monotonic() < deadline:
            statuses = _raw_statuses(target)
            if statuses != last:
                summary = ", ".join(f"{k.split('/')[0]}:{v}" for k, v in sorted(statuses.items()))
                print(f"  {summary}", flush=True)
                settled = sum(status in TERMINAL for status in statuses.values())
                spinner.update(f"{settled} of {len(UPLOADS)} uploads settled")
                last = statuses
            else:
                spinner.tick()
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


# ------------------------------------------------------------------------------------- erasure


def _erasure_story(target: Target, state_file: Path) -> int:
    _overwrite(target)
    _step(
        "lethe erasure request --subject <two reviewers> --dataset reviews --dataset orders"
        "   (as the privacy officer)"
    )
    started = time.monotonic()
    # Scoped to the datasets that hold the two reviewers: the clicks upload quarantined whole
    # above cannot be searched, so a request over every dataset would end INCOMPLETE naming it
    # (docs/ERASURE.md, "What a request covers") until it is fixed or deleted.
    request_id = _cli_output(
        "erasure", "request", "--subject", DEMO_SUBJECT, "--subject", SECOND_SUBJECT,
        "--dataset", "reviews", "--dataset", "orders",
        "--requested-by", REQUESTER, "--reason", "GDPR article 17 request",
        "--state-file", str(state_file),
    ).strip()  # fmt: skip
    print(f"  request {request_id}: the ids are hashed at the door, never stored")
    _step("waiting for the frozen report and the approver's email")
    _cli(
        "erasure", "status", request_id, "--wait", "--until", "AWAITING_APPROVAL",
        "--state-file", str(state_file),
    )  # fmt: skip
    _step("lethe local mail   (what SES sent the approver)")
    _cli("local", "mail", "--state-file", str(state_file))
    link = _approval_link(state_file, request_id)
    _step("the approver opens the link, reads the page, types the code and approves")
    print(f"  {_approve(link)}")
    _step("Spark erases every object and stored version, verifies, updates the index, certifies")
    status = subprocess.run(  # noqa: S603 - our own CLI, arguments built here
        [sys.executable, "-m", "lethe", "erasure", "status", request_id, "--wait",
         "--timeout", str(ERASURE_TIMEOUT_SECONDS), "--state-file", str(state_file)],
        check=False,
    ).returncode  # fmt: skip
    elapsed = time.monotonic() - started
    if status != 0:
        print(f"\nthe erasure did not complete; see lethe erasure status {request_id}")
        return 1
    _step(f"lethe erasure certificate {request_id} --verify")
    _cli("erasure", "certificate", request_id, "--verify", "--state-file", str(state_file))
    _lookup(state_file, "after the erasure: the subject is gone from the index")
    _summary(target, request_id, elapsed)
    return 0


def _cli_output(*args: str) -> str:
    return subprocess.run(  # noqa: S603 - our own CLI, arguments built by this module
        [sys.executable, "-m", "lethe", *args], check=True, capture_output=True, text=True
    ).stdout


def _overwrite(target: Target) -> None:
    key, body = OVERWRITE
    raw = target.output("RawBucketName")
    _step(f"a producer overwrites {key}: the second reviewer stays only in its older version")
    target.client("s3").put_object(Bucket=raw, Key=key, Body=body)
    catalog = object_catalog(target)
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        versions = catalog.versions_of(s3_url(raw, key))
        newest = latest(versions)
        if len(versions) > 1 and newest is not None and newest.status.value in TERMINAL:
            print(f"  version 2: {newest.status.value}")
            return
        time.sleep(2)
    raise SystemExit("the overwritten file was not ingested in time")


def _approval_link(state_file: Path, request_id: str) -> str:
    mail = json.loads(_cli_output("local", "mail", "--json", "--state-file", str(state_file)))
    for item in reversed(mail):
        if request_id in item["subject"] and item["links"]:
            return str(item["links"][0])
    raise SystemExit(f"no approval email for {request_id}")


def _approve(link: str) -> str:
    """What the approver does on the page (the e2e tests do it in Chromium)."""
    session = requests.Session()
    page = session.get(link, timeout=30).text
    code = re.search(r'<code id="confirmation-code">([^<]+)</code>', page)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    if code is None or token is None:
        raise SystemExit("the approval page offers no decision")
    answer = session.post(
        link,
        data={"csrf_token": token.group(1), "confirmation": code.group(1), "decision": "approve"},
        timeout=30,
    ).text
    found = re.search(r'data-outcome="([^"]+)"', answer)
    said = found.group(1) if found else "?"
    return f"confirmation code {code.group(1)} typed; the page says: {said}"


def _summary(target: Target, request_id: str, elapsed: float) -> None:
    _, record = target.call_api("GET", f"/erasure-requests/{request_id}")
    result, report = record.get("result", {}), record.get("report", {})
    _step("summary")
    print(f"  request            {request_id} ({record['status']})")
    touched = f"{result.get('rewritten', 0)} rewritten, {result.get('deleted', 0)} deleted"
    print(f"  objects touched    {result.get('objects', 0)} ({touched})")
    print(f"  rows removed       {result.get('rows_removed', 0)}")
    print(f"  versions purged    {result.get('versions_purged', 0)}")
    print(f"  report SHA-256     {report.get('manifest_sha256', '')}")
    print(f"  time taken         {elapsed:.0f} s from request to certificate")
    print(f"  certificate        {record.get('certificate', {}).get('url', '')}")
    print(f"                     {record.get('certificate', {}).get('html_url', '')}")
    print(
        "\ndemo finished: ingested, indexed, and two subjects forgotten with a signed certificate."
    )
