"""Create the resources of the SAM-translated template.yaml in moto and describe them.

`provision()` translates template.yaml with the official SAM translator, evaluates parameters,
Conditions and intrinsic functions (lethe.localcloud.intrinsics), and creates every resource
in dependency order through boto3 against the moto server, with one handler per resource
TYPE. The result is a `Deployment` (lethe.localcloud.deployment) that the Lambda runtime,
EventBridge delivery, Step Functions hooks and the API server read.

Nothing here is a list of Lethe's resources: a resource type either has a handler, or an entry
in NOT_EMULATED with the reason it is not created, or provisioning fails naming it. After
provisioning, every logical id of the translated template is either created (physical_ids) or
recorded in Deployment.not_created with its reason (`check_coverage`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import boto3
import yaml
from botocore.exceptions import BotoCoreError, ClientError
from botocore.model import Shape

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
    effective_parameters,
    pseudo_parameters,
    references,
    to_text,
    typed_parameters,
)
from lethe.localcloud.template import LOCAL_CODE_BUCKET, load_template, local_path_of, translate
from lethe_shared.aws.errors import is_no_such_entity

logger = logging.getLogger(__name__)

# Resource types that are deliberately not created locally, and why. Everything else needs a
# handler below: an unknown type fails provisioning, so a template change cannot lose a
# resource silently.
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
    "AWS::XRay::SamplingRule": "X-Ray is not emulated: tracing is off locally",
}

DEFAULT_STACK_NAME: Final = "lethe-local"
_DUMMY_HANDLER = b"def handler(event, context):\n    raise RuntimeError('local cloud stub')\n"


class ProvisionError(RuntimeError):
    """The template cannot be deployed locally; the message names the resource."""


@dataclass
class Created:
    """What a handler created: CloudFormation's Ref value and GetAtt attributes."""

    physical_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class _FunctionDraft:
    logical_id: str
    name: str
    arn: str
    code_uri: Path
    handler: str
    layer_paths: tuple[Path, ...]
    environment: dict[str, str]
    timeout_seconds: int
    memory_mb: int


_Handler = Callable[["_Stack", str, dict[str, Any]], Created]
HANDLERS: dict[str, _Handler] = {}


def _handles(*resource_types: str) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        for resource_type in resource_types:
            HANDLERS[resource_type] = handler
        return handler

    return register


# ---------------------------------------------------------------------------------- entry point


def provision(
    endpoints: Endpoints,
    repo_root: Path,
    state_dir: Path,
    parameters: Mapping[str, str],
    stack_name: str = DEFAULT_STACK_NAME,
) -> Deployment:
    """Deploy repo_root/template.yaml into the moto server at endpoints.endpoint_url."""
    repo_root = repo_root.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    sam_template = load_template(repo_root / "template.yaml")
    declared = sam_template.get("Parameters", {})
    try:
        values = effective_parameters(declared, parameters)
    except IntrinsicError as error:
        raise ProvisionError(str(error)) from None
    template = _translate_in_region(sam_template, values, endpoints.region)
    (state_dir / "translated-template.json").write_text(json.dumps(template, indent=2) + "\n")
    stack = _Stack(
        endpoints,
        repo_root=repo_root,
        state_dir=state_dir,
        stack_name=stack_name,
        template=template,
        parameter_values=values,
    )
    stack.create_all()
    deployment = stack.deployment()
    check_coverage(template, deployment)
    return deployment


def _translate_in_region(
    sam_template: dict[str, Any], values: dict[str, str], region: str
) -> dict[str, Any]:
    """The SAM translator builds some ARNs from AWS_DEFAULT_REGION: make it the cloud's."""
    previous = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = region
    try:
        return translate(sam_template, values)
    finally:
        if previous is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = previous


def check_coverage(template: Mapping[str, Any], deployment: Deployment) -> None:
    """Every logical id is created or recorded as not created with a reason."""
    missing = sorted(
        set(template.get("Resources", {}))
        - set(deployment.physical_ids)
        - set(deployment.not_created)
    )
    if missing:
        raise ProvisionError(f"resources neither created nor explained: {', '.join(missing)}")
    unexplained = sorted(lid for lid, reason in deployment.not_created.items() if not reason)
    if unexplained:
        raise ProvisionError(f"resources not created without a reason: {', '.join(unexplained)}")


def unsupported_types(template: Mapping[str, Any]) -> dict[str, str]:
    """Logical id -> type for every resource that has neither a handler nor a table entry."""
    return {
        lid: resource.get("Type", "?")
        for lid, resource in template.get("Resources", {}).items()
        if resource.get("Type") not in HANDLERS and resource.get("Type") not in NOT_EMULATED
    }


def localize_outputs(deployment: Deployment, api_url: str) -> dict[str, str]:
    """Outputs with the API's https execute-api URL replaced by the local API URL, and the
    same replacement in every function's environment (a function that builds links to the
    API, such as the approval emails, must point at the local server).

    api_url is the local equivalent of https://<id>.execute-api.<region>.<suffix>/<stage>.
    """
    local = api_url.rstrip("/")
    pattern = re.compile(
        r"https://[a-z0-9]+\.execute-api\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/"
        + re.escape(deployment.api_stage)
        + r"(?=/|$)"
    )
    for spec in deployment.functions.values():
        spec.environment.update(
            {name: pattern.sub(local, value) for name, value in spec.environment.items()}
        )
    return {name: pattern.sub(local, value) for name, value in deployment.outputs.items()}


# ---------------------------------------------------------------------------------- the stack


class _Stack:
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
        self.functions: dict[str, _FunctionDraft] = {}
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
        return getattr(client, method)(**_coerce(operation.input_shape, params))

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
                "lethe/localcloud/provision.py or an entry with a reason in NOT_EMULATED"
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
                lid: {k: _attribute_text(v) for k, v in attrs.items()}
                for lid, attrs in self.attributes.items()
            },
            outputs=self.outputs(),
            functions=functions,
            api_routes=list(self.api_routes),
            api_stage=self.api_stage,
            not_created=dict(self.not_created),
        )

    def function_for(self, ref: str) -> _FunctionDraft:
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


