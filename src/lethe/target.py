"""Which Lethe deployment a CLI command talks to, and how.

`--state-file F` targets the local cloud that `lethe local up` described in F; `--stack-name S`
(or the LETHE_STACK_NAME variable) targets a real stack through the normal AWS configuration,
reading the stack's Outputs. Commands use the same outputs either way, so one code path serves
both.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import boto3
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

API_TIMEOUT_SECONDS = 30


class TargetError(Exception):
    """The deployment cannot be found or reached; the message says what to do."""


@dataclass(frozen=True)
class Target:
    outputs: dict[str, str]
    region: str
    api_url: str
    endpoint_url: str | None = None  # the local cloud's moto server; None on AWS
    credentials: dict[str, str] | None = None  # fixed fake credentials for the local cloud

    def _session(self) -> boto3.Session:
        credentials = self.credentials or {}
        return boto3.Session(
            region_name=self.region,
            aws_access_key_id=credentials.get("aws_access_key_id"),
            aws_secret_access_key=credentials.get("aws_secret_access_key"),
        )

    def client(self, service: Any) -> Any:
        return self._session().client(service, endpoint_url=self.endpoint_url)

    def resource(self, service: Any) -> Any:
        return self._session().resource(service, endpoint_url=self.endpoint_url)

    def output(self, name: str) -> str:
        try:
            return self.outputs[name]
        except KeyError:
            raise TargetError(f"the deployment has no output {name!r}; is it up to date?") from None

    def call_api(
        self,
        method: str,
        path: str,
        body: Any | None = None,
        *,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """A SigV4-signed (IAM) request to the REST API; returns status and JSON body.

        `headers` (e.g. Idempotency-Key) and the `query` string are part of what is signed."""
        url = self.api_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(sorted(query.items()), quote_via=quote)
        data = json.dumps(body) if body is not None else None
        request = AWSRequest(
            method=method,
            url=url,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        credentials = self._session().get_credentials()
        if credentials is None:
            raise TargetError("no AWS credentials found to sign the API request")
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(
            request
        )
        response = requests.request(
            method,
            url,
            data=data,
            headers=dict(request.headers.items()),
            timeout=API_TIMEOUT_SECONDS,
        )
        try:
            payload = response.json()
        except ValueError:
            payload = {"message": response.text}
        return response.status_code, payload


def from_state_file(path: Path) -> Target:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise TargetError(
            f"{path} does not exist: start the local cloud with "
            f"`lethe local up --detach --state-file {path}`"
        ) from None
    return Target(
        outputs=dict(state["outputs"]),
        region=state["region"],
        api_url=state["api_url"],
        endpoint_url=state["endpoint_url"],
        credentials={
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
    )


def from_stack(stack_name: str, region: str | None = None) -> Target:
    session = boto3.Session(region_name=region)
    stacks = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return Target(
        outputs=outputs,
        region=session.region_name or "us-east-1",
        api_url=outputs.get("ApiUrl", ""),
    )


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--state-file",
        type=Path,
        default=os.environ.get("LETHE_STATE_FILE"),
        help="the local cloud's state file (default: $LETHE_STATE_FILE)",
    )
    group.add_argument(
        "--stack-name",
        default=os.environ.get("LETHE_STACK_NAME"),
        help="a deployed stack, through the normal AWS configuration (default: $LETHE_STACK_NAME)",
    )
    parser.add_argument("--region", default=None, help="AWS region of --stack-name")


def resolve(args: argparse.Namespace) -> Target:
    if getattr(args, "state_file", None):
        return from_state_file(Path(args.state_file))
    if getattr(args, "stack_name", None):
        return from_stack(args.stack_name, args.region)
    raise TargetError(
        "say which deployment: --state-file F (local cloud) or --stack-name S (AWS); "
        "or set LETHE_STATE_FILE / LETHE_STACK_NAME"
    )
