"""Spark job artifacts: build them and upload them to the artifacts bucket (docs/SPARK.md).

One code path for a real deployment (`lethe artifacts build` then `lethe artifacts upload`,
`make deploy-artifacts`) and the local cloud (`lethe local up` uploads after provisioning). The
template's Glue jobs and the state machines' EMR Serverless job runs read, under
``s3://<ArtifactsBucket>/spark_jobs/``:

- ``<job>.py``: each entry script of ``spark_jobs/``, as is;
- ``lethe_shared.zip``: ``layers/shared/lethe_shared`` and ``spark_jobs/lethe_jobs`` as
  importable packages at the root of the zip, for ``--py-files`` (EMR Serverless) and
  ``--extra-py-files`` (Glue);
- ``requirements.txt``: ``spark_jobs/requirements.txt`` as is, the one place the jobs' Python
  dependencies are pinned. Glue 5.0 installs it (``--additional-python-modules`` pointing at it
  with ``--python-modules-installer-option -r``);
- ``pyspark_env.tar.gz``: the Python environment of the EMR Serverless runs (``spark.archives``
  ``...#environment``), built from the same requirements file: the manylinux wheels of those
  pins for CPython 3.11 on Amazon Linux 2023 (glibc 2.34) and the target architecture, installed
  into a virtualenv layout whose interpreter is EMR's own ``/usr/bin/python3.11``, with
  ``lethe_shared`` and ``lethe_jobs`` in its site-packages. The layout is what venv-pack writes
  for a venv built on AL2023 (``bin/python*`` links, ``pyvenv.cfg``, ``lib/python3.11/
  site-packages``), assembled here because a venv cannot be created for another platform.

Everything is byte-for-byte reproducible from the same inputs (sorted entries, fixed timestamps
and owners, no bytecode), so an unchanged build uploads identical objects. Building the Python
environment needs the wheels: from the package index (pip's configuration) or from a folder
(``wheels_dir``, offline).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lethe_shared.aws.s3 import s3_url

S3_PREFIX: Final = "spark_jobs/"
DEPENDENCIES_ZIP: Final = "lethe_shared.zip"
REQUIREMENTS: Final = "requirements.txt"
PYTHON_ENV_ARCHIVE: Final = "pyspark_env.tar.gz"
PYTHON_ENV_MANIFEST: Final = "lethe-python-env.json"
REQUIREMENTS_SOURCE: Final = Path("spark_jobs/requirements.txt")
_PACKAGES: Final = (Path("layers/shared/lethe_shared"), Path("spark_jobs/lethe_jobs"))
_ZIP_TIME: Final = (2020, 1, 1, 0, 0, 0)
_TAR_TIME: Final = 1577836800  # 2020-01-01T00:00:00Z, the zip's timestamp

# The Python of EMR Serverless 7.x (docs/SPARK.md): release emr-7.1.0 and later ship Python 3.9
# and 3.11 on Amazon Linux 2023, whose glibc is 2.34. The archive carries no interpreter.
EMR_PYTHON_VERSION: Final = "3.11"
EMR_PYTHON: Final = "/usr/bin/python3.11"
AL2023_GLIBC: Final = (2, 34)
# wheel architecture -> the EMR Serverless application's Architecture
ARCHITECTURES: Final = {"x86_64": "X86_64", "aarch64": "ARM64"}

_CONTENT_TYPES: Final = {
    ".py": "text/x-python",
    ".zip": "application/zip",
    ".txt": "text/plain",
    ".gz": "application/gzip",
}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
_LEGACY_MANYLINUX: Final = {
    "manylinux1": (2, 5),
    "manylinux2010": (2, 12),
    "manylinux2014": (2, 17),
}


_PIP: Final = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")


class ArtifactError(Exception):
    """The artifacts cannot be built or uploaded as asked: one line that says why."""


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them (Typing_Extensions is typing-extensions)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One ``name==version`` line of a requirements file."""

    name: str
    version: str

    @property
    def key(self) -> str:
        return canonical_name(self.name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def read_pins(path: Path) -> tuple[Pin, ...]:
    """The pins of a requirements file: every requirement exactly pinned (``name==version``,
    comments allowed), each distribution once. Anything else is an ArtifactError: the
    environment must be the same on every engine and every build."""
    pins: list[Pin] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line.replace(" ", ""))
        if match is None:
            raise ArtifactError(f"{path}:{number}: not an exact pin (name==version): {line!r}")
        pin = Pin(match.group(1), match.group(2))
        if pin.key in seen:
            raise ArtifactError(
                f"{path}:{number}: {pin.name} is pinned twice (first on line {seen[pin.key]})"
            )
        seen[pin.key] = number
        pins.append(pin)
    if not pins:
        raise ArtifactError(f"{path}: no pins")
    return tuple(pins)


