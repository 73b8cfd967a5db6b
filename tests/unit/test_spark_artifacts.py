"""The Spark artifacts' plan: what goes into the EMR Serverless Python environment, where its
pins come from (spark_jobs/requirements.txt, nothing else), and the checks that keep a build to
exactly those pins, the target's glibc and architecture. No network: the build itself is
tests/integration/test_python_env_archive.py."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
import sys
import tarfile
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest

from lethe import artifacts
from lethe.artifacts import (
    ArtifactError,
    Pin,
    Wheel,
    canonical_name,
    check_wheels,
    plan_python_env,
    read_pins,
)
from tests.conftest import REPO_ROOT

REQUIREMENTS = REPO_ROOT / "spark_jobs" / "requirements.txt"
# Provided by Spark on every engine (and locally by the dev venv): never pinned for the jobs.
ENGINE_PROVIDED = {"pyspark", "py4j"}
# Imported only inside a function that the Spark jobs never call (certificate verification).
OPTIONAL = {"cryptography"}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _repo(tmp_path: Path, requirements: str) -> Path:
    """A minimal checkout: a requirements file and the two packages."""
    _write(tmp_path / "spark_jobs" / "requirements.txt", requirements)
    _write(tmp_path / "spark_jobs" / "job.py", "print('job')\n")
    _write(tmp_path / "spark_jobs" / "lethe_jobs" / "__init__.py", "")
    _write(tmp_path / "layers" / "shared" / "lethe_shared" / "__init__.py", "")
    return tmp_path


# ------------------------------------------------------------------------------------ the pins


def test_the_plan_takes_its_pins_from_the_spark_requirements_file() -> None:
    plan = plan_python_env(REPO_ROOT)

    assert plan.requirements == REQUIREMENTS
    assert plan.pins == read_pins(REQUIREMENTS)
    assert len({pin.key for pin in plan.pins}) == len(plan.pins)
    assert [p.name for p in plan.packages] == ["lethe_shared", "lethe_jobs"]
    assert (plan.python_version, plan.interpreter, plan.arch) == (
        "3.11",
        "/usr/bin/python3.11",
        "x86_64",
    )


def test_another_requirements_file_gives_another_plan(tmp_path: Path) -> None:
    # the pins live in the file only: the plan and pip's command lines follow it
    repo = _repo(tmp_path, "pydantic==9.9.9  # comment\n\nSix == 1.0\n")

    plan = plan_python_env(repo, arch="aarch64")

    assert plan.pins == (Pin("pydantic", "9.9.9"), Pin("Six", "1.0"))
    for command in (plan.pip_download(tmp_path / "w"), plan.pip_install(tmp_path / "w", tmp_path)):
        assert command[command.index("--requirement") + 1] == str(
            repo / "spark_jobs/requirements.txt"
        )
        assert not any("==" in part for part in command), command
        assert "--only-binary=:all:" in command
        assert command[command.index("--python-version") + 1] == "3.11"
        assert command[command.index("--abi") + 1] == "cp311"
        platforms = [command[i + 1] for i, part in enumerate(command) if part == "--platform"]
        assert platforms == list(plan.platforms)
    assert "--no-deps" in plan.pip_install(tmp_path / "w", tmp_path)
    assert "--no-compile" in plan.pip_install(tmp_path / "w", tmp_path)
    assert "--no-deps" not in plan.pip_download(tmp_path / "w")  # resolves to find what is unpinned


def test_offline_builds_read_only_the_given_wheels(tmp_path: Path) -> None:
    command = plan_python_env(REPO_ROOT).pip_download(tmp_path / "dest", tmp_path / "wheels")

    assert "--no-index" in command
    assert command[command.index("--find-links") + 1] == str(tmp_path / "wheels")


def test_wheel_platforms_are_every_manylinux_that_runs_on_al2023() -> None:
    plan = plan_python_env(REPO_ROOT)

    assert plan.platforms[0] == "manylinux_2_34_x86_64"
    assert plan.platforms[-2:] == ("manylinux_2_17_x86_64", "manylinux2014_x86_64")
    assert len(plan.platforms) == 34 - 17 + 2
    assert all(p.endswith("_x86_64") for p in plan.platforms)
    assert plan_python_env(REPO_ROOT, "aarch64").platforms[0] == "manylinux_2_34_aarch64"
    with pytest.raises(ArtifactError, match="unknown architecture"):
        plan_python_env(REPO_ROOT, "arm64")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pydantic>=2\n", "not an exact pin"),
        ("pydantic\n", "not an exact pin"),
        ("pydantic[email]==2.0\n", "not an exact pin"),
        ("pydantic==2.0 ; python_version>'3'\n", "not an exact pin"),
        ("pydantic==2.0\nPydantic==2.1\n", "pinned twice"),
        ("typing_extensions==4\ntyping-extensions==4\n", "pinned twice"),
        ("# nothing\n", "no pins"),
    ],
)
def test_requirements_must_be_exact_pins_each_once(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        read_pins(_write(tmp_path / "requirements.txt", text))


def test_the_spark_pins_are_what_the_tests_run() -> None:
    locked = dict(
        (canonical_name(name), version)
        for name, _, version in (
            line.split("#", 1)[0].strip().partition("==")
            for line in (REPO_ROOT / "requirements" / "dev.lock").read_text().splitlines()
        )
        if version
    )
    for pin in read_pins(REQUIREMENTS):
        assert locked.get(pin.key) == pin.version, (
            f"{pin} but requirements/dev.lock has {locked.get(pin.key)}"
        )


def test_one_pin_per_dependency_across_the_spark_and_lambda_requirements() -> None:
    spark = {pin.key: pin.version for pin in read_pins(REQUIREMENTS)}
    layer = (REPO_ROOT / "layers" / "shared" / "requirements.txt").read_text()
    for name, version in re.findall(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)", layer, re.M):
        if canonical_name(name) in spark:
            assert spark[canonical_name(name)] == version, name


def _third_party_imports(paths: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    first_party = {"lethe_shared", "lethe_jobs", "ingest", "index", "reconcile", "erase"}
    return {m for m in found if m not in sys.stdlib_module_names and m not in first_party}


def test_every_package_the_jobs_import_is_pinned() -> None:
    code = [
        *sorted((REPO_ROOT / "spark_jobs").rglob("*.py")),
        *sorted((REPO_ROOT / "layers" / "shared" / "lethe_shared").rglob("*.py")),
    ]
    mapping = packages_distributions()
    pinned = {pin.key for pin in read_pins(REQUIREMENTS)}
    for module in sorted(_third_party_imports(code) - OPTIONAL):
        distributions = {canonical_name(d) for d in mapping[module]}
        if distributions & ENGINE_PROVIDED:
            continue
        assert distributions & pinned, f"{module} is imported but not pinned"
    assert not pinned & ENGINE_PROVIDED, "the engines provide Spark's own Python packages"


# ------------------------------------------------------------------------------- the wheels


def _wheels(*names: str) -> list[Wheel]:
    return [Wheel.parse(name) for name in names]


def _plan(tmp_path: Path, requirements: str = "pydantic-core==2.46.5\nsix==1.17.0\n") -> Any:
    return plan_python_env(_repo(tmp_path, requirements))


def test_the_pinned_wheels_pass(tmp_path: Path) -> None:
    check_wheels(
        _plan(tmp_path),
        _wheels(
            "pydantic_core-2.46.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "six-1.17.0-py2.py3-none-any.whl",
        ),
    )


@pytest.mark.parametrize(
    ("wheels", "message"),
    [
        (["six-1.17.0-py2.py3-none-any.whl"], "no wheel for pydantic-core==2.46.5"),
        (
            [
                "pydantic_core-2.46.5-cp311-cp311-manylinux_2_17_x86_64.whl",
                "six-1.17.0-py2.py3-none-any.whl",
                "typing_extensions-4.16.0-py3-none-any.whl",
            ],
            "typing-extensions 4.16.0 is needed but spark_jobs/requirements.txt does not pin it",
        ),
        (
            [
                "pydantic_core-2.46.4-cp311-cp311-manylinux_2_17_x86_64.whl",
                "six-1.17.0-py2.py3-none-any.whl",
            ],
            "pinned 2.46.5",
        ),
        (
            [
                "pydantic_core-2.46.5-cp311-cp311-manylinux_2_35_x86_64.whl",
                "six-1.17.0-py2.py3-none-any.whl",
            ],
            "needs glibc 2.35",
        ),
        (
            [
                "pydantic_core-2.46.5-cp311-cp311-manylinux_2_17_aarch64.whl",
                "six-1.17.0-py2.py3-none-any.whl",
            ],
            "is not for x86_64",
        ),
        (
            [
                "pydantic_core-2.46.5-cp311-cp311-linux_x86_64.whl",
                "six-1.17.0-py2.py3-none-any.whl",
            ],
            "not a manylinux or pure wheel",
        ),
    ],
)
def test_anything_but_the_pinned_runnable_wheels_fails_the_build(
    tmp_path: Path, wheels: list[str], message: str
) -> None:
    with pytest.raises(ArtifactError, match=re.escape(message)):
        check_wheels(_plan(tmp_path), _wheels(*wheels))


def test_a_wheel_needs_the_oldest_glibc_its_tags_name() -> None:
    numpy = Wheel.parse("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    legacy = Wheel.parse("x-1-cp311-cp311-manylinux2014_x86_64.manylinux1_x86_64.whl")

    assert (numpy.name, numpy.version, numpy.glibc()) == ("numpy", "2.4.6", (2, 27))
    assert legacy.glibc() == (2, 5)
    assert Wheel.parse("Typing_Extensions-4-py3-none-any.whl").glibc() is None
    assert Wheel.parse("Typing_Extensions-4-py3-none-any.whl").name == "typing-extensions"


# ------------------------------------------------------------------------------ the archive


def _tree(root: Path) -> Path:
    _write(root / "lethe-python-env.json", "{}\n")
    _write(root / "lib" / "python3.11" / "site-packages" / "m" / "__init__.py", "X = 1\n")
    tool = _write(root / "lib" / "tool.so", "binary")
    tool.chmod(0o775)
    (root / "bin").mkdir()
    (root / "bin" / "python3.11").symlink_to("/usr/bin/python3.11")
    (root / "bin" / "python").symlink_to("python3.11")
    return root


def test_the_archive_bytes_depend_only_on_the_tree(tmp_path: Path) -> None:
    first = artifacts.write_reproducible_tar_gz(_tree(tmp_path / "a"), tmp_path / "a.tar.gz")
    second_root = _tree(tmp_path / "b")
    (second_root / "lib" / "tool.so").touch()  # another mtime
    second = artifacts.write_reproducible_tar_gz(second_root, tmp_path / "b.tar.gz")

    assert first.read_bytes() == second.read_bytes()


def test_the_archive_keeps_links_and_normalises_owners_times_and_modes(tmp_path: Path) -> None:
    archive = artifacts.write_reproducible_tar_gz(
        _tree(tmp_path / "env"), tmp_path / "env.tar.gz", first=("lethe-python-env.json",)
    )

    with gzip.open(archive) as stream:
        assert stream.read(1)  # a gzip stream
    assert archive.read_bytes()[4:8] == b"\0\0\0\0"  # no gzip timestamp
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
    assert members[0].name == "lethe-python-env.json"
    assert [m.name for m in members[1:]] == sorted(m.name for m in members[1:])
    by_name = {m.name: m for m in members}
    assert by_name["bin/python3.11"].issym()
    assert by_name["bin/python3.11"].linkname == "/usr/bin/python3.11"
    assert by_name["bin/python"].linkname == "python3.11"
    assert by_name["lib/tool.so"].mode == 0o755
    assert by_name["lib/python3.11/site-packages/m/__init__.py"].mode == 0o644
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "", "", 1577836800)
    }


def _fake_build(repo: Path, build: Path, requirements: bytes | None = None) -> None:
    built = artifacts.build_spark_artifacts(repo, build)
    assert [p.name for p in built] == artifacts.artifact_names(repo, python_env=False)
    env = build / "env"
    manifest = {"requirements_sha256": hashlib.sha256(requirements or b"").hexdigest()}
    _write(env / artifacts.PYTHON_ENV_MANIFEST, json.dumps(manifest))
    artifacts.write_reproducible_tar_gz(
        env, build / artifacts.PYTHON_ENV_ARCHIVE, first=(artifacts.PYTHON_ENV_MANIFEST,)
    )


def test_an_upload_from_a_build_folder_sends_exactly_a_current_build(tmp_path: Path) -> None:
    requirements = "six==1.17.0\n"
    repo = _repo(tmp_path / "repo", requirements)
    build = tmp_path / "build"
    _fake_build(repo, build, requirements.encode())
    (build / "stale.py").write_text("")

    found = artifacts.built_spark_artifacts(repo, build)

    assert [p.name for p in found] == [
        "job.py",
        "lethe_shared.zip",
        "requirements.txt",
        "pyspark_env.tar.gz",
    ]
    assert artifacts.read_python_env_manifest(build / "pyspark_env.tar.gz")["requirements_sha256"]


def test_an_out_of_date_build_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo", "six==1.17.0\n")
    build = tmp_path / "build"
    _fake_build(repo, build, b"six==1.16.0\n")

    with pytest.raises(ArtifactError, match="built from other pins"):
        artifacts.built_spark_artifacts(repo, build)
    assert artifacts.built_spark_artifacts(repo, build, python_env=False)  # the rest is current

    (repo / "spark_jobs" / "requirements.txt").write_text("six==1.17.1\n")
    with pytest.raises(ArtifactError, match=re.escape("differs from spark_jobs/requirements.txt")):
        artifacts.built_spark_artifacts(repo, build)

    (build / "pyspark_env.tar.gz").unlink()
    with pytest.raises(ArtifactError, match=re.escape("lacks pyspark_env.tar.gz")):
        artifacts.built_spark_artifacts(repo, build)


class _RecordingS3:
    def __init__(self) -> None:
        self.uploads: list[tuple[str, str, str, dict[str, str]]] = []

    def upload_file(self, path: str, bucket: str, key: str, ExtraArgs: dict[str, str]) -> None:
        self.uploads.append((Path(path).name, bucket, key, ExtraArgs))


def test_uploads_go_under_spark_jobs_with_their_content_types(tmp_path: Path) -> None:
    names = ["job.py", "lethe_shared.zip", "requirements.txt", "pyspark_env.tar.gz"]
    files = [_write(tmp_path / name, "x") for name in names]
    s3 = _RecordingS3()

    uris = artifacts.upload_artifacts(s3, "bucket", files)

    assert uris == [f"s3://bucket/spark_jobs/{name}" for name in names]
    assert [(key, extra["ContentType"]) for _, _, key, extra in s3.uploads] == [
        ("spark_jobs/job.py", "text/x-python"),
        ("spark_jobs/lethe_shared.zip", "application/zip"),
        ("spark_jobs/requirements.txt", "text/plain"),
        ("spark_jobs/pyspark_env.tar.gz", "application/gzip"),
    ]


def test_the_manifest_says_what_was_built(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    wheels = _wheels(
        "pydantic_core-2.46.5-cp311-cp311-manylinux_2_17_x86_64.whl",
        "six-1.17.0-py2.py3-none-any.whl",
    )

    manifest = artifacts.python_env_manifest(plan, wheels)

    assert manifest["pins"] == {"pydantic-core": "2.46.5", "six": "1.17.0"}
    assert manifest["interpreter"] == "/usr/bin/python3.11"
    assert manifest["emr_serverless_architecture"] == "X86_64"
    assert manifest["glibc"] == "2.34"
    assert (
        manifest["requirements_sha256"]
        == hashlib.sha256(plan.requirements.read_bytes()).hexdigest()
    )
    assert manifest["wheels"] == [w.filename for w in wheels]
    assert json.loads(json.dumps(manifest)) == manifest
