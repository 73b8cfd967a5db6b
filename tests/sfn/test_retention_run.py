"""A scheduled retention run (statemachines/retention.asl.json) on the local cloud, started as
the schedule starts it (input {}): a dataset with a retention period loses its expired rows in
the raw zone (rewritten, every older version purged) and the lake (expired partitions deleted
with every version), keeps the rest, the index no longer lists a subject whose rows all expired,
a dataset under a legal hold is skipped with the hold recorded, and the run's KMS-signed
certificate verifies and names no subject. The erase job (erase and verify) and the index job
are the real Spark jobs on the EMR Serverless path. RetentionNoticeDays 0: rules apply at once
(the notice period has its unit tests, tests/unit/test_retention_runs.py)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest

from lethe.commands.erasure_certificate import show_certificate
from lethe_shared.datasets.holds import DynamoHolds, new_hold
from lethe_shared.erasure.certificate import KmsSigner
from lethe_shared.erasure.requests import DynamoErasureRequests
from lethe_shared.erasure.retention_certificate import verify_retention
from lethe_shared.index.opening import IndexLocation, open_subject_index
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint, load_hash_key
from tests.sfn.conftest import SAMPLES, Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver

TODAY = datetime.now(UTC).date()
OLD = (TODAY - timedelta(days=400)).isoformat()
OLDER = (TODAY - timedelta(days=500)).isoformat()
RECENT = (TODAY - timedelta(days=1)).isoformat()
KEY = "notes/2026/batch-001.csv"
BODY = (
    "user_id,review_date,stars,text\n"
    f"u-1,{OLD},5,old one\n"
    f'u-2,{OLDER},4,"old, two"\n'
    f"u-4,{OLD},1,held four\n"
    f"u-1,{RECENT},3,recent one\n"
    f"u-3,{RECENT},2,recent three\n"
).encode()


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(
        tmp_path_factory, SparkEngine="EMR_SERVERLESS", RetentionNoticeDays="0"
    ) as started:
        yield started


def _register(driver: ErasureDriver, dataset_id: str) -> None:
    document = json.loads((SAMPLES / "reviews.dataset.json").read_text())
    document |= {"dataset_id": dataset_id, "retention": {"column": "review_date", "days": 30}}
    status, body = driver.target.call_api("PUT", f"/datasets/{dataset_id}", document)
    assert status in (200, 201), body


def _ingest(cloud: Cloud, key: str, body: bytes) -> None:
    raw = cloud.outputs["RawBucketName"]
    version = str(cloud.client("s3").put_object(Bucket=raw, Key=key, Body=body)["VersionId"])
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            item = cloud.catalog_item(raw, key, version)
            if item["status"] in {"INGESTED", "QUARANTINED", "FAILED"}:
                assert item["status"] == "INGESTED", item
                return
        except KeyError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{key} was not ingested")


def _versions(cloud: Cloud, bucket: str, prefix: str) -> list[dict[str, Any]]:
    listed = cloud.client("s3").list_object_versions(Bucket=bucket, Prefix=prefix)
    return [*listed.get("Versions", []), *listed.get("DeleteMarkers", [])]


def _run(cloud: Cloud, driver: ErasureDriver) -> dict[str, Any]:
    arn = cloud.client("stepfunctions").start_execution(
        stateMachineArn=cloud.outputs["RetentionStateMachineArn"], name="retention-1", input="{}"
    )["executionArn"]
    return driver.wait_execution(arn, timeout=600)


@pytest.mark.timeout(1200)  # the cloud, one ingestion, then three Spark runs
def test_a_scheduled_run_removes_expired_rows_skips_a_held_dataset_and_certifies(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    driver = ErasureDriver(cloud)
    raw, lake = cloud.outputs["RawBucketName"], cloud.outputs["LakeBucketName"]
    # Given a dataset keeping rows 30 days (two expired, two recent) and a held one
    _register(driver, "notes")
    _register(driver, "ledger")
    _ingest(cloud, KEY, BODY)
    assert _versions(cloud, lake, f"notes/review_date={OLD}/")
    table = driver.target.resource("dynamodb").Table(cloud.outputs["DatasetsTableName"])
    hold = new_hold(dataset_id="ledger", reason="tax audit 2026", held_by="dpo@example.com")
    DynamoHolds(table).add(hold)
    # and u-4 of notes under a legal hold of its own (its keyed hash only): its expired row stays
    key = load_hash_key(cloud.client("secretsmanager"), cloud.outputs["SubjectHashKeySecretArn"])
    subject_hold = new_hold(
        dataset_id="notes", reason="litigation", held_by="dpo@example.com",
        subject_hashes={"notes": hash_of_id(key, "u-4")}, key_fingerprint=key_fingerprint(key),
    )  # fmt: skip
    DynamoHolds(table).add(subject_hold)

    # When the schedule starts a run
    ended = _run(cloud, driver)

    # Then it succeeded, the held dataset skipped with its hold
    assert ended["execution"]["status"] == "SUCCEEDED", ended["execution"]
    output = json.loads(ended["execution"]["output"])
    assert output["skipped"] == [{
        "dataset_id": "ledger", "reason": "legal_hold", "hold_id": hold.hold_id,
        "detail": f"legal hold {hold.hold_id}: tax audit 2026",
    }]  # fmt: skip
    (run,) = output["runs"]
    assert (run["dataset_id"], run["outcome"], run["complete"]) == ("notes", "COMPLETED", True)
    ledger_state = json.loads(
        table.get_item(Key={"dataset_id": "retention#ledger"})["Item"]["state"]
    )
    assert ledger_state["last_run"]["reason"] == "legal_hold"

    # the raw upload keeps its recent rows only, in one version: every older version purged
    current = cloud.client("s3").get_object(Bucket=raw, Key=KEY)["Body"].read()
    assert (
        current
        == (
            "user_id,review_date,stars,text\n"
            f"u-4,{OLD},1,held four\n"
            f"u-1,{RECENT},3,recent one\n"
            f"u-3,{RECENT},2,recent three\n"
        ).encode()
    )
    assert len(_versions(cloud, raw, KEY)) == 1
    # the lake's expired partition of u-2 is gone with every version; u-4's held row is the only
    # row left in the other, in one version; the recent one stays
    assert _versions(cloud, lake, f"notes/review_date={OLDER}/") == []
    (kept,) = _versions(cloud, lake, f"notes/review_date={OLD}/")
    kept_rows = pq.read_table(
        io.BytesIO(cloud.client("s3").get_object(Bucket=lake, Key=kept["Key"])["Body"].read())
    ).to_pylist()
    assert [row["user_id"] for row in kept_rows] == ["u-4"]
    assert len(_versions(cloud, lake, f"notes/review_date={RECENT}/")) == 1

    # the index: u-2's rows all expired, so nothing lists it; u-1 only where it is left
    # (read through the deployment's store, as every component opens it: segments by default)
    index = open_subject_index(
        IndexLocation(
            store=cloud.outputs["IndexStore"],
            table=cloud.outputs["SubjectIndexTableName"],
            bucket=cloud.outputs["IndexBucketName"],
            manifest_table=cloud.outputs["IndexManifestTableName"],
        ),
        s3=cloud.client("s3"),
        dynamodb=driver.target.resource("dynamodb"),
    )
    assert cloud.outputs["IndexStore"] == "segments"
    assert not index.lookup(hash_of_id(key, "u-2"))
    left = {entry.object_url for entry in index.lookup(hash_of_id(key, "u-1"))}
    assert left
    assert not [u for u in left if OLD in u]
    assert {e.object_url for e in index.lookup(hash_of_id(key, "u-4"))}, "the held row's entries"

    # the record and its certificate: signed, complete, no subject named
    requests = driver.target.resource("dynamodb").Table(cloud.outputs["ErasureRequestsTableName"])
    stored = DynamoErasureRequests(requests).get(run["run_id"])
    assert stored is not None
    record = stored.model_dump(mode="json")
    assert (record["status"], record["kind"]) == ("COMPLETED", "retention")
    assert record["approval"]["standing"] == "retention"
    bucket, cert_key = record["certificate"]["url"].removeprefix("s3://").split("/", 1)
    envelope = json.loads(cloud.client("s3").get_object(Bucket=bucket, Key=cert_key)["Body"].read())
    signer = KmsSigner(cloud.client("kms"), cloud.outputs["ErasureCertificateKeyArn"])
    certificate = verify_retention(envelope, signer)
    assert certificate.complete
    assert certificate.not_removed == ()
    assert certificate.totals["rows_removed"] == 4  # two raw lines, two lake rows
    assert certificate.totals["deleted"] == 1
    assert certificate.totals["rewritten"] == 2
    assert certificate.totals["versions_purged"] >= 1
    assert certificate.cutoff.startswith((TODAY - timedelta(days=30)).isoformat())
    assert certificate.reindexed
    assert certificate.verification["verified"]
    text = json.dumps(envelope)
    assert not any(s in text for s in ("u-1", "u-2", "u-3", "u-4", hash_of_id(key, "u-2")))
    assert subject_hold.hold_id in text  # the subject hold honoured, named by its id only
    # `lethe erasure certificate rt-... --verify` checks it with the stack's pinned key
    show_certificate(driver.target, run["run_id"], record, as_json=False, html=None, verify=True)
    printed = capsys.readouterr().out
    assert "rows removed     4" in printed
    assert "certificate verifies: signed by" in printed
    # tampering is detected
    envelope["certificate"]["totals"]["rows_removed"] = 5
    with pytest.raises(Exception, match="digest"):
        verify_retention(envelope, signer)
