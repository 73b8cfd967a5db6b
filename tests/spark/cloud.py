"""The moto cloud the Spark jobs run against in this tier, and how the tests drive the jobs.

Tables have the keys and indexes of template.yaml's DatasetsTable, ObjectCatalogTable,
SubjectIndexTable and ErasureRequestsTable (the erase job reads its request there); the subject
hash key is a secret like SubjectHashKeySecret.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe.localcloud.template import load_template
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone, normalize_sequencer
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.pins import pin_manifest
from lethe_shared.erasure.report import Manifest
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys, key_fingerprint

REGION = "us-east-1"
RAW = "lethe-test-raw"
LAKE = "lethe-test-lake"
REPORTS = "lethe-test-reports"
DATASETS = "lethe-test-datasets"
CATALOG = "lethe-test-object-catalog"
INDEX = "lethe-test-subject-index"
REQUESTS = "lethe-test-erasure-requests"
REQUESTER = "privacy@example.com"
APPROVER = "dpo@example.com"
HASH_KEY_SECRET = "lethe-test-subject-hash-key"
HASH_KEY = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01"


def h(subject_id: str) -> str:
    """The index's hash of a single-column subject id."""
    return hash_of_id(HASH_KEY, subject_id)


def hk(columns: Sequence[str], **values: Any) -> str:
    """The index's hash of a composite subject key."""
    return hash_of_keys(HASH_KEY, columns, values)


def _create_table(dynamodb: Any, logical_id: str, name: str) -> Any:
    props = load_template()["Resources"][logical_id]["Properties"]
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    return dynamodb.create_table(**kwargs)


# An entry as the tests compare it: everything but updated_at.
Entry = tuple[str, str, str, str, int, tuple[int, ...], str, str, bool]


def entry_view(entry: IndexEntry) -> Entry:
    return (
        entry.subject_hash,
        entry.object_url,
        entry.zone,
        entry.format,
        entry.rows,
        entry.row_hints,
        entry.version_id,
        entry.etag,
        entry.deleted,
    )


@dataclass
class Cloud:
    endpoint: str
    s3: Any
    datasets: Any
    catalog: Any
    index: Any
    requests: Any = None

    def record_request(
        self,
        request_id: str,
        manifest_url: str,
        manifest_sha256: str,
        *,
        status: str = "ERASING",
        approval: dict[str, Any] | None = None,
    ) -> None:
        """The request's record as the workflow leaves it for the erase job: ERASING (or
        `status`), approved by APPROVER (or `approval`), its report this manifest."""
        decided = {
            "decision": "approve",
            "decided_by": APPROVER,
            "decided_at": "2026-11-23T12:30:00+00:00",
            "approvers": [APPROVER],
        }
        self.requests.put_item(
            Item={
                "request_id": request_id,
                "status": status,
                "created_at": "2026-11-23T12:00:00+00:00",
                "updated_at": "2026-11-23T12:30:00+00:00",
                "requested_by": REQUESTER,
                "approval": decided if approval is None else approval,
                "report": {"manifest_url": manifest_url, "manifest_sha256": manifest_sha256},
            }
        )

    def register(self, document: dict[str, Any]) -> None:
        DynamoDatasetRegistry(self.datasets).put(parse_dataset(document))

    def pinned(self, manifest: Manifest, key: bytes = HASH_KEY) -> Manifest:
        """`manifest` pinned as the report step pins it (lethe_shared.erasure.pins): to `key`,
        the key the request's ids were hashed with, and each dataset's registration now."""
        return pin_manifest(
            manifest,
            key_fingerprint=key_fingerprint(key),
            registry=DynamoDatasetRegistry(self.datasets),
        )

    def upload(
        self, key: str, body: bytes, dataset_id: str, sequencer: str = "1", **put: Any
    ) -> str:
        """Put a raw object (with `put`'s extra PutObject parameters) and record it in the
        catalog as the object events handler does."""
        version = self.s3.put_object(Bucket=RAW, Key=key, Body=body, **put)["VersionId"]
        item = CatalogItem(
            bucket=RAW,
            key=key,
            version_id=version,
            zone=Zone.RAW,
            status=ObjectStatus.RECEIVED,
            sequencer=normalize_sequencer(sequencer),
            dataset_id=dataset_id,
            size=len(body),
        )
        self.catalog.put_item(Item=item.to_item())
        return str(version)

    def put_lake_parquet(self, key: str, table: pa.Table) -> str:
        """A lake file written by something else than Lethe (no producer metadata)."""
        sink = io.BytesIO()
        pq.write_table(table, sink)
        return str(self.s3.put_object(Bucket=LAKE, Key=key, Body=sink.getvalue())["VersionId"])

    def lake_keys(self) -> list[str]:
        return self.keys(LAKE)

    def keys(self, bucket: str) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=bucket)
        return sorted(o["Key"] for o in listing.get("Contents", []))

    def lake_object(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=LAKE, Key=key)["Body"].read())

    def lake_parquet(self, key: str) -> pa.Table:
        return pq.read_table(io.BytesIO(self.lake_object(key)))

    def current(self, bucket: str, key: str) -> tuple[str, str]:
        """(version id, ETag without quotes) of the key's current version."""
        head = self.s3.head_object(Bucket=bucket, Key=key)
        return str(head["VersionId"]), str(head["ETag"]).strip('"')

    def delete_every_version(self, bucket: str, key: str) -> None:
        listing = self.s3.list_object_versions(Bucket=bucket, Prefix=key)
        for item in [*listing.get("Versions", []), *listing.get("DeleteMarkers", [])]:
            if item["Key"] == key:
                self.s3.delete_object(Bucket=bucket, Key=key, VersionId=item["VersionId"])

    def catalog_item(self, key: str, version: str) -> dict[str, Any]:
        found = self.catalog.get_item(
            Key={"object_url": f"s3://{RAW}/{key}", "version_id": version}
        )
        return dict(found["Item"])

    def pins(self) -> set[tuple[str, str, str]]:
        """(dataset, matching fingerprint, key fingerprint) of every item of the subject index:
        what each entry says it was computed with."""
        return {
            (e.dataset_id, e.matching_fingerprint, e.key_fingerprint)
            for e in map(IndexEntry.from_item, self._items())
        }

    def expected_pin(self, document: dict[str, Any]) -> tuple[str, str, str]:
        """The pin of entries computed from `document`'s rows with the test's hash key."""
        dataset = parse_dataset(document)
        return (dataset.dataset_id, matching_fingerprint(dataset), key_fingerprint(HASH_KEY))

    def entries(self) -> set[Entry]:
        """Every item of the subject index."""
        return {entry_view(IndexEntry.from_item(i)) for i in self._items()}

    def _items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"ConsistentRead": True}
        while True:
            page = self.index.scan(**kwargs)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return items

    def lookup(self, subject_hash: str) -> list[Entry]:
        page = self.index.query(
            KeyConditionExpression="subject_hash = :h",
            ExpressionAttributeValues={":h": subject_hash},
            ConsistentRead=True,
        )
        return [entry_view(IndexEntry.from_item(i)) for i in page.get("Items", [])]

    def clear_index(self) -> None:
        with self.index.batch_writer() as batch:
            for entry in self.entries():
                batch.delete_item(Key={"subject_hash": entry[0], "object_url": entry[1]})


