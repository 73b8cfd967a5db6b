"""What a local Spark run no longer pays for again and again: the fixed costs of the processes
the local cloud keeps or starts for it (docs/LOCAL_CLOUD.md, "Warm drivers"). Nothing here
changes what a job does or what AWS runs; each is applied only in the local cloud's own Spark
processes (the warm driver, `spark_driver.py`, and the Python worker daemon of its runs,
`spark_worker_daemon.py`).

- `share_botocore_models()`: every botocore session of this process reads its service models
  (JSON files of a few MB: S3's is the largest) into a loader cache of its own, and the warm
  driver starts a session per run (it drops boto3's default session after each), each worker a
  session of its own. Loaders made for the same data path now share one cache, so a model is
  parsed once per process. The models are botocore's own files, read-only; a loader still
  looks up what it has not cached in its own search paths.
- `shorten_accumulator_poll()`: PySpark's accumulator server handles the JVM's connection in a
  loop that polls for shutdown once a second, and `SparkContext.stop()` waits for that loop:
  about 0.8 s of every run's stop. The loop polls every `ACCUMULATOR_POLL_SECONDS` instead.
- `preload_worker_modules()`: the libraries every job's Python worker imports (numpy, pandas,
  pyarrow, boto3 and botocore, pydantic: about 2.4 s of the 2.9 s a worker spent importing an
  erase job's code), imported once in the worker daemon before it forks the workers; and the
  service models of the services the jobs call, loaded into the shared cache. The job's own
  code (its script and py-files) is never preloaded: every run imports its own.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select as _select
from collections.abc import Callable
from typing import Any

ACCUMULATOR_POLL_SECONDS = 0.05
# Third-party modules a job's Python workers import (by the job's own imports); same venv, same
# pins, whatever the run. Not the job's own packages.
WORKER_MODULES = (
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "boto3",
    "boto3.dynamodb.conditions",
    "botocore.session",
    "pydantic",
    "pyspark.sql",
    "pyspark.sql.functions",
)
# Services the jobs' workers call (the clients and the DynamoDB resource).
WORKER_SERVICES = ("s3", "dynamodb", "sts", "secretsmanager", "kms")

_shared_caches: dict[tuple[str | None, str], dict[Any, Any]] = {}


def share_botocore_models() -> None:
    """Loaders made for the same data path (and home) share one model cache from now on."""
    import botocore.loaders  # noqa: PLC0415
    import botocore.session  # noqa: PLC0415

    original: Callable[..., Any] = botocore.loaders.create_loader
    if getattr(botocore.session.create_loader, "lethe_shared_cache", False):
        return

    def create_loader(search_path_string: str | None = None) -> Any:
        loader = original(search_path_string)
        key = (search_path_string, os.path.expanduser("~"))
        loader._cache = _shared_caches.setdefault(key, loader._cache)
        return loader

    create_loader.lethe_shared_cache = True  # type: ignore[attr-defined]
    botocore.session.create_loader = create_loader  # the name Session's data loader calls


class _ShortSelect:
    """The `select` module as pyspark.accumulators sees it: timeouts capped."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_select, name)

    @staticmethod
    def select(rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
        if timeout is None or timeout > ACCUMULATOR_POLL_SECONDS:
            timeout = ACCUMULATOR_POLL_SECONDS
        return _select.select(rlist, wlist, xlist, timeout)


def shorten_accumulator_poll() -> None:
    """The accumulator server's handler polls for shutdown every ACCUMULATOR_POLL_SECONDS."""
    from pyspark import accumulators  # noqa: PLC0415

    setattr(accumulators, "select", _ShortSelect())  # noqa: B010 - not an exported name


def preload_worker_modules(
    modules: tuple[str, ...] = WORKER_MODULES, services: tuple[str, ...] = WORKER_SERVICES
) -> list[str]:
    """Import `modules` and load `services`' models into the shared cache; the names that
    failed (a module this venv lacks: the worker imports it itself, as before)."""
    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    share_botocore_models()
    try:
        import boto3  # noqa: PLC0415

        # explicit keys and region: nothing is resolved (no credential chain, no metadata
        # service); only the models are read
        session: Any = boto3.session.Session(
            aws_access_key_id="preload",
            aws_secret_access_key="preload",  # noqa: S106 - no secret: nothing is signed
            region_name="us-east-1",
        )
        for service in services:
            try:
                session.client(service, endpoint_url="http://127.0.0.1:9")
            except Exception:
                failed.append(service)
        with contextlib.suppress(Exception):
            session.resource("dynamodb", endpoint_url="http://127.0.0.1:9")
    except ImportError:
        failed.append("boto3")
    return failed
