"""`lethe objects list | reingest | shown`: the raw and lake objects of a dataset, re-ingestion,
and the real key of an object shown by a certificate, an audit record or a log (`shown`).

`list` shows each version's status and, for a FAILED one, why (`error`, the catalog's
`ingest_error`): scrubbed as errors are everywhere people see them, its object URLs in their
shown form (`_shown_errors`). The keys of the listing itself are the catalog's real keys: the
operator's own view, as before.

`reingest --dataset ID (--key KEY [--version-id V] | --status S)` re-runs ingestion of raw
object versions (after fixing what made them FAILED, say) the way the object events function
starts it: groups planned by `lethe_shared.ingestion.starter.plan_groups`, each a manifest in the
reports
bucket and one execution of the ingestion state machine (`StepFunctionsBatchStarter`), under a
name of its own (`rerun-<UTC time>-<digest>`: the first attempt's name stays taken). The state
machine's Mark Ingesting step takes any catalogued version that is not DELETED, so the catalog is
not touched here. DELETED versions and lake objects are refused; a version being ingested
(INGESTING) needs --force.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any, Final

from lethe.adapters import object_catalog
from lethe.commands import CommandError, NotFoundError, UsageError
from lethe.commands.datasets import require_dataset
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    DynamoObjectCatalog,
    ObjectStatus,
    Zone,
    latest,
)
from lethe_shared.ingestion.starter import IngestionGroup, StepFunctionsBatchStarter, plan_groups

#: Statuses `reingest --status` may select (DELETED is refused: nothing is left to ingest).
REINGEST_STATUSES: Final = tuple(
    s.value
    for s in (
        ObjectStatus.FAILED,
        ObjectStatus.RECEIVED,
        ObjectStatus.QUARANTINED,
        ObjectStatus.INGESTED,
        ObjectStatus.SUPERSEDED,
        ObjectStatus.INGESTING,
        ObjectStatus.DELETED,
    )
)


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

    reingest = commands.add_parser(
        "reingest",
        help="re-run ingestion of raw object versions (e.g. the FAILED ones)",
        description="Starts the ingestion state machine for raw object versions of a dataset, "
        "as the object events function does, under a new execution name. DELETED versions and "
        "lake objects are refused.",
    )
    reingest.add_argument("--dataset", required=True, help="dataset id")
    chosen = reingest.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--key", help="a raw object key (its current version, or --version-id)")
    chosen.add_argument(
        "--status",
        choices=REINGEST_STATUSES,
        metavar="STATUS",
        help="every raw version of the dataset in this status (FAILED, RECEIVED, ...)",
    )
    reingest.add_argument("--version-id", help="with --key: this version of the key")
    reingest.add_argument(
        "--dry-run", action="store_true", help="list what would be re-ingested; start nothing"
    )
    reingest.add_argument(
        "--force", action="store_true", help="also versions INGESTING now (a stuck execution)"
    )
    reingest.add_argument("--json", action="store_true", help="print the plan/outcome as JSON")
    add_target_arguments(reingest)
    reingest.set_defaults(func=reingest_objects)

    shown = commands.add_parser(
        "shown",
        help="the real key of an object a certificate, an audit record or a log shows",
        description="Certificates, audit records, erasure logs and errors name objects by "
        "their shown keys (a subject column's partition value, or a producer's key, replaced by "
        "a keyed hash: docs/SECURITY.md). Lists the dataset's catalogued objects with their "
        "shown keys under the current subject hash key; with SHOWN, only the objects shown so.",
    )
    shown.add_argument("--dataset", required=True, help="dataset id")
    shown.add_argument("shown", nargs="*", help="shown keys or s3:// URLs to find")
    shown.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(shown)
    shown.set_defaults(func=shown_objects)


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


def _row(target: Target, item: CatalogItem, error: str | None) -> dict[str, Any]:
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
        "error": error,
    }


def _shown_errors(target: Target, items: list[CatalogItem]) -> dict[int, str]:
    """Each item's `ingest_error` (why it is FAILED) as people may see it: scrubbed as errors are
    at every boundary (lethe_shared.aws.scrub: quoted literals emptied, partition values
    removed) with every `s3://` URL in its shown form under the current subject hash key
    (lethe_shared.subject_hashing.shown_keys), so no subject id in a key or a value is printed.
    The key is read only when an item has an error. By the item's position in `items`."""
    failed = {n: item.ingest_error for n, item in enumerate(items) if item.ingest_error}
    if not failed:
        return {}
    from lethe_shared.aws.scrub import scrub_text  # noqa: PLC0415
    from lethe_shared.datasets.registry import DynamoDatasetRegistry  # noqa: PLC0415
    from lethe_shared.subject_hashing.keys import load_hash_key  # noqa: PLC0415
    from lethe_shared.subject_hashing.shown_keys import KeyNamer  # noqa: PLC0415

    key = load_hash_key(target.client("secretsmanager"), target.output("SubjectHashKeySecretArn"))
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    namer = KeyNamer(key, registry.get)
    return {n: scrub_text(text, namer) for n, text in failed.items()}


