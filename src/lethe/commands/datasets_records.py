"""`lethe datasets records` and `lethe datasets show`: what a data-protection officer reads.

`records [--json]` prints the record of processing (GDPR Art. 30(1)) of every registered
dataset: purpose, legal basis (Art. 6(1)), data categories, recipients, the columns that
identify its subjects, retention, and which of these the document does not declare
(lethe_shared.datasets.processing). `show ID [--json]` prints one dataset: its document's
fields, its registry state, its record, and the legal holds that reach it
(lethe_shared.datasets.holds), so an operator sees at once why an erasure or a retention run
left its rows. Both read the DatasetsTable directly (like `datasets list`).

`retention ID [--json]` prints the dataset's retention plan as of now, a dry run that changes
nothing (lethe_shared.datasets.retention): the cutoff, the objects whose rows all expired
(decided from their partition key or age), the objects whose rows must be read one by one, and
the holds that keep rows (a held dataset: nothing is planned). The scheduled runs that remove
them are statemachines/retention.asl.json; `retention ID --run [--wait]` starts one by hand
(lethe.commands.retention_run); `show` prints the dataset's run state (its last run, the rule's
notice, the next scheduled run: lethe_shared.erasure.retention_runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from lethe.commands import NotFoundError, UsageError
from lethe.commands.retention_run import add_run_arguments, last_run_line, run_retention
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.datasets.holds import DynamoHolds, HoldView, LegalHold, hold_line
from lethe_shared.datasets.processing import processing_record, record_lines
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.datasets.retention import RetentionPlan, StoredObject, plan_retention, rule_sha256
from lethe_shared.erasure.retention_runs import DynamoRunStates, next_scheduled
from lethe_shared.errors import HashKeyError
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    records = commands.add_parser(
        "records",
        help="print the record of processing (Art. 30) of every dataset",
        description="Purpose, legal basis, data categories, recipients, subject columns and "
        "retention of every registered dataset, and the record fields each document does not "
        "declare.",
    )
    records.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(records)
    records.set_defaults(func=print_records)

    show = commands.add_parser(
        "show",
        help="print a dataset: document, registry state, record of processing, legal holds",
    )
    show.add_argument("dataset_id")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_arguments(show)
    show.set_defaults(func=show_dataset)

    retention = commands.add_parser(
        "retention",
        help="print a dataset's retention plan as of now (a dry run), or start a run (--run)",
        description="Without --run: the dataset's retention plan as of now, a dry run that "
        "removes nothing. With --run: starts a retention run of the dataset now, as the daily "
        "schedule starts one (legal holds and the rule's notice period apply as they do to "
        "scheduled runs), prints the execution ARN, and with --wait follows it and prints its "
        "outcome.",
    )
    retention.add_argument("dataset_id")
    retention.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the plan; with --run the execution and its outcome)",
    )
    add_run_arguments(retention)
    add_target_arguments(retention)
    retention.set_defaults(func=retention_command)


def _table(target: Target) -> Any:
    return target.resource("dynamodb").Table(target.output("DatasetsTableName"))


def print_records(args: argparse.Namespace) -> int:
    registry = DynamoDatasetRegistry(_table(resolve(args)))
    records = [processing_record(d) for d in sorted(registry.list(), key=lambda d: d.dataset_id)]
    if args.json:
        print(json.dumps(records, indent=2, sort_keys=True))
        return 0
    for line in record_lines(records) or ["(no dataset is registered)"]:
        print(line)
    return 0


def shown_dataset(target: Target, dataset_id: str) -> dict[str, Any]:
    """Everything `show` prints about one dataset, or NotFoundError."""
    table = _table(target)
    registration = DynamoDatasetRegistry(table).registration(dataset_id)
    if registration is None:
        raise NotFoundError(
            f"dataset {dataset_id} is not registered: list them with `lethe datasets list`"
        )
    holds = DynamoHolds(table).active_for([dataset_id])
    return {
        "dataset": registration.dataset.document(),
        **registration.summary(),
        "record": processing_record(registration.dataset),
        "legal_holds": [h.shown() for h in holds],
        "retention_runs": retention_runs(target, table, registration.dataset),
    }


def retention_runs(target: Target, table: Any, dataset: Any) -> dict[str, Any]:
    """The dataset's scheduled retention: the schedule, the next run, the rule's notice and
    the last run (its state item; {} without a declared retention)."""
    if dataset.retention is None:
        return {}
    state = DynamoRunStates(table).get(dataset.dataset_id)
    schedule = str(target.outputs.get("RetentionSchedule", ""))  # "": a stack from before
    expression, _, enabled = schedule.partition(" (")
    upcoming = next_scheduled(expression, datetime.now(UTC)) if "ENABLED" in enabled else None
    current = rule_sha256(dataset)
    return {
        "schedule": schedule or "not deployed",
        "next_run": upcoming.isoformat() if upcoming else None,
        "rule_sha256": current,
        # a rule no run has seen yet: its notice starts at the next run
        "rule_seen": state is not None and state.rule_sha256 == current,
        "rule_since": state.rule_since if state and state.rule_sha256 == current else None,
        "applies_from": state.applies_from if state and state.rule_sha256 == current else None,
        "last_run": state.last_run if state else None,
    }


def show_dataset(args: argparse.Namespace) -> int:
    shown = shown_dataset(resolve(args), args.dataset_id)
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    document = shown["dataset"]
    print(
        f"dataset {args.dataset_id}: {document['format']}, version {shown['version']}, "
        f"matching generation {shown['generation']}, indexed {shown['indexed_generation']}"
    )
    print(f"  subjects by:      {', '.join(document['subject_columns'])}")
    for line in record_lines([shown["record"]])[1:]:
        print(line)
    runs = shown["retention_runs"]
    if runs:
        print(f"  retention runs:   {runs['schedule']}; next {runs['next_run'] or 'not scheduled'}")
        if runs["rule_seen"]:
            print(
                f"    rule in force since {runs['rule_since']}, applied from {runs['applies_from']}"
            )
        else:
            print("    rule not yet seen by a run: its notice period starts at the next run")
        last = runs["last_run"] or {}
        if last:
            print(f"    {last_run_line(last)}")
        else:
            print("    no run yet")
    holds = shown["legal_holds"]
    print(f"  legal holds:      {len(holds) or 'none'}")
    for hold in holds:
        print(f"    {hold_line(LegalHold.model_validate(hold))}")
    return 0


def _stored(target: Target, dataset_id: str) -> list[StoredObject]:
    """The current versions of the dataset's objects in both zones."""
    store = S3ObjectStore(target.client("s3"))
    found = []
    for zone, output in (("raw", "RawBucketName"), ("lake", "LakeBucketName")):
        bucket = target.output(output)
        for version in store.list_versions(bucket, f"{dataset_id}/"):
            if version.is_latest and not version.delete_marker and version.last_modified:
                found.append(StoredObject(zone, bucket, version.key, version.last_modified))
    return found


