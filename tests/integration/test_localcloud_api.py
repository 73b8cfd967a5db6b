"""ApiServer: API Gateway REST (v1) proxy behaviour on a local port, handlers in real workers.

The handlers (tests/integration/fixtures/localcloud/api/app.py) make no AWS calls, so no moto
server is needed here: the endpoint in the Deployment is never contacted.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from lethe.localcloud.api import ApiServer
from lethe.localcloud.deployment import ApiRoute, Deployment, Endpoints, FunctionSpec
from lethe.localcloud.lambdas import LambdaRuntime

REGION = "us-east-1"
ACCOUNT = "123456789012"
FIXTURES = Path(__file__).parent / "fixtures" / "localcloud"
MISSING_TOKEN = {"message": "Missing Authentication Token"}
INTERNAL_ERROR = {"message": "Internal server error"}


def _function(logical_id: str, handler: str) -> FunctionSpec:
    name = f"lt-api-{logical_id.lower()}"
    return FunctionSpec(
        logical_id=logical_id,
        name=name,
        arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}",
        code_uri=FIXTURES / "api",
        handler=handler,
        layer_paths=(),
        environment={},
        timeout_seconds=3,
        memory_mb=128,
    )


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    functions = {
        "Echo": _function("Echo", "app.echo"),
        "Binary": _function("Binary", "app.binary"),
        "Boom": _function("Boom", "app.boom"),
        "Malformed": _function("Malformed", "app.malformed"),
    }
    routes = [
        ApiRoute("GET", "/datasets/{dataset_id}", "Echo", "NONE"),
        ApiRoute("POST", "/datasets/{dataset_id}", "Echo", "AWS_IAM"),
        ApiRoute("GET", "/datasets/special", "Echo", "NONE"),
        ApiRoute("POST", "/forms", "Echo", "NONE"),
        ApiRoute("ANY", "/files/{proxy+}", "Echo", "NONE"),
        ApiRoute("GET", "/binary", "Binary", "NONE"),
        ApiRoute("GET", "/boom", "Boom", "NONE"),
        ApiRoute("GET", "/malformed", "Malformed", "NONE"),
    ]
    deployment = Deployment(
        endpoints=Endpoints("http://127.0.0.1:9", REGION, ACCOUNT),
        repo_root=FIXTURES,
        state_dir=tmp_path_factory.mktemp("localcloud-api"),
        stack_name="lt-api",
        parameters={},
        physical_ids={},
        attributes={},
        outputs={},
        functions=functions,
        api_routes=routes,
        api_stage="v1",
    )
    runtime = LambdaRuntime(deployment)
    server = ApiServer(deployment, runtime)
    try:
        yield server.start()
    finally:
        server.stop()
        runtime.shutdown()


def _echo(response: requests.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["X-Handler"] == "echo"
    return dict(response.json())


def test_base_url_has_the_stage(base_url: str) -> None:
    assert base_url.startswith("http://127.0.0.1:")
    assert base_url.endswith("/v1")


def test_get_with_path_and_query_parameters(base_url: str) -> None:
    response = requests.get(f"{base_url}/datasets/reviews?limit=5&tag=a&tag=b", timeout=10)

    body = _echo(response)
    assert body == {
        "resource": "/datasets/{dataset_id}",
        "path": "/datasets/reviews",
        "httpMethod": "GET",
        "pathParameters": {"dataset_id": "reviews"},
        "queryStringParameters": {"limit": "5", "tag": "b"},
        "multiValueQueryStringParameters": {"limit": ["5"], "tag": ["a", "b"]},
        "stageVariables": None,
        "body": None,
        "isBase64Encoded": False,
        "contentType": None,
        "stage": "v1",
        "resourcePath": "/datasets/{dataset_id}",
        "contextPath": "/v1/datasets/reviews",
        "sourceIp": "127.0.0.1",
        "accessKey": None,
        "userArn": None,
    }
    assert response.headers["Content-Type"] == "application/json"
    assert response.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_literal_resources_win_over_parameters_and_values_are_decoded(base_url: str) -> None:
    special = _echo(requests.get(f"{base_url}/datasets/special", timeout=10))
    spaced = _echo(requests.get(f"{base_url}/datasets/my%20data", timeout=10))

    assert special["resource"] == "/datasets/special"
    assert special["pathParameters"] is None
    assert special["queryStringParameters"] is None
    assert spaced["pathParameters"] == {"dataset_id": "my data"}


def test_iam_route_without_signature_is_403(base_url: str) -> None:
    response = requests.post(f"{base_url}/datasets/reviews", json={"a": 1}, timeout=10)

    assert response.status_code == 403
    assert response.json() == MISSING_TOKEN


def test_iam_route_with_sigv4_signature_is_200_with_the_caller_identity(base_url: str) -> None:
    url = f"{base_url}/datasets/reviews"
    request = AWSRequest(
        method="POST",
        url=url,
        data=b'{"subject_ids": ["u1"]}',
        headers={"Content-Type": "application/json"},
    )
    SigV4Auth(Credentials("AKIDLOCALTEST", "not-checked"), "execute-api", REGION).add_auth(request)

    response = requests.post(url, data=request.body, headers=dict(request.headers), timeout=10)

    body = _echo(response)
    assert body["httpMethod"] == "POST"
    assert body["body"] == '{"subject_ids": ["u1"]}'
    assert body["contentType"] == "application/json"
    assert body["accessKey"] == "AKIDLOCALTEST"
    assert body["userArn"] == "arn:aws:iam::123456789012:user/local"


def test_form_post_passes_the_body_as_a_string(base_url: str) -> None:
    response = requests.post(f"{base_url}/forms", data={"a": "1", "b": "x y"}, timeout=10)

    body = _echo(response)
    assert body["body"] == "a=1&b=x+y"
    assert body["isBase64Encoded"] is False
    assert body["contentType"] == "application/x-www-form-urlencoded"


def test_greedy_path_and_binary_request_body(base_url: str) -> None:
    response = requests.put(
        f"{base_url}/files/raw/2026/a.bin",
        data=b"\x00\xff\x10",
        headers={"Content-Type": "application/octet-stream"},
        timeout=10,
    )

    body = _echo(response)
    assert body["resource"] == "/files/{proxy+}"
    assert body["httpMethod"] == "PUT"
    assert body["pathParameters"] == {"proxy": "raw/2026/a.bin"}
    assert body["isBase64Encoded"] is True
    assert body["body"] == "AP8Q"
    assert base64.b64decode(body["body"]) == b"\x00\xff\x10"


def test_base64_proxy_response_is_decoded(base_url: str) -> None:
    response = requests.get(f"{base_url}/binary", timeout=10)

    assert response.status_code == 201
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.content == b"\x00\x01\xfe\xff"


@pytest.mark.parametrize("path", ["/boom", "/malformed"])
def test_function_error_or_malformed_response_is_502(base_url: str, path: str) -> None:
    response = requests.get(f"{base_url}{path}", timeout=10)

    assert response.status_code == 502
    assert response.json() == INTERNAL_ERROR


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nowhere"),
        ("DELETE", "/datasets/reviews"),  # known resource, method not defined
        ("GET", "/"),
    ],
)
def test_unknown_routes_and_methods_are_403(base_url: str, method: str, path: str) -> None:
    response = requests.request(method, f"{base_url}{path}", timeout=10)

    assert response.status_code == 403
    assert response.json() == MISSING_TOKEN
    assert response.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def test_request_outside_the_stage_is_403(base_url: str) -> None:
    root = base_url.removesuffix("/v1")

    response = requests.get(f"{root}/v2/datasets/reviews", timeout=10)

    assert response.status_code == 403
    assert response.json() == MISSING_TOKEN


def test_json_body_round_trip(base_url: str) -> None:
    payload = {"subject_ids": ["u1", "u2"], "reason": "GDPR Art. 17"}

    response = requests.post(f"{base_url}/forms", json=payload, timeout=10)

    assert json.loads(_echo(response)["body"]) == {
        "subject_ids": ["u1", "u2"],
        "reason": "GDPR Art. 17",
    }
