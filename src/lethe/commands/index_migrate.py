"""`lethe index migrate`: copy a DynamoDB subject index (`SubjectIndexTable`) into the segment
store (the index bucket and its manifest table), then verify it entry for entry; and
`open_index`, the CLI's one way to open the deployment's index (lethe_shared.index.opening).

Per dataset (every dataset the DynamoDB index names, or `--dataset`):

1. The DynamoDB entries are read whole (one consistent Scan of the table, every page), the
   segment store's entries of the dataset too (`SegmentSubjectIndex.entries`).
2. Objects whose entries already agree (every field the segments keep: subject hash, object,
   dataset, zone, format, rows, version id, ETag, the `deleted` flag, both fingerprints; not
   row hints, which segments do not store, nor `updated_at`) are left alone: a second run
   writes nothing (idempotent).
3. An object that differs is rewritten: its segment rows are retired first (`remove_object`,
   when the segments hold any), then its entries are written as the writes that made them:
   flagged entries (grouped by the version they describe, oldest `updated_at` first) as older
   writes, the unflagged ones last as the current write; an object whose every entry is
   flagged is then flagged (`flag_deleted`). The segment rule then reads back exactly
   DynamoDB's flags (lethe_shared.index.segments.rules). Objects the segments hold and
   DynamoDB does not are removed.
4. Verification (a dataset of 48-bit prefixes, the default for a new one: DynamoDB's hashes
   are compared by their prefixes, as the segments name them): the segment store's entries
   are read again and compared with DynamoDB's, entry for entry (counts and every field
   above). Any difference fails the command (exit status 1) with the number of entries
   missing, extra and different, per dataset; no hash is printed.

The DynamoDB index is read only, never changed. Run it while ingestion is paused (an entry
written to DynamoDB during the copy is found by the verification, or by the next run).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lethe.commands import CommandError
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.index.opening import IndexLocation, IndexStore, open_subject_index, parse_store
from lethe_shared.index.subject_ids import ids_of
from lethe_shared.index.subject_index import IndexEntry, SubjectIndex

# the fields an entry keeps in both stores (row hints and updated_at are not compared)
COMPARED: Final = (
    "subject_hash", "object_url", "dataset_id", "zone", "format", "rows", "version_id", "etag",
    "deleted", "matching_fingerprint", "key_fingerprint",
)  # fmt: skip
_KEY = tuple[str, str]  # (object URL, subject hash)


def location_of(target: Target, store: str | None = None) -> IndexLocation:
    """The deployment's index: its `IndexStore` output (a deployment without it predates the
    segment store: DynamoDB), or `store` when given."""
    chosen = parse_store(store or target.outputs.get("IndexStore") or IndexStore.DYNAMODB.value)
    if chosen is IndexStore.DYNAMODB:
        return IndexLocation(chosen, table=target.output("SubjectIndexTableName"))
    return IndexLocation(
        chosen,
        table=target.outputs.get("SubjectIndexTableName", ""),
        bucket=target.output("IndexBucketName"),
        manifest_table=target.output("IndexManifestTableName"),
    )


def open_index(target: Target, store: str | None = None) -> SubjectIndex:
    """The deployment's subject index (`location_of`), opened as the functions open it: a
    dataset's first write (a migration's) records the partition bits its document declares."""
    dynamodb = target.resource("dynamodb")
    datasets_table = target.outputs.get("DatasetsTableName", "")
    return open_subject_index(
        location_of(target, store),
        s3=target.client("s3"),
        dynamodb=dynamodb,
        datasets=DynamoDatasetRegistry(dynamodb.Table(datasets_table)) if datasets_table else None,
    )


def compared(entry: IndexEntry) -> tuple[Any, ...]:
    return tuple(getattr(entry, name) for name in COMPARED)


@dataclass
class DatasetMigration:
    dataset_id: str
    dynamodb_entries: int = 0
    segment_entries_before: int = 0
    segment_entries: int = 0
    objects: int = 0
    objects_written: int = 0
    objects_removed: int = 0
    missing: int = 0  # entries DynamoDB has and the segments do not, after the copy
    extra: int = 0  # entries the segments have and DynamoDB does not
    different: int = 0  # entries of both whose compared fields differ

    @property
    def verified(self) -> bool:
        return (
            self.missing == self.extra == self.different == 0
            and self.dynamodb_entries == self.segment_entries
        )

    def document(self) -> dict[str, Any]:
        return {**self.__dict__, "verified": self.verified}


@dataclass
class Migration:
    datasets: list[DatasetMigration] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return all(d.verified for d in self.datasets)

    def document(self) -> dict[str, Any]:
        return {"verified": self.verified, "datasets": [d.document() for d in self.datasets]}


def dynamodb_entries(table: Any) -> dict[str, dict[_KEY, IndexEntry]]:
    """Every entry of SubjectIndexTable by dataset (one consistent Scan, every page)."""
    found: dict[str, dict[_KEY, IndexEntry]] = defaultdict(dict)
    kwargs: dict[str, Any] = {"ConsistentRead": True}
    while True:
        page = table.scan(**kwargs)
        for item in page.get("Items", []):
            entry = IndexEntry.from_item(item)
            found[entry.dataset_id][(entry.object_url, entry.subject_hash)] = entry
        if "LastEvaluatedKey" not in page:
            return dict(found)
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _by_object(entries: Mapping[_KEY, IndexEntry]) -> dict[str, list[IndexEntry]]:
    objects: dict[str, list[IndexEntry]] = defaultdict(list)
    for (url, _), entry in sorted(entries.items()):
        objects[url].append(entry)
    return dict(objects)


def _writes(entries: Iterable[IndexEntry]) -> Iterator[list[IndexEntry]]:
    """An object's entries as the writes that made them, oldest first, flags cleared (the
    order of the writes makes them)."""
    groups: dict[tuple[Any, ...], list[IndexEntry]] = defaultdict(list)
    for e in entries:
        groups[(e.deleted, e.version_id, e.etag, e.zone, e.format, e.matching_fingerprint,
                e.key_fingerprint)].append(e)  # fmt: skip
    ordered = sorted(
        groups.values(), key=lambda g: (not g[0].deleted, max(e.updated_at for e in g))
    )
    for group in ordered:
        yield [e.model_copy(update={"deleted": False}) for e in group]


def _named(source: Mapping[_KEY, IndexEntry], ids: Any) -> dict[_KEY, IndexEntry]:
    """DynamoDB's entries named as the segments name them: with 48-bit prefixes
    (lethe_shared.index.subject_ids) by the prefix (two subjects of one object sharing one would
    be one segment row: the verification then reports the object different, never verified)."""
    return {
        (url, ids(h)): e.model_copy(update={"subject_hash": ids(h)})
        for (url, h), e in source.items()
    }


def migrate_dataset(
    dataset_id: str, source: Mapping[_KEY, IndexEntry], target: Any
) -> DatasetMigration:
    """Copy one dataset's entries into `target` (a SegmentSubjectIndex), then verify."""
    report = DatasetMigration(dataset_id, dynamodb_entries=len(source))
    before = {(e.object_url, e.subject_hash): e for e in target.entries(dataset_id)}
    report.segment_entries_before = len(before)
    wanted, held = _by_object(source), _by_object(before)
    stored = _by_object(_named(source, ids_of(target, dataset_id)))
    report.objects = len(wanted)
    for url, entries in wanted.items():
        if sorted(map(compared, stored[url])) == sorted(map(compared, held.get(url, []))):
            continue
        if url in held:
            target.remove_object(url)
        for group in _writes(entries):
            target.replace_object(url, group)
        if all(e.deleted for e in entries):
            target.flag_deleted(url)
        report.objects_written += 1
    for url in held.keys() - wanted.keys():
        target.remove_object(url)
        report.objects_removed += 1
    after = {(e.object_url, e.subject_hash): e for e in target.entries(dataset_id)}
    source = _named(source, ids_of(target, dataset_id))
    report.segment_entries = len(after)
    report.missing = len(source.keys() - after.keys())
    report.extra = len(after.keys() - source.keys())
    report.different = sum(
        compared(source[k]) != compared(after[k]) for k in source.keys() & after.keys()
    )
    return report


