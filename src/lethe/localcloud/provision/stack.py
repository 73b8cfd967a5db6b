"""One provisioning run (`Stack`): the resolver, the boto3 clients, everything created so
far; the handler registry (`handles`, one handler per resource TYPE), the types not
emulated and why, and the creation order.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from lethe.localcloud.deployment import (
    ApiRoute,
    AsyncInvokeConfig,
    Deployment,
    Endpoints,
    FunctionSpec,
)
from lethe.localcloud.intrinsics import (
    NO_VALUE,
    IntrinsicError,
    Resolver,
    pseudo_parameters,
    references,
    to_text,
    typed_parameters,
)
from lethe.localcloud.provision.coercion import attribute_text, coerce
from lethe.localcloud.template import LOCAL_CODE_BUCKET, local_path_of

logger = logging.getLogger("lethe.localcloud.provision")


# Resource types that are deliberately not created locally, and why. Everything else needs a
# handler in its service's module (`handles`): an unknown type fails provisioning, so a
# template change cannot lose a resource silently.
NOT_EMULATED: Final[dict[str, str]] = {
    "AWS::Lambda::Permission": (
        "recorded, not enforced: resource-based policies are not evaluated locally; the API "
        "server, EventBridge delivery and Step Functions invoke functions directly"
    ),
    "AWS::ApiGateway::Account": (
        "account-wide CloudWatch role for API Gateway logging; the local API server logs to "
        "the state directory"
    ),
    "AWS::CloudFormation::WaitConditionHandle": (
        "only orders creation in CloudFormation (a conditional DependsOn); creation_order "
        "already follows DependsOn, and nothing signals a handle locally"
    ),
    "AWS::XRay::Group": "X-Ray is not emulated: tracing is off locally",
    "AWS::Budgets::Budget": (
        "AWS Budgets tracks the account's bill, and the local cloud has none (MonthlyBudgetUsd "
        "is 0 by default, so the budget's condition is false anyway)"
    ),
    "AWS::XRay::SamplingRule": "X-Ray is not emulated: tracing is off locally",
}

DEFAULT_STACK_NAME: Final = "lethe-local"


class ProvisionError(RuntimeError):
    """The template cannot be deployed locally; the message names the resource."""


@dataclass
class Created:
    """What a handler created: CloudFormation's Ref value and GetAtt attributes."""

    physical_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class FunctionDraft:
    logical_id: str
    name: str
    arn: str
    code_uri: Path
    handler: str
    layer_paths: tuple[Path, ...]
    environment: dict[str, str]
    timeout_seconds: int
    memory_mb: int


Handler = Callable[["Stack", str, dict[str, Any]], Created]
HANDLERS: dict[str, Handler] = {}


