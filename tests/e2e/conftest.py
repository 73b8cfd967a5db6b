"""End-to-end tier: the local cloud is started through the `lethe` CLI, in a subprocess, exactly
as a user starts it, and every test talks to it through boto3, the REST API and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest

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

    def lethe(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the CLI against this cloud."""
        result = subprocess.run(
            [LETHE, *args, "--state-file", str(self.state_file)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"lethe {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
            )
        return result


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.25)


@pytest.fixture(scope="session")
def local_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    state_file = tmp_path_factory.mktemp("localcloud") / "local.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    started = subprocess.run(
        [LETHE, "local", "up", "--detach", "--state-file", str(state_file)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    try:
        assert started.returncode == 0, f"local up failed:\n{started.stdout}\n{started.stderr}"
        yield LocalCloud(state_file=state_file, state=json.loads(state_file.read_text()))
    finally:
        subprocess.run(
            [LETHE, "local", "down", "--state-file", str(state_file)],
            capture_output=True,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="session")
def registered(local_cloud: LocalCloud) -> LocalCloud:
    """The sample datasets, registered through the CLI (and so through the signed REST API)."""
    for name in ("reviews", "orders", "clicks"):
        local_cloud.lethe("datasets", "put", str(SAMPLES / f"{name}.dataset.json"))
    return local_cloud
