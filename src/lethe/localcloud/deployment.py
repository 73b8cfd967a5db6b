"""What the local cloud deployed from template.yaml: the contract between its parts.

`provision` builds a Deployment from the SAM-translated template; the Lambda runtime, the
EventBridge delivery, the Step Functions hooks and the REST API server only read it. Nothing in
here is a second list of resources: every value comes from the template.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3


@dataclass(frozen=True)
class Endpoints:
    """Where the emulated AWS APIs answer."""

    endpoint_url: str  # the moto server, http://127.0.0.1:<port>
    region: str
    account_id: str

    def client(
        self, service: Any, region: str | None = None, credentials: Mapping[str, str] | None = None
    ) -> Any:
        """A boto3 client for `service` against this endpoint, with the fake credentials (or
        `credentials`: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN of a role)."""
        credentials = {**self.client_environment(), **(credentials or {})}
        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=region or self.region,
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials["AWS_SESSION_TOKEN"],
        )

    def client_environment(self) -> dict[str, str]:
        """Environment that points boto3, pyarrow and the AWS CLI at the local cloud."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
        }


@dataclass(frozen=True)
class AsyncInvokeConfig:
    """A function's EventInvokeConfig: what happens when an asynchronous invocation fails."""

    maximum_retry_attempts: int = 2  # Lambda's default
    maximum_event_age_seconds: int = 21600
    on_failure_arn: str | None = None  # an SQS queue ARN (the only destination type Lethe uses)


@dataclass(frozen=True)
class FunctionSpec:
    """One AWS::Lambda::Function of the translated template, resolved."""

    logical_id: str
    name: str  # the physical FunctionName
    arn: str
    code_uri: Path  # absolute path of the function's source folder (CodeUri)
    handler: str  # "module.function", relative to code_uri
    layer_paths: tuple[Path, ...]  # absolute source folders of its layers (ContentUri)
    environment: dict[str, str]  # the template's Environment.Variables, intrinsics resolved
    timeout_seconds: int
    memory_mb: int
    async_config: AsyncInvokeConfig = field(default_factory=AsyncInvokeConfig)


@dataclass(frozen=True)
class ApiRoute:
    """One method of the template's REST API, as its Api events (or OpenAPI body) declare it."""

    method: str  # upper case: GET, POST, PUT, DELETE, ANY
    path: str  # API Gateway template, e.g. /datasets/{dataset_id}
    function_logical_id: str
    authorization: str  # "AWS_IAM" or "NONE"


@dataclass
class Deployment:
    """Everything the local cloud created, by logical id."""

    endpoints: Endpoints
    repo_root: Path
    state_dir: Path  # logs/, spark/ and worker files of this running cloud
    stack_name: str
    parameters: dict[str, str]
    physical_ids: dict[str, str]  # logical id -> physical id (name, ARN or URL as CFN's Ref gives)
    attributes: dict[str, dict[str, str]]  # logical id -> GetAtt attribute name -> value
    outputs: dict[str, str]
    functions: dict[str, FunctionSpec]  # by logical id
    api_routes: list[ApiRoute] = field(default_factory=list)
    api_stage: str = ""
    not_created: dict[str, str] = field(default_factory=dict)  # logical id -> documented reason

    def function(self, ref: str) -> FunctionSpec:
        """Find a function by logical id, physical name, ARN, or ARN with a qualifier."""
        for spec in self.functions.values():
            if ref in {spec.logical_id, spec.name, spec.arn} or ref.startswith(spec.arn + ":"):
                return spec
        raise KeyError(f"no function {ref!r} in this deployment")

    @property
    def logs_dir(self) -> Path:
        path = self.state_dir / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path
