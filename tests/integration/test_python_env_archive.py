"""`lethe artifacts build` really builds the EMR Serverless Python environment: the pinned
manylinux wheels for CPython 3.11 on Amazon Linux 2023 (from the package index pip is configured
with), lethe_shared and lethe_jobs, in a venv layout whose interpreter is EMR's /usr/bin/python3.11.

The archive carries no interpreter, so it is unpacked and run here with this machine's CPython 3.11:
/usr/bin/python3.11 itself when the machine has one (Debian 12 does), else the base interpreter of
this venv behind the same link. Spark workers running from it: tests/spark/test_python_env_spark.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe import artifacts
from lethe.artifacts import Wheel, read_pins
from tests.conftest import REPO_ROOT

LETHE = str(Path(sys.executable).parent / "lethe")
BUILD_TIMEOUT_SECONDS = 900  # the wheels are ~100 MB when pip's cache is cold
SITE_PACKAGES = "lib/python3.11/site-packages"
PINS = {pin.key: pin.version for pin in read_pins(REPO_ROOT / "spark_jobs" / "requirements.txt")}
ENGINE_PROVIDED = ("pyspark", "py4j")  # on EMR they come from Spark's own PYTHONPATH


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spark-artifacts")
    built = subprocess.run(
        [LETHE, "artifacts", "build", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.split() == [
        str(out / name) for name in artifacts.artifact_names(REPO_ROOT, python_env=True)
    ]
    return out


@pytest.fixture(scope="module")
def archive(build: Path) -> Path:
    return build / "pyspark_env.tar.gz"


@pytest.fixture(scope="module")
def members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        infos = tar.getmembers()
    assert infos[0].name == "lethe-python-env.json"
    return {info.name: info for info in infos}


@pytest.fixture(scope="module")
def unpacked(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive as Spark unpacks it (`#environment`), its interpreter link kept when this
    machine has /usr/bin/python3.11."""
    environment = tmp_path_factory.mktemp("executor") / "environment"
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(environment, filter="tar")
    link = environment / "bin" / "python3.11"
    if not Path(os.readlink(link)).exists():  # pragma: no cover - machines without it
        link.unlink()
        link.symlink_to(
            Path(getattr(sys, "_base_executable", sys.executable)).resolve()
        )  # the venv's base CPython
    return environment


@pytest.fixture(scope="module")
def spark_python_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pyspark and py4j alone, as EMR's Spark puts them on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("spark-python")
    for name in ENGINE_PROVIDED:
        module = __import__(name)
        (folder / name).symlink_to(Path(str(module.__file__)).parent)
    return folder


def test_the_build_copies_the_requirements_file_glue_installs(build: Path) -> None:
    source = (REPO_ROOT / "spark_jobs" / "requirements.txt").read_bytes()
    assert (build / "requirements.txt").read_bytes() == source


def test_the_archive_is_a_venv_on_emrs_python(
    archive: Path, members: dict[str, tarfile.TarInfo]
) -> None:
    assert members["bin/python3.11"].issym()
    assert members["bin/python3.11"].linkname == "/usr/bin/python3.11"
    assert members["bin/python"].linkname == "python3.11"
    assert members["bin/python3"].linkname == "python3.11"
    with tarfile.open(archive, "r:gz") as tar:
        config = tar.extractfile("pyvenv.cfg")
        assert config is not None
        assert config.read().decode().splitlines() == [
            "home = /usr/bin",
            "include-system-site-packages = false",
            "version = 3.11",
        ]
    names = set(members)
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]
    assert f"{SITE_PACKAGES}/bin" not in names  # no console scripts with this machine's paths
    assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 1577836800)}


def test_the_archive_holds_exactly_the_pinned_distributions(
    members: dict[str, tarfile.TarInfo],
) -> None:
    installed = {
        artifacts.canonical_name(
            name.split("/")[-1].removesuffix(".dist-info").rsplit("-", 1)[0]
        ): (name.split("/")[-1].removesuffix(".dist-info").rsplit("-", 1)[1])
        for name, info in members.items()
        if info.isdir() and name.endswith(".dist-info") and name.count("/") == 3
    }

    assert installed == PINS
    assert not [name for name in installed if name in ENGINE_PROVIDED]


