"""The house in wings stays a house in wings (docs/ARCHITECTURE.md, "Wings and owners").

Read from the source as a newcomer reads it, with `ast` (nothing is imported):
- no product module is longer than a reader can hold;
- `lethe_shared`'s wings import downward only, and each handler imports its own wing;
- the Spark jobs do not import each other's `*_core` modules;
- the CLI and the local cloud have no import circle, and nothing below `lethe.commands` imports it;
- AWS error codes are spelled in `lethe_shared/aws/errors.py` alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

# "A file past ~600 lines is a room to split along its seams."
MAX_LINES = 600
PRODUCT_ROOTS = ("layers/shared/lethe_shared", "spark_jobs", "src/lethe", "functions")
SHARED = REPO_ROOT / "layers/shared/lethe_shared"

# Each wing of lethe_shared and the wings it may import. `errors`, `config` and `models` (typed
# errors, the settings model, the model base) sit under every wing. The graph is acyclic: a wing
# never reaches back up.
WINGS: dict[str, frozenset[str]] = {
    "aws": frozenset(),
    "catalog": frozenset({"aws"}),
    "datasets": frozenset({"aws", "catalog"}),
    "subject_hashing": frozenset({"aws", "datasets"}),
    "index": frozenset({"aws", "catalog", "datasets", "subject_hashing"}),
    "ingestion": frozenset({"aws", "catalog", "datasets", "index", "subject_hashing"}),
    "erasure": frozenset({"aws", "catalog", "datasets", "index", "subject_hashing"}),
}
BASE_MODULES = frozenset({"errors", "config", "models"})

# Each function and the wing it belongs to: its handler imports that wing and what the wing may.
HANDLER_WINGS = {
    "object_events": "ingestion",
    "ingestion_steps": "catalog",
    "index_object": "index",
    # the datasets wing and the key's fingerprint (a new dataset records it; a re-index gets it)
    "datasets_api": "subject_hashing",
    "erasure_api": "erasure",
    "erasure_steps": "erasure",
    "erasure_metrics": "erasure",
    "retention_steps": "erasure",
    "approval_request": "erasure",
    "approval_page": "erasure",
}

# Error codes whose meaning Lethe decides on (not found, condition failed, ...): one module.
CLASSIFIED_CODES = (
    "ConditionalCheckFailedException",
    "NoSuchKey",
    "NoSuchVersion",
    "PreconditionFailed",
    "NoSuchEntity",
    "ExecutionDoesNotExist",
    "InvalidClientTokenId",
)


def _python_files(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((REPO_ROOT / root).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute, at any depth of the file (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _shared_parts(modules: set[str]) -> set[str]:
    """The first component under lethe_shared of each lethe_shared module in `modules`."""
    return {m.split(".")[1] for m in modules if m.startswith("lethe_shared.")}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def test_no_product_module_is_longer_than_a_reader_can_hold() -> None:
    long = {
        _rel(path): lines
        for path in _python_files(*PRODUCT_ROOTS)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_module_of_lethe_shared_lives_in_a_wing() -> None:
    loose = sorted(
        path.name
        for path in SHARED.glob("*.py")
        if path.stem not in BASE_MODULES and path.name != "__init__.py"
    )
    wings = sorted(p.name for p in SHARED.iterdir() if (p / "__init__.py").exists())
    assert loose == []
    assert wings == sorted(WINGS)


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_a_wing_imports_only_the_wings_below_it(wing: str) -> None:
    allowed = WINGS[wing] | BASE_MODULES | {wing}
    reaching_up = {
        _rel(path): sorted(parts - allowed)
        for path in _python_files(f"layers/shared/lethe_shared/{wing}")
        if (parts := _shared_parts(_imports(path))) - allowed
    }
    assert reaching_up == {}


def test_the_base_modules_import_no_wing() -> None:
    for name in BASE_MODULES:
        assert _shared_parts(_imports(SHARED / f"{name}.py")) - BASE_MODULES == set(), name


@pytest.mark.parametrize("function", sorted(HANDLER_WINGS))
def test_a_handler_imports_its_own_wing_only(function: str) -> None:
    wing = HANDLER_WINGS[function]
    allowed = WINGS[wing] | BASE_MODULES | {wing}
    parts = _shared_parts(_imports(REPO_ROOT / "functions" / function / "app.py"))
    assert wing in parts
    assert parts - allowed == set()


@pytest.mark.parametrize("function", sorted(HANDLER_WINGS))
def test_a_handler_is_wired_by_the_one_helper(function: str) -> None:
    """Settings, clients and adapters come from lethe_shared.aws.wiring, built at the first
    invocation: no handler imports boto3 or caches its own dependencies."""
    imported = _imports(REPO_ROOT / "functions" / function / "app.py")
    assert "lethe_shared.aws.wiring" in imported
    assert {"boto3", "functools.cache", "lethe_shared.config.load_settings"} & imported == set()


def test_every_function_has_a_wing() -> None:
    functions = sorted(p.name for p in (REPO_ROOT / "functions").iterdir() if p.is_dir())
    assert functions == sorted(HANDLER_WINGS)


def test_no_spark_job_imports_another_jobs_core() -> None:
    crossing = {}
    for path in _python_files("spark_jobs/lethe_jobs"):
        own = path.stem
        cores = {
            m
            for m in _imports(path)
            if m.startswith("lethe_jobs.") and m.split(".")[1].endswith("_core")
        }
        others = {m.split(".")[1] for m in cores} - {own}
        if others:
            crossing[_rel(path)] = sorted(others)
    assert crossing == {}


def _package_graph() -> dict[str, set[str]]:
    """Module → the `lethe.*` modules it imports, over src/lethe (modules and packages)."""
    root = REPO_ROOT / "src"
    graph: dict[str, set[str]] = {}
    names = set()
    for path in _python_files("src/lethe"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names.add(name)
        graph[name] = _imports(path)
    return {
        name: {m for m in imported if m in names and m != name} for name, imported in graph.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of `graph` (modules in order), or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cli_and_the_local_cloud_have_no_import_circle() -> None:
    graph = _package_graph()
    # A package's __init__ re-exporting its modules is not a circle of ideas: look at modules.
    modules = {
        name: {m for m in deps if not name.startswith(m + ".")} for name, deps in graph.items()
    }
    assert _cycle(modules) == []


def test_nothing_below_the_commands_imports_them() -> None:
    upward = {
        name: sorted(m for m in deps if m.startswith("lethe.commands"))
        for name, deps in _package_graph().items()
        if not name.startswith("lethe.commands")
        and name not in {"lethe.cli", "lethe.__main__"}
        and any(m.startswith("lethe.commands") for m in deps)
    }
    assert upward == {}


def test_aws_error_codes_are_spelled_in_one_module() -> None:
    errors_module = SHARED / "aws" / "errors.py"
    spelled = {
        _rel(path): [code for code in CLASSIFIED_CODES if code in text]
        for path in _python_files("layers/shared/lethe_shared", "spark_jobs", "functions")
        if path != errors_module
        and any(code in (text := path.read_text(encoding="utf-8")) for code in CLASSIFIED_CODES)
    }
    cli = {
        _rel(path): [code for code in CLASSIFIED_CODES if code in text]
        for path in _python_files("src/lethe")
        if "localcloud" not in path.parts  # the local cloud emulates AWS: it raises these codes
        and any(code in (text := path.read_text(encoding="utf-8")) for code in CLASSIFIED_CODES)
    }
    assert spelled == {}
    assert cli == {}


def test_every_lambda_model_builds_its_schema_on_first_use() -> None:
    """A model defined on pydantic's BaseModel builds its schema at import, which every cold
    start of every handler importing it pays; lethe_shared.models.Model defers it."""
    direct = sorted(
        f"{_rel(path)}:{node.name}"
        for path in _python_files("layers/shared/lethe_shared", "functions")
        if path != SHARED / "models.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id == "BaseModel" for b in node.bases)
    )
    assert direct == []
