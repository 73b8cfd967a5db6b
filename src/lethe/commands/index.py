"""`lethe index lookup | backfill | reconcile | migrate`: the subject index (docs/INDEX.md;
`migrate`: lethe.commands.index_migrate).

Subject ids are personal data. This module never prints or logs a raw id nor the hash key: it
hashes ids with the deployment's key (`SubjectHashKeySecretArn`) as soon as they are read, and
refers to a subject by that keyed hash, which is what the index stores.

`backfill` and `reconcile` start the state machines of template.yaml (outputs
`IndexBackfillStateMachineArn`, `IndexReconcileStateMachineArn`) and follow them until they end
(lethe.commands.executions); `compact` is lethe.commands.index_compact.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from lethe.commands import CommandError, UsageError, add_subject_argument
from lethe.commands.datasets import require_dataset
from lethe.commands.executions import (
    WAIT_TIMEOUT_SECONDS,
    check_dataset_id,
    finished,
    start_execution,
    wait_for_execution,
)
from lethe.commands.index_compact import add_compact_parser
from lethe.commands.index_migrate import add_migrate_parser, open_index
from lethe.commands.subject_keys import add_subject_key_argument, check_subject_keys
from lethe.progress import waiting
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.aws.executions import timestamped
from lethe_shared.aws.s3 import split_s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.subjects import (
    ErasureRequestBody,
    ErasureRequestError,
    SubjectSet,
    hash_subjects,
)
from lethe_shared.index.subject_index import DRIFT_KINDS, IndexEntry
from lethe_shared.subject_hashing.keys import load_hash_key

ZONES: Final = (Zone.LAKE.value, Zone.RAW.value)
HASH_SHOWN: Final = 16  # hex digits of a subject hash in text output


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "index", help="the subject index: lookup, backfill, reconcile, compact, migrate"
    )
    commands = parser.add_subparsers(dest="index_command", metavar="COMMAND", required=True)

    lookup = commands.add_parser(
        "lookup",
        help="objects that hold a subject's rows",
        description="Hashes the subject ids (--subject) and composite keys (--subject-key, one "
        "whole key per flag, as erasure request takes them) with the deployment's key, as an "
        "erasure request would, and lists the index entries of those hashes. Raw ids are never "
        "printed.",
    )
    add_subject_argument(lookup)
    add_subject_key_argument(lookup)
    lookup.add_argument("--dataset", help="only this dataset's objects")
    lookup.add_argument(
        "--all",
        action="store_true",
        help="include entries of keys whose current version is a delete marker "
        "(their data still sits in older versions until erased or expired)",
    )
    lookup.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(lookup)
    lookup.set_defaults(func=lookup_subjects)

    backfill = commands.add_parser(
        "backfill",
        help="index a dataset's existing objects (the index backfill state machine)",
    )
    backfill.add_argument("--dataset", required=True, help="dataset id")
    backfill.add_argument(
        "--zones",
        type=_zones,
        default=None,
        help="comma-separated zones to index, in order (default: lake,raw)",
    )
    backfill.add_argument(
        "--batch-size", type=int, default=100, help="objects per Spark job run (1-500)"
    )
    backfill.add_argument(
        "--max-concurrency", type=int, default=4, help="job runs at a time (1-50)"
    )
    backfill.add_argument(
        "--force",
        action="store_true",
        help="re-index objects already indexed at their current version (after a key rotation)",
    )
    _wait_arguments(backfill)
    add_target_arguments(backfill)
    backfill.set_defaults(func=backfill_dataset)

    reconcile = commands.add_parser(
        "reconcile",
        help="compare a dataset's index with a full scan (the index reconcile state machine)",
    )
    reconcile.add_argument("--dataset", required=True, help="dataset id")
    reconcile.add_argument("--fix", action="store_true", help="repair the drift it finds")
    reconcile.add_argument("--json", action="store_true", help="print the report JSON")
    reconcile.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        help="seconds to wait for the execution to end",
    )
    add_target_arguments(reconcile)
    reconcile.set_defaults(func=reconcile_dataset)

    add_compact_parser(commands)
    add_migrate_parser(commands)


def _wait_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-wait", action="store_true", help="print the execution ARN and return at once"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        help="seconds to wait for the execution to end (it goes on after that)",
    )


def _zones(text: str) -> list[str]:
    zones = [z.strip() for z in text.split(",") if z.strip()]
    if not zones or any(z not in ZONES for z in zones) or len(set(zones)) != len(zones):
        raise argparse.ArgumentTypeError("zones are lake and/or raw, comma-separated, once each")
    return zones


# ------------------------------------------------------------------------------------- lookup


def lookup_subjects(args: argparse.Namespace) -> int:
    """Each subject is hashed per dataset exactly as an erasure request hashes it
    (`erasure.subjects.hash_subjects`: "01001" is 1001 in an integer subject column and stays
    "01001" in a string one), and an entry is shown only when its hash is the subject's hash in
    the entry's own dataset: what a request for the same ids would find."""
    if not args.subject and not args.subject_key:
        raise UsageError("give --subject ID or --subject-key COLUMN=VALUE[,COLUMN=VALUE...]")
    composites = check_subject_keys(args.subject_key)
    target = resolve(args)
    key = load_hash_key(target.client("secretsmanager"), target.output("SubjectHashKeySecretArn"))
    if composites and args.dataset:
        for composite in composites:
            _check_composite(target, args.dataset, composite)
    registered = list(_registry(target).list())
    asked: list[dict[str, Any]] = [{"subject_ids": [s]} for s in dict.fromkeys(args.subject)]
    asked += [{"subject_keys": [composite]} for composite in composites]
    subjects = [_hashed(body, args.dataset, key, registered) for body in asked]
    index = open_index(target)  # the deployment's store (lethe_shared.index.opening)
    rows, seen = [], set()
    for number, subject in enumerate(subjects, start=1):
        for subject_hash in subject.hashes:
            for entry in index.lookup(subject_hash):
                wanted = subject_hash in subject.hashes_for(entry.dataset_id)
                place = (entry.subject_hash, entry.object_url)
                if not wanted or place in seen:
                    continue
                if (args.dataset is None or entry.dataset_id == args.dataset) and (
                    args.all or not entry.deleted
                ):
                    seen.add(place)
                    rows.append((number, _lookup_row(entry, with_deleted=args.all)))
    rows.sort(key=lambda r: (r[1]["dataset"], r[1]["zone"], r[1]["key"], r[1]["subject_hash"]))
    if args.json:
        print(json.dumps([row for _, row in rows], indent=2))
    else:
        _print_lookup(rows, subjects)
    return 0