def handles(*resource_types: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for resource_type in resource_types:
            HANDLERS[resource_type] = handler
        return handler

    return register


def unsupported_types(template: Mapping[str, Any]) -> dict[str, str]:
    """Logical id -> type for every resource that has neither a handler nor a table entry."""
    return {
        lid: resource.get("Type", "?")
        for lid, resource in template.get("Resources", {}).items()
        if resource.get("Type") not in HANDLERS and resource.get("Type") not in NOT_EMULATED
    }


class Stack:
    """One provisioning run: resolver, clients and everything created so far."""

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        repo_root: Path,
        state_dir: Path,
        stack_name: str,
        template: dict[str, Any],
        parameter_values: dict[str, str],
    ) -> None:
        self.endpoints = endpoints
        self.region = endpoints.region
        self.account_id = endpoints.account_id
        self.repo_root = repo_root
        self.state_dir = state_dir
        self.stack_name = stack_name
        self.template = template
        self.parameter_values = parameter_values
        declared = template.get("Parameters", {})
        self.resolver = Resolver(
            parameters=typed_parameters(declared, parameter_values),
            pseudo=pseudo_parameters(self.region, stack_name, endpoints.account_id),
            conditions=template.get("Conditions", {}),
            mappings=template.get("Mappings", {}),
            resources=self,
        )
        self.session = boto3.session.Session(
            aws_access_key_id="testing",
            aws_secret_access_key="testing",  # noqa: S106 - moto's fixed fake credentials
            region_name=self.region,
        )
        self._clients: dict[str, Any] = {}
        self.physical_ids: dict[str, str] = {}
        self.attributes: dict[str, dict[str, Any]] = {}
        self.not_created: dict[str, str] = {}
        self.functions: dict[str, FunctionDraft] = {}
        self.layer_paths: dict[str, Path] = {}
        self.async_configs: dict[str, AsyncInvokeConfig] = {}
        self.api_routes: list[ApiRoute] = []
        self.api_stage = ""
        self.deferred: list[tuple[str, Callable[[], None]]] = []

    # -- ResourceLookup for the resolver

    def ref(self, logical_id: str) -> Any:
        if logical_id in self.physical_ids:
            return self.physical_ids[logical_id]
        raise LookupError(self._absent(logical_id))

    def get_att(self, logical_id: str, attribute: str) -> Any:
        if logical_id not in self.physical_ids:
            raise LookupError(self._absent(logical_id))
        attributes = self.attributes.get(logical_id, {})
        if attribute not in attributes:
            known = ", ".join(sorted(attributes)) or "none"
            raise LookupError(
                f"{logical_id} has no attribute {attribute!r} locally (known: {known})"
            )
        return attributes[attribute]

    def _absent(self, logical_id: str) -> str:
        if logical_id in self.not_created:
            return f"{logical_id} was not created: {self.not_created[logical_id]}"
        if logical_id in self.template.get("Resources", {}):
            return f"{logical_id} is not created yet (circular dependency?)"
        return f"no parameter or resource named {logical_id!r}"

    # -- boto3

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service,  # type: ignore[call-overload]
                endpoint_url=self.endpoints.endpoint_url,
            )
        return self._clients[service]

    def call(self, service: str, method: str, **params: Any) -> Any:
        """Call a boto3 method with template values coerced to the API's types.

        CloudFormation accepts "30" for a number and 30 for a string; boto3 does not.
        """
        client = self.client(service)
        operation = client.meta.service_model.operation_model(
            client.meta.method_to_api_mapping[method]
        )
        return getattr(client, method)(**coerce(operation.input_shape, params))

    # -- names

    def name(self, logical_id: str, given: Any, max_length: int, *, lowercase: bool = False) -> str:
        """The given physical name, or one generated like CloudFormation's (stable per stack)."""
        if given:
            return to_text(given, f"{logical_id} name")
        digest = hashlib.sha256(f"{self.stack_name}/{logical_id}".encode()).hexdigest()
        suffix = digest[:12].upper()
        head = f"{self.stack_name}-{logical_id}"[: max_length - len(suffix) - 1]
        generated = f"{head}-{suffix}"
        return generated.lower() if lowercase else generated

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return (
            f"arn:aws:{service}:{self.region if region else ''}:"
            f"{self.account_id if account else ''}:{resource}"
        )

    def local_path(self, logical_id: str, prop: str, bucket: str, key: str) -> Path:
        path = local_path_of(bucket, key, self.repo_root)
        if path is None:
            raise ProvisionError(
                f"{logical_id}.{prop}: s3://{bucket}/{key} is not local code; the local cloud "
                f"runs code from the repository (placeholder bucket {LOCAL_CODE_BUCKET})"
            )
        if not path.exists():
            raise ProvisionError(f"{logical_id}.{prop}: {path} does not exist")
        return path

    def defer(self, description: str, action: Callable[[], None]) -> None:
        """Run after every resource exists (e.g. bucket logging needs the target's policy)."""
        self.deferred.append((description, action))

    @staticmethod
    def warn_unhandled(logical_id: str, props: Mapping[str, Any], handled: Iterable[str]) -> None:
        ignored = sorted(set(props) - set(handled))
        if ignored:
            logger.warning(
                "%s: properties not emulated locally: %s", logical_id, ", ".join(ignored)
            )

    # -- run

    def create_all(self) -> None:
        resources = self.template.get("Resources", {})
        unknown = unsupported_types(self.template)
        if unknown:
            listing = ", ".join(f"{lid} ({rtype})" for lid, rtype in sorted(unknown.items()))
            raise ProvisionError(
                f"resource types the local cloud does not handle: {listing}; add a handler in "
                "a module of lethe/localcloud/provision/ or an entry with a reason in NOT_EMULATED"
            )
        for logical_id in creation_order(resources):
            self._create(logical_id, resources[logical_id])
        for description, action in self.deferred:
            try:
                action()
            except ClientError as error:
                raise ProvisionError(f"{description}: {error}") from error

    def _create(self, logical_id: str, resource: Mapping[str, Any]) -> None:
        resource_type = str(resource.get("Type"))
        condition = resource.get("Condition")
        if condition is not None and not self._condition(condition, logical_id):
            self.not_created[logical_id] = f"condition {condition} is false"
            return
        if resource_type in NOT_EMULATED:
            self.not_created[logical_id] = NOT_EMULATED[resource_type]
            return
        try:
            props = self.resolver.resolve(
                resource.get("Properties", {}), f"{logical_id}.Properties"
            )
            created = HANDLERS[resource_type](self, logical_id, props)
        except IntrinsicError as error:
            raise ProvisionError(str(error)) from None
        except KeyError as error:
            raise ProvisionError(
                f"{logical_id} ({resource_type}): missing property or value {error}"
            ) from error
        except (BotoCoreError, ClientError, TypeError, ValueError) as error:
            raise ProvisionError(f"{logical_id} ({resource_type}): {error}") from error
        self.physical_ids[logical_id] = created.physical_id
        self.attributes[logical_id] = created.attributes
        logger.info("created %s (%s): %s", logical_id, resource_type, created.physical_id)

    def _condition(self, name: str, logical_id: str) -> bool:
        try:
            return self.resolver.condition(name)
        except IntrinsicError as error:
            raise ProvisionError(f"{logical_id}.Condition: {error}") from None

    def outputs(self) -> dict[str, str]:
        outputs: dict[str, str] = {}
        for name, output in self.template.get("Outputs", {}).items():
            condition = output.get("Condition")
            if condition is not None and not self._condition(condition, f"Outputs.{name}"):
                continue
            try:
                value = self.resolver.resolve(output.get("Value"), f"Outputs.{name}.Value")
                if value is NO_VALUE:
                    continue
                outputs[name] = (
                    ",".join(to_text(v, name) for v in value)
                    if isinstance(value, list)
                    else to_text(value, f"Outputs.{name}.Value")
                )
            except IntrinsicError as error:
                raise ProvisionError(str(error)) from None
        return outputs

    def deployment(self) -> Deployment:
        functions = {
            lid: FunctionSpec(
                logical_id=draft.logical_id,
                name=draft.name,
                arn=draft.arn,
                code_uri=draft.code_uri,
                handler=draft.handler,
                layer_paths=draft.layer_paths,
                environment=draft.environment,
                timeout_seconds=draft.timeout_seconds,
                memory_mb=draft.memory_mb,
                async_config=self.async_configs.get(lid, AsyncInvokeConfig()),
            )
            for lid, draft in self.functions.items()
        }
        return Deployment(
            endpoints=self.endpoints,
            repo_root=self.repo_root,
            state_dir=self.state_dir,
            stack_name=self.stack_name,
            parameters=dict(self.parameter_values),
            physical_ids=dict(self.physical_ids),
            attributes={
                lid: {k: attribute_text(v) for k, v in attrs.items()}
                for lid, attrs in self.attributes.items()
            },
            outputs=self.outputs(),
            functions=functions,
            api_routes=list(self.api_routes),
            api_stage=self.api_stage,
            not_created=dict(self.not_created),
        )

    def function_for(self, ref: str) -> FunctionDraft:
        """A created function by logical id, name, ARN, or qualified ARN."""
        for draft in self.functions.values():
            if ref in {draft.logical_id, draft.name, draft.arn} or ref.startswith(draft.arn + ":"):
                return draft
        raise ProvisionError(f"no function {ref!r} was created by this template")


def creation_order(resources: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Logical ids so that each comes after what it Refs, GetAtts, Subs or DependsOn."""
    dependencies: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        depends_on = resource.get("DependsOn", [])
        names = references(resource.get("Properties", {})) | set(
            [depends_on] if isinstance(depends_on, str) else depends_on
        )
        dependencies[logical_id] = {name for name in names if name in resources}
    order: list[str] = []
    placed: set[str] = set()
    pending = list(resources)
    while pending:
        ready = [lid for lid in pending if dependencies[lid] <= placed]
        if not ready:
            raise ProvisionError(f"circular dependency between {', '.join(sorted(pending))}")
        order.extend(ready)
        placed.update(ready)
        pending = [lid for lid in pending if lid not in placed]
    return order
