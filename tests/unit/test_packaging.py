"""`pip install .` gives a working `lethe`: every third-party module the CLI and lethe_shared
import is a declared dependency, and the local cloud's are in the `local` extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

FIRST_PARTY = {"lethe", "lethe_shared", "lethe_jobs"}
# Imported only inside a function, by a command that says what to install when it is missing.
OPTIONAL = {"cryptography"}


def _imports(paths: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in FIRST_PARTY}


def _distributions(modules: set[str]) -> set[str]:
    mapping = packages_distributions()
    names: set[str] = set()
    for module in modules:
        assert module in mapping, f"{module} is imported but installed by no distribution"
        names.update(_normal(d) for d in mapping[module])
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(requirements: list[str]) -> set[str]:
    return {_normal(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0]) for r in requirements}


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    document = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return dict(document["project"])


def test_the_cli_and_shared_code_need_only_declared_dependencies(
    project: dict[str, Any],
) -> None:
    cli = [p for p in (REPO_ROOT / "src" / "lethe").rglob("*.py") if "localcloud" not in p.parts]
    shared = list((REPO_ROOT / "layers" / "shared" / "lethe_shared").glob("*.py"))
    needed = _distributions(_imports(cli + shared) - OPTIONAL)
    declared = _declared(list(project["dependencies"]))

    assert needed - declared == set()
    assert "moto" not in declared  # an operator who talks to AWS does not install moto


def test_the_local_cloud_needs_only_the_local_extra(project: dict[str, Any]) -> None:
    localcloud = list((REPO_ROOT / "src" / "lethe" / "localcloud").rglob("*.py"))
    needed = _distributions(_imports(localcloud))
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    declared = _declared(list(project["dependencies"])) | _declared(extras["local"])

    assert needed - declared == set()