# ---------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class PythonEnvPlan:
    """What goes into the EMR Serverless Python environment, and how pip gets it.

    The pins are read from ``spark_jobs/requirements.txt`` and nowhere else; the build installs
    exactly them (a dependency the file does not pin fails the build)."""

    requirements: Path
    pins: tuple[Pin, ...]
    packages: tuple[Path, ...]  # lethe_shared, lethe_jobs: copied into site-packages
    arch: str = "x86_64"
    python_version: str = EMR_PYTHON_VERSION
    interpreter: str = EMR_PYTHON
    glibc: tuple[int, int] = AL2023_GLIBC

    @property
    def platforms(self) -> tuple[str, ...]:
        """The wheel platform tags that run on the target's glibc, newest first. pip does not
        widen ``manylinux_2_34`` to older tags by itself, so every one is listed."""
        major, newest = self.glibc
        tags = [f"manylinux_{major}_{minor}_{self.arch}" for minor in range(newest, 16, -1)]
        return (*tags, f"manylinux2014_{self.arch}")

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    @property
    def site_packages(self) -> str:
        return f"lib/python{self.python_version}/site-packages"

    def _target_options(self) -> list[str]:
        options = ["--only-binary=:all:", "--implementation", "cp"]
        options += ["--python-version", self.python_version, "--abi", self.abi]
        for platform in self.platforms:
            options += ["--platform", platform]
        return options

    def pip_download(self, dest: Path, wheels_dir: Path | None = None) -> list[str]:
        """pip download of the pins (and, to check that nothing is missing, their
        dependencies) for the target, from the index or only from `wheels_dir`."""
        source = ["--no-index", "--find-links", str(wheels_dir)] if wheels_dir else []
        return [
            *_PIP,
            "download",
            *source,
            *self._target_options(),
            "--dest",
            str(dest),
            "--requirement",
            str(self.requirements),
        ]

    def pip_install(self, wheels: Path, site_packages: Path) -> list[str]:
        """pip install of exactly the downloaded pins into `site_packages`, no bytecode."""
        return [
            *_PIP,
            "install",
            "--no-index",
            "--find-links",
            str(wheels),
            "--no-deps",
            "--no-compile",
            *self._target_options(),
            "--target",
            str(site_packages),
            "--requirement",
            str(self.requirements),
        ]


def plan_python_env(repo_root: Path, arch: str = "x86_64") -> PythonEnvPlan:
    """The archive plan for `arch` (``x86_64`` or ``aarch64``) from this repository."""
    if arch not in ARCHITECTURES:
        raise ArtifactError(f"unknown architecture {arch!r} (use {', '.join(ARCHITECTURES)})")
    requirements = repo_root / REQUIREMENTS_SOURCE
    return PythonEnvPlan(
        requirements=requirements,
        pins=read_pins(requirements),
        packages=_lethe_packages(repo_root),
        arch=arch,
    )


def _lethe_packages(repo_root: Path) -> tuple[Path, ...]:
    packages = tuple(repo_root / p for p in _PACKAGES if (repo_root / p / "__init__.py").is_file())
    if not packages:
        raise ArtifactError(f"no lethe_shared package under {repo_root / _PACKAGES[0]}")
    return packages


# --------------------------------------------------------------------------------- the build


def _package_files(package: Path) -> Iterator[Path]:
    for path in sorted(package.rglob("*")):
        if (
            path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix not in {".pyc", ".pyo"}
        ):
            yield path


def build_dependencies_zip(repo_root: Path, target: Path) -> Path:
    """lethe_shared (and lethe_jobs when present) as a reproducible zip at `target`."""
    packages = _lethe_packages(repo_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            for path in _package_files(package):
                name = path.relative_to(package.parent).as_posix()
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, path.read_bytes())
    return target