def migrate(table: Any, target: Any, datasets: Iterable[str] | None = None) -> Migration:
    """Copy SubjectIndexTable (`table`) into the segment store `target`, dataset by dataset."""
    source = dynamodb_entries(table)
    names = sorted(source) if datasets is None else list(dict.fromkeys(datasets))
    return Migration([migrate_dataset(d, source.get(d, {}), target) for d in names])


def add_migrate_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate_parser = commands.add_parser(
        "migrate",
        help="copy the DynamoDB subject index into segments and verify it entry for entry",
        description="Reads SubjectIndexTable (never changes it), writes every dataset's entries "
        "to the index bucket's segments, and compares both entry for entry. Safe to run again: "
        "objects already copied are not written. Exit status 1 when the comparison differs.",
    )
    migrate_parser.add_argument(
        "--dataset", action="append", help="only this dataset (repeatable); default: every one"
    )
    migrate_parser.add_argument("--json", action="store_true", help="print the report JSON")
    add_target_arguments(migrate_parser)
    migrate_parser.set_defaults(func=migrate_index)


def migrate_index(args: argparse.Namespace) -> int:
    target = resolve(args)
    table = target.resource("dynamodb").Table(target.output("SubjectIndexTableName"))
    segments = open_index(target, IndexStore.SEGMENTS.value)
    report = migrate(table, segments, args.dataset)
    if args.json:
        print(json.dumps(report.document(), indent=2, sort_keys=True))
    else:
        for d in report.datasets:
            print(
                f"{d.dataset_id}: {d.dynamodb_entries} DynamoDB entries, {d.segment_entries} in "
                f"segments ({d.objects_written} of {d.objects} objects written, "
                f"{d.objects_removed} removed); "
                + ("verified" if d.verified else
                   f"DIFFERENT: {d.missing} missing, {d.extra} extra, {d.different} changed")
            )  # fmt: skip
    if not report.verified:
        raise CommandError("the segment index differs from the DynamoDB index (see above)")
    return 0
