"""AWS::Lambda::LayerVersion, Function, EventInvokeConfig and EventSourceMapping in moto's
Lambda, and the functions the local Lambda runtime runs (their code from the repository).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lethe.localcloud.deployment import AsyncInvokeConfig
from lethe.localcloud.intrinsics import to_text
from lethe.localcloud.provision.coercion import dummy_zip, pick, tag_dict
from lethe.localcloud.provision.stack import Created, FunctionDraft, ProvisionError, Stack, handles

logger = logging.getLogger("lethe.localcloud.provision")


@handles("AWS::Lambda::LayerVersion")
def _lambda_layer(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    content = props["Content"]
    path = stack.local_path(lid, "Content", content["S3Bucket"], content["S3Key"])
    name = stack.name(lid, props.get("LayerName"), 64)
    layer = stack.call(
        "lambda",
        "publish_layer_version",
        LayerName=name,
        Content={"ZipFile": dummy_zip()},
        **pick(
            props, ["Description", "CompatibleRuntimes", "CompatibleArchitectures", "LicenseInfo"]
        ),
    )
    arn = layer["LayerVersionArn"]
    stack.layer_paths[arn] = path
    return Created(arn, {"LayerVersionArn": arn})


@handles("AWS::Lambda::Function")
def _lambda_function(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
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
        "Code": {"ZipFile": dummy_zip()},
        "Timeout": props.get("Timeout", 3),
        "MemorySize": props.get("MemorySize", 128),
        "Environment": {"Variables": environment},
        "Layers": local_layers,
        **pick(props, ["Description", "Architectures", "TracingConfig", "DeadLetterConfig"]),
    }
    if "Tags" in props:
        params["Tags"] = tag_dict(props["Tags"])
    function = stack.call("lambda", "create_function", **params)
    if "ReservedConcurrentExecutions" in props:
        stack.call(
            "lambda",
            "put_function_concurrency",
            FunctionName=name,
            ReservedConcurrentExecutions=props["ReservedConcurrentExecutions"],
        )
    stack.functions[lid] = FunctionDraft(
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


def _function_code(stack: Stack, lid: str, props: dict[str, Any]) -> tuple[Path, str]:
    code = props["Code"]
    handler = str(props.get("Handler", "index.handler"))
    if "ZipFile" in code:  # inline code: CloudFormation names the module index
        folder = stack.state_dir / "inline-code" / lid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.py").write_text(code["ZipFile"])
        return folder, handler
    return stack.local_path(lid, "Code", code["S3Bucket"], code["S3Key"]), handler


@handles("AWS::Lambda::EventInvokeConfig")
def _lambda_event_invoke_config(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    function = stack.function_for(props["FunctionName"])
    destinations = props.get("DestinationConfig", {})
    params: dict[str, Any] = {
        "FunctionName": function.name,
        **pick(props, ["MaximumRetryAttempts", "MaximumEventAgeInSeconds"]),
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


@handles("AWS::Lambda::EventSourceMapping")
def _event_source_mapping(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
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
    params: dict[str, Any] = {"FunctionName": function.name, **pick(props, _ESM_PARAMETERS)}
    mapping = stack.call("lambda", "create_event_source_mapping", **params)
    stack.warn_unhandled(lid, props, {"FunctionName", *_ESM_PARAMETERS})
    return Created(
        mapping["UUID"],
        {"Id": mapping["UUID"], "EventSourceMappingArn": mapping.get("EventSourceMappingArn", "")},
    )


def _check_visibility_timeout(
    stack: Stack, lid: str, queue_arn: str, function: FunctionDraft
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