@dataclass(frozen=True)
class Wheel:
    """A wheel file name, parsed (PEP 427)."""

    filename: str
    name: str
    version: str
    platforms: tuple[str, ...]

    @classmethod
    def parse(cls, filename: str) -> Wheel:
        parts = filename.removesuffix(".whl").split("-")
        if not filename.endswith(".whl") or len(parts) not in (5, 6):
            raise ArtifactError(f"not a wheel file name: {filename}")
        return cls(filename, canonical_name(parts[0]), parts[1], tuple(parts[-1].split(".")))

    def glibc(self) -> tuple[int, int] | None:
        """The oldest glibc this wheel's platform tags ask for (None: a pure wheel)."""
        needed: list[tuple[int, int]] = []
        for platform in self.platforms:
            match = _MANYLINUX.match(platform)
            if match:
                needed.append((int(match.group(1)), int(match.group(2))))
            elif platform.split("_", 1)[0] in _LEGACY_MANYLINUX:
                needed.append(_LEGACY_MANYLINUX[platform.split("_", 1)[0]])
            elif platform != "any":
                raise ArtifactError(f"{self.filename}: not a manylinux or pure wheel")
        return min(needed) if needed else None


def check_wheels(plan: PythonEnvPlan, wheels: Iterable[Wheel]) -> None:
    """Exactly the pinned distributions, at their pinned versions, each runnable on the target
    glibc and architecture; raise ArtifactError naming every problem otherwise."""
    pinned = {pin.key: pin.version for pin in plan.pins}
    found = {wheel.name: wheel for wheel in wheels}
    problems = [
        f"{name} {wheel.version} is needed but spark_jobs/requirements.txt does not pin it"
        for name, wheel in sorted(found.items())
        if name not in pinned
    ]
    problems += [f"no wheel for {name}=={pinned[name]}" for name in sorted(pinned.keys() - found)]
    for name, wheel in sorted(found.items()):
        if name in pinned and wheel.version != pinned[name]:
            problems.append(f"{wheel.filename}: pinned {pinned[name]}")
        needed = wheel.glibc()
        if needed is not None and needed > plan.glibc:
            problems.append(f"{wheel.filename} needs glibc {needed[0]}.{needed[1]}")
        if needed is not None and not all(p.endswith(plan.arch) for p in wheel.platforms):
            problems.append(f"{wheel.filename} is not for {plan.arch}")
    if problems:
        raise ArtifactError("the Python environment is not the pinned one: " + "; ".join(problems))


