"""A moto server with Lethe's buckets, tables and hash key secret, for benchmarks that run a job.

The same setup as the Spark test tier (tests/spark/cloud.py, tests/spark/conftest.py), without
pytest: a `ThreadedMotoServer` on 127.0.0.1 (server mode, as the local cloud runs it, so that a
job in another process and its Spark workers reach it over HTTP), versioned raw, lake and reports
buckets, the datasets, object catalog and subject index tables with the keys and indexes
template.yaml declares, the segment index's bucket (unversioned) and manifest table, the subject
hash key as a secret, and the dataset registered. A job is pointed at the DynamoDB index
(`index_store = "dynamodb"`, the ingestion benchmarks' runs so far) or at the segment index
(`"segments"`, the deployed default): `MotoCloud.start(index_store=...)` or the attribute.
moto's version listing under a prefix is patched while the server runs
(`lethe.localcloud.moto_instances.patch_version_listing`, as the local cloud does): unpatched,
each of the ingest job's `versions_of(bucket, key)` calls deep-copied every version of every key
of the bucket, bodies included, and a 100-object batch ran the benchmark out of memory. Its
ranged GETs read only their range (`lethe.localcloud.moto_ranges`, as the local cloud does):
unpatched, each range of a large object cost the server the whole object, on the job's cores.

    with MotoCloud.start() as cloud:
        cloud.reset()                        # a fresh state: buckets, tables, secret
        cloud.register(dataset_document)
        version = cloud.upload_file("ds/a.csv", path, "ds")
        env = cloud.job_environment()        # what a job process needs to reach it
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import requests
from boto3.s3.transfer import TransferConfig
from moto.server import ThreadedMotoServer

from lethe.localcloud.moto_instances import patch_version_listing
from lethe.localcloud.moto_ranges import patch_range_reads
from lethe.localcloud.template import load_template
from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone, normalize_sequencer
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.index.opening import IndexStore, parse_store
from lethe_shared.index.segments import SegmentSubjectIndex

REGION = "us-east-1"
RAW = "lethe-bench-raw"
LAKE = "lethe-bench-lake"
REPORTS = "lethe-bench-reports"
DATASETS = "lethe-bench-datasets"
CATALOG = "lethe-bench-object-catalog"
INDEX = "lethe-bench-subject-index"
INDEX_BUCKET = "lethe-bench-index"  # the segment index's bucket (unversioned, as deployed)
MANIFEST = "lethe-bench-index-manifest"  # the segment index's manifest table
HASH_KEY_SECRET = "lethe-bench-subject-hash-key"
HASH_KEY = b"lethe-benchmark-subject-hash-key-0123456789"  # any key of >= 32 bytes
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
# Large objects go up in parts of 64 MiB (moto keeps each part, then joins them once).
_UPLOAD = TransferConfig(multipart_threshold=64 * 1024 * 1024, multipart_chunksize=64 * 1024 * 1024)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoCloud:
    endpoint: str
    sequencer: int = 0
    index_store: str = "dynamodb"  # the store `job_args` points a job at: dynamodb or segments

    @classmethod
    @contextmanager
    def start(cls, index_store: str = "dynamodb") -> Iterator[MotoCloud]:
        """A moto server on 127.0.0.1 for the duration of the block; this process's boto3
        clients point at it (environment), as a job's do. `index_store`: where the jobs keep the
        subject index (`dynamodb` or `segments`)."""
        unlisted = patch_version_listing()
        unranged = patch_range_reads()
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's request log
        endpoint = f"http://127.0.0.1:{port}"
        saved = {
            k: os.environ.get(k)
            for k in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_PROFILE", *CREDENTIALS)
        }
        os.environ.pop("AWS_PROFILE", None)
        os.environ.update(
            {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": REGION, **CREDENTIALS}
        )
        try:
            yield cls(endpoint, index_store=parse_store(index_store).value)
        finally:
            server.stop()
            unranged()
            unlisted()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def job_environment(self) -> dict[str, str]:
        """Environment that points a job's boto3 clients (driver and Spark workers) here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            **CREDENTIALS,
        }

    @property
    def s3(self) -> Any:
        return boto3.client("s3", region_name=REGION)

    def reset(self) -> None:
        """Forget everything, then create the buckets, tables and secret again."""
        requests.post(f"{self.endpoint}/moto-api/reset", timeout=60).raise_for_status()
        s3 = self.s3
        for bucket in (RAW, LAKE, REPORTS):
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket=INDEX_BUCKET)
        boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name=HASH_KEY_SECRET, SecretString=HASH_KEY.decode()
        )
        dynamodb = boto3.resource("dynamodb", region_name=REGION)
        resources = load_template()["Resources"]
        for logical_id, name in (
            ("DatasetsTable", DATASETS),
            ("ObjectCatalogTable", CATALOG),
            ("SubjectIndexTable", INDEX),
            ("IndexManifestTable", MANIFEST),
        ):
            props = resources[logical_id]["Properties"]
            kwargs: dict[str, Any] = {
                "TableName": name,
                "KeySchema": props["KeySchema"],
                "AttributeDefinitions": props["AttributeDefinitions"],
                "BillingMode": "PAY_PER_REQUEST",
            }
            if props.get("GlobalSecondaryIndexes"):
                kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
            dynamodb.create_table(**kwargs)

    def register(self, document: dict[str, Any]) -> None:
        table = boto3.resource("dynamodb", region_name=REGION).Table(DATASETS)
        DynamoDatasetRegistry(table).put(parse_dataset(document))

    def upload_file(self, key: str, path: Path, dataset_id: str) -> str:
        """Put a raw object and record it in the catalog as the object events handler does
        (RECEIVED, with a sequencer). Returns its version id."""
        s3 = self.s3
        s3.upload_file(str(path), RAW, key, Config=_UPLOAD)
        head = s3.head_object(Bucket=RAW, Key=key)
        self.sequencer += 1
        item = CatalogItem(
            bucket=RAW,
            key=key,
            version_id=head["VersionId"],
            zone=Zone.RAW,
            status=ObjectStatus.RECEIVED,
            sequencer=normalize_sequencer(f"{self.sequencer:x}"),
            dataset_id=dataset_id,
            etag=str(head["ETag"]).strip('"'),
            size=int(head["ContentLength"]),
        )
        boto3.resource("dynamodb", region_name=REGION).Table(CATALOG).put_item(Item=item.to_item())
        return str(head["VersionId"])

    def index_items(self) -> int:
        """Entries in the subject index: with segments, the entries of the write each live
        object pointer names (what each object's last write holds); with DynamoDB, its items (a
        scan)."""
        dynamodb = boto3.resource("dynamodb", region_name=REGION)
        if self.index_store == IndexStore.SEGMENTS.value:
            index = SegmentSubjectIndex(self.s3, INDEX_BUCKET, dynamodb.Table(MANIFEST))
            count = 0
            for dataset_id in index.manifest.datasets():
                pointers = index.reads.all_pointers(dataset_id)
                for (_, url), entry in index.reads.dataset_entries(dataset_id).items():
                    pointer = pointers.get(url)
                    if pointer is not None and pointer.live:
                        count += entry.row.origin_seq == pointer.current
            return count
        table = dynamodb.Table(INDEX)
        count, kwargs = 0, {"Select": "COUNT"}
        while True:
            page = table.scan(**kwargs)
            count += int(page["Count"])
            if "LastEvaluatedKey" not in page:
                return count
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def job_args(self, objects: list[dict[str, str]], correlation_id: str) -> list[str]:
        """The ingest job's arguments for a batch of {"dataset_id", "key", "version_id"}, on the
        index store `index_store` names."""
        return [
            "--objects-json", json.dumps(objects),
            "--raw-bucket", RAW,
            "--lake-bucket", LAKE,
            "--datasets-table", DATASETS,
            "--catalog-table", CATALOG,
            "--index-table", INDEX,
            *self.index_args(),
            "--hash-key-secret", HASH_KEY_SECRET,
            "--correlation-id", correlation_id,
        ]  # fmt: skip

    def index_args(self) -> list[str]:
        """`--index-store` and, for segments, the bucket and manifest table."""
        if self.index_store == "segments":
            return ["--index-store", "segments", "--index-bucket", INDEX_BUCKET,
                    "--manifest-table", MANIFEST]  # fmt: skip
        return ["--index-store", self.index_store]
