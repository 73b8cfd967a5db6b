"""`lethe key rotate-check | rotate` on in-process moto: a rotation is refused while an erasure
request is open or an ingestion is in flight, changes nothing then, and otherwise puts a new key
whose fingerprint (never the key) is printed; the old version stays, so `lethe erasure find`
still finds a request hashed with it."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lethe import cli
from lethe.commands import erasure_find
from lethe.commands import key as key_command
from lethe_shared.catalog.object_catalog import CatalogItem, DynamoObjectCatalog, ObjectStatus, Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.requests import DynamoErasureRequests, ErasureStatus
from lethe_shared.subject_hashing.keys import key_fingerprint
from tests.integration.conftest import create_table_from_template
from tests.integration.test_erasure_find_cli import REVIEWS, ApiTarget, _file

OLD_KEY = "rotate-old-key-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def deployment(
    lethe_tables: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> dict[str, Any]:
    registry = DynamoDatasetRegistry(lethe_tables["DatasetsTable"])
    reviews = parse_dataset(REVIEWS)
    registry.register(reviews)
    requests = DynamoErasureRequests(
        create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    )
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    arn = secrets.create_secret(Name="lethe-local-subject-hash-key", SecretString=OLD_KEY)["ARN"]
    _file(requests, "er-open", {"subject_ids": ["u-SECRET-1"]}, OLD_KEY, [reviews])
    catalog = DynamoObjectCatalog(lethe_tables["ObjectCatalogTable"])
    item = CatalogItem(
        bucket="raw", key="reviews/a.csv", version_id="va", zone=Zone.RAW,
        status=ObjectStatus.INGESTING, sequencer="A1", dataset_id="reviews",
    )  # fmt: skip
    assert catalog.put_if_newer(item)
    target = ApiTarget(
        {
            "DatasetsTableName": lethe_tables["DatasetsTable"].name,
            "ObjectCatalogTableName": lethe_tables["ObjectCatalogTable"].name,
            "SubjectHashKeySecretArn": arn,
        },
        requests,
    )
    monkeypatch.setattr(key_command, "resolve", lambda args: target)
    monkeypatch.setattr(erasure_find, "resolve", lambda args: target)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return {"run": run, "requests": requests, "catalog": catalog, "secrets": secrets, "arn": arn,
            "item": item}  # fmt: skip


def _secret(deployment: dict[str, Any]) -> str:
    return str(deployment["secrets"].get_secret_value(SecretId=deployment["arn"])["SecretString"])


def test_rotation_is_refused_while_a_request_or_an_ingestion_is_open(
    deployment: dict[str, Any],
) -> None:
    run = deployment["run"]
    code, out, _ = run("key", "rotate-check", "--json")
    assert code == 1
    check = json.loads(out)
    assert check["ready"] is False
    assert check["key_fingerprint"] == key_fingerprint(OLD_KEY.encode())
    assert check["open_requests"] == [{"request_id": "er-open", "status": "RECEIVED"}]
    assert check["ingestion_in_flight"] == [
        {"dataset": "reviews", "key": "reviews/a.csv", "version_id": "va", "status": "INGESTING"}
    ]

    assert run("key", "rotate")[0] == 2  # without --yes
    code, out, err = run("key", "rotate", "--yes")
    assert code == 1
    assert "er-open  RECEIVED" in out
    assert "INGESTING  reviews/a.csv (va)" in out
    assert "not rotated" in err
    assert _secret(deployment) == OLD_KEY  # nothing changed

    # the request ends, the ingestion still runs: still refused
    deployment["requests"].transition(
        "er-open", ErasureStatus.REJECTED, by="dpo@example.com", updates={"outcome": "CANCELLED"}
    )
    code, out, _ = run("key", "rotate-check")
    assert code == 1
    assert "1 raw version(s) RECEIVED or INGESTING" in out
    assert "erasure request(s) open" not in out


def test_rotation_when_nothing_is_open_puts_a_new_key_and_find_still_uses_the_old(
    deployment: dict[str, Any],
) -> None:
    run = deployment["run"]
    deployment["requests"].transition(
        "er-open", ErasureStatus.REJECTED, by="dpo@example.com", updates={"outcome": "CANCELLED"}
    )
    item = deployment["item"]
    deployment["catalog"].fail_ingestion(item.object_url, item.version_id, "boom")
    code, out, _ = run("key", "rotate-check")
    assert (code, out.splitlines()[-1]) == (
        0,
        "nothing open: the key may be rotated (`lethe key rotate --yes`)",
    )

    code, out, err = run("key", "rotate", "--yes")
    assert code == 0, err
    new = _secret(deployment)
    assert new != OLD_KEY
    assert len(new) == 64
    old_fp, new_fp = key_fingerprint(OLD_KEY.encode()), key_fingerprint(new.encode())
    assert f"fingerprint {old_fp} -> {new_fp}" in out
    assert "lethe datasets reindex --all" in out
    assert new not in out + err  # never the key

    # the request filed under the old key is still found (the old version is kept)
    code, out, err = run("erasure", "find", "--subject", "u-SECRET-1", "--json")
    assert code == 0, err
    assert [(r["request_id"], r["key_fingerprint"]) for r in json.loads(out)] == [
        ("er-open", old_fp)
    ]
