"""Fixtures shared by every test tier.

Tiers are folders (unit, integration, spark, sfn, e2e); each test is marked with its folder's
name so `pytest -m unit` and `make unit` select the same tests.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# Records which test needed which IAM statement when LETHE_IAM_COVERAGE_OUT is set, and fails
# an sfn or e2e test during whose fixtures or call any call was denied (tests/iam_coverage.py).
from tests.iam_coverage import pytest_runtest_makereport, pytest_runtest_protocol  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
EVENTS_DIR = REPO_ROOT / "events"
TIERS = ("unit", "integration", "spark", "sfn", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO_ROOT / "tests").parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture
def load_event() -> Callable[[str], dict[str, Any]]:
    """An event file from events/ (the same files `sam local invoke -e` uses)."""

    def _load(name: str) -> dict[str, Any]:
        event: dict[str, Any] = json.loads((EVENTS_DIR / name).read_text())
        return event

    return _load


def load_function_module(function_dir: str) -> ModuleType:
    """Import functions/<function_dir>/app.py under a unique module name, as Lambda would load it
    from its CodeUri, without two functions' `app` modules colliding in sys.modules."""
    path = REPO_ROOT / "functions" / function_dir / "app.py"
    name = f"lethe_fn_{function_dir}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeLambdaContext:
    function_name: str = "lethe-local-test"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:lethe-local-test"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/lethe-local-test"
    log_stream_name: str = "2026/11/22/[$LATEST]test"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()
