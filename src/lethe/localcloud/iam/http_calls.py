"""One HTTP request to the local cloud, read as AWS reads it: who signed it and which operation.

`read_call(environ)` takes a WSGI environ of the moto server and returns a `Call`: the access key
(SigV4 `Authorization` header or a presigned URL's `X-Amz-Credential`), the signing service and
region of the credential scope, the operation and its parameters:

- JSON protocol (DynamoDB, Step Functions, KMS, Secrets Manager, EventBridge, SQS, Logs, Glue):
  `X-Amz-Target: <prefix>.<Operation>`, parameters = the JSON body;
- query protocol (SNS, SES, STS, CloudFormation, CloudWatch): the form body's `Action` and its
  flattened parameters;
- REST (S3 is read by `s3_calls`; Lambda and EMR Serverless): the method and path matched
  against botocore's model of the service (`requestUri`), path parameters as parameters.

The body is read only where it is needed (never for S3 object uploads) and put back, so moto
reads the request unchanged.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, unquote

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/([^/]+)/([^/]+)/([^/]+)/aws4_request")


@dataclass
class Call:
    access_key: str  # "" when unsigned
    service: str  # the signing name of the credential scope: s3, dynamodb, states, ses, ...
    region: str
    method: str
    path: str  # unquoted PATH_INFO
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    operation: str = ""  # the API operation, "" for S3 (s3_calls works it out)
    params: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = str(environ["CONTENT_TYPE"])
    return headers


def read_body(environ: dict[str, Any]) -> bytes:
    """The request body; the environ gets a fresh stream with the same bytes for moto."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    stream = environ.get("wsgi.input")
    body = stream.read(length) if stream is not None and length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return body


def read_call(environ: dict[str, Any]) -> Call:
    headers = _headers(environ)
    query = parse_qs(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    scope = _CREDENTIAL.search(headers.get("authorization", ""))
    if scope is None and "X-Amz-Credential" in query:
        scope = _CREDENTIAL.search("Credential=" + query["X-Amz-Credential"][0])
    access_key, region, service = (
        (scope.group(1), scope.group(3), scope.group(4)) if scope else ("", "", "")
    )
    call = Call(
        access_key=access_key,
        service=service,
        region=region,
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=unquote(str(environ.get("PATH_INFO", "/"))),
        query=query,
        headers=headers,
    )
    if service == "s3":
        if call.method == "POST" and "delete" in query:  # DeleteObjects: the keys are the body
            call.body = read_body(environ)
        return call
    target = headers.get("x-amz-target", "")
    if target:
        call.operation = target.rsplit(".", 1)[-1]
        call.body = read_body(environ)
        try:
            call.params = json.loads(call.body or b"{}")
        except ValueError:
            call.params = {}
        return call
    if "x-www-form-urlencoded" in headers.get("content-type", "") or "Action" in query:
        call.body = read_body(environ)
        form = parse_qs(call.body.decode("utf-8", "replace"), keep_blank_values=True)
        merged = {**query, **form}
        call.operation = (merged.get("Action") or [""])[0]
        call.params = {key: values[0] for key, values in merged.items()}
        return call
    operation, path_params = match_rest_operation(service, call.method, call.path)
    call.operation = operation
    call.params = path_params
    if call.method in {"POST", "PUT"} and "json" in headers.get("content-type", "json"):
        call.body = read_body(environ)
    return call


#: botocore's name of a service whose signing name differs.
_BOTOCORE_NAMES = {"emr-serverless": "emr-serverless", "lambda": "lambda"}


@lru_cache(maxsize=16)
def _rest_routes(service: str) -> list[tuple[str, re.Pattern[str], str, int]]:
    import botocore.session  # noqa: PLC0415 - only REST services need the model

    model = botocore.session.get_session().get_service_model(_BOTOCORE_NAMES.get(service, service))
    routes = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        uri = http.get("requestUri", "/").split("?", 1)[0]
        literal = len(re.sub(r"\{[^}]+\}", "", uri))
        regex = re.sub(
            r"\\\{([A-Za-z0-9_]+)(\\\+)?\\\}",
            lambda m: f"(?P<{m.group(1)}>{'.+' if m.group(2) else '[^/]+'})",
            re.escape(uri),
        )
        routes.append(
            (http.get("method", "POST").upper(), re.compile(f"^{regex}/?$"), name, literal)
        )
    routes.sort(key=lambda route: -route[3])  # most literal first
    return routes


def match_rest_operation(service: str, method: str, path: str) -> tuple[str, dict[str, str]]:
    """(operation, path parameters) of a REST request; ("", {}) when no operation matches."""
    try:
        routes = _rest_routes(service)
    except Exception:  # an unknown service: the caller denies "operation not recognised"
        return "", {}
    for route_method, pattern, name, _ in routes:
        match = pattern.match(path)
        if route_method == method and match:
            return name, {k: unquote(v) for k, v in match.groupdict().items()}
    return "", {}