def test_the_archive_carries_this_checkouts_lethe_packages(
    archive: Path, members: dict[str, tarfile.TarInfo]
) -> None:
    sources = {
        f"{SITE_PACKAGES}/{path.relative_to(package.parent).as_posix()}": path
        for package in (
            REPO_ROOT / "layers" / "shared" / "lethe_shared",
            REPO_ROOT / "spark_jobs" / "lethe_jobs",
        )
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    packed = {
        name
        for name in members
        if name.startswith((f"{SITE_PACKAGES}/lethe_shared/", f"{SITE_PACKAGES}/lethe_jobs/"))
        and members[name].isfile()
    }
    assert packed == set(sources)
    with tarfile.open(archive, "r:gz") as tar:
        for name in sorted(packed)[:5]:
            body = tar.extractfile(name)
            assert body is not None
            assert body.read() == sources[name].read_bytes()


def test_every_wheel_runs_on_amazon_linux_2023(archive: Path) -> None:
    manifest = artifacts.read_python_env_manifest(archive)
    wheels = [Wheel.parse(name) for name in manifest["wheels"]]

    assert {wheel.name: wheel.version for wheel in wheels} == PINS
    assert manifest["pins"] == PINS
    assert (manifest["python"], manifest["interpreter"], manifest["glibc"]) == (
        "3.11",
        "/usr/bin/python3.11",
        "2.34",
    )
    native = [wheel for wheel in wheels if wheel.glibc() is not None]
    assert {wheel.name for wheel in native} >= {"pydantic-core", "pyarrow", "numpy", "pandas"}
    for wheel in native:
        assert "-cp311-cp311-" in wheel.filename, wheel.filename
        glibc = wheel.glibc()
        assert glibc is not None
        assert glibc <= (2, 34), wheel.filename
        assert all(platform.endswith("_x86_64") for platform in wheel.platforms)


def _run_in(environment: Path, code: str, python_path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [str(environment / "bin" / "python"), "-s", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(python_path), "HOME": str(environment)},
        cwd=environment.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
import boto3, numpy, pandas, pyarrow, pydantic
import lethe_jobs, lethe_shared
modules = [
    name
    for package in (lethe_shared, lethe_jobs)
    for _, name, _ in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
]
files = {name: importlib.import_module(name).__file__ for name in modules}
files.update({m.__name__: m.__file__ for m in (boto3, numpy, pandas, pyarrow, pydantic)})
print(json.dumps({
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": list(sys.version_info[:2]),
    "files": files,
    "versions": {
        "boto3": boto3.__version__, "numpy": numpy.__version__, "pandas": pandas.__version__,
        "pyarrow": pyarrow.__version__, "pydantic": pydantic.VERSION,
    },
}))
"""


def test_the_unpacked_environment_imports_every_lethe_module(
    unpacked: Path, spark_python_path: Path
) -> None:
    seen = _run_in(unpacked, IMPORT_EVERYTHING, spark_python_path)

    assert seen["version"] == [3, 11]
    assert Path(seen["prefix"]) == unpacked  # the venv, not this machine's site-packages
    assert Path(seen["base_prefix"]) != unpacked
    assert seen["versions"] == {name: PINS[name] for name in seen["versions"]}
    site_packages = unpacked / SITE_PACKAGES
    for module, file in seen["files"].items():
        assert Path(file).is_relative_to(site_packages), (module, file)
    assert {
        "lethe_jobs.erase_rows",
        "lethe_jobs.ingest_core",
        "lethe_shared.index.arrow_entries",
    } <= set(seen["files"])


@pytest.fixture
def bucket(aws: None) -> str:
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="lethe-test-artifacts")
    return "lethe-test-artifacts"


def test_upload_from_the_build_sends_every_artifact(build: Path, bucket: str) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")

    uris = artifacts.upload_artifacts(s3, bucket, artifacts.built_spark_artifacts(REPO_ROOT, build))

    names = artifacts.artifact_names(REPO_ROOT, python_env=True)
    assert uris == [f"s3://{bucket}/spark_jobs/{name}" for name in names]
    head = s3.head_object(Bucket=bucket, Key="spark_jobs/pyspark_env.tar.gz")
    assert head["ContentLength"] == (build / "pyspark_env.tar.gz").stat().st_size
    assert head["ContentType"] == "application/gzip"
