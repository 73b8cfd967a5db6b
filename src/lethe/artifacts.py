"""Spark job artifacts: package them and upload them to the artifacts bucket.

One code path for a real deployment (`lethe artifacts upload --bucket B`) and the local cloud
(`lethe local up` uploads after provisioning). The template's Glue jobs and EMR Serverless job
runs point at:

- ``s3://<ArtifactsBucket>/spark_jobs/<job>.py``: each entry script of ``spark_jobs/``, as is;
- ``s3://<ArtifactsBucket>/spark_jobs/lethe_shared.zip``: ``layers/shared/lethe_shared`` and, when
  it exists, ``spark_jobs/lethe_jobs``, as importable packages at the root of the zip, for
  ``--py-files`` (EMR Serverless) / ``--extra-py-files`` (Glue).

The zip is byte-for-byte reproducible (sorted entries, fixed timestamps, no bytecode), so an
unchanged build uploads identical objects.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from lethe_shared.s3 import s3_url

S3_PREFIX: Final = "spark_jobs/"
DEPENDENCIES_ZIP: Final = "lethe_shared.zip"
_PACKAGES: Final = (Path("layers/shared/lethe_shared"), Path("spark_jobs/lethe_jobs"))
_ZIP_TIME: Final = (2020, 1, 1, 0, 0, 0)


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
    packages = [repo_root / p for p in _PACKAGES if (repo_root / p / "__init__.py").is_file()]
    if not packages:
        raise FileNotFoundError(f"no lethe_shared package under {repo_root / _PACKAGES[0]}")
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


def build_spark_artifacts(repo_root: Path, out_dir: Path) -> list[Path]:
    """Entry scripts (spark_jobs/*.py, copied as is) and the dependencies zip, in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts: list[Path] = []
    for script in sorted((repo_root / "spark_jobs").glob("*.py")):
        if script.name == "__init__.py":
            continue
        target = out_dir / script.name
        target.write_bytes(script.read_bytes())
        artifacts.append(target)
    artifacts.append(build_dependencies_zip(repo_root, out_dir / DEPENDENCIES_ZIP))
    return artifacts


def upload_spark_artifacts(
    s3_client: Any, bucket: str, repo_root: Path, prefix: str = S3_PREFIX
) -> list[str]:
    """Build and upload the artifacts under `prefix` in `bucket`; returns their s3:// URIs."""
    uris: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lethe-artifacts-") as tmp:
        for path in build_spark_artifacts(repo_root, Path(tmp)):
            key = f"{prefix}{path.name}"
            content_type = "application/zip" if path.suffix == ".zip" else "text/x-python"
            with path.open("rb") as body:
                s3_client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)
            uris.append(s3_url(bucket, key))
    return uris
