"""The deployment's REST API (API Gateway v1, Lambda proxy integration) on a local port.

`ApiServer(deployment, runtime).start()` serves ``deployment.api_routes`` on 127.0.0.1 (a free
port) under ``/<api_stage>`` and returns the base URL, ``http://127.0.0.1:<port>/<stage>``.

Per request, as API Gateway does:

- Resource matching (werkzeug's routing, one rule per resource): the path after the stage is
  matched against the route templates (``{name}`` = one segment, ``{name+}`` = the rest of the
  path, a trailing ``/`` ignored); when several match, literal segments beat ``{param}`` which
  beats ``{proxy+}``. Then the method (an ``ANY`` route accepts every method). No matching
  resource, no such method on it, or a request outside the stage:
  ``403 {"message": "Missing Authentication Token"}`` (that is what API Gateway answers).
- ``AWS_IAM`` routes need a SigV4 ``Authorization`` header (``AWS4-HMAC-SHA256
  Credential=<access key>/...``), else the same 403. **The signature is not verified**: the local
  cloud has no secret to check it against. The access key goes to
  ``requestContext.identity`` (``accessKey``, ``caller``, ``user``, ``accountId``, ``userArn``
  ``arn:aws:iam::<account>:user/local``).
- The proxy event: resource, path, httpMethod, headers / multiValueHeaders,
  queryStringParameters / multiValueQueryStringParameters (null when empty), pathParameters
  (URL-decoded; null when none), stageVariables null, requestContext (stage, requestId,
  httpMethod, path with the stage, resourcePath, identity with sourceIp 127.0.0.1, ...), body,
  isBase64Encoded. Text bodies (text/*, JSON, XML, form posts) pass as strings; other bodies
  (and any body that is not UTF-8) are base64 with isBase64Encoded true.
- The function runs synchronously through the `LambdaRuntime`. A function error (including a
  timeout) or a response that is not a valid proxy response (a dict with an integer statusCode,
  string body, string headers, list multiValueHeaders, boolean isBase64Encoded and no other
  keys) gives ``502 {"message": "Internal server error"}``. API Gateway's own 29 s integration
  timeout is not applied (the function's timeout is).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, MapAdapter, PathConverter, Rule

from lethe.localcloud.deployment import ApiRoute, Deployment
from lethe.localcloud.lambdas import LambdaRuntime

logger = logging.getLogger("lethe.localcloud.api")

MISSING_TOKEN = {"message": "Missing Authentication Token"}
INTERNAL_ERROR = {"message": "Internal server error"}
_SIGV4_PREFIX = "AWS4-HMAC-SHA256 Credential="
_PROXY_KEYS = frozenset({"statusCode", "headers", "multiValueHeaders", "body", "isBase64Encoded"})
_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/x-www-form-urlencoded",
    "application/xml",
    "application/javascript",
)


_PARAMETER = re.compile(r"\{(?P<name>[A-Za-z0-9_.\-]+)(?P<greedy>\+?)\}")
# werkzeug matches "/" + path.lstrip("/"): under a fixed first segment, an empty leading segment
# ("//x") stays in the path instead of being dropped.
_MOUNT = "/api"


class _GreedyConverter(PathConverter):
    """API Gateway's ``{name+}``: the rest of the path, slashes included."""

    part_isolating = False
    regex = ".+"


@dataclass(frozen=True)
class _Resource:
    """One API resource (path template): its routes by method and its parameter names."""

    names: tuple[str, ...]  # werkzeug's variable p<i> is API Gateway's parameter names[i]
    routes: dict[str, ApiRoute]


def _rule(path: str) -> tuple[str, tuple[str, ...]]:
    """The werkzeug rule of an API Gateway path template, and its parameter names in order.

    API Gateway's names may hold '.' and '-', werkzeug's are identifiers: p0, p1, ...
    """
    parts: list[str] = []
    names: list[str] = []
    for segment in (s for s in path.strip("/").split("/") if s):
        found = _PARAMETER.fullmatch(segment)
        if found is None:
            parts.append(segment)
            continue
        converter = "greedy:" if found.group("greedy") else ""
        parts.append(f"<{converter}p{len(names)}>")
        names.append(found.group("name"))
    return f"{_MOUNT}/" + "/".join(parts), tuple(names)


def _routing(routes: list[ApiRoute]) -> tuple[MapAdapter, dict[str, _Resource]]:
    """werkzeug routing over the API's resources (one rule per path template), and the resources.

    Rules carry no methods: as in API Gateway, the most specific resource wins first (literal
    segments before ``{name}`` before ``{name+}``: werkzeug's own ordering), then its method.
    """
    resources: dict[str, _Resource] = {}
    rules: list[Rule] = []
    for route in routes:
        if route.path not in resources:
            rule, names = _rule(route.path)
            resources[route.path] = _Resource(names, {})
            rules.append(Rule(rule, endpoint=route.path))
        resources[route.path].routes.setdefault(route.method, route)
    routing = Map(
        rules,
        converters={"greedy": _GreedyConverter},
        strict_slashes=False,  # "/forms/" is "/forms"
        merge_slashes=False,  # "/datasets//x" is no resource
        redirect_defaults=False,
    )
    return routing.bind("127.0.0.1"), resources