# ---------------------------------------------------------------------------------- coercion


def _coerce(shape: Shape | None, value: Any) -> Any:
    """Template value -> the type the API shape wants (numbers, booleans, strings)."""
    if shape is None:
        return value
    type_name = shape.type_name
    if type_name == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {k: _coerce(members.get(k), v) for k, v in value.items()}
    if type_name == "list" and isinstance(value, list):
        return [_coerce(shape.member, v) for v in value]  # type: ignore[attr-defined]
    if type_name == "map" and isinstance(value, dict):
        return {k: _coerce(shape.value, v) for k, v in value.items()}  # type: ignore[attr-defined]
    converter = _SCALAR_CONVERTERS.get(type_name)
    return converter(value) if converter is not None else value


def _to_int(value: Any) -> Any:
    return (
        int(float(value))
        if isinstance(value, str | float) and not isinstance(value, bool)
        else value
    )


def _to_float(value: Any) -> Any:
    return float(value) if isinstance(value, str | int) and not isinstance(value, bool) else value


def _to_bool(value: Any) -> Any:
    return value.lower() == "true" if isinstance(value, str) else value


def _to_str(value: Any) -> Any:
    return to_text(value, "value") if isinstance(value, bool | int | float) else value


_SCALAR_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "integer": _to_int,
    "long": _to_int,
    "float": _to_float,
    "double": _to_float,
    "boolean": _to_bool,
    "string": _to_str,
}


def _attribute_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return to_text(value, "attribute")


def _tag_dict(tags: Any) -> dict[str, str]:
    if isinstance(tags, dict):
        return {str(k): to_text(v, "Tags") for k, v in tags.items()}
    return {str(t["Key"]): to_text(t["Value"], "Tags") for t in tags or []}


