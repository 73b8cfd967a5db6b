"""`lethe datasets put | get | list | reindex`: register and read dataset documents
(docs/DATASETS.md; `records` and `show` live in datasets_records.py), and follow each
dataset's matching generation (lethe_shared.datasets.matching).

A PUT that changes how a dataset's rows match its subjects (its matching fingerprint) starts a
re-index of the dataset (the index backfill state machine, forced); until it completes, erasure
requests that reach the dataset wait. `put` says so; `get` and `list` show the generation the
registry holds and the one the index was built for; `reindex` starts the re-index of the
current generation again (after a failed one).

The subject hash key is followed the same way: each dataset records the fingerprint of the key
its index was built with (`indexed_key_fingerprint`); after the key is rotated (a new secret
value), every dataset has a *key re-index* pending, requests wait for it, and `lethe datasets
reindex --all` starts one for every dataset, with the fingerprint of the key it reads now
(recorded when the re-index succeeds). `list` and `get` say which datasets are still pending.
`--force` re-indexes a dataset even when nothing is pending."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lethe.commands import CommandError, NotFoundError
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.aws.executions import timestamped
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry, Registration
from lethe_shared.datasets.reindex import reindex_input
from lethe_shared.errors import DatasetValidationError, HashKeyError
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key

WAIT_NOTE = "erasure requests for this dataset wait until it completes"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("datasets", help="register and read datasets")
    commands = parser.add_subparsers(dest="datasets_command", required=True)

    put = commands.add_parser("put", help="register or update a dataset from a JSON document")
    put.add_argument("file", type=Path, help="the dataset document (JSON)")
    add_target_arguments(put)
    put.set_defaults(func=put_dataset)

    get = commands.add_parser("get", help="print a registered dataset document")
    get.add_argument("dataset_id")
    get.add_argument(
        "--json", action="store_true", help="print the document as JSON (what it always prints)"
    )
    add_target_arguments(get)
    get.set_defaults(func=get_dataset)

    listing = commands.add_parser("list", help="list registered datasets")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(listing)
    listing.set_defaults(func=list_datasets)

    reindex = commands.add_parser(
        "reindex",
        help="re-index a dataset (or --all) for its current generation and hash key",
        description="Starts the index backfill state machine for the whole dataset, forced, "
        "for its current matching generation and the subject hash key's current fingerprint, "
        "which it records when it succeeds. Use it when the re-index a PUT started failed, and "
        "after rotating the subject hash key (--all). Only a dataset with a re-index pending is "
        "started, unless --force; prints each execution ARN and returns.",
    )
    reindex.add_argument("dataset_id", nargs="?", help="the dataset (or --all)")
    reindex.add_argument(
        "--all", action="store_true", help="every registered dataset with a re-index pending"
    )
    reindex.add_argument(
        "--force", action="store_true", help="start a re-index even when nothing is pending"
    )
    add_target_arguments(reindex)
    reindex.set_defaults(func=reindex_dataset)

    from lethe.commands import datasets_records  # noqa: PLC0415

    datasets_records.add_parsers(commands)  # `records`, `show`


def put_dataset(args: argparse.Namespace) -> int:
    try:
        document = json.loads(args.file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CommandError(f"cannot read {args.file}: {exc}") from exc
    try:
        dataset = parse_dataset(document)  # the API validates too; fail before the round trip
    except DatasetValidationError as exc:
        raise CommandError(
            "\n".join([f"{args.file}: invalid dataset document", *exc.errors])
        ) from exc
    status, body = resolve(args).call_api("PUT", f"/datasets/{dataset.dataset_id}", document)
    if status >= 400:
        details = "\n".join(body.get("errors", []))
        raise CommandError(
            f"registration refused ({status}): {body.get('message')}\n{details}".rstrip()
        )
    for line in put_lines(dataset.dataset_id, status, body):
        print(line)
    return 0


def put_lines(dataset_id: str, status: int, body: dict[str, Any]) -> list[str]:
    """What `put` prints for the API's answer: the version and generation, and the re-index
    when there is one, with what it means for erasure."""
    verb = "registered" if status == 201 else "updated"
    lines = [f"{verb} dataset {dataset_id} (version {body['version']})"]
    if "generation" not in body:  # an API from before generations
        return lines
    lines.append(f"matching generation {body['generation']}{_indexed_text(body)}")
    reindex = body.get("reindex")
    if reindex:
        status_text = str(reindex.get("status", "RUNNING"))
        lines.append(
            f"re-index of generation {reindex['generation']}: {reindex['execution']} "
            f"({status_text}); {WAIT_NOTE}"
        )
        if status_text not in {"RUNNING", "SUCCEEDED"}:
            lines.append(f"start it again with `lethe datasets reindex {dataset_id}`")
    return lines


def _indexed_text(body: dict[str, Any]) -> str:
    indexed, generation = body.get("indexed_generation"), body.get("generation")
    text = (
        ", indexed"
        if indexed == generation
        else f", index built for generation {indexed} (re-index pending)"
    )
    if body.get("key_reindex_pending"):
        text += f", {_key_text(body.get('indexed_key_fingerprint'), body.get('key_fingerprint'))}"
    return text


def _key_text(indexed: str | None, current: str | None) -> str:
    """A pending key re-index in words: fingerprints only."""
    built = f"key {indexed}" if indexed else "an unknown key"
    return (
        f"index built with {built}, current key {current} (key re-index pending: "
        "`lethe datasets reindex`)"
    )


def get_dataset(args: argparse.Namespace) -> int:
    status, body = resolve(args).call_api("GET", f"/datasets/{args.dataset_id}")
    if status == 404:
        raise NotFoundError(
            f"{body.get('message')} ({status}): list them with `lethe datasets list`"
        )
    if status >= 400:
        raise CommandError(f"{body.get('message')} ({status})")
    print(json.dumps(body["dataset"], indent=2, sort_keys=True))
    if "generation" in body:  # stdout stays the document; the registry's fields go to stderr
        print(
            f"{args.dataset_id}: version {body.get('version')}, matching generation "
            f"{body['generation']}{_indexed_text(body)}",
            file=sys.stderr,
        )
    return 0


def current_key_fingerprint(target: Target) -> str:
    """The fingerprint of the subject hash key as the deployment's secret holds it now (read,
    never printed), or HashKeyError."""
    secrets = target.client("secretsmanager")
    return key_fingerprint(load_hash_key(secrets, target.output("SubjectHashKeySecretArn")))


def list_datasets(args: argparse.Namespace) -> int:
    target = resolve(args)
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    registrations = sorted(registry.registrations(), key=lambda r: r.dataset.dataset_id)
    if args.json:
        print(json.dumps([r.dataset.document() for r in registrations], indent=2, sort_keys=True))
        return 0
    try:
        current: str | None = current_key_fingerprint(target)
    except HashKeyError as exc:
        current = None
        print(f"lethe: {exc}: key re-index state not shown", file=sys.stderr)
    for registration in registrations:
        dataset = registration.dataset
        pending = "  re-index pending" if registration.reindex_pending else ""
        if current is not None and registration.key_reindex_pending(current):
            pending += "  key re-index pending"
        print(
            f"{dataset.dataset_id:24} {dataset.format.value:8} "
            f"subjects={','.join(dataset.subject_columns)} "
            f"generation={registration.matching_generation} "
            f"indexed={registration.indexed_generation}{pending}"
        )
    return 0


def _to_reindex(registry: DynamoDatasetRegistry, args: argparse.Namespace) -> list[Registration]:
    if args.all == bool(args.dataset_id):
        raise CommandError("name one dataset or give --all")
    if args.all:
        return sorted(registry.registrations(), key=lambda r: r.dataset.dataset_id)
    registration = registry.registration(args.dataset_id)
    if registration is None:
        raise NotFoundError(
            f"dataset {args.dataset_id} is not registered: list them with `lethe datasets list`"
        )
    return [registration]


def reindex_dataset(args: argparse.Namespace) -> int:
    target = resolve(args)
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    chosen = _to_reindex(registry, args)
    try:  # read before any re-index starts: a rotation after this leaves the datasets pending
        key = current_key_fingerprint(target)
    except HashKeyError as exc:
        raise CommandError(f"{exc}: no re-index started") from exc
    sfn = target.client("stepfunctions")
    for registration in chosen:
        dataset_id = registration.dataset.dataset_id
        generation = registration.matching_generation
        key_pending = registration.key_reindex_pending(key)
        if not (registration.reindex_pending or key_pending or args.force):
            print(
                f"dataset {dataset_id}: generation {generation} is indexed; nothing to do",
                file=sys.stderr if args.all else sys.stdout,
            )
            continue
        started = sfn.start_execution(
            stateMachineArn=target.output("IndexBackfillStateMachineArn"),
            # by generation, key (its first 8 hex digits) and second: a start of its own
            name=timestamped(dataset_id, f"reindex-g{generation}-k{key[:8]}"),
            input=json.dumps(reindex_input(dataset_id, generation, key), sort_keys=True),
        )
        print(started["executionArn"])
        why = f" (index built with {registration.indexed_key_fingerprint or 'an unknown key'})"
        print(
            f"re-index of {dataset_id} for generation {generation} with key {key} started"
            f"{why if key_pending else ''}; {WAIT_NOTE}",
            file=sys.stderr,
        )
    return 0


def require_dataset(target: Target, dataset_id: str) -> Dataset:
    """The registered dataset `dataset_id`, or NotFoundError (exit 3) saying how to list them."""
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    dataset = registry.get(dataset_id)
    if dataset is None:
        raise NotFoundError(
            f"dataset {dataset_id} is not registered: list them with `lethe datasets list`"
        )
    return dataset