def list_objects(args: argparse.Namespace) -> int:
    target = resolve(args)
    require_dataset(target, args.dataset)
    catalog = object_catalog(target)
    items = list(catalog.by_dataset(args.dataset))
    if not args.all_versions:
        by_object: dict[str, list[CatalogItem]] = {}
        for item in items:
            by_object.setdefault(item.object_url, []).append(item)
        items = [newest for group in by_object.values() if (newest := latest(group))]
    items.sort(key=lambda i: (i.zone is not Zone.RAW, i.key, i.sequencer))
    errors = _shown_errors(target, items)
    rows = [_row(target, item, errors.get(n)) for n, item in enumerate(items)]
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
        if row["error"]:
            print(f"{'':5} error: {row['error']}")
    return 0


# ------------------------------------------------------------------------------------ reingest


def reingest_objects(args: argparse.Namespace) -> int:
    if args.version_id and not args.key:
        raise UsageError("--version-id needs --key")
    if args.status == ObjectStatus.DELETED:
        raise UsageError("DELETED versions cannot be re-ingested: their data is gone from S3")
    target = resolve(args)
    require_dataset(target, args.dataset)
    catalog = object_catalog(target)
    raw = target.output("RawBucketName")
    if args.key:
        items = [_chosen_version(catalog, args.dataset, raw, args.key, args.version_id)]
        _check_reingestable(items[0], force=args.force)
    else:
        items = sorted(
            (
                item
                for item in catalog.by_dataset(args.dataset)
                if item.zone is Zone.RAW and item.bucket == raw and item.status == args.status
            ),
            key=lambda i: (i.key, i.sequencer),
        )
        if args.status == ObjectStatus.INGESTING and not args.force:
            raise UsageError("versions INGESTING are being ingested now: add --force to re-run")
    rerun = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    groups = plan_groups(((item, "lethe-cli") for item in items), rerun=rerun)
    machine = target.output("IngestionStateMachineArn")
    reports = target.output("ReportsBucketName")
    executions = [_execution(group, machine, reports) for group in groups]
    if not args.dry_run and groups:
        starter = StepFunctionsBatchStarter(
            target.client("stepfunctions"), target.client("s3"), machine, reports
        )
        for group, execution in zip(groups, executions, strict=True):
            execution["outcome"] = starter.start(group).value
    _print_reingest(args, items, executions)
    return 0


