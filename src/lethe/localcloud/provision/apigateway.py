"""AWS::ApiGateway::RestApi, Deployment and Stage in moto's API Gateway, and the routes the
local API server serves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any

from botocore.exceptions import ClientError

from lethe.localcloud.deployment import ApiRoute
from lethe.localcloud.provision.coercion import camel, load_document, pick
from lethe.localcloud.provision.stack import Created, ProvisionError, Stack, handles

logger = logging.getLogger("lethe.localcloud.provision")


_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
_ANY_METHOD = "x-amazon-apigateway-any-method"
_LAMBDA_URI = re.compile(r":lambda:path/[^/]+/functions/(?P<arn>.+)/invocations$")


@handles("AWS::ApiGateway::RestApi")
def _rest_api(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    body = props.get("Body")
    if body is None and "BodyS3Location" in props:
        location = props["BodyS3Location"]
        path = stack.local_path(lid, "BodyS3Location", location["Bucket"], location["Key"])
        body = load_document(path)
    name = (
        props.get("Name") or (body or {}).get("info", {}).get("title") or stack.name(lid, None, 128)
    )
    api_id = _create_rest_api(stack, str(name), body)
    if body is not None:
        stack.api_routes.extend(_api_routes(stack, lid, body))
    root = next(
        (
            r["id"]
            for r in stack.call("apigateway", "get_resources", restApiId=api_id)["items"]
            if r["path"] == "/"
        ),
        "",
    )
    return Created(api_id, {"RootResourceId": root})


def _create_rest_api(stack: Stack, name: str, body: dict[str, Any] | None) -> str:
    """Import the API's methods into moto so that its deployments and stages can exist.

    moto imports OpenAPI 3 only and reads paths, methods and integrations; SAM writes
    Swagger 2.0, so moto gets an OpenAPI 3 skeleton of the same paths and integrations.
    Routes for the local API server come from the full body (`_api_routes`).
    """
    if body is not None:
        document = {
            "openapi": "3.0.1",
            "info": {"title": name, "description": "", "version": "1.0"},
            "paths": {
                path: {
                    ("ANY" if key == _ANY_METHOD else key): {
                        "responses": {},
                        "x-amazon-apigateway-integration": {
                            # "arn:aws:iam::*:user/*" (call with the caller's credentials)
                            # is refused by moto as a cross-account role
                            k: v
                            for k, v in operation.get("x-amazon-apigateway-integration", {}).items()
                            if k != "credentials"
                        },
                    }
                    for key, operation in item.items()
                    if key.lower() in _HTTP_METHODS or key == _ANY_METHOD
                }
                for path, item in body.get("paths", {}).items()
            },
        }
        try:
            api = stack.call(
                "apigateway",
                "import_rest_api",
                body=json.dumps(document).encode(),
                failOnWarnings=False,
            )
            return str(api["id"])
        except (ClientError, KeyError, ValueError, TypeError) as error:
            logger.warning(
                "REST API %s: moto could not import its body (%s); created empty", name, error
            )
    return str(stack.call("apigateway", "create_rest_api", name=name)["id"])


def _api_routes(stack: Stack, lid: str, body: dict[str, Any]) -> list[ApiRoute]:
    schemes = body.get("securityDefinitions") or body.get("components", {}).get(
        "securitySchemes", {}
    )
    routes: list[ApiRoute] = []
    for path, item in body.get("paths", {}).items():
        for key, operation in item.items():
            if key.lower() not in _HTTP_METHODS and key != _ANY_METHOD:
                continue
            method = "ANY" if key == _ANY_METHOD else key.upper()
            where = f"{lid}.Body.paths.{path}.{key}"
            function = _integration_function(stack, where, operation)
            if function is None:
                continue
            authorization = _authorization(where, operation, schemes, body.get("security"))
            routes.append(ApiRoute(method, path, function, authorization))
    return routes


def _integration_function(stack: Stack, where: str, operation: dict[str, Any]) -> str | None:
    integration = operation.get("x-amazon-apigateway-integration", {})
    kind = str(integration.get("type", "")).lower()
    if kind == "mock":  # e.g. CORS preflight: nothing to run
        logger.info("%s: mock integration, not served locally", where)
        return None
    match = _LAMBDA_URI.search(str(integration.get("uri", "")))
    if kind != "aws_proxy" or match is None:
        raise ProvisionError(
            f"{where}: integration {kind or 'none'} is not emulated (only Lambda proxy)"
        )
    return stack.function_for(match.group("arn")).logical_id


def _authorization(
    where: str, operation: dict[str, Any], schemes: dict[str, Any], default: Any
) -> str:
    if str(operation.get("x-amazon-apigateway-auth", {}).get("type", "")).upper() == "AWS_IAM":
        return "AWS_IAM"
    security = operation.get("security", default) or []
    names = [name for requirement in security for name in requirement]
    if not names or names == ["NONE"]:
        return "NONE"
    for name in names:
        scheme = schemes.get(name, {})
        if name == "AWS_IAM" or scheme.get("x-amazon-apigateway-authtype") == "awsSigv4":
            return "AWS_IAM"
    raise ProvisionError(f"{where}: authorizer {names} is not emulated (only AWS_IAM and NONE)")


@handles("AWS::ApiGateway::Deployment")
def _api_deployment(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    params: dict[str, Any] = {
        "restApiId": props["RestApiId"],
        **camel(pick(props, ["StageName", "Description"])),
    }
    try:
        deployment_id = str(stack.call("apigateway", "create_deployment", **params)["id"])
    except ClientError as error:
        logger.warning("%s: moto refused the deployment (%s); recorded only", lid, error)
        deployment_id = hashlib.sha256(lid.encode()).hexdigest()[:10]
    return Created(deployment_id)


@handles("AWS::ApiGateway::Stage")
def _api_stage(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    stage = props["StageName"]
    params: dict[str, Any] = {
        "restApiId": props["RestApiId"],
        "stageName": stage,
        "deploymentId": props.get("DeploymentId", ""),
        **camel(pick(props, ["Description", "Variables", "TracingEnabled"])),
    }
    try:
        stack.call("apigateway", "create_stage", **params)
    except ClientError as error:
        logger.warning("%s: moto refused the stage (%s); recorded only", lid, error)
    stack.api_stage = stage
    return Created(stage)