def _registry(target: Target) -> DynamoDatasetRegistry:
    return DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )


def _hashed(
    body: dict[str, Any], dataset_id: str | None, key: bytes, registered: list[Dataset]
) -> SubjectSet:
    """One subject hashed per dataset of the scope (`--dataset`, else every registered one),
    as a request naming it alone would be; UsageError names the problem, never the value."""
    try:
        request = ErasureRequestBody.model_validate(
            {**body, "requested_by": "lethe index lookup",
             "datasets": [dataset_id] if dataset_id else None}
        )  # fmt: skip
        return hash_subjects(request, key, registered)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(_named(problems)) from None
    except ErasureRequestError as exc:
        raise UsageError(_named("; ".join(exc.problems))) from None


def _named(problems: str) -> str:
    """The body's field names as the command line's flags."""
    named = problems.replace("subject_ids[0]", "--subject")
    return named.replace("subject_keys[0]", "--subject-key")


def _print_lookup(rows: list[tuple[int, dict[str, Any]]], subjects: list[SubjectSet]) -> None:
    """A table; subjects are numbered in the order they were given (#1 is the first
    --subject, each --subject-key after the ids, in order) and shown by their hashes (one per
    subject column type of the datasets looked up in)."""
    for number, subject in enumerate(subjects, start=1):
        shown = ", ".join(subject.hashes) or "none: no dataset's subject column can hold it"
        print(f"#{number}: subject hash {shown}")
    if not rows:
        print("no index entries for these subjects")
        return
    print(f"{'#':>3} {'DATASET':16} {'ZONE':4} {'ROWS':>6}  OBJECT")
    for number, row in rows:
        flag = "  (deleted: older versions only)" if row.get("deleted") else ""
        print(
            f"{'#' + str(number):>3} {row['dataset']:16} {row['zone']:4} "
            f"{row['rows']:>6}  s3://{row['bucket']}/{row['key']}{flag}"
        )


