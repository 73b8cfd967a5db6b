"""End-to-end tier: the local cloud is started through the `lethe` CLI, in a subprocess, exactly
as a user starts it, and every test talks to it through boto3, the REST API and the CLI
(tests/localcloud_support.py has the cloud, its start-up and the waiting helpers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.localcloud_support import SAMPLES, LocalCloud, every_call_allowed, running_local_cloud


@pytest.fixture(scope="session")
def local_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    state_file = tmp_path_factory.mktemp("localcloud") / "local.json"
    with running_local_cloud(state_file, up_timeout=240, down_timeout=60) as cloud:
        yield cloud


@pytest.fixture(autouse=True)
def every_call_allowed_by_the_template(local_cloud: LocalCloud) -> Iterator[None]:
    """The tier runs with the IAM check on (LETHE_LOCAL_IAM=enforce, lethe.localcloud.iam): a
    call of a function, state machine or Spark job that the template's policies do not allow
    fails the test during which it was made, naming role, action and resource."""
    with every_call_allowed(local_cloud):
        yield


@pytest.fixture(scope="session")
def registered(local_cloud: LocalCloud) -> LocalCloud:
    """The sample datasets, registered through the CLI (and so through the signed REST API)."""
    for name in ("reviews", "orders", "clicks"):
        local_cloud.lethe("datasets", "put", str(SAMPLES / f"{name}.dataset.json"))
    return local_cloud