@dataclass
class ProxyResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def _json_response(status: int, document: dict[str, Any], error_type: str) -> ProxyResponse:
    return ProxyResponse(
        status,
        [("Content-Type", "application/json"), ("x-amzn-ErrorType", error_type)],
        json.dumps(document).encode("utf-8"),
    )


def _is_text(content_type: str | None) -> bool:
    if not content_type:
        return True
    lowered = content_type.lower()
    return lowered.startswith(_TEXT_TYPES) or "+json" in lowered or "+xml" in lowered


def _proxy_status(document: dict[str, Any]) -> int | None:
    status = document.get("statusCode", 200)
    if isinstance(status, str) and status.isdigit():
        status = int(status)
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        return None
    return status


def _proxy_headers(document: dict[str, Any]) -> list[tuple[str, str]] | None:
    headers = document.get("headers") or {}
    multi = document.get("multiValueHeaders") or {}
    if not isinstance(headers, dict) or not isinstance(multi, dict):
        return None
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        if isinstance(value, dict | list):
            return None
        out.append((str(name), "" if value is None else str(value)))
    for name, values in multi.items():
        if not isinstance(values, list):
            return None
        out.extend((str(name), str(v)) for v in values)
    if not any(name.lower() == "content-type" for name, _ in out):
        out.append(("Content-Type", "application/json"))
    return out


def _proxy_body(document: dict[str, Any]) -> bytes | None:
    body = document.get("body")
    encoded = document.get("isBase64Encoded", False)
    if not isinstance(encoded, bool) or (body is not None and not isinstance(body, str)):
        return None
    try:
        return base64.b64decode(body or "", validate=True) if encoded else (body or "").encode()
    except (binascii.Error, ValueError):
        return None


def translate_proxy_response(document: Any) -> ProxyResponse | None:
    """API Gateway's reading of a Lambda proxy response; None if it is malformed."""
    if not isinstance(document, dict) or not set(document) <= _PROXY_KEYS:
        return None
    status = _proxy_status(document)
    headers = _proxy_headers(document)
    body = _proxy_body(document)
    if status is None or headers is None or body is None:
        return None
    return ProxyResponse(status, headers, body)