def new_cloud(endpoint: str) -> Cloud:
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (RAW, LAKE, REPORTS):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name=HASH_KEY_SECRET, SecretString=HASH_KEY.decode()
    )
    dynamodb = boto3.resource("dynamodb", region_name=REGION)
    return Cloud(
        endpoint,
        s3,
        _create_table(dynamodb, "DatasetsTable", DATASETS),
        _create_table(dynamodb, "ObjectCatalogTable", CATALOG),
        _create_table(dynamodb, "SubjectIndexTable", INDEX),
        _create_table(dynamodb, "ErasureRequestsTable", REQUESTS),
    )


class JobRunner:
    """Runs a job's main() in this process, as the local cloud's runner would run the script,
    with the arguments every run of that job shares; returns the JSON line it printed."""

    def __init__(
        self,
        main: Callable[[Sequence[str]], int],
        common: Sequence[str],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        self._main = main
        self._common = list(common)
        self._capsys = capsys
        self.logs = ""  # stderr of the last run

    def __call__(self, *args: str) -> Any:
        self._capsys.readouterr()
        try:
            code = self._main([*args, *self._common])
        finally:
            captured = self._capsys.readouterr()
            self.logs = captured.err
        assert code == 0
        lines = captured.out.strip().splitlines()
        assert len(lines) == 1
        return json.loads(lines[0])


def ingest_args(
    dataset_id: str, key: str, version: str, correlation_id: str = "exec-1"
) -> list[str]:
    """The ingest job's arguments for a batch of one object version."""
    return batch_args([(dataset_id, key, version)], correlation_id)


def batch_args(objects: list[tuple[str, str, str]], correlation_id: str = "exec-1") -> list[str]:
    """The ingest job's arguments for a batch of (dataset id, key, version id)."""
    batch = [{"dataset_id": d, "key": k, "version_id": v} for d, k, v in objects]
    return [
        "--objects-json", json.dumps(batch),
        "--raw-bucket", RAW,
        "--lake-bucket", LAKE,
        "--datasets-table", DATASETS,
        "--catalog-table", CATALOG,
        "--index-table", INDEX, "--index-store", "dynamodb",
        "--hash-key-secret", HASH_KEY_SECRET,
        "--correlation-id", correlation_id,
    ]  # fmt: skip


GLUE_ARGS = ["--JOB_ID", "j_123", "--job-bookmark-option", "job-bookmark-disable"]
COMMON_JOB_ARGS = [
    "--raw-bucket", RAW,
    "--lake-bucket", LAKE,
    "--datasets-table", DATASETS,
    "--index-table", INDEX, "--index-store", "dynamodb",
    "--hash-key-secret", HASH_KEY_SECRET,
    *GLUE_ARGS,
]  # fmt: skip
