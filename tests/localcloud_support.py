"""What the tiers that run on a local cloud started through the CLI share (tests/e2e, whose
conftest starts one for the session, and tests/soak, which starts its own): the running cloud
and its CLI, its start-up and shut-down, waiting for a condition, and the probes they wait on.

A plain module, not a conftest: both tiers import it by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import requests

from lethe.localcloud import iam_log
from lethe.localcloud.deployment import Endpoints
from tests.conftest import REPO_ROOT

LETHE = str(Path(sys.executable).parent / "lethe")
SAMPLES = REPO_ROOT / "samples"
T = TypeVar("T")


@dataclass(frozen=True)
class LocalCloud:
    state_file: Path
    state: dict[str, Any]

    @property
    def outputs(self) -> dict[str, str]:
        return dict(self.state["outputs"])

    def client(self, service: str) -> Any:
        return Endpoints(
            self.state["endpoint_url"], self.state["region"], self.state["account_id"]
        ).client(service)

    def table(self, output_name: str) -> Any:
        return boto3.resource(
            "dynamodb",
            endpoint_url=self.state["endpoint_url"],
            region_name=self.state["region"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).Table(self.outputs[output_name])

    def lethe(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the CLI against this cloud; with `check`, fail unless it exits 0."""
        result = subprocess.run(
            [LETHE, *args, "--state-file", str(self.state_file)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"lethe {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
            )
        return result


def cli(cloud: LocalCloud, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The CLI against `cloud`, whatever its exit status (the caller looks at it), with room for
    Spark runs (`LocalCloud.lethe` allows 120 s)."""
    return cloud.lethe(*args, check=False, timeout=timeout)


@contextmanager
def running_local_cloud(
    state_file: Path,
    *,
    env: dict[str, str] | None = None,
    up_timeout: float,
    down_timeout: float,
) -> Iterator[LocalCloud]:
    """`lethe local up --detach` in a subprocess, as a user starts it (without the caller's
    AWS_* variables, plus `env`); `lethe local down` when done, whatever happened."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for name, value in (env or {}).items():
        environment.setdefault(name, value)
    up_command = [LETHE, "local", "up", "--detach", "--state-file", str(state_file)]
    started = subprocess.run(
        # the CLI's own wait a little shorter than ours, so that its message is what we see
        [*up_command, "--timeout", str(max(30, int(up_timeout) - 10))],
        capture_output=True,
        text=True,
        timeout=up_timeout,
        env=environment,
        check=False,
    )
    try:
        assert started.returncode == 0, f"local up failed:\n{started.stdout}\n{started.stderr}"
        yield LocalCloud(state_file=state_file, state=json.loads(state_file.read_text()))
    finally:
        subprocess.run(
            [LETHE, "local", "down", "--state-file", str(state_file)],
            capture_output=True,
            timeout=down_timeout,
            check=False,
        )


@contextmanager
def every_call_allowed(cloud: LocalCloud) -> Iterator[None]:
    """The block's calls of functions, state machines and Spark jobs were all allowed by the
    template's IAM policies (the local cloud runs with LETHE_LOCAL_IAM=enforce,
    lethe.localcloud.iam); otherwise fail naming role, action, resource and reason."""
    assert cloud.state.get("iam") == "enforce", "the local cloud runs with LETHE_LOCAL_IAM=enforce"
    logs_dir = cloud.state["logs_dir"]
    offset = iam_log.end_offset(logs_dir)
    yield
    decisions, _ = iam_log.read_decisions(logs_dir, offset)
    denied = iam_log.distinct_denials(decisions)
    assert not denied, "calls the template's IAM policies do not allow:\n" + "\n".join(denied)


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.25) -> T:
    """Call `probe` every `every` s until it returns something truthy, and return that; fail
    with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def quiet(cloud: LocalCloud, *, machines: tuple[str, ...] = ("IngestionStateMachineArn",)) -> bool:
    """Nothing left to deliver or run: the object events queue is empty and no execution of
    the state machines `machines` (outputs naming their ARNs) is running."""
    attributes = cloud.client("sqs").get_queue_attributes(
        QueueUrl=cloud.outputs["ObjectEventsQueueUrl"],
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    if any(int(value) for value in attributes.values()):
        return False
    sfn = cloud.client("stepfunctions")
    return not any(
        sfn.list_executions(stateMachineArn=cloud.outputs[arn], statusFilter="RUNNING")[
            "executions"
        ]
        for arn in machines
    )


def catalog_items(cloud: LocalCloud, key: str) -> list[dict[str, Any]]:
    """Every catalog item (one per version) of the raw bucket's `key`, read consistently."""
    url = f"s3://{cloud.outputs['RawBucketName']}/{key}"
    return list(
        cloud.table("ObjectCatalogTableName").query(
            KeyConditionExpression="object_url = :u",
            ExpressionAttributeValues={":u": url},
            ConsistentRead=True,
        )["Items"]
    )


def sample_dataset_as(sample: str, dataset_id: str, folder: Path) -> Path:
    """The dataset document of samples/<sample>.dataset.json under another dataset id, written
    to `folder` (for `lethe datasets put`): a test's own dataset, untouched by the others."""
    document = json.loads((SAMPLES / f"{sample}.dataset.json").read_text())
    path = folder / f"{dataset_id}.json"
    path.write_text(json.dumps({**document, "dataset_id": dataset_id}))
    return path


def capture_queue(cloud: LocalCloud, name: str) -> tuple[str, str]:
    """A new queue to capture copies of what the cloud publishes: its URL and ARN."""
    sqs = cloud.client("sqs")
    url = str(sqs.create_queue(QueueName=name)["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return url, str(arn)


def decide_on_approval_page(link: str, decision: str, *, timeout: float) -> requests.Response:
    """What an approver does without a browser: GET the approval page `link`, read its
    confirmation code and CSRF token, and POST `decision` (approve or reject) with them."""
    session = requests.Session()
    page = session.get(link, timeout=timeout).text
    code = page.split('<code id="confirmation-code">', 1)[1].split("<", 1)[0]
    token = page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    return session.post(
        link,
        data={"csrf_token": token, "confirmation": code, "decision": decision},
        timeout=timeout,
    )
