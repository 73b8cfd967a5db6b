"""`lethe hold add | remove | list`: legal holds (GDPR Art. 17(3); lethe_shared.datasets.holds).

    lethe hold add --dataset ID --reason TEXT [--by WHO]                 the whole dataset
    lethe hold add --subject ID [--dataset ID] --reason TEXT [--by WHO]  one subject
    lethe hold add --subject-key COL=VAL,COL=VAL [--dataset ID] ...      a composite key
    lethe hold remove HOLD_ID --reason TEXT [--by WHO]
    lethe hold list [--all] [--json]

A subject is hashed here with the deployment's subject hash key, per dataset (its subject
column's type decides the canonical text, as an erasure request's ids are:
lethe_shared.subject_hashing.values.request_text), in the named dataset or in every dataset
registered now; only the hashes and the key's fingerprint are stored, never the id, and the id
is never printed. A held dataset or subject is not erased by erasure requests (their
certificates name it, reason `legal_hold`) nor by retention runs, until the hold is removed.
Removing records who, when and why; the hold stays listed with `--all`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from lethe.commands import CommandError, UsageError, add_subject_argument
from lethe.commands.subject_keys import add_subject_key_argument, check_subject_keys
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.holds import (
    EVERY_DATASET,
    DynamoHolds,
    HoldError,
    LegalHold,
    hold_line,
    new_hold,
)
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.subject_hashing.canonical import is_no_subject
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key, subject_hash


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "hold", help="legal holds: keep a dataset or a subject from erasure and retention"
    )
    commands = parser.add_subparsers(dest="hold_command", required=True)

    add = commands.add_parser("add", help="hold a dataset, or a subject (hashed, never stored)")
    add.add_argument("--dataset", metavar="ID", help="the dataset (a subject: limits it there)")
    add_subject_argument(add)
    add_subject_key_argument(add)  # one whole key per flag, as everywhere (subject_keys)
    add.add_argument("--reason", required=True, help="why (Art. 17(3)); stored as written")
    add.add_argument(
        "--by",
        metavar="WHO",
        help="who holds (default: $LETHE_REQUESTED_BY, else the caller's AWS identity ARN)",
    )
    add.add_argument("--json", action="store_true", help="print the hold as JSON")
    add_target_arguments(add)
    add.set_defaults(func=add_hold)

    remove = commands.add_parser("remove", help="release a hold (recorded, never deleted)")
    remove.add_argument("hold_id")
    remove.add_argument("--reason", required=True, help="why the hold ends")
    remove.add_argument("--by", metavar="WHO", help="who releases it")
    add_target_arguments(remove)
    remove.set_defaults(func=remove_hold)

    listing = commands.add_parser("list", help="list active holds (--all: released too)")
    listing.add_argument("--all", action="store_true", help="released holds too")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(listing)
    listing.set_defaults(func=list_holds)


def _holds(target: Target) -> DynamoHolds:
    return DynamoHolds(target.resource("dynamodb").Table(target.output("DatasetsTableName")))


def _who(target: Target, given: str | None) -> str:
    who = given or os.environ.get("LETHE_REQUESTED_BY", "")
    if who:
        return who
    try:
        return str(target.client("sts").get_caller_identity()["Arn"])
    except (BotoCoreError, ClientError) as exc:
        raise CommandError(f"cannot tell who acts ({exc}): give --by WHO") from None


METRIC_NAMESPACE = "Lethe"  # the functions' Powertools namespace and dimension: one dashboard
HOLD_METRICS = ("LegalHoldsAdded", "LegalHoldsReleased")  # the dashboard's "Legal holds" widget


def count_change(target: Target, metric: str) -> None:
    """One CloudWatch count per hold change (`LegalHoldsAdded`, `LegalHoldsReleased`) for the
    dashboard; a metric that cannot be written is said on stderr, the hold stays recorded."""
    try:
        target.client("cloudwatch").put_metric_data(
            Namespace=METRIC_NAMESPACE,
            MetricData=[{
                "MetricName": metric, "Value": 1, "Unit": "Count",
                "Dimensions": [{"Name": "service", "Value": "lethe"}],
            }],
        )  # fmt: skip
    except (BotoCoreError, ClientError) as exc:
        print(f"lethe: the hold is recorded; metric {metric} not written ({exc})", file=sys.stderr)


def subject_hashes(
    datasets: list[Dataset], subject: str | None, key_values: dict[str, str] | None, key: bytes
) -> dict[str, str]:
    """The subject's keyed hash in each dataset it can be a subject of: one id in datasets with
    one subject column, a composite key in datasets whose subject columns are exactly its
    columns; a dataset where no value of the column's type equals the id is left out."""
    from lethe_shared.subject_hashing.values import request_text  # noqa: PLC0415

    found: dict[str, str] = {}
    for dataset in datasets:
        columns = dataset.subject_columns
        if subject is not None and len(columns) == 1:
            values: dict[str, Any] = {columns[0]: subject}
        elif key_values is not None and set(key_values) == set(columns):
            values = dict(key_values)
        else:
            continue
        texts = [request_text(values[c], dataset.column_type(c)) for c in columns]
        if all(t is not None for t in texts):
            found[dataset.dataset_id] = subject_hash(key, columns, texts)
    return found


