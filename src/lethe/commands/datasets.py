"""`lethe datasets put | get | list`: register and read dataset documents (docs/DATASETS.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lethe.commands import CommandError, NotFoundError
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.errors import DatasetValidationError


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
    verb = "registered" if status == 201 else "updated"
    print(f"{verb} dataset {dataset.dataset_id} (version {body['version']})")
    return 0


def get_dataset(args: argparse.Namespace) -> int:
    status, body = resolve(args).call_api("GET", f"/datasets/{args.dataset_id}")
    if status == 404:
        raise NotFoundError(
            f"{body.get('message')} ({status}): list them with `lethe datasets list`"
        )
    if status >= 400:
        raise CommandError(f"{body.get('message')} ({status})")
    print(json.dumps(body["dataset"], indent=2, sort_keys=True))
    return 0


def list_datasets(args: argparse.Namespace) -> int:
    target = resolve(args)
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    datasets = sorted(registry.list(), key=lambda d: d.dataset_id)
    if args.json:
        print(json.dumps([d.document() for d in datasets], indent=2, sort_keys=True))
    else:
        for dataset in datasets:
            print(
                f"{dataset.dataset_id:24} {dataset.format.value:8} "
                f"subjects={','.join(dataset.subject_columns)}"
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
