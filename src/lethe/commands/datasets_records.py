"""`lethe datasets records` and `lethe datasets show`: what a data-protection officer reads.

`records [--json]` prints the record of processing (GDPR Art. 30(1)) of every registered
dataset: purpose, legal basis (Art. 6(1)), data categories, recipients, the columns that
identify its subjects, retention, and which of these the document does not declare
(lethe_shared.datasets.processing). `show ID [--json]` prints one dataset: its document's
fields, its registry state, its record, and the legal holds that reach it
(lethe_shared.datasets.holds), so an operator sees at once why an erasure or a retention run
left its rows. Both read the DatasetsTable directly (like `datasets list`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lethe.commands import NotFoundError
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.datasets.holds import DynamoHolds, LegalHold, hold_line
from lethe_shared.datasets.processing import processing_record, record_lines
from lethe_shared.datasets.registry import DynamoDatasetRegistry


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
    holds = [h for h in DynamoHolds(table).active() if dataset_id in h.datasets()]
    return {
        "dataset": registration.dataset.document(),
        **registration.summary(),
        "record": processing_record(registration.dataset),
        "legal_holds": [h.shown() for h in holds],
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
    holds = shown["legal_holds"]
    print(f"  legal holds:      {len(holds) or 'none'}")
    for hold in holds:
        print(f"    {hold_line(LegalHold.model_validate(hold))}")
    return 0
