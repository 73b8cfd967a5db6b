"""Which Lethe deployment a CLI command talks to, and how.

`--state-file F` targets the local cloud that `lethe local up` described in F; `--stack-name S`
(or the LETHE_STACK_NAME variable) targets a real stack through the normal AWS configuration,
reading the stack's Outputs. Commands use the same outputs either way, so one code path serves
both. `--profile` and `--region` (global options, also accepted after the command) go to
`boto3.Session` for a stack; the local cloud has its own region and fixed test credentials.

A target that cannot be found, reached or authenticated against raises `TargetError` (exit
status 4, `ExitCode.UNREACHABLE`) with a message that says what to do next.
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
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ProfileNotFound

from lethe.api_retry import (
    CONNECT_TIMEOUT_SECONDS,
    IDEMPOTENCY_HEADER,
    READ_TIMEOUT_SECONDS,
    ApiUnavailableError,
    Attempt,
    is_repeatable,
    send_with_retry,
)
from lethe.errors import UnreachableError

API_TIMEOUT_SECONDS = READ_TIMEOUT_SECONDS  # one attempt's read time-out (LETHE_API_TIMEOUT)
#: Where boto3 looks for credentials, in order: named in every "no credentials" message.
CREDENTIALS_CHAIN = (
    "the AWS configuration chain: --profile / AWS_PROFILE, AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, ~/.aws/credentials and ~/.aws/config (`aws configure`, "
    "`aws sso login`), then a container or instance role"
)
LOCAL_HINT = (
    "start the local cloud with `lethe local up --detach --state-file F` and pass "
    "--state-file F, or pass --stack-name S [--region R] [--profile P] for AWS"
)


class TargetError(UnreachableError):
    """The deployment cannot be found or reached (exit status 4); the message says what to do."""


@dataclass(frozen=True)
class Target:
    outputs: dict[str, str]
    region: str
    api_url: str
    endpoint_url: str | None = None  # the local cloud's moto server; None on AWS
    credentials: dict[str, str] | None = None  # fixed fake credentials for the local cloud
    profile: str | None = None  # the AWS profile of a stack target (--profile)
    stack_name: str | None = None  # the CloudFormation stack of a stack target
    logs_dir: Path | None = None  # the local cloud's log files; None on AWS

    @property
    def is_local(self) -> bool:
        return self.endpoint_url is not None

    def _session(self) -> boto3.Session:
        if self.credentials is not None:
            return boto3.Session(
                region_name=self.region,
                aws_access_key_id=self.credentials.get("aws_access_key_id"),
                aws_secret_access_key=self.credentials.get("aws_secret_access_key"),
            )
        return _aws_session(self.profile, self.region)

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
        attempts: list[Attempt] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """A SigV4-signed (IAM) request to the REST API; returns status and JSON body.

        `headers` (e.g. Idempotency-Key) and the `query` string are part of what is signed.
        Time-outs, lost connections, 429 and 5xx are retried (lethe.api_retry) when the call
        is safe to repeat: an idempotent method, or an Idempotency-Key header. Every attempt
        sends the same method, URL, headers and body, signed again. Each attempt's outcome is
        appended to `attempts` when given. Raises ApiUnavailableError when no usable answer
        came (exit status 4 when no attempt can have reached the API, 1 otherwise)."""
        url = self.api_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(sorted(query.items()), quote_via=quote)
        data = json.dumps(body) if body is not None else None
        sent_headers = {"Content-Type": "application/json", **(headers or {})}
        credentials = self._session().get_credentials()
        if credentials is None:
            raise TargetError(
                f"no AWS credentials to sign the API request: set them up in {CREDENTIALS_CHAIN}"
            )

        def send(read_timeout: float) -> requests.Response:
            request = AWSRequest(method=method, url=url, data=data, headers=dict(sent_headers))
            SigV4Auth(credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(
                request
            )
            return requests.request(
                method,
                url,
                data=data,
                headers=dict(request.headers.items()),
                timeout=(CONNECT_TIMEOUT_SECONDS, read_timeout),
            )

        key = next(
            (v for k, v in sent_headers.items() if k.lower() == IDEMPOTENCY_HEADER.lower()), None
        )
        try:
            response = send_with_retry(
                send,
                what=f"{method} {path}",
                repeatable=is_repeatable(method, headers),
                idempotency_key=key,
                attempts=attempts,
            )
        except ApiUnavailableError as error:
            if not error.maybe_delivered:  # no connection at all: where to look
                error.add_hint(
                    LOCAL_HINT
                    if self.is_local
                    else f"check the network and the stack's ApiUrl output ({self.api_url})"
                )
            raise
        try:
            payload = response.json()
        except ValueError:
            payload = {"message": response.text}
        return response.status_code, payload


def _aws_session(profile: str | None, region: str | None) -> boto3.Session:
    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound:
        raise TargetError(
            f"AWS profile {profile!r} is not configured (~/.aws/config): `aws configure "
            f"--profile {profile}` or `aws configure sso`, or name another with --profile"
        ) from None


def from_state_file(path: Path) -> Target:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise TargetError(
            f"{path} does not exist: start the local cloud with "
            f"`lethe local up --detach --state-file {path}`, or pass --stack-name S "
            "[--region R] for AWS"
        ) from None
    except (OSError, ValueError) as exc:
        raise TargetError(f"cannot read the local cloud's state file {path}: {exc}") from None
    return Target(
        outputs=dict(state["outputs"]),
        region=state["region"],
        api_url=state["api_url"],
        endpoint_url=state["endpoint_url"],
        credentials={
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
        stack_name=state.get("stack_name"),
        logs_dir=Path(state["logs_dir"]) if state.get("logs_dir") else None,
    )


def from_stack(stack_name: str, region: str | None = None, profile: str | None = None) -> Target:
    session = _aws_session(profile, region)
    if not session.region_name:
        raise TargetError(
            "no AWS region: pass --region R, or set AWS_REGION / AWS_DEFAULT_REGION or the "
            "profile's region (~/.aws/config)"
        )
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except NoCredentialsError:
        raise TargetError(f"no AWS credentials found: set them up in {CREDENTIALS_CHAIN}") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ValidationError" and "does not exist" in error.get("Message", ""):
            raise TargetError(
                f"stack {stack_name} does not exist in {session.region_name}: check "
                "--stack-name and --region (`aws cloudformation list-stacks`), or deploy it "
                "with `sam deploy --guided`"
            ) from None
        raise TargetError(
            f"cannot read stack {stack_name} in {session.region_name}: {error.get('Code')}: "
            f"{error.get('Message')} (credentials come from {CREDENTIALS_CHAIN})"
        ) from None
    except BotoCoreError as exc:
        raise TargetError(f"cannot reach CloudFormation in {session.region_name}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return Target(
        outputs=outputs,
        region=session.region_name,
        api_url=outputs.get("ApiUrl", ""),
        profile=profile,
        stack_name=stack_name,
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
    add_aws_arguments(parser)


def add_aws_arguments(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """`--profile` and `--region`. `lethe.cli` adds them before the command (top_level: with
    their defaults); commands add them again so they may follow it (no default there, so an
    option given before the command is not reset)."""
    default: Any = None if top_level else argparse.SUPPRESS
    parser.add_argument(
        "--profile",
        default=default,
        help="AWS profile for --stack-name (default: AWS_PROFILE, else the default chain)",
    )
    parser.add_argument(
        "--region",
        default=default,
        help="AWS region of --stack-name (default: AWS_REGION / the profile's region)",
    )


def resolve(args: argparse.Namespace) -> Target:
    if getattr(args, "state_file", None):
        return from_state_file(Path(args.state_file))
    if getattr(args, "stack_name", None):
        return from_stack(
            args.stack_name, getattr(args, "region", None), getattr(args, "profile", None)
        )
    raise TargetError(
        "say which deployment: --state-file F (a local cloud: `lethe local up --detach "
        "--state-file F` starts one) or --stack-name S [--region R] [--profile P] (AWS); "
        "or set LETHE_STATE_FILE / LETHE_STACK_NAME"
    )
