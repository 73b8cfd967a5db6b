"""`sam local invoke --env-vars <lethe local sam-env>` reaches the local cloud.

No Docker engine here, so the container itself cannot run. What the test runs instead is each
half of the path for real: SAM CLI's own code (the pinned `.venv-sam`) resolves the function's
environment from template.yaml and the env file exactly as `sam local invoke` does
(`LocalLambdaRunner._make_env_vars`: only declared variables, file over shell over template,
plus its AWS_* variables); then the handler runs in a fresh Python process with that
environment and nothing else, and must answer from a moto server standing in for the local
cloud. Without LETHE_ENDPOINT_URL (the template's declared, empty variable) boto3 would go to
AWS with fake credentials and the invoke would fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lethe.commands.local import sam_env_vars
from lethe.localcloud.template import load_template
from tests.conftest import EVENTS_DIR, REPO_ROOT
from tests.integration.conftest import moto_server

pytestmark = pytest.mark.integration

SAM_PYTHON = REPO_ROOT / ".venv-sam" / "bin" / "python"
FUNCTION = "DatasetsApiFunction"

# Runs in .venv-sam: SAM CLI's function provider and env-vars resolution, as `sam local invoke
# FUNCTION --env-vars FILE` calls them; prints the environment the container would get.
RESOLVE = """
import json, sys
from unittest import mock
from samcli.commands.local.lib.local_lambda import LocalLambdaRunner
from samcli.lib.providers.sam_function_provider import SamFunctionProvider
from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

template, env_file, function = sys.argv[1:4]
stacks, _ = SamLocalStackProvider.get_stacks(template)
provider = SamFunctionProvider(stacks)
runner = LocalLambdaRunner(
    local_runtime=mock.Mock(), function_provider=provider, cwd=".", real_path=".",
    env_vars_values=json.load(open(env_file)),
)
print(json.dumps(runner._make_env_vars(provider.get(function)).resolve()))
"""

# Runs in a clean process of the dev venv: the handler as the Lambda runtime would load it.
INVOKE = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import app

class Context:
    function_name = "lethe-local-datasets-api"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + function_name
    aws_request_id = "sam-local-1"

print(json.dumps(app.handler(json.load(open(sys.argv[3])), Context())))
"""


def _function_code(logical_id: str) -> tuple[Path, Path]:
    props = load_template()["Resources"][logical_id]["Properties"]
    return REPO_ROOT / props["CodeUri"], REPO_ROOT / "layers" / "shared"


def _resolved_environment(env_file: Path, shell: dict[str, str]) -> dict[str, str]:
    assert SAM_PYTHON.exists(), "make tools creates .venv-sam (the integration target needs it)"
    result = subprocess.run(
        [str(SAM_PYTHON), "-c", RESOLVE, str(REPO_ROOT / "template.yaml"), str(env_file), FUNCTION],
        capture_output=True,
        text=True,
        env=shell,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _invoke(environment: dict[str, str], event: Path) -> dict[str, Any]:
    code, layer = _function_code(FUNCTION)
    result = subprocess.run(
        [sys.executable, "-c", INVOKE, str(code), str(layer), str(event)],
        capture_output=True,
        text=True,
        env={**environment, "PATH": os.environ["PATH"], "POWERTOOLS_TRACE_DISABLED": "true"},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.fixture
def local_cloud_state(tmp_path: Path) -> Any:
    """A moto server with the datasets table, the raw and lake buckets and the hash key,
    described by a state document such as `lethe local up` writes (endpoint and the functions'
    environments)."""
    with moto_server() as endpoints:
        env = json.loads((EVENTS_DIR / "env.json").read_text())
        table_props = load_template()["Resources"]["DatasetsTable"]["Properties"]
        dynamodb = endpoints.client("dynamodb")
        dynamodb.create_table(
            TableName=env[FUNCTION]["DATASETS_TABLE"],
            KeySchema=table_props["KeySchema"],
            AttributeDefinitions=table_props["AttributeDefinitions"],
            BillingMode=table_props["BillingMode"],
        )
        s3 = endpoints.client("s3")
        for bucket in (env[FUNCTION]["RAW_BUCKET"], env[FUNCTION]["LAKE_BUCKET"]):
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        # the subject hash key, whose fingerprint a new dataset records
        endpoints.client("secretsmanager").create_secret(
            Name=env[FUNCTION]["HASH_KEY_SECRET_ARN"], SecretString="k" * 64
        )
        put = json.loads((EVENTS_DIR / "datasets_api_put.json").read_text())
        put["requestContext"]["requestId"] = "sam-local-put"
        yield {
            "endpoint_url": endpoints.endpoint_url,
            "function_environments": env,
            "put_event": put,
        }


def test_a_sam_local_invoke_environment_reaches_the_local_cloud(
    local_cloud_state: dict[str, Any], tmp_path: Path
) -> None:
    env_file = tmp_path / "sam-env.json"
    env_file.write_text(json.dumps(sam_env_vars(local_cloud_state)))
    # the operator's shell: the local cloud's fake credentials, and an AWS_ENDPOINT_URL that
    # SAM CLI does not pass (the template does not declare it)
    shell = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
    }

    environment = _resolved_environment(env_file, shell)

    assert environment["LETHE_ENDPOINT_URL"] == local_cloud_state["endpoint_url"]
    assert "AWS_ENDPOINT_URL" not in environment  # dropped: not declared
    assert environment["AWS_ACCESS_KEY_ID"] == "testing"
    assert environment["DATASETS_TABLE"] == "lethe-local-datasets"

    event_file = tmp_path / "put.json"
    event_file.write_text(json.dumps(local_cloud_state["put_event"]))
    put = _invoke(environment, event_file)
    got = _invoke(environment, EVENTS_DIR / "datasets_api_get.json")

    assert put["statusCode"] == 201, put
    assert got["statusCode"] == 200, got
    assert json.loads(got["body"])["dataset"]["dataset_id"] == "reviews"


def test_the_env_file_as_committed_leaves_the_endpoint_alone(tmp_path: Path) -> None:
    """events/env.json (LETHE_ENDPOINT_URL empty, as deployed): the handler gets no endpoint
    override, so a `sam local invoke` with it talks to the AWS account of the shell."""
    shell = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AWS_DEFAULT_REGION": "us-east-1"}
    environment = _resolved_environment(EVENTS_DIR / "env.json", shell)
    assert environment["LETHE_ENDPOINT_URL"] == ""
    assert "AWS_ENDPOINT_URL" not in environment