def _tag_list(tags: Any) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in _tag_dict(tags).items()]


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _camel(value: Any) -> Any:
    """PascalCase CloudFormation keys -> the camelCase keys of newer AWS APIs."""
    if isinstance(value, dict):
        return {(k[:1].lower() + k[1:]): _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _pick(props: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: props[name] for name in names if name in props}


def _dummy_zip() -> bytes:
    """Moto needs code to create a function or layer; the local runtime runs CodeUri instead."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("index.py", date_time=(2020, 1, 1, 0, 0, 0))
        archive.writestr(info, _DUMMY_HANDLER)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------- S3


@_handles("AWS::S3::Bucket")
def _s3_bucket(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("BucketName"), 63, lowercase=True)
    params: dict[str, Any] = {"Bucket": name}
    if stack.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": stack.region}
    if props.get("ObjectLockEnabled") in (True, "true"):
        params["ObjectLockEnabledForBucket"] = True
    stack.call("s3", "create_bucket", **params)
    for prop, configure in _BUCKET_SETTINGS.items():
        if prop in props:
            configure(stack, name, props[prop])
    stack.warn_unhandled(lid, props, {"BucketName", "ObjectLockEnabled", *_BUCKET_SETTINGS})
    return Created(
        name,
        {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": f"{name}.s3.amazonaws.com",
            "RegionalDomainName": f"{name}.s3.{stack.region}.amazonaws.com",
            "DualStackDomainName": f"{name}.s3.dualstack.{stack.region}.amazonaws.com",
            "WebsiteURL": f"http://{name}.s3-website-{stack.region}.amazonaws.com",
        },
    )


def _bucket_versioning(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call(
        "s3",
        "put_bucket_versioning",
        Bucket=bucket,
        VersioningConfiguration=_pick(value, ["Status"]),
    )


def _bucket_encryption(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    rules = [
        {
            ("ApplyServerSideEncryptionByDefault" if k == "ServerSideEncryptionByDefault" else k): v
            for k, v in rule.items()
        }
        for rule in value.get("ServerSideEncryptionConfiguration", [])
    ]
    stack.call(
        "s3",
        "put_bucket_encryption",
        Bucket=bucket,
        ServerSideEncryptionConfiguration={"Rules": rules},
    )


def _bucket_ownership(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call("s3", "put_bucket_ownership_controls", Bucket=bucket, OwnershipControls=value)


def _bucket_public_access(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call("s3", "put_public_access_block", Bucket=bucket, PublicAccessBlockConfiguration=value)


def _bucket_tags(stack: _Stack, bucket: str, value: Any) -> None:
    stack.call("s3", "put_bucket_tagging", Bucket=bucket, Tagging={"TagSet": _tag_list(value)})


def _bucket_cors(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    renames = {"ExposedHeaders": "ExposeHeaders", "MaxAge": "MaxAgeSeconds", "Id": "ID"}
    rules = [{renames.get(k, k): v for k, v in rule.items()} for rule in value.get("CorsRules", [])]
    stack.call("s3", "put_bucket_cors", Bucket=bucket, CORSConfiguration={"CORSRules": rules})


def _bucket_logging(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    target = {
        "TargetBucket": value.get("DestinationBucketName", bucket),
        "TargetPrefix": value.get("LogFilePrefix", ""),
    }

    def configure() -> None:
        if _moto_cannot_check_logging_target(stack, target["TargetBucket"]):
            logger.info(
                "bucket %s: logging to %s not recorded in moto (moto 5.2 cannot read a target "
                'policy with Principal "*"); access logs are not delivered locally anyway',
                bucket,
                target,
            )
            return
        try:
            stack.call(
                "s3",
                "put_bucket_logging",
                Bucket=bucket,
                BucketLoggingStatus={"LoggingEnabled": target},
            )
        except ClientError as error:
            # moto 5.2 checks the target's policy for the log service and fails on any
            # statement whose Principal is "*" (a TLS-only Deny). Access logs are not
            # delivered locally either way, so the setting is only missing from moto.
            logger.warning(
                "bucket %s: logging to %s not recorded in moto: %s", bucket, target, error
            )

    # The target bucket's policy (which lets the log service write) may come later.
    stack.defer(f"logging of bucket {bucket}", configure)


def _moto_cannot_check_logging_target(stack: _Stack, target_bucket: str) -> bool:
    """moto's PutBucketLogging crashes (HTTP 500) on a target policy statement whose
    Principal is the string "*", which every TLS-only Deny statement has."""
    try:
        policy = stack.call("s3", "get_bucket_policy", Bucket=target_bucket)["Policy"]
    except ClientError:
        return False
    statements = json.loads(policy).get("Statement", [])
    return any(isinstance(statement.get("Principal"), str) for statement in statements)


def _bucket_notifications(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    config: dict[str, Any] = {}
    if value.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled") in (True, "true"):
        config["EventBridgeConfiguration"] = {}
    for cfn_key, boto_key, target_key, arn_key in (
        ("QueueConfigurations", "QueueConfigurations", "Queue", "QueueArn"),
        ("TopicConfigurations", "TopicConfigurations", "Topic", "TopicArn"),
        ("LambdaConfigurations", "LambdaFunctionConfigurations", "Function", "LambdaFunctionArn"),
    ):
        items = [_notification(item, target_key, arn_key) for item in value.get(cfn_key, [])]
        if items:
            config[boto_key] = items
    stack.call(
        "s3",
        "put_bucket_notification_configuration",
        Bucket=bucket,
        NotificationConfiguration=config,
    )


def _notification(item: dict[str, Any], target_key: str, arn_key: str) -> dict[str, Any]:
    result: dict[str, Any] = {arn_key: item[target_key], "Events": [item["Event"]]}
    rules = item.get("Filter", {}).get("S3Key", {}).get("Rules")
    if rules:
        result["Filter"] = {"Key": {"FilterRules": rules}}
    return result


def _bucket_lifecycle(stack: _Stack, bucket: str, value: dict[str, Any]) -> None:
    rules = [_lifecycle_rule(rule) for rule in value.get("Rules", [])]
    stack.call(
        "s3",
        "put_bucket_lifecycle_configuration",
        Bucket=bucket,
        LifecycleConfiguration={"Rules": rules},
    )


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's flat lifecycle rule -> the S3 API's nested one."""
    result: dict[str, Any] = {"Status": rule["Status"], "Filter": _lifecycle_filter(rule)}
    if "Id" in rule:
        result["ID"] = rule["Id"]
    expiration = {
        boto: rule[cfn]
        for cfn, boto in (
            ("ExpirationInDays", "Days"),
            ("ExpirationDate", "Date"),
            ("ExpiredObjectDeleteMarker", "ExpiredObjectDeleteMarker"),
        )
        if cfn in rule
    }
    if expiration:
        result["Expiration"] = expiration
    noncurrent = dict(rule.get("NoncurrentVersionExpiration", {}))
    if "NoncurrentVersionExpirationInDays" in rule:
        noncurrent["NoncurrentDays"] = rule["NoncurrentVersionExpirationInDays"]
    if noncurrent:
        result["NoncurrentVersionExpiration"] = noncurrent
    result.update(_lifecycle_transitions(rule))
    if "AbortIncompleteMultipartUpload" in rule:
        result["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return result


def _lifecycle_transitions(rule: dict[str, Any]) -> dict[str, Any]:
    current = [
        *rule.get("Transitions", []),
        *([rule["Transition"]] if "Transition" in rule else []),
    ]
    noncurrent = [
        *rule.get("NoncurrentVersionTransitions", []),
        *([rule["NoncurrentVersionTransition"]] if "NoncurrentVersionTransition" in rule else []),
    ]
    renames = {"TransitionInDays": "Days", "TransitionDate": "Date"}
    result: dict[str, Any] = {}
    if current:
        result["Transitions"] = [{renames.get(k, k): v for k, v in t.items()} for t in current]
    if noncurrent:
        result["NoncurrentVersionTransitions"] = [
            {"NoncurrentDays" if k == "TransitionInDays" else k: v for k, v in t.items()}
            for t in noncurrent
        ]
    return result


def _lifecycle_filter(rule: dict[str, Any]) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if "Prefix" in rule:
        conditions["Prefix"] = rule["Prefix"]
    if rule.get("TagFilters"):
        conditions["Tags"] = rule["TagFilters"]
    for key in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
        if key in rule:
            conditions[key] = rule[key]
    tags = conditions.get("Tags", [])
    if len(conditions) > 1 or len(tags) > 1:
        return {"And": conditions}
    if tags:
        return {"Tag": tags[0]}
    return conditions or {"Prefix": ""}


_BUCKET_SETTINGS: dict[str, Callable[[_Stack, str, Any], None]] = {
    "VersioningConfiguration": _bucket_versioning,
    "BucketEncryption": _bucket_encryption,
    "OwnershipControls": _bucket_ownership,
    "PublicAccessBlockConfiguration": _bucket_public_access,
    "LifecycleConfiguration": _bucket_lifecycle,
    "NotificationConfiguration": _bucket_notifications,
    "CorsConfiguration": _bucket_cors,
    "LoggingConfiguration": _bucket_logging,
    "Tags": _bucket_tags,
}


@_handles("AWS::S3::BucketPolicy")
def _s3_bucket_policy(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    bucket = props["Bucket"]
    stack.call("s3", "put_bucket_policy", Bucket=bucket, Policy=_json_text(props["PolicyDocument"]))
    return Created(bucket)


# ---------------------------------------------------------------------------------- DynamoDB


@_handles("AWS::DynamoDB::Table")
def _dynamodb_table(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("TableName"), 255)
    params: dict[str, Any] = {
        "TableName": name,
        **_pick(
            props,
            [
                "AttributeDefinitions",
                "KeySchema",
                "BillingMode",
                "ProvisionedThroughput",
                "LocalSecondaryIndexes",
                "DeletionProtectionEnabled",
                "TableClass",
            ],
        ),
    }
    if "GlobalSecondaryIndexes" in props:
        params["GlobalSecondaryIndexes"] = [
            {k: v for k, v in index.items() if k != "ContributorInsightsSpecification"}
            for index in props["GlobalSecondaryIndexes"]
        ]
    if "StreamSpecification" in props:
        params["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    sse = props.get("SSESpecification")
    if sse:
        params["SSESpecification"] = {
            "Enabled": sse.get("SSEEnabled", False),
            **_pick(sse, ["SSEType", "KMSMasterKeyId"]),
        }
    if "Tags" in props:
        params["Tags"] = _tag_list(props["Tags"])
    table = stack.call("dynamodb", "create_table", **params)["TableDescription"]
    _table_settings(stack, name, props)
    stack.warn_unhandled(
        lid,
        props,
        {
            *params,
            "TimeToLiveSpecification",
            "PointInTimeRecoverySpecification",
            "ContributorInsightsSpecification",
        },
    )
    attributes = {"Arn": table["TableArn"]}
    if table.get("LatestStreamArn"):
        attributes["StreamArn"] = table["LatestStreamArn"]
    return Created(name, attributes)


def _table_settings(stack: _Stack, name: str, props: dict[str, Any]) -> None:
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled") in (True, "true"):
        stack.call(
            "dynamodb",
            "update_time_to_live",
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    pitr = props.get("PointInTimeRecoverySpecification", {})
    if pitr.get("PointInTimeRecoveryEnabled") in (True, "true"):
        stack.call(
            "dynamodb",
            "update_continuous_backups",
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )


# ---------------------------------------------------------------------------------- SQS / SNS


_SQS_ATTRIBUTES = (
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "KmsDataKeyReusePeriodSeconds",
    "KmsMasterKeyId",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
)


@_handles("AWS::SQS::Queue")
def _sqs_queue(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    fifo = str(props.get("FifoQueue", "")).lower() == "true"
    name = stack.name(lid, props.get("QueueName"), 75 if fifo else 80)
    if fifo and not name.endswith(".fifo"):
        name += ".fifo"
    attributes = {
        key: _json_text(props[key]) if isinstance(props[key], dict) else to_text(props[key], key)
        for key in _SQS_ATTRIBUTES
        if key in props
    }
    params: dict[str, Any] = {"QueueName": name, "Attributes": attributes}
    if "Tags" in props:
        params["tags"] = _tag_dict(props["Tags"])
    url = stack.call("sqs", "create_queue", **params)["QueueUrl"]
    arn = stack.call("sqs", "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    stack.warn_unhandled(lid, props, {"QueueName", "Tags", *_SQS_ATTRIBUTES})
    return Created(url, {"Arn": arn, "QueueName": name, "QueueUrl": url})


@_handles("AWS::SQS::QueuePolicy")
def _sqs_queue_policy(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    for url in props["Queues"]:
        stack.call(
            "sqs",
            "set_queue_attributes",
            QueueUrl=url,
            Attributes={"Policy": _json_text(props["PolicyDocument"])},
        )
    return Created(stack.name(lid, None, 128))


@_handles("AWS::SNS::Topic")
def _sns_topic(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    fifo = str(props.get("FifoTopic", "")).lower() == "true"
    name = stack.name(lid, props.get("TopicName"), 251 if fifo else 256)
    if fifo and not name.endswith(".fifo"):
        name += ".fifo"
    attribute_names = [
        "DisplayName",
        "KmsMasterKeyId",
        "FifoTopic",
        "ContentBasedDeduplication",
        "SignatureVersion",
        "TracingConfig",
    ]
    attributes = {k: to_text(props[k], k) for k in attribute_names if k in props}
    params: dict[str, Any] = {"Name": name, "Attributes": attributes}
    if "Tags" in props:
        params["Tags"] = _tag_list(props["Tags"])
    arn = stack.call("sns", "create_topic", **params)["TopicArn"]
    for subscription in props.get("Subscription", []):
        stack.call(
            "sns",
            "subscribe",
            TopicArn=arn,
            Protocol=subscription["Protocol"],
            Endpoint=subscription["Endpoint"],
        )
    stack.warn_unhandled(lid, props, {"TopicName", "Tags", "Subscription", *attribute_names})
    return Created(arn, {"TopicArn": arn, "TopicName": name})


@_handles("AWS::SNS::TopicPolicy")
def _sns_topic_policy(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    for arn in props["Topics"]:
        stack.call(
            "sns",
            "set_topic_attributes",
            TopicArn=arn,
            AttributeName="Policy",
            AttributeValue=_json_text(props["PolicyDocument"]),
        )
    return Created(stack.name(lid, None, 128))


@_handles("AWS::SNS::Subscription")
def _sns_subscription(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    attribute_names = [
        "DeliveryPolicy",
        "FilterPolicy",
        "FilterPolicyScope",
        "RawMessageDelivery",
        "RedrivePolicy",
        "SubscriptionRoleArn",
    ]
    attributes = {
        k: _json_text(props[k]) if isinstance(props[k], dict) else to_text(props[k], k)
        for k in attribute_names
        if k in props
    }
    arn = stack.call(
        "sns",
        "subscribe",
        TopicArn=props["TopicArn"],
        Protocol=props["Protocol"],
        Endpoint=props.get("Endpoint", ""),
        Attributes=attributes,
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    stack.warn_unhandled(
        lid, props, {"TopicArn", "Protocol", "Endpoint", "Region", *attribute_names}
    )
    return Created(arn, {"Arn": arn})


# ---------------------------------------------------------------------------------- SES


@_handles("AWS::SES::EmailIdentity")
def _ses_identity(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    identity = props["EmailIdentity"]
    if "@" in identity:
        stack.call("ses", "verify_email_identity", EmailAddress=identity)
    else:
        stack.call("ses", "verify_domain_identity", Domain=identity)
    stack.warn_unhandled(lid, props, {"EmailIdentity", "DkimAttributes", "FeedbackAttributes"})
    return Created(identity)


# ---------------------------------------------------------------------------------- IAM


@_handles("AWS::IAM::Role")
def _iam_role(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("RoleName"), 64)
    params: dict[str, Any] = {
        "RoleName": name,
        "AssumeRolePolicyDocument": _json_text(props["AssumeRolePolicyDocument"]),
        **_pick(props, ["Path", "Description", "MaxSessionDuration", "PermissionsBoundary"]),
    }
    if "Tags" in props:
        params["Tags"] = _tag_list(props["Tags"])
    role = stack.call("iam", "create_role", **params)["Role"]
    for policy in props.get("Policies", []):
        stack.call(
            "iam",
            "put_role_policy",
            RoleName=name,
            PolicyName=policy["PolicyName"],
            PolicyDocument=_policy_document(policy["PolicyDocument"]),
        )
    for arn in props.get("ManagedPolicyArns", []):
        _attach_role_policy(stack, name, arn)
    stack.warn_unhandled(lid, props, {*params, "Policies", "ManagedPolicyArns"})
    return Created(name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})


def _policy_document(document: Any) -> str:
    """IAM accepts a policy without Version (SAM emits some); moto wants 2012-10-17."""
    if isinstance(document, dict) and "Version" not in document:
        document = {"Version": "2012-10-17", **document}
    return _json_text(document)


def _attach_role_policy(stack: _Stack, role: str, arn: str) -> None:
    try:
        stack.call("iam", "attach_role_policy", RoleName=role, PolicyArn=arn)
    except ClientError as error:
        if not is_no_such_entity(error) or ":iam::aws:policy/" not in arn:
            raise
        logger.warning(
            "role %s: AWS managed policy %s is not loaded in moto; IAM is not enforced locally",
            role,
            arn,
        )


# ---------------------------------------------------------------------------------- Lambda


@_handles("AWS::Lambda::LayerVersion")
def _lambda_layer(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    content = props["Content"]
    path = stack.local_path(lid, "Content", content["S3Bucket"], content["S3Key"])
    name = stack.name(lid, props.get("LayerName"), 64)
    layer = stack.call(
        "lambda",
        "publish_layer_version",
        LayerName=name,
        Content={"ZipFile": _dummy_zip()},
        **_pick(
            props, ["Description", "CompatibleRuntimes", "CompatibleArchitectures", "LicenseInfo"]
        ),
    )
    arn = layer["LayerVersionArn"]
    stack.layer_paths[arn] = path
    return Created(arn, {"LayerVersionArn": arn})


@_handles("AWS::Lambda::Function")
def _lambda_function(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    if props.get("PackageType", "Zip") != "Zip":
        raise ProvisionError(f"{lid}: PackageType {props['PackageType']} is not run locally")
    name = stack.name(lid, props.get("FunctionName"), 64)
    code_uri, handler = _function_code(stack, lid, props)
    environment = {
        key: to_text(value, f"{lid}.Environment.Variables.{key}")
        for key, value in props.get("Environment", {}).get("Variables", {}).items()
    }
    local_layers = [arn for arn in props.get("Layers", []) if arn in stack.layer_paths]
    for arn in set(props.get("Layers", [])) - set(local_layers):
        logger.warning("%s: layer %s is not local; its packages must be in the venv", lid, arn)
    params: dict[str, Any] = {
        "FunctionName": name,
        "Runtime": props.get("Runtime", "python3.11"),
        "Role": props["Role"],
        "Handler": handler,
        "Code": {"ZipFile": _dummy_zip()},
        "Timeout": props.get("Timeout", 3),
        "MemorySize": props.get("MemorySize", 128),
        "Environment": {"Variables": environment},
        "Layers": local_layers,
        **_pick(props, ["Description", "Architectures", "TracingConfig", "DeadLetterConfig"]),
    }
    if "Tags" in props:
        params["Tags"] = _tag_dict(props["Tags"])
    function = stack.call("lambda", "create_function", **params)
    if "ReservedConcurrentExecutions" in props:
        stack.call(
            "lambda",
            "put_function_concurrency",
            FunctionName=name,
            ReservedConcurrentExecutions=props["ReservedConcurrentExecutions"],
        )
    stack.functions[lid] = _FunctionDraft(
        logical_id=lid,
        name=name,
        arn=function["FunctionArn"],
        code_uri=code_uri,
        handler=handler,
        layer_paths=tuple(stack.layer_paths[arn] for arn in local_layers),
        environment=environment,
        timeout_seconds=int(params["Timeout"]),
        memory_mb=int(params["MemorySize"]),
    )
    stack.warn_unhandled(
        lid,
        props,
        {*params, "Code", "PackageType", "ReservedConcurrentExecutions", "LoggingConfig"},
    )
    return Created(name, {"Arn": function["FunctionArn"]})


def _function_code(stack: _Stack, lid: str, props: dict[str, Any]) -> tuple[Path, str]:
    code = props["Code"]
    handler = str(props.get("Handler", "index.handler"))
    if "ZipFile" in code:  # inline code: CloudFormation names the module index
        folder = stack.state_dir / "inline-code" / lid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.py").write_text(code["ZipFile"])
        return folder, handler
    return stack.local_path(lid, "Code", code["S3Bucket"], code["S3Key"]), handler


@_handles("AWS::Lambda::EventInvokeConfig")
def _lambda_event_invoke_config(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    function = stack.function_for(props["FunctionName"])
    destinations = props.get("DestinationConfig", {})
    params: dict[str, Any] = {
        "FunctionName": function.name,
        **_pick(props, ["MaximumRetryAttempts", "MaximumEventAgeInSeconds"]),
    }
    if destinations:
        params["DestinationConfig"] = destinations
    stack.call("lambda", "put_function_event_invoke_config", **params)
    defaults = AsyncInvokeConfig()
    stack.async_configs[function.logical_id] = AsyncInvokeConfig(
        maximum_retry_attempts=int(
            props.get("MaximumRetryAttempts", defaults.maximum_retry_attempts)
        ),
        maximum_event_age_seconds=int(
            props.get("MaximumEventAgeInSeconds", defaults.maximum_event_age_seconds)
        ),
        on_failure_arn=destinations.get("OnFailure", {}).get("Destination"),
    )
    if destinations.get("OnSuccess"):
        logger.warning("%s: OnSuccess destinations are not delivered locally", lid)
    return Created(f"{function.name}:{props.get('Qualifier', '$LATEST')}")


# What lethe.localcloud.sqs follows; the rest of an SQS mapping is recorded in moto only.
_ESM_PARAMETERS = (
    "EventSourceArn",
    "BatchSize",
    "MaximumBatchingWindowInSeconds",
    "FunctionResponseTypes",
    "Enabled",
    "ScalingConfig",
)


@_handles("AWS::Lambda::EventSourceMapping")
def _event_source_mapping(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    """Created in moto's Lambda API; lethe.localcloud.sqs polls the queue and invokes the
    function (only SQS sources are emulated, and without event filtering)."""
    source = to_text(props["EventSourceArn"], f"{lid}.EventSourceArn")
    if source.split(":")[2:3] != ["sqs"]:
        raise ProvisionError(
            f"{lid}: event source {source} is not emulated (only SQS queues: "
            "lethe.localcloud.sqs); add a poller for it or leave it out of the local template"
        )
    if props.get("FilterCriteria"):
        raise ProvisionError(
            f"{lid}: FilterCriteria is not emulated: the local poller would hand the function "
            "every message"
        )
    function = stack.function_for(to_text(props["FunctionName"], f"{lid}.FunctionName"))
    _check_visibility_timeout(stack, lid, source, function)
    params: dict[str, Any] = {"FunctionName": function.name, **_pick(props, _ESM_PARAMETERS)}
    mapping = stack.call("lambda", "create_event_source_mapping", **params)
    stack.warn_unhandled(lid, props, {"FunctionName", *_ESM_PARAMETERS})
    return Created(
        mapping["UUID"],
        {"Id": mapping["UUID"], "EventSourceMappingArn": mapping.get("EventSourceMappingArn", "")},
    )


def _check_visibility_timeout(
    stack: _Stack, lid: str, queue_arn: str, function: _FunctionDraft
) -> None:
    """Lambda refuses a mapping whose queue hides a message for less than the function runs."""
    _, _, _, _, account, name = queue_arn.split(":", 5)
    url = stack.call("sqs", "get_queue_url", QueueName=name, QueueOwnerAWSAccountId=account)
    attributes = stack.call(
        "sqs",
        "get_queue_attributes",
        QueueUrl=url["QueueUrl"],
        AttributeNames=["VisibilityTimeout"],
    )["Attributes"]
    visibility = int(attributes.get("VisibilityTimeout", 30))
    if visibility < function.timeout_seconds:
        raise ProvisionError(
            f"{lid}: queue {name} has VisibilityTimeout {visibility} s, less than the timeout of "
            f"{function.name} ({function.timeout_seconds} s); Lambda refuses this mapping"
        )


# ---------------------------------------------------------------------------------- EventBridge


@_handles("AWS::Events::Rule")
def _events_rule(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 64)
    bus = str(props.get("EventBusName", "default")).rsplit("event-bus/", 1)[-1]
    params: dict[str, Any] = {
        "Name": name,
        "EventBusName": bus,
        "State": props.get("State", "ENABLED"),
        **_pick(props, ["Description", "ScheduleExpression", "RoleArn"]),
    }
    if "EventPattern" in props:
        params["EventPattern"] = _json_text(props["EventPattern"])
    targets = [_event_target(lid, target) for target in props.get("Targets", [])]
    arn = stack.call("events", "put_rule", **params)["RuleArn"]
    if targets:
        result = stack.call("events", "put_targets", Rule=name, EventBusName=bus, Targets=targets)
        if result.get("FailedEntryCount"):
            raise ProvisionError(f"{lid}: targets rejected: {result['FailedEntries']}")
    stack.warn_unhandled(lid, props, {*params, "Targets"})
    return Created(name if bus == "default" else f"{bus}|{name}", {"Arn": arn})


def _event_target(lid: str, target: dict[str, Any]) -> dict[str, Any]:
    if target.get("InputTransformer"):
        raise ProvisionError(
            f"{lid}: target {target.get('Id')} uses InputTransformer, which the local cloud "
            "does not emulate (lethe.localcloud.eventbridge delivers Input, InputPath or the event)"
        )
    result = dict(target)
    if isinstance(result.get("Input"), dict):
        result["Input"] = json.dumps(result["Input"])
    return result


# ---------------------------------------------------------------------------------- logs, alarms


@_handles("AWS::Logs::LogGroup")
def _log_group(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("LogGroupName"), 512)
    params: dict[str, Any] = {"logGroupName": name}
    if "KmsKeyId" in props:
        params["kmsKeyId"] = props["KmsKeyId"]
    if "Tags" in props:
        params["tags"] = _tag_dict(props["Tags"])
    stack.call("logs", "create_log_group", **params)
    if "RetentionInDays" in props:
        stack.call(
            "logs",
            "put_retention_policy",
            logGroupName=name,
            retentionInDays=props["RetentionInDays"],
        )
    stack.warn_unhandled(lid, props, {"LogGroupName", "KmsKeyId", "Tags", "RetentionInDays"})
    return Created(name, {"Arn": stack.arn("logs", f"log-group:{name}:*")})


_ALARM_PARAMETERS = (
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "OKActions",
    "AlarmActions",
    "InsufficientDataActions",
    "MetricName",
    "Namespace",
    "Statistic",
    "ExtendedStatistic",
    "Dimensions",
    "Period",
    "Unit",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "Threshold",
    "ComparisonOperator",
    "TreatMissingData",
    "EvaluateLowSampleCountPercentile",
    "Metrics",
    "ThresholdMetricId",
)


@_handles("AWS::CloudWatch::Alarm")
def _alarm(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("AlarmName"), 255)
    params = {**_pick(props, _ALARM_PARAMETERS), "AlarmName": name}
    if "Tags" in props:
        params["Tags"] = _tag_list(props["Tags"])
    stack.call("cloudwatch", "put_metric_alarm", **params)
    stack.warn_unhandled(lid, props, {*_ALARM_PARAMETERS, "Tags"})
    return Created(name, {"Arn": stack.arn("cloudwatch", f"alarm:{name}")})


@_handles("AWS::CloudWatch::Dashboard")
def _dashboard(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    """Stored by moto (nothing draws it locally); the body must at least be JSON, as on AWS."""
    name = stack.name(lid, props.get("DashboardName"), 255)
    body = props["DashboardBody"]
    try:
        json.loads(body)
    except (TypeError, ValueError) as error:
        raise ProvisionError(f"{lid}: DashboardBody is not JSON: {error}") from None
    stack.call("cloudwatch", "put_dashboard", DashboardName=name, DashboardBody=body)
    stack.warn_unhandled(lid, props, {"DashboardName", "DashboardBody"})
    return Created(name, {})


# ---------------------------------------------------------------------------------- Secrets, KMS


@_handles("AWS::SecretsManager::Secret")
def _secret(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 512)
    params: dict[str, Any] = {"Name": name, **_pick(props, ["Description", "KmsKeyId"])}
    if "SecretString" in props:
        params["SecretString"] = props["SecretString"]
    elif "GenerateSecretString" in props:
        params["SecretString"] = _generated_secret(stack, props["GenerateSecretString"])
    if "Tags" in props:
        params["Tags"] = _tag_list(props["Tags"])
    arn = stack.call("secretsmanager", "create_secret", **params)["ARN"]
    return Created(arn, {"Id": arn})


def _generated_secret(stack: _Stack, spec: dict[str, Any]) -> str:
    options = _pick(
        spec,
        [
            "PasswordLength",
            "ExcludeCharacters",
            "ExcludeNumbers",
            "ExcludePunctuation",
            "ExcludeUppercase",
            "ExcludeLowercase",
            "IncludeSpace",
            "RequireEachIncludedType",
        ],
    )
    password = stack.call("secretsmanager", "get_random_password", **options)["RandomPassword"]
    if "SecretStringTemplate" not in spec:
        return str(password)
    document = json.loads(spec["SecretStringTemplate"])
    document[spec["GenerateStringKey"]] = password
    return json.dumps(document)


@_handles("AWS::KMS::Key")
def _kms_key(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    params: dict[str, Any] = _pick(props, ["Description", "KeyUsage", "KeySpec", "MultiRegion"])
    if "KeyPolicy" in props:
        params["Policy"] = _json_text(props["KeyPolicy"])
    if "Tags" in props:
        params["Tags"] = [
            {"TagKey": t["Key"], "TagValue": t["Value"]} for t in _tag_list(props["Tags"])
        ]
    key = stack.call("kms", "create_key", **params)["KeyMetadata"]
    if props.get("EnableKeyRotation") in (True, "true"):
        stack.call("kms", "enable_key_rotation", KeyId=key["KeyId"])
    return Created(key["KeyId"], {"Arn": key["Arn"], "KeyId": key["KeyId"]})


@_handles("AWS::KMS::Alias")
def _kms_alias(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    stack.call(
        "kms", "create_alias", AliasName=props["AliasName"], TargetKeyId=props["TargetKeyId"]
    )
    return Created(props["AliasName"])


# ---------------------------------------------------------------------------------- API Gateway

_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
_ANY_METHOD = "x-amazon-apigateway-any-method"
_LAMBDA_URI = re.compile(r":lambda:path/[^/]+/functions/(?P<arn>.+)/invocations$")


@_handles("AWS::ApiGateway::RestApi")
def _rest_api(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    body = props.get("Body")
    if body is None and "BodyS3Location" in props:
        location = props["BodyS3Location"]
        path = stack.local_path(lid, "BodyS3Location", location["Bucket"], location["Key"])
        body = _load_document(path)
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


def _load_document(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".json":
        return dict(json.loads(text))
    return dict(yaml.safe_load(text))


def _create_rest_api(stack: _Stack, name: str, body: dict[str, Any] | None) -> str:
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


def _api_routes(stack: _Stack, lid: str, body: dict[str, Any]) -> list[ApiRoute]:
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


def _integration_function(stack: _Stack, where: str, operation: dict[str, Any]) -> str | None:
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


@_handles("AWS::ApiGateway::Deployment")
def _api_deployment(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    params: dict[str, Any] = {
        "restApiId": props["RestApiId"],
        **_camel(_pick(props, ["StageName", "Description"])),
    }
    try:
        deployment_id = str(stack.call("apigateway", "create_deployment", **params)["id"])
    except ClientError as error:
        logger.warning("%s: moto refused the deployment (%s); recorded only", lid, error)
        deployment_id = hashlib.sha256(lid.encode()).hexdigest()[:10]
    return Created(deployment_id)


@_handles("AWS::ApiGateway::Stage")
def _api_stage(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    stage = props["StageName"]
    params: dict[str, Any] = {
        "restApiId": props["RestApiId"],
        "stageName": stage,
        "deploymentId": props.get("DeploymentId", ""),
        **_camel(_pick(props, ["Description", "Variables", "TracingEnabled"])),
    }
    try:
        stack.call("apigateway", "create_stage", **params)
    except ClientError as error:
        logger.warning("%s: moto refused the stage (%s); recorded only", lid, error)
    stack.api_stage = stage
    return Created(stage)


# ---------------------------------------------------------------------------------- Step Functions

_SUBSTITUTION = re.compile(r"\$\{([^}]+)\}")


def substitute_definition(definition: str, substitutions: Mapping[str, Any]) -> str:
    """DefinitionSubstitutions as CloudFormation applies them: textual ${Name} for each key."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in substitutions:
            return match.group(0)
        return to_text(substitutions[name], f"DefinitionSubstitutions.{name}")

    return _SUBSTITUTION.sub(replace, definition)


@_handles("AWS::StepFunctions::StateMachine")
def _state_machine(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("StateMachineName"), 80)
    definition = substitute_definition(
        _definition_text(stack, lid, props), props.get("DefinitionSubstitutions", {})
    )
    try:
        json.loads(definition)
    except json.JSONDecodeError as error:
        raise ProvisionError(
            f"{lid}: the definition is not JSON after substitution: {error}"
        ) from None
    copy = stack.state_dir / "statemachines" / f"{name}.asl.json"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(definition)
    params: dict[str, Any] = {
        "name": name,
        "definition": definition,
        "roleArn": props["RoleArn"],
        "type": props.get("StateMachineType", "STANDARD"),
    }
    if "Tags" in props:
        params["tags"] = [{"key": t["Key"], "value": t["Value"]} for t in _tag_list(props["Tags"])]
    arn = stack.call("stepfunctions", "create_state_machine", **params)["stateMachineArn"]
    stack.warn_unhandled(
        lid,
        props,
        {
            "StateMachineName",
            "Definition",
            "DefinitionString",
            "DefinitionS3Location",
            "DefinitionSubstitutions",
            "RoleArn",
            "StateMachineType",
            "Tags",
            "LoggingConfiguration",
            "TracingConfiguration",
        },
    )
    return Created(arn, {"Arn": arn, "Name": name, "StateMachineRevisionId": arn})


def _definition_text(stack: _Stack, lid: str, props: dict[str, Any]) -> str:
    if "DefinitionString" in props:
        return str(props["DefinitionString"])
    if "Definition" in props:
        return json.dumps(props["Definition"])
    location = props.get("DefinitionS3Location")
    if location is None:
        raise ProvisionError(f"{lid}: no Definition, DefinitionString or DefinitionS3Location")
    path = stack.local_path(lid, "DefinitionS3Location", location["Bucket"], location["Key"])
    if path.suffix in {".yaml", ".yml"}:
        return json.dumps(_load_document(path))
    return path.read_text()


# ---------------------------------------------------------------------------------- Spark engines


_GLUE_JOB_PARAMETERS = (
    "Description",
    "LogUri",
    "Role",
    "ExecutionProperty",
    "Command",
    "DefaultArguments",
    "NonOverridableArguments",
    "Connections",
    "MaxRetries",
    "Timeout",
    "MaxCapacity",
    "SecurityConfiguration",
    "NotificationProperty",
    "GlueVersion",
    "NumberOfWorkers",
    "WorkerType",
    "ExecutionClass",
    "JobMode",
    "MaintenanceWindow",
)


@_handles("AWS::Glue::Job")
def _glue_job(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 255)
    params: dict[str, Any] = {"Name": name, **_pick(props, _GLUE_JOB_PARAMETERS)}
    for key in ("DefaultArguments", "NonOverridableArguments"):
        if key in params:
            params[key] = {k: to_text(v, f"{lid}.{key}.{k}") for k, v in params[key].items()}
    if "Tags" in props:
        params["Tags"] = _tag_dict(props["Tags"])
    stack.call("glue", "create_job", **params)
    stack.warn_unhandled(lid, props, {*params, "AllocatedCapacity"})
    return Created(name)


@_handles("AWS::Glue::SecurityConfiguration")
def _glue_security_configuration(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 255)
    stack.call(
        "glue",
        "create_security_configuration",
        Name=name,
        EncryptionConfiguration={
            # CloudFormation says S3Encryptions where the API says S3Encryption
            ("S3Encryption" if key == "S3Encryptions" else key): value
            for key, value in props["EncryptionConfiguration"].items()
        },
    )
    return Created(name)


@_handles("AWS::EMRServerless::Application")
def _emr_serverless_application(stack: _Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("Name"), 64)
    params: dict[str, Any] = {
        "name": name,
        **_camel(
            _pick(
                props,
                [
                    "ReleaseLabel",
                    "Type",
                    "MaximumCapacity",
                    "AutoStartConfiguration",
                    "AutoStopConfiguration",
                    "NetworkConfiguration",
                    "Architecture",
                ],
            )
        ),
    }
    if "InitialCapacity" in props:
        params["initialCapacity"] = {
            item["Key"]: _camel(item["Value"]) for item in props["InitialCapacity"]
        }
    if "Tags" in props:
        params["tags"] = _tag_dict(props["Tags"])
    application = stack.call("emr-serverless", "create_application", **params)
    stack.warn_unhandled(
        lid,
        props,
        {"Name", "Tags", "InitialCapacity", *(k[:1].upper() + k[1:] for k in params)},
    )
    return Created(
        application["applicationId"],
        {"ApplicationId": application["applicationId"], "Arn": application["arn"]},
    )
