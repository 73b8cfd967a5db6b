"""The soak (`make soak`, issue 11 item 7): a local cloud of its own, started through the CLI as
the e2e tier starts one (tests/localcloud_support.py), and the run's figures (times per phase,
counts, machine load) printed at the end and written to `--soak-report` as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.localcloud_support import LocalCloud, every_call_allowed, running_local_cloud

FULL = {"objects": 1000, "requests": 50}
QUICK = {"objects": 120, "requests": 12}
FIGURES: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak")
    group.addoption(
        "--quick",
        action="store_true",
        help=f"a development size ({QUICK['objects']} objects, {QUICK['requests']} requests) "
        f"instead of the full one ({FULL['objects']}, {FULL['requests']})",
    )
    group.addoption(
        "--soak-size",
        default="",
        metavar="OBJECTS,REQUESTS",
        help="any other size, e.g. 400,25 (to see how the local cloud grows between the two)",
    )
    group.addoption("--soak-report", default="", help="write the run's figures here (JSON)")


@pytest.fixture(scope="session")
def sizes(request: pytest.FixtureRequest) -> dict[str, int]:
    chosen = dict(QUICK if request.config.getoption("--quick") else FULL)
    size = request.config.getoption("--soak-size")
    if size:
        objects, requests = (int(n) for n in size.split(","))
        chosen = {"objects": objects, "requests": requests}
    FIGURES["sizes"] = chosen
    return chosen


@pytest.fixture(scope="session")
def soak_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    state_file = tmp_path_factory.mktemp("soak") / "local.json"
    # Lambda's own batching (the template's 60 s window for batches of 100 object events), not
    # the local 2 s cap: a burst makes batches of 100, as on AWS, not dozens of small ones
    env = {"LETHE_LOCAL_MAX_BATCH_WINDOW": "none"}
    with running_local_cloud(state_file, env=env, up_timeout=600, down_timeout=120) as cloud:
        FIGURES["logs_dir"] = cloud.state["logs_dir"]
        yield cloud


@pytest.fixture(autouse=True)
def every_call_allowed_by_the_template(request: pytest.FixtureRequest) -> Iterator[None]:
    """A soak test fails when one of its calls was not allowed by the template's IAM policies
    (lethe.localcloud.iam, LETHE_LOCAL_IAM=enforce), naming role, action and resource."""
    if "soak_cloud" not in request.fixturenames:
        yield
        return
    with every_call_allowed(request.getfixturevalue("soak_cloud")):
        yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not FIGURES:
        return
    text = json.dumps(FIGURES, indent=2, sort_keys=True, default=str)
    terminalreporter.write_sep("=", "soak figures")
    terminalreporter.write_line(text)
    report = config.getoption("--soak-report")
    if report:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(text + "\n")