def _check_composite(target: Target, dataset_id: str, pairs: dict[str, str]) -> None:
    """Every column of a `--subject-key` is a subject column of the `--dataset`, and none is
    missing (UsageError names columns, never a value; an unregistered dataset is exit 3)."""
    dataset = require_dataset(target, dataset_id)
    unknown = sorted(set(pairs) - set(dataset.subject_columns))
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not a subject column of {dataset_id} "
            f"(subject columns: {', '.join(dataset.subject_columns)})"
        )
    missing = [c for c in dataset.subject_columns if c not in pairs]
    if missing:
        raise UsageError(f"--subject-key: subject_keys lacks {', '.join(missing)}")


def _lookup_row(entry: IndexEntry, *, with_deleted: bool) -> dict[str, Any]:
    bucket, key = _split_s3_url(entry.object_url)
    row: dict[str, Any] = {
        "dataset": entry.dataset_id,
        "zone": entry.zone.value,
        "bucket": bucket,
        "key": key,
        "rows": entry.rows,
        "version_id": entry.version_id,
        "subject_hash": entry.subject_hash,
    }
    if with_deleted:
        row["deleted"] = entry.deleted
    return row


# ----------------------------------------------------------------------------------- backfill


def backfill_dataset(args: argparse.Namespace) -> int:
    check_dataset_id(args.dataset)
    if not 1 <= args.batch_size <= 500:
        raise UsageError("--batch-size must be from 1 to 500")
    if not 1 <= args.max_concurrency <= 50:
        raise UsageError("--max-concurrency must be from 1 to 50")
    document: dict[str, Any] = {
        "dataset_id": args.dataset,
        "batch_size": args.batch_size,
        "max_concurrency": args.max_concurrency,
        "force": args.force,
    }
    if args.zones:
        document["zones"] = args.zones
    target = resolve(args)
    require_dataset(target, args.dataset)
    sfn = target.client("stepfunctions")
    execution_arn = start_execution(
        sfn,
        target.output("IndexBackfillStateMachineArn"),
        timestamped(args.dataset, "backfill"),
        document,
    )
    print(execution_arn)
    if args.no_wait:
        return 0
    with waiting(args, f"backfill of {args.dataset}") as shown:
        described = wait_for_execution(
            sfn,
            execution_arn,
            timeout=args.timeout,
            progress=BatchProgress(sfn, execution_arn),
            waiting=shown,
        )
    output = finished(described, "backfill")
    print(
        f"backfill of {args.dataset} SUCCEEDED: {output.get('objects', 0)} objects "
        f"in {output.get('batches', 0)} batches (zones: {', '.join(output.get('zones', []))})"
    )
    return 0


