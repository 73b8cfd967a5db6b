"""One request, several datasets (the erase job's main, both modes, against the moto server):
each object is matched with its own dataset's hashes only, so `"01001"` erases customer 1001 of
an int-typed dataset and staff member `"01001"` of a string-typed one, never staff member
`"1001"` (another person); a scoped request leaves the other datasets alone; a row whose subject
is empty or whitespace only is never indexed, counted, and never matched."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from erase import main as erase_main

from ingest import main as ingest_main
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.erasure.report import build_manifest, report_key, sha256_hex
from lethe_shared.erasure.subjects import hash_subjects, parse_request_body
from lethe_shared.index.subject_index import DynamoSubjectIndex
from tests.spark.cloud import (
    CATALOG,
    DATASETS,
    GLUE_ARGS,
    HASH_KEY,
    HASH_KEY_SECRET,
    LAKE,
    RAW,
    REPORTS,
    REQUESTS,
    Cloud,
    JobRunner,
    h,
    ingest_args,
)

REQUEST = "er-20261123T120000Z-1d2a7a5e"
CUSTOMERS = {
    "dataset_id": "customers",
    "format": "csv",
    "subject_columns": ["customer_id"],
    "schema": [{"name": "customer_id", "type": "int"}, {"name": "name", "type": "string"}],
}
STAFF = {
    "dataset_id": "staff",
    "format": "csv",
    "subject_columns": ["staff_id"],
    "schema": [{"name": "staff_id", "type": "string"}, {"name": "name", "type": "string"}],
}
CUSTOMERS_KEY = "customers/c.csv"
STAFF_KEY = "staff/s.csv"
CUSTOMERS_CSV = b"customer_id,name\n1001,ann\n1002,bob\n"
STAFF_CSV = b'staff_id,name\n01001,cy\n1001,di\n" ",ed\n"",fay\n'


class Run:
    def __init__(self, cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> None:
        self.cloud = cloud
        self.capsys = capsys
        cloud.register(CUSTOMERS)
        cloud.register(STAFF)
        self.ingested = {
            key: JobRunner(ingest_main, GLUE_ARGS, capsys)(
                *ingest_args(dataset, key, cloud.upload(key, body, dataset))
            )["objects"][0]
            for dataset, key, body in (
                ("customers", CUSTOMERS_KEY, CUSTOMERS_CSV),
                ("staff", STAFF_KEY, STAFF_CSV),
            )
        }

    def erase(self, **request: Any) -> dict[str, Any]:
        """Files the request's subjects as intake hashes them, freezes the manifest as the
        report step does, and runs the erase job, then the verify run; the manifest."""
        body = parse_request_body({"requested_by": "dpo@example.com", **request})
        datasets = [parse_dataset(CUSTOMERS), parse_dataset(STAFF)]
        subjects = hash_subjects(body, HASH_KEY, datasets)
        manifest = build_manifest(
            REQUEST, subjects.hashes, subjects.count,
            index=DynamoSubjectIndex(self.cloud.index), objects=S3ObjectStore(self.cloud.s3),
            now=datetime(2026, 11, 23, 12, tzinfo=UTC), hash_groups=subjects.groups,
            scope=subjects.scope, not_looked_up=subjects.not_looked_up,
        )  # fmt: skip
        document = self.cloud.pinned(manifest).bytes()
        self.cloud.s3.put_object(
            Bucket=REPORTS, Key=report_key(REQUEST, "manifest.json"), Body=document
        )
        url = f"s3://{REPORTS}/{report_key(REQUEST, 'manifest.json')}"
        self.cloud.record_request(REQUEST, url, sha256_hex(document))  # ERASING, approved
        for mode in ("erase", "verify"):
            JobRunner(erase_main, GLUE_ARGS, self.capsys)(
                "--mode", mode,
                "--request-id", REQUEST,
                "--manifest", url,
                "--manifest-sha256", sha256_hex(document),
                "--requests-table", REQUESTS,
                "--raw-bucket", RAW,
                "--lake-bucket", LAKE,
                "--reports-bucket", REPORTS,
                "--datasets-table", DATASETS,
                "--catalog-table", CATALOG,
                "--hash-key-secret", HASH_KEY_SECRET,
                "--correlation-id", f"erasure-{REQUEST}",
            )  # fmt: skip
        return dict(json.loads(document))

    def raw(self, key: str) -> bytes:
        return bytes(self.cloud.s3.get_object(Bucket=RAW, Key=key)["Body"].read())

    def lake_ids(self, dataset: str, column: str) -> list[Any]:
        return sorted(
            value
            for key in self.cloud.lake_keys()
            if key.startswith(f"{dataset}/part-")
            for value in self.cloud.lake_parquet(key).column(column).to_pylist()
        )


def test_blank_subjects_are_counted_and_never_indexed(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(cloud, capsys)

    staff = run.ingested[STAFF_KEY]
    assert (staff["rows_read"], staff["rows_written"], staff["rows_without_subject"]) == (4, 4, 2)
    assert run.ingested[CUSTOMERS_KEY]["rows_without_subject"] == 0
    assert {e[0] for e in cloud.entries() if "/staff/" in e[1]} == {h("01001"), h("1001")}


def test_an_id_erases_each_datasets_own_subject_and_no_other(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(cloud, capsys)

    manifest = run.erase(subject_ids=["01001"])

    # customer 1001 (the int "01001" is) and staff member "01001"; staff "1001" stays
    assert run.raw(CUSTOMERS_KEY) == b"customer_id,name\n1002,bob\n"
    assert run.raw(STAFF_KEY) == b'staff_id,name\n1001,di\n" ",ed\n"",fay\n'
    assert run.lake_ids("customers", "customer_id") == [1002]
    assert run.lake_ids("staff", "staff_id") == ["", " ", "1001"]
    assert {g["hashes"][0]: g["datasets"] for g in manifest["hash_groups"]} == {
        h("1001"): ["customers"],
        h("01001"): ["staff"],
    }
    assert {
        (o["dataset_id"], tuple(s["subject_hash"] for s in o["subjects"]))
        for o in manifest["objects"]
    } == {("customers", (h("1001"),)), ("staff", (h("01001"),))}


def test_a_scoped_request_leaves_the_other_datasets_alone(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(cloud, capsys)

    manifest = run.erase(subject_ids=["1001"], datasets=["staff"])

    assert {o["dataset_id"] for o in manifest["objects"]} == {"staff"}
    assert manifest["scope"] == ["staff"]
    assert run.raw(CUSTOMERS_KEY) == CUSTOMERS_CSV
    assert run.raw(STAFF_KEY) == b'staff_id,name\n01001,cy\n" ",ed\n"",fay\n'
