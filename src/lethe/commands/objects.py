"""`lethe objects list --dataset ID [--json]`: the raw and lake objects of a dataset."""

from __future__ import annotations

import argparse
import json
from typing import Any

from lethe.commands.datasets import require_dataset
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.catalog import CatalogItem, DynamoObjectCatalog, ObjectStatus, Zone, latest


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("objects", help="objects of a dataset, as the catalog sees them")
    commands = parser.add_subparsers(dest="objects_command", required=True)
    listing = commands.add_parser("list", help="list the raw and lake objects of a dataset")
    listing.add_argument("--dataset", required=True, help="dataset id")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.add_argument(
        "--all-versions", action="store_true", help="every version, not only the current one"
    )
    add_target_arguments(listing)
    listing.set_defaults(func=list_objects)


def _lake_rows(target: Target, item: CatalogItem) -> int | None:
    """Row count of a lake Parquet object, from its footer (two small range reads)."""
    if item.status is ObjectStatus.DELETED or not item.key.endswith(".parquet"):
        return None
    import pyarrow.parquet as pq  # noqa: PLC0415 - only this path needs pyarrow
    from pyarrow import fs  # noqa: PLC0415

    s3 = fs.S3FileSystem(
        region=target.region,
        endpoint_override=target.endpoint_url,
        scheme="http"
        if target.endpoint_url and target.endpoint_url.startswith("http:")
        else "https",
        **({"access_key": "testing", "secret_key": "testing"} if target.credentials else {}),
    )
    with s3.open_input_file(f"{item.bucket}/{item.key}") as handle:
        return int(pq.ParquetFile(handle).metadata.num_rows)


def _row(target: Target, item: CatalogItem) -> dict[str, Any]:
    rows = item.rows_written if item.zone is Zone.RAW else _lake_rows(target, item)
    return {
        "zone": item.zone.value,
        "bucket": item.bucket,
        "key": item.key,
        "version_id": item.version_id,
        "status": item.status.value,
        "rows": rows,
        "rows_read": item.rows_read,
        "rows_quarantined": item.rows_quarantined,
    }


def list_objects(args: argparse.Namespace) -> int:
    target = resolve(args)
    require_dataset(target, args.dataset)
    catalog = DynamoObjectCatalog(
        target.resource("dynamodb").Table(target.output("ObjectCatalogTableName"))
    )
    items = list(catalog.by_dataset(args.dataset))
    if not args.all_versions:
        by_object: dict[str, list[CatalogItem]] = {}
        for item in items:
            by_object.setdefault(item.object_url, []).append(item)
        items = [newest for group in by_object.values() if (newest := latest(group))]
    items.sort(key=lambda i: (i.zone is not Zone.RAW, i.key, i.sequencer))
    rows = [_row(target, item) for item in items]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'ZONE':5} {'STATUS':12} {'ROWS':>7} {'QUAR':>5}  KEY (version)")
    for row in rows:
        rows_text = "" if row["rows"] is None else str(row["rows"])
        quarantined = "" if row["rows_quarantined"] is None else str(row["rows_quarantined"])
        print(
            f"{row['zone']:5} {row['status']:12} {rows_text:>7} {quarantined:>5}  "
            f"{row['key']} ({row['version_id']})"
        )
    return 0
