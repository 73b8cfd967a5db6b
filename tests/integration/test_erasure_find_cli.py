"""`lethe erasure find` on in-process moto (the registry, the requests table, the hash key
secret with its versions): a subject's requests are found by the keyed hashes the requests
stored, under the key version each was hashed with (a request filed before a key rotation
included), per dataset as a request hashes it; raw ids are never printed."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lethe import cli
from lethe.commands import erasure_find
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.subject_hashing.keys import key_fingerprint
from tests.integration.conftest import create_table_from_template
from tests.integration.test_datasets_reindex_cli import MotoTarget

OLD_KEY = "find-old-key-0123456789abcdefghijklmnopqrstuvwxyz"
NEW_KEY = "find-new-key-0123456789abcdefghijklmnopqrstuvwxyz"
LOST_KEY = "find-lost-key-0123456789abcdefghijklmnopqrstuvwxy"
TENANT = "acme-SECRET-tenant"
ORDERS = {"dataset_id": "orders", "format": "parquet", "subject_columns": ["customer_id"],
          "schema": [{"name": "customer_id", "type": "bigint"}]}  # fmt: skip
REVIEWS = {"dataset_id": "reviews", "format": "parquet", "subject_columns": ["user_id"],
           "schema": [{"name": "user_id", "type": "string"}]}  # fmt: skip
VISITS = {"dataset_id": "visits", "format": "parquet", "subject_columns": ["tenant", "user_id"],
          "schema": [{"name": "tenant", "type": "string"},
                     {"name": "user_id", "type": "bigint"}]}  # fmt: skip
CERTIFICATE = {"url": "s3://reports/erasure/A/certificate.json", "sha256": "ab" * 32}


class ApiTarget(MotoTarget):
    """MotoTarget plus the erasure API's listing, answered from the requests table."""

    def __init__(self, outputs: dict[str, str], requests: DynamoErasureRequests) -> None:
        super().__init__(outputs)
        self.requests = requests

    def call_api(self, method: str, path: str, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        assert (method, path) == ("GET", "/erasure-requests")
        return 200, {"requests": [r.public() for r in self.requests.list()]}


def _file(
    requests: DynamoErasureRequests, rid: str, body: dict[str, Any], key: str, datasets: list[Any]
) -> None:
    parsed = parse_request_body({**body, "requested_by": "dpo@example.com"})
    subjects = hash_subjects(parsed, key.encode(), datasets)
    fingerprint = key_fingerprint(key.encode())
    requests.create(new_request(rid, parsed, subjects, key_fingerprint=fingerprint))


@pytest.fixture
def find(
    lethe_tables: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    registry = DynamoDatasetRegistry(lethe_tables["DatasetsTable"])
    datasets = [parse_dataset(d) for d in (ORDERS, REVIEWS, VISITS)]
    for dataset in datasets:
        registry.register(dataset)
    requests = DynamoErasureRequests(
        create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    )
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    arn = secrets.create_secret(Name="lethe-local-subject-hash-key", SecretString=OLD_KEY)["ARN"]
    # filed before the rotation, under the old key: "01001" (the integer 1001 in orders, the
    # text "01001" in reviews); completed, with its certificate
    _file(requests, "er-a", {"subject_ids": ["01001"]}, OLD_KEY, datasets)
    requests.transition(
        "er-a", ErasureStatus.COMPLETED, by="workflow",
        allowed_from=frozenset({ErasureStatus.RECEIVED}), updates={"certificate": CERTIFICATE},
    )  # fmt: skip
    secrets.put_secret_value(SecretId=arn, SecretString=NEW_KEY)  # the rotation
    # after it: "1001" in reviews only (the text "1001": another person than "01001" there)
    _file(requests, "er-b", {"subject_ids": ["1001"], "datasets": ["reviews"]}, NEW_KEY, datasets)
    _file(
        requests, "er-c", {"subject_keys": [{"tenant": TENANT, "user_id": "42"}]}, NEW_KEY,
        datasets,
    )  # fmt: skip
    # a key no version of the secret holds any more: cannot be matched, and said so
    _file(requests, "er-d", {"subject_ids": ["01001"]}, LOST_KEY, datasets)
    target = ApiTarget(
        {"DatasetsTableName": lethe_tables["DatasetsTable"].name, "SubjectHashKeySecretArn": arn},
        requests,
    )
    monkeypatch.setattr(erasure_find, "resolve", lambda args: target)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["erasure", "find", *argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _ids(out: str) -> list[str]:
    return [row["request_id"] for row in json.loads(out)]


def test_find_matches_under_each_request_s_own_key_and_per_dataset(find: Any) -> None:
    code, out, err = find("--subject", "01001", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["request_id"] == "er-a"  # under the old key; never er-b ("1001" in reviews)
    assert (row["status"], row["subjects"]) == ("COMPLETED", [1])
    assert row["certificate"] == CERTIFICATE
    assert row["key_fingerprint"] == key_fingerprint(OLD_KEY.encode())
    assert "1 request(s) were hashed with a key Secrets Manager no longer holds" in err
    assert key_fingerprint(LOST_KEY.encode()) in err

    # "1001" is customer 1001 of orders (er-a) and the text "1001" of reviews (er-b)
    code, out, _ = find("--subject", "1001", "--json")
    assert (code, sorted(_ids(out))) == (0, ["er-a", "er-b"])


def test_find_by_composite_key_and_text_output(find: Any) -> None:
    code, out, err = find("--subject-key", f"tenant={TENANT},user_id=042")
    assert code == 0, err
    assert "er-c" in out
    assert "er-a" not in out
    assert "RECEIVED" in out

    code, out, err = find("--subject", "01001", "--subject", "7")
    assert code == 0, err
    assert "er-a" in out
    assert "COMPLETED" in out
    assert CERTIFICATE["url"] in out
    assert "lethe erasure certificate ID --verify" in out
    for text in (out, err):
        assert "01001" not in text
        assert TENANT not in text

    code, out, _ = find("--subject", "nobody-at-all")
    assert code == 0
    assert "no erasure request names these subjects (searched under 2 key version(s))" in out


def test_find_refuses_one_column_per_subject_key_flag(find: Any) -> None:
    code, out, err = find("--subject-key", f"tenant={TENANT}", "--subject-key", "user_id=42")
    assert (code, out) == (2, "")
    assert "--subject-key is one whole key per flag" in err
    assert TENANT not in err


def test_find_shows_a_failed_request_s_partial_certificates(find: Any) -> None:
    # the runbook "An erasure that failed halfway": which request and certificate prove what
    target = erasure_find.resolve(None)  # type: ignore[arg-type]
    partial = {"url": "s3://reports/erasure/er-b/failed-run-1/certificate.json",
               "sha256": "cd" * 32, "partial": True, "run": 1}  # fmt: skip
    target.requests.transition(
        "er-b", ErasureStatus.FAILED, by="workflow",
        updates={"certificate": partial, "partial_certificates": [
            {"run": 1, "url": partial["url"], "sha256": partial["sha256"]}
        ]},
    )  # fmt: skip
    code, out, err = find("--subject", "1001")
    assert code == 0, err
    (line,) = [row for row in out.splitlines() if row.startswith("er-b")]
    assert "FAILED" in line
    assert line.endswith(f"{partial['url']} (partial, run 1)")
    code, out, _ = find("--subject", "1001", "--json")
    (row,) = [r for r in json.loads(out) if r["request_id"] == "er-b"]
    assert row["partial_certificates"] == [{"run": 1, "url": partial["url"], "sha256": "cd" * 32}]