def _scope(registry: DynamoDatasetRegistry, dataset_id: str | None) -> list[Dataset]:
    """The named dataset, or every registered one."""
    if not dataset_id:
        return sorted(registry.list(), key=lambda d: d.dataset_id)
    dataset = registry.get(dataset_id)
    if dataset is None:
        raise CommandError(
            f"dataset {dataset_id} is not registered: list them with `lethe datasets list`"
        )
    return [dataset]


def _held_subject(
    args: argparse.Namespace, target: Target, scope: list[Dataset]
) -> tuple[dict[str, str], str]:
    """The subject's hashes per dataset of the scope and the key's fingerprint (never the id)."""
    subject = args.subject[0] if args.subject else None
    key_values = args.subject_key[0] if args.subject_key else None
    texts = [subject] if subject is not None else list((key_values or {}).values())
    if any(is_no_subject(t) for t in texts):
        raise UsageError("the subject is empty or whitespace only: it names nobody")
    if any(len(t) >= 4 and t in args.reason for t in texts):
        raise UsageError("--reason names the subject: say why without the id")
    key = load_hash_key(target.client("secretsmanager"), target.output("SubjectHashKeySecretArn"))
    hashes = subject_hashes(scope, subject, key_values, key)
    if not hashes:
        raise CommandError(
            "no dataset of the scope can hold this subject (no subject column of that form "
            "or type): nothing held"
        )
    return hashes, key_fingerprint(key)


def add_hold(args: argparse.Namespace) -> int:
    target = resolve(args)
    subjects = [*args.subject, *check_subject_keys(args.subject_key)]
    if len(subjects) > 1:
        raise UsageError("one subject per hold: give one --subject or one --subject-key")
    if not subjects and not args.dataset:
        raise UsageError("give --dataset ID, or a subject (--subject ID or --subject-key)")
    table = target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    scope = _scope(DynamoDatasetRegistry(table), args.dataset)
    who = _who(target, args.by)
    hashes, fingerprint = _held_subject(args, target, scope) if subjects else ({}, "")
    try:
        hold = new_hold(
            dataset_id=args.dataset or EVERY_DATASET,
            reason=args.reason,
            held_by=who,
            subject_hashes=hashes,
            key_fingerprint=fingerprint,
        )
    except ValidationError as exc:  # the fields' names and limits, never their values
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise UsageError(f"the hold is refused: {problems}") from None
    try:
        DynamoHolds(table).add(hold)
    except HoldError as exc:
        raise CommandError(str(exc)) from None
    count_change(target, HOLD_METRICS[0])
    if args.json:
        print(json.dumps(hold.shown(), indent=2, sort_keys=True))
    else:
        print(hold.hold_id)
        print(f"held: {hold_line(hold)}", file=sys.stderr)
    return 0


def remove_hold(args: argparse.Namespace) -> int:
    target = resolve(args)
    try:
        released = _holds(target).release(
            args.hold_id, by=_who(target, args.by), reason=args.reason
        )
    except HoldError as exc:
        raise CommandError(str(exc)) from None
    count_change(target, HOLD_METRICS[1])
    print(f"released: {hold_line(released)}")
    return 0


def list_holds(args: argparse.Namespace) -> int:
    store = _holds(resolve(args))
    holds: list[LegalHold] = store.all() if args.all else store.active()
    if args.json:
        print(json.dumps([h.shown() for h in holds], indent=2, sort_keys=True))
        return 0
    for hold in holds:
        print(hold_line(hold))
    if not holds:
        print("(no hold)", file=sys.stderr)
    return 0
