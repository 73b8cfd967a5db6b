"""Integration tier: handlers and adapters against moto (in-process `mock_aws`).

Tables are created from their definitions in template.yaml, so a key schema change in the
template is what these tests exercise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from moto.core.config import default_user_config

from lethe.localcloud.template import load_template
from tests.conftest import EVENTS_DIR

if TYPE_CHECKING:
    from lethe.localcloud.deployment import Endpoints

REGION = "us-east-1"
RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE = "lethe-local-lake-123456789012-us-east-1"
TABLES = {
    "DatasetsTable": "lethe-local-datasets",
    "ObjectCatalogTable": "lethe-local-object-catalog",
    "SubjectIndexTable": "lethe-local-subject-index",
}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Lethe")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "lethe")
    with mock_aws():
        yield


def create_table_from_template(logical_id: str, name: str) -> Any:
    """Create one of template.yaml's DynamoDB tables under `name`, keys and indexes as declared."""
    props = load_template()["Resources"][logical_id]["Properties"]
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props["BillingMode"],
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    return boto3.resource("dynamodb", region_name=REGION).create_table(**kwargs)


@pytest.fixture
def lethe_tables(aws: None) -> dict[str, Any]:
    return {logical: create_table_from_template(logical, name) for logical, name in TABLES.items()}


@pytest.fixture
def lethe_buckets(aws: None) -> Callable[..., None]:
    def _create(*, versioned: bool = True) -> None:
        s3 = boto3.client("s3", region_name=REGION)
        for bucket in (RAW, LAKE):
            s3.create_bucket(Bucket=bucket)
            if versioned:
                s3.put_bucket_versioning(
                    Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
                )

    return _create


@pytest.fixture
def handler_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Set a function's environment from events/env.json (what `sam local invoke` gets)."""

    task_token_key: list[str] = []  # one task token key per test, created when first needed

    def _set(function_logical_id: str, *, index_store: str = "dynamodb") -> None:
        env = json.loads((EVENTS_DIR / "env.json").read_text())
        for key, value in env[function_logical_id].items():
            monkeypatch.setenv(key, value)
        if "LETHE_INDEX_STORE" in env[function_logical_id]:
            # env.json deploys the segment store (the template's default); the handler tests
            # that read SubjectIndexTable run on the DynamoDB store, those of the segment store
            # ask for it (index_store="segments": IndexBucket and IndexManifestTable, moto)
            monkeypatch.setenv("LETHE_INDEX_STORE", index_store)
        if "TASK_TOKEN_KEY_ARN" in env[function_logical_id]:
            # the template's TaskTokenKey: moto gives a key its own id, env.json cannot name it
            if not task_token_key:
                kms = boto3.client("kms", region_name=REGION)
                task_token_key.append(
                    kms.create_key(Description="task tokens")["KeyMetadata"]["Arn"]
                )
            monkeypatch.setenv("TASK_TOKEN_KEY_ARN", task_token_key[0])

    return _set


@contextmanager
def moto_server(account: str = "123456789012") -> Iterator[Endpoints]:
    """A moto server on 127.0.0.1 (free port) configured as the local cloud configures it:
    Lambda's Docker-free backend, state machines executed, MOTO_PORT pointing the Step Functions
    interpreter at it.

    Imported here, not at the top: the handler tests of the Lambda tier (make lambda-tests) share
    this conftest, and their venv has neither moto's server (Flask) nor the local cloud."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    from lethe.localcloud.deployment import Endpoints  # noqa: PLC0415

    patch = pytest.MonkeyPatch()
    patch.setitem(default_user_config["lambda"], "use_docker", False)
    patch.setitem(default_user_config["stepfunctions"], "execute_state_machine", True)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    patch.setenv("MOTO_PORT", str(port))
    try:
        yield Endpoints(f"http://127.0.0.1:{port}", REGION, account)
    finally:
        server.stop()
        patch.undo()