class ApiServer:
    """Serves the deployment's REST API on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self, deployment: Deployment, runtime: LambdaRuntime, *, api_id: str | None = None
    ) -> None:
        self.deployment = deployment
        self.runtime = runtime
        self.stage = deployment.api_stage.strip("/")
        self.api_id = api_id or deployment.physical_ids.get("ServerlessRestApi", "localapi")
        self._router, self._resources = _routing(deployment.api_routes)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the API server is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        stage = f"/{self.stage}" if self.stage else ""
        return f"http://127.0.0.1:{self.port}{stage}"

    def start(self) -> str:
        """Start serving on a free port; returns the base URL (with the stage)."""
        if self._server is not None:
            return self.base_url
        api = self

        class Handler(_RequestHandler):
            server_api = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="local-rest-api", daemon=True
        )
        self._thread.start()
        logger.info("REST API on %s", self.base_url)
        return self.base_url

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None
        self._thread = None

    # -- request handling --------------------------------------------------------------------

    def match(self, path: str) -> tuple[_Resource, dict[str, str]] | None:
        """The best-matching resource for `path` and its path parameters (URL-decoded)."""
        try:
            endpoint, values = self._router.match(_MOUNT + path)
        except HTTPException:  # NotFound (a redirect cannot happen with these settings)
            return None
        resource = self._resources[str(endpoint)]
        return resource, {
            resource.names[int(variable[1:])]: unquote(value) for variable, value in values.items()
        }

    def handle(
        self, method: str, raw_path: str, headers: list[tuple[str, str]], body: bytes
    ) -> ProxyResponse:
        split = urlsplit(raw_path)
        path = unquote(split.path) or "/"
        prefix = f"/{self.stage}" if self.stage else ""
        if prefix and not (path == prefix or path.startswith(prefix + "/")):
            return _json_response(403, MISSING_TOKEN, "MissingAuthenticationTokenException")
        resource_path = path[len(prefix) :] or "/"
        found = self.match(resource_path)
        if found is None:
            return _json_response(403, MISSING_TOKEN, "MissingAuthenticationTokenException")
        resource, params = found
        route = resource.routes.get(method) or resource.routes.get("ANY")
        if route is None:
            return _json_response(403, MISSING_TOKEN, "MissingAuthenticationTokenException")
        access_key: str | None = None
        if route.authorization.upper() == "AWS_IAM":
            authorization = next((v for k, v in headers if k.lower() == "authorization"), "")
            if not authorization.startswith(_SIGV4_PREFIX):
                return _json_response(403, MISSING_TOKEN, "MissingAuthenticationTokenException")
            access_key = authorization[len(_SIGV4_PREFIX) :].split("/", 1)[0].strip() or None
        event = self.proxy_event(
            route,
            method=method,
            resource_path=resource_path,
            query=split.query,
            headers=headers,
            body=body,
            path_parameters=params,
            access_key=access_key,
        )
        return self._invoke(route, event)

    def _invoke(self, route: ApiRoute, event: dict[str, Any]) -> ProxyResponse:
        try:
            spec = self.deployment.functions[route.function_logical_id]
        except KeyError:
            logger.error(
                "route %s %s: no function %s", route.method, route.path, route.function_logical_id
            )
            return _json_response(500, INTERNAL_ERROR, "InternalServerErrorException")
        result = self.runtime.invoke(spec.logical_id, json.dumps(event).encode("utf-8"))
        if result.function_error:
            logger.warning(
                "%s %s: function error %s",
                route.method,
                route.path,
                result.payload[:500].decode("utf-8", "replace"),
            )
            return _json_response(502, INTERNAL_ERROR, "InternalServerErrorException")
        try:
            document = json.loads(result.payload)
        except ValueError:
            document = None
        response = translate_proxy_response(document)
        if response is None:
            logger.warning("%s %s: malformed Lambda proxy response", route.method, route.path)
            return _json_response(502, INTERNAL_ERROR, "InternalServerErrorException")
        response.headers.append(("x-amzn-RequestId", event["requestContext"]["requestId"]))
        return response

    def proxy_event(
        self,
        route: ApiRoute,
        *,
        method: str,
        resource_path: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes,
        path_parameters: dict[str, str],
        access_key: str | None,
    ) -> dict[str, Any]:
        """The API Gateway REST (v1) proxy event for one request."""
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for name, value in headers:
            single[name] = value
            multi.setdefault(name, []).append(value)
        query_single: dict[str, str] = {}
        query_multi: dict[str, list[str]] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            query_single[name] = value
            query_multi.setdefault(name, []).append(value)
        content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
        text: str | None = None
        is_base64 = False
        if body:
            if _is_text(content_type):
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            if text is None:
                text = base64.b64encode(body).decode("ascii")
                is_base64 = True
        now = datetime.now(UTC)
        request_id = str(uuid.uuid4())
        account = self.deployment.endpoints.account_id
        user_agent = next((v for k, v in headers if k.lower() == "user-agent"), None)
        identity = {
            "cognitoIdentityPoolId": None,
            "accountId": account if access_key else None,
            "cognitoIdentityId": None,
            "caller": access_key,
            "sourceIp": "127.0.0.1",
            "principalOrgId": None,
            "accessKey": access_key,
            "cognitoAuthenticationType": None,
            "cognitoAuthenticationProvider": None,
            "userArn": f"arn:aws:iam::{account}:user/local" if access_key else None,
            "userAgent": user_agent,
            "user": access_key,
        }
        stage_path = f"/{self.stage}{resource_path}" if self.stage else resource_path
        return {
            "resource": route.path,
            "path": resource_path,
            "httpMethod": method,
            "headers": single or None,
            "multiValueHeaders": multi or None,
            "queryStringParameters": query_single or None,
            "multiValueQueryStringParameters": query_multi or None,
            "pathParameters": path_parameters or None,
            "stageVariables": None,
            "requestContext": {
                "resourceId": uuid.uuid5(uuid.NAMESPACE_URL, route.path).hex[:6],
                "resourcePath": route.path,
                "httpMethod": method,
                "extendedRequestId": request_id,
                "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                "path": stage_path,
                "accountId": account,
                "protocol": "HTTP/1.1",
                "stage": self.stage,
                "domainPrefix": "127",
                "requestTimeEpoch": int(time.time() * 1000),
                "requestId": request_id,
                "identity": identity,
                "domainName": f"127.0.0.1:{self.port}",
                "apiId": self.api_id,
            },
            "body": text,
            "isBase64Encoded": is_base64,
        }


class _RequestHandler(BaseHTTPRequestHandler):
    server_api: ApiServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = [(name, value) for name, value in self.headers.items()]
        headers.extend(
            [
                ("X-Forwarded-For", self.client_address[0]),
                ("X-Forwarded-Port", str(self.server_api.port)),
                ("X-Forwarded-Proto", "http"),
            ]
        )
        try:
            response = self.server_api.handle(self.command, self.path, headers, body)
        except Exception:
            logger.exception("%s %s failed", self.command, self.path)
            response = _json_response(500, INTERNAL_ERROR, "InternalServerErrorException")
        self.send_response(response.status)
        for name, value in response.headers:
            if name.lower() not in {"content-length", "connection", "transfer-encoding"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)