def _chosen_version(
    catalog: DynamoObjectCatalog, dataset_id: str, raw: str, key: str, version_id: str | None
) -> CatalogItem:
    listing = f"`lethe objects list --dataset {dataset_id} --all-versions` lists them"
    if version_id:
        item = catalog.get(raw, key, version_id)
        if item is None:
            raise NotFoundError(f"no version {version_id} of s3://{raw}/{key}: {listing}")
    else:
        versions = [
            i for i in catalog.by_dataset(dataset_id) if i.key == key and i.zone is Zone.RAW
        ]
        found = latest(versions)
        if found is None:
            lake = any(i.key == key for i in catalog.by_dataset(dataset_id))
            if lake:
                raise CommandError(
                    f"{key} is a lake object of {dataset_id}, not a raw one: re-ingestion reads "
                    "raw objects (the raw key it came from)"
                )
            raise NotFoundError(f"no raw object {key} in dataset {dataset_id}: {listing}")
        item = found
    if item.dataset_id != dataset_id:
        raise CommandError(
            f"s3://{raw}/{key} belongs to dataset {item.dataset_id or '(none)'}, not {dataset_id}"
        )
    return item


def _check_reingestable(item: CatalogItem, *, force: bool) -> None:
    where = f"{item.object_url} (version {item.version_id})"
    if item.zone is not Zone.RAW:
        raise CommandError(f"{where} is a {item.zone.value} object: only raw objects are ingested")
    if item.status is ObjectStatus.DELETED:
        raise CommandError(
            f"{where} is DELETED: its data is gone from S3, nothing to re-ingest"
            + (" (the key's current version is a delete marker)" if item.delete_marker else "")
        )
    if item.status is ObjectStatus.INGESTING and not force:
        raise CommandError(
            f"{where} is INGESTING now: wait for its execution, or add --force if it is stuck"
        )


def _execution(group: IngestionGroup, machine_arn: str, reports: str) -> dict[str, Any]:
    return {
        "name": group.name,
        "execution_arn": f"{machine_arn.replace(':stateMachine:', ':execution:')}:{group.name}",
        "manifest": s3_url(reports, group.manifest_key),
        "objects": len(group.items),
        "outcome": "planned",
    }


def _print_reingest(
    args: argparse.Namespace, items: list[CatalogItem], executions: list[dict[str, Any]]
) -> None:
    versions = [
        {"bucket": i.bucket, "key": i.key, "version_id": i.version_id, "status": i.status.value}
        for i in items
    ]
    if args.json:
        document = {
            "dataset": args.dataset,
            "dry_run": args.dry_run,
            "versions": versions,
            "executions": executions,
        }
        print(json.dumps(document, indent=2))
        return
    if not items:
        print(f"nothing to re-ingest: no raw version of {args.dataset} is {args.status}")
        return
    verb = "would re-ingest" if args.dry_run else "re-ingesting"
    print(f"{verb} {len(items)} version(s) of {args.dataset}:")
    for version in versions:
        print(f"  {version['status']:12} {version['key']} ({version['version_id']})")
    for execution in executions:
        if args.dry_run:
            print(f"would start {execution['name']} ({execution['objects']} objects)")
        else:
            print(f"{execution['outcome']}: {execution['execution_arn']}")


def shown_objects(args: argparse.Namespace) -> int:
    """Every catalogued object of the dataset (every key, in both zones) with its shown URL
    (lethe_shared.subject_hashing.shown_keys, the current hash key), or those matching SHOWN
    (a shown key or URL). The real keys printed are the catalog's: the operator's own view."""
    from lethe_shared.datasets.registry import DynamoDatasetRegistry  # noqa: PLC0415
    from lethe_shared.subject_hashing.keys import load_hash_key  # noqa: PLC0415
    from lethe_shared.subject_hashing.shown_keys import KeyNamer  # noqa: PLC0415

    target = resolve(args)
    require_dataset(target, args.dataset)
    key = load_hash_key(target.client("secretsmanager"), target.output("SubjectHashKeySecretArn"))
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    namer = KeyNamer(key, registry.get)
    urls = sorted({item.object_url for item in object_catalog(target).by_dataset(args.dataset)})
    rows = [{"object_url": url, "shown": namer.url(url)} for url in urls]
    wanted = set(args.shown)
    if wanted:
        rows = [r for r in rows if r["shown"] in wanted or r["shown"].split("/", 3)[3] in wanted]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['shown']}  {row['object_url']}")
    if wanted and not rows:
        raise NotFoundError(
            "no catalogued object of the dataset is shown so (under the current key)"
        )
    return 0