def retention_plan(target: Target, dataset_id: str, now: datetime) -> RetentionPlan:
    """The dataset's retention plan at `now`, with the active holds under the current key (a
    key that cannot be read: every subject hold holds its datasets whole, fail closed)."""
    table = _table(target)
    registration = DynamoDatasetRegistry(table).registration(dataset_id)
    if registration is None:
        raise NotFoundError(
            f"dataset {dataset_id} is not registered: list them with `lethe datasets list`"
        )
    try:
        secret = target.output("SubjectHashKeySecretArn")
        key = key_fingerprint(load_hash_key(target.client("secretsmanager"), secret))
    except HashKeyError as exc:
        key = ""
        print(f"lethe: {exc}: subject holds hold their datasets whole", file=sys.stderr)
    holds = HoldView.of(DynamoHolds(table).active_for([dataset_id]), key)
    return plan_retention(registration.dataset, _stored(target, dataset_id), now, holds)


def retention_command(args: argparse.Namespace) -> int:
    """`retention ID`: the plan (a dry run); `retention ID --run`: a run started now
    (lethe.commands.retention_run)."""
    if args.run:
        return run_retention(args)
    if args.wait:
        raise UsageError("--wait needs --run (without --run the plan is printed, nothing runs)")
    return show_retention(args)


def show_retention(args: argparse.Namespace) -> int:
    plan = retention_plan(resolve(args), args.dataset_id, datetime.now(UTC))
    shown: dict[str, Any] = {
        **plan.summary(),
        "expired": [f"s3://{o.bucket}/{o.key}" for o in plan.expired],
        "scanned": [f"s3://{o.bucket}/{o.key}" for o in plan.scanned],
    }
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    if plan.rule is None:
        print(f"dataset {args.dataset_id} declares no retention")
        return 0
    if plan.held_by:
        print(f"dataset {args.dataset_id} is under legal hold {plan.held_by}: nothing expires")
        return 0
    rule = f"{plan.rule.column} before" if plan.rule.column else "objects written before"
    print(f"dataset {args.dataset_id}: rows with {rule} {plan.rule.cutoff.isoformat()} expire")
    print(f"  objects expired whole:   {len(plan.expired)}")
    print(f"  objects to read by row:  {len(plan.scanned)}")
    print(f"  objects within period:   {plan.left}")
    if plan.undated:
        print(f"  objects without a date:  {plan.undated} (kept)")
    if plan.held_hashes:
        print(f"  held subjects kept:      {len(plan.held_hashes)}")
    return 0