def _run_pip(command: Sequence[str]) -> None:
    result = subprocess.run(  # noqa: S603 - this interpreter's own pip
        list(command), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise ArtifactError(f"pip {command[len(_PIP)]} failed (exit {result.returncode}):\n{tail}")


def build_python_env(plan: PythonEnvPlan, target: Path, wheels_dir: Path | None = None) -> Path:
    """Build the EMR Serverless Python environment archive described by `plan` at `target`.

    Layout (the archive's root is the venv; Spark unpacks it as ``./environment``)::

        lethe-python-env.json         what was built: pins, wheels, target, interpreter
        pyvenv.cfg                    home = /usr/bin, include-system-site-packages = false
        bin/python3.11 -> /usr/bin/python3.11, bin/python3 -> python3.11, bin/python -> ...
        lib/python3.11/site-packages/ the pinned distributions, lethe_shared, lethe_jobs
    """
    with tempfile.TemporaryDirectory(prefix="lethe-python-env-") as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        _run_pip(plan.pip_download(wheels, wheels_dir))
        downloaded = [Wheel.parse(p.name) for p in sorted(wheels.glob("*.whl"))]
        check_wheels(plan, downloaded)
        root = work / "env"
        site_packages = root / plan.site_packages
        _run_pip(plan.pip_install(wheels, site_packages))
        shutil.rmtree(site_packages / "bin", ignore_errors=True)  # console scripts: local shebangs
        for package in plan.packages:
            for path in _package_files(package):
                copy = site_packages / path.relative_to(package.parent)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
        _write_venv_files(plan, root)
        (root / PYTHON_ENV_MANIFEST).write_text(
            json.dumps(python_env_manifest(plan, downloaded), indent=2, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        write_reproducible_tar_gz(root, target, first=(PYTHON_ENV_MANIFEST,))
    return target


def _write_venv_files(plan: PythonEnvPlan, root: Path) -> None:
    """pyvenv.cfg and the interpreter links, as `python3.11 -m venv` writes them on AL2023."""
    home = os.path.dirname(plan.interpreter)
    (root / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = false\nversion = {plan.python_version}\n",
        encoding="utf-8",
    )
    bin_dir = root / "bin"
    bin_dir.mkdir()
    versioned = f"python{plan.python_version}"
    (bin_dir / versioned).symlink_to(plan.interpreter)
    for alias in ("python3", "python"):
        (bin_dir / alias).symlink_to(versioned)


def python_env_manifest(plan: PythonEnvPlan, wheels: Sequence[Wheel]) -> dict[str, Any]:
    return {
        "format": 1,
        "python": plan.python_version,
        "interpreter": plan.interpreter,
        "architecture": plan.arch,
        "emr_serverless_architecture": ARCHITECTURES[plan.arch],
        "glibc": f"{plan.glibc[0]}.{plan.glibc[1]}",
        "requirements_sha256": hashlib.sha256(plan.requirements.read_bytes()).hexdigest(),
        "pins": {pin.key: pin.version for pin in plan.pins},
        "wheels": [wheel.filename for wheel in wheels],
        "lethe_packages": [package.name for package in plan.packages],
    }


def read_python_env_manifest(archive: Path) -> dict[str, Any]:
    """The manifest of a built archive (its first member)."""
    with tarfile.open(archive, "r:gz") as tar:
        member = tar.next()
        if member is None or member.name != PYTHON_ENV_MANIFEST:
            raise ArtifactError(f"{archive}: no {PYTHON_ENV_MANIFEST} first: not a Lethe build")
        extracted = tar.extractfile(member)
        assert extracted is not None
        manifest: dict[str, Any] = json.loads(extracted.read())
        return manifest


def write_reproducible_tar_gz(root: Path, target: Path, first: Sequence[str] = ()) -> Path:
    """`root`'s tree as a .tar.gz whose bytes depend only on the tree: entries sorted (`first`
    ahead), fixed time, owner root, modes 0644/0755, symlinks kept, no gzip name or time."""
    paths = sorted(
        (path for path in root.rglob("*") if path.relative_to(root).as_posix() not in first),
        key=lambda path: path.relative_to(root).as_posix(),
    )
    ordered = [root / name for name in first] + paths
    with (
        target.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in ordered:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.mtime = _TAR_TIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.issym():
                info.mode = 0o777
                tar.addfile(info)
            elif info.isdir():
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.mode = 0o755 if info.mode & 0o111 else 0o644
                with path.open("rb") as body:
                    tar.addfile(info, body)
    return target


# ------------------------------------------------------------------------ all of the artifacts


def _scripts(repo_root: Path) -> list[Path]:
    return [p for p in sorted((repo_root / "spark_jobs").glob("*.py")) if p.name != "__init__.py"]


def artifact_names(repo_root: Path, *, python_env: bool) -> list[str]:
    """The file names a build of this repository writes (and an upload sends), in order."""
    names = [script.name for script in _scripts(repo_root)] + [DEPENDENCIES_ZIP, REQUIREMENTS]
    return [*names, PYTHON_ENV_ARCHIVE] if python_env else names


def build_spark_artifacts(
    repo_root: Path,
    out_dir: Path,
    *,
    python_env: bool = False,
    arch: str = "x86_64",
    wheels_dir: Path | None = None,
) -> list[Path]:
    """Entry scripts (copied as is), the dependencies zip, the requirements file and, with
    `python_env`, the EMR Serverless Python environment archive, in out_dir."""
    plan = plan_python_env(repo_root, arch) if python_env else None  # fail before writing
    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts: list[Path] = []
    for script in _scripts(repo_root):
        target = out_dir / script.name
        target.write_bytes(script.read_bytes())
        artifacts.append(target)
    artifacts.append(build_dependencies_zip(repo_root, out_dir / DEPENDENCIES_ZIP))
    read_pins(repo_root / REQUIREMENTS_SOURCE)  # what Glue installs must be valid too
    requirements = out_dir / REQUIREMENTS
    requirements.write_bytes((repo_root / REQUIREMENTS_SOURCE).read_bytes())
    artifacts.append(requirements)
    if plan is not None:
        artifacts.append(build_python_env(plan, out_dir / PYTHON_ENV_ARCHIVE, wheels_dir))
    return artifacts


def built_spark_artifacts(
    repo_root: Path, build_dir: Path, *, python_env: bool = True
) -> list[Path]:
    """The artifacts of an earlier `build_spark_artifacts` into `build_dir`, checked against this
    repository: every expected file present, the requirements file and the archive's pins
    current (an out-of-date build is refused rather than uploaded). Other files are ignored."""
    expected = artifact_names(repo_root, python_env=python_env)
    missing = [name for name in expected if not (build_dir / name).is_file()]
    if missing:
        raise ArtifactError(
            f"{build_dir} lacks {', '.join(missing)}: run `lethe artifacts build --out {build_dir}`"
        )
    current = (repo_root / REQUIREMENTS_SOURCE).read_bytes()
    if (build_dir / REQUIREMENTS).read_bytes() != current:
        raise ArtifactError(f"{build_dir / REQUIREMENTS} differs from {REQUIREMENTS_SOURCE}")
    if not python_env:
        return [build_dir / name for name in expected]
    manifest = read_python_env_manifest(build_dir / PYTHON_ENV_ARCHIVE)
    if manifest.get("requirements_sha256") != hashlib.sha256(current).hexdigest():
        raise ArtifactError(
            f"{build_dir / PYTHON_ENV_ARCHIVE} was built from other pins: build it again"
        )
    return [build_dir / name for name in expected]


def upload_artifacts(
    s3_client: Any, bucket: str, artifacts: Iterable[Path], prefix: str = S3_PREFIX
) -> list[str]:
    """Upload each file as ``<prefix><file name>``; returns their s3:// URIs."""
    uris: list[str] = []
    for path in artifacts:
        key = f"{prefix}{path.name}"
        content_type = _CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        # upload_file: multipart for the large archive, one PUT for the small files
        s3_client.upload_file(str(path), bucket, key, ExtraArgs={"ContentType": content_type})
        uris.append(s3_url(bucket, key))
    return uris


def write_python_env_stand_in(target: Path) -> Path:
    """The local cloud's ``pyspark_env.tar.gz``: only a manifest saying it is a stand-in.

    The local cloud's EMR Serverless runs use the local venv, not the archive, but the state
    machines' pre-flight (``Check Spark Artifacts``) asks for the archive as on AWS, so the local
    cloud uploads this in its place. Its manifest has no ``requirements_sha256``, so
    `built_spark_artifacts` refuses it: it never reaches a real deployment."""
    with tempfile.TemporaryDirectory(prefix="lethe-python-env-stand-in-") as tmp:
        root = Path(tmp)
        manifest = {"format": 1, "local_stand_in": True, "note": "local cloud only: no Python"}
        (root / PYTHON_ENV_MANIFEST).write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        return write_reproducible_tar_gz(root, target, first=(PYTHON_ENV_MANIFEST,))


def upload_spark_artifacts(
    s3_client: Any,
    bucket: str,
    repo_root: Path,
    prefix: str = S3_PREFIX,
    *,
    python_env: bool = False,
    arch: str = "x86_64",
    wheels_dir: Path | None = None,
    python_env_stand_in: bool = False,
) -> list[str]:
    """Build the artifacts in a temporary folder and upload them under `prefix` in `bucket`;
    returns their s3:// URIs. The local cloud leaves `python_env` off (its Spark runs use the
    local venv, docs/LOCAL_CLOUD.md, and the archive needs the wheels of another platform) and
    asks for `python_env_stand_in` instead (`write_python_env_stand_in`)."""
    with tempfile.TemporaryDirectory(prefix="lethe-artifacts-") as tmp:
        built = build_spark_artifacts(
            repo_root, Path(tmp), python_env=python_env, arch=arch, wheels_dir=wheels_dir
        )
        if python_env_stand_in and not python_env:
            built.append(write_python_env_stand_in(Path(tmp) / PYTHON_ENV_ARCHIVE))
        return upload_artifacts(s3_client, bucket, built, prefix)