class BatchProgress:
    """Progress of the backfill's Map Runs (one per zone): batches are child executions
    (DescribeMapRun `executionCounts`), objects are items (`itemCounts`), when the API has
    them; else the number of Map Runs started and ended, read from the execution history."""

    def __init__(self, sfn: Any, execution_arn: str) -> None:
        self._sfn = sfn
        self._execution_arn = execution_arn
        self._map_runs_api = True

    def __call__(self) -> str:
        if self._map_runs_api:
            try:
                return self._from_map_runs()
            except (ClientError, BotoCoreError, KeyError):  # no Map Run API: use the history
                self._map_runs_api = False
        return self._from_history()

    def _from_map_runs(self) -> str:
        batches = {"succeeded": 0, "failed": 0, "running": 0, "pending": 0}
        objects = {"total": 0, "succeeded": 0}
        runs = 0
        pages = self._sfn.get_paginator("list_map_runs").paginate(executionArn=self._execution_arn)
        for page in pages:
            for run in page.get("mapRuns", []):
                runs += 1
                described = self._sfn.describe_map_run(mapRunArn=run["mapRunArn"])
                for name in batches:
                    batches[name] += int(described["executionCounts"].get(name, 0))
                for name in objects:
                    objects[name] += int(described["itemCounts"].get(name, 0))
        if not runs:
            return "starting"
        return (
            f"batches: {batches['succeeded']} done, {batches['running']} running, "
            f"{batches['pending']} pending, {batches['failed']} failed; objects: "
            f"{objects['succeeded']} of {objects['total']} listed; zones started: {runs}"
        )

    def _from_history(self) -> str:
        started = ended = 0
        pages = self._sfn.get_paginator("get_execution_history").paginate(
            executionArn=self._execution_arn
        )
        for page in pages:
            for event in page.get("events", []):
                started += event["type"] == "MapRunStarted"
                ended += event["type"] in {"MapRunSucceeded", "MapRunFailed", "MapRunAborted"}
        return f"zones: {ended} of {started} indexed"


# ---------------------------------------------------------------------------------- reconcile


def reconcile_dataset(args: argparse.Namespace) -> int:
    check_dataset_id(args.dataset)
    target = resolve(args)
    require_dataset(target, args.dataset)
    sfn = target.client("stepfunctions")
    execution_arn = start_execution(
        sfn,
        target.output("IndexReconcileStateMachineArn"),
        timestamped(args.dataset, "reconcile"),
        {"dataset_id": args.dataset, "fix": args.fix},
    )
    print(execution_arn, file=sys.stderr if args.json else sys.stdout)
    with waiting(args, f"reconcile of {args.dataset}") as shown:
        described = wait_for_execution(sfn, execution_arn, timeout=args.timeout, waiting=shown)
    output = finished(described, "reconcile")
    bucket, key = _split_s3_url(str(output["report"]))
    body = target.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    report: dict[str, Any] = json.loads(body)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    for line in report_summary(report, str(output["report"])):
        print(line)
    return 0


def report_summary(report: dict[str, Any], url: str) -> list[str]:
    """A few lines a person reads; samples show subject hashes and objects only."""
    lines = [
        f"reconcile of {report.get('dataset_id')}: report {url}",
        f"objects scanned {report.get('objects_scanned', 0)}, index entries expected "
        f"{report.get('entries_expected', 0)}, found {report.get('entries_found', 0)}",
    ]
    for name in DRIFT_KINDS:
        label = name.replace("_", " ")
        part = report.get(name) or {}
        lines.append(f"{label + ':':12}{part.get('count', 0)}")
        lines.extend(f"    {_sample_text(sample)}" for sample in part.get("sample", [])[:5])
    drift = sum(int((report.get(n) or {}).get("count", 0)) for n in DRIFT_KINDS)
    fixed = report.get("fixed")
    lines.append(
        "no drift"
        if drift == 0
        else f"drift: {drift} entries ({'fixed' if fixed else 'not fixed; --fix repairs it'})"
    )
    return lines


def _sample_text(sample: Any) -> str:
    if not isinstance(sample, dict):
        return str(sample)
    subject = str(sample.get("subject_hash", ""))[:HASH_SHOWN]
    where = sample.get("object_url") or sample.get("key") or ""
    extra = {k: v for k, v in sample.items() if k not in {"subject_hash", "object_url", "key"}}
    details = " ".join(f"{k}={v}" for k, v in sorted(extra.items()))
    parts = (f"{subject}…" if subject else "", str(where), details)
    return " ".join(part for part in parts if part)


# ------------------------------------------------------------------------------------ helpers


def _split_s3_url(url: str) -> tuple[str, str]:
    try:
        return split_s3_url(url)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
