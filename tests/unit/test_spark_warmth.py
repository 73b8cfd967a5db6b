"""lethe.localcloud.spark_warmth: the local Spark processes' fixed costs paid once (shared
botocore model caches, a short accumulator poll, the worker daemon's preloaded libraries)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import boto3
import botocore.session
import pytest

from lethe.localcloud import spark_warmth

pytestmark = pytest.mark.unit


@pytest.fixture
def restored_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    # share_botocore_models replaces the name botocore's sessions call; undone after the test
    monkeypatch.setattr(botocore.session, "create_loader", botocore.session.create_loader)
    monkeypatch.setattr(spark_warmth, "_shared_caches", {})


def _loader(session: boto3.session.Session) -> object:
    return session._session.get_component("data_loader")


@pytest.mark.usefixtures("restored_loader")
def test_sessions_share_one_model_cache_once_shared() -> None:
    before = (boto3.session.Session(), boto3.session.Session())
    assert _loader(before[0])._cache is not _loader(before[1])._cache  # type: ignore[attr-defined]

    spark_warmth.share_botocore_models()
    spark_warmth.share_botocore_models()  # a second call changes nothing
    first = boto3.session.Session(region_name="us-east-1")
    first.client("s3", aws_access_key_id="a", aws_secret_access_key="b")
    second = boto3.session.Session(region_name="us-east-1")

    cache = _loader(second)._cache  # type: ignore[attr-defined]
    assert cache is _loader(first)._cache  # type: ignore[attr-defined]
    assert any(key[:2] == ("load_service_model", "s3") for key in cache)  # parsed once
    # a client of the second session works from the shared model
    client = second.client("s3", aws_access_key_id="a", aws_secret_access_key="b")
    assert client.meta.service_model.service_name == "s3"
    assert "PutObject" in client.meta.service_model.operation_names


def test_accumulator_poll_is_capped_and_the_rest_of_select_passes_through() -> None:
    short = spark_warmth._ShortSelect()
    read_end, write_end = os.pipe()
    try:
        started = time.monotonic()
        assert short.select([read_end], [], [], 1) == ([], [], [])
        assert time.monotonic() - started < 0.5  # not the handler's 1 s
        os.write(write_end, b"x")
        assert short.select([read_end], [], [], 1)[0] == [read_end]
    finally:
        os.close(read_end)
        os.close(write_end)
    import select  # noqa: PLC0415

    assert short.error is select.error  # everything else is the select module's


def test_shorten_accumulator_poll_patches_pyspark_accumulators_only() -> None:
    from pyspark import accumulators  # noqa: PLC0415

    saved = getattr(accumulators, "select")  # noqa: B009 - not an exported name
    try:
        spark_warmth.shorten_accumulator_poll()
        assert isinstance(getattr(accumulators, "select"), spark_warmth._ShortSelect)  # noqa: B009
        import select  # noqa: PLC0415

        assert select.select is not spark_warmth._ShortSelect.select
    finally:
        setattr(accumulators, "select", saved)  # noqa: B010


@pytest.mark.usefixtures("restored_loader")
def test_preload_imports_the_libraries_and_names_what_it_could_not() -> None:
    failed = spark_warmth.preload_worker_modules(
        ("json", "no_such_module_for_lethe"), ("s3", "no-such-service")
    )

    assert failed == ["no_such_module_for_lethe", "no-such-service"]
    cache = spark_warmth._shared_caches
    assert any(key[:2] == ("load_service_model", "s3") for c in cache.values() for key in c)


def test_the_worker_daemon_module_preloads_before_pyspark_daemon_runs() -> None:
    """The daemon module imports nothing of a job: only the libraries, then PySpark's daemon
    (its `manager`), which is what `python -m pyspark.daemon` runs."""
    probe = (
        "import runpy, sys, pyspark.daemon as d\n"
        "d.manager = lambda: print(sorted(m for m in ('pandas', 'pyarrow', 'boto3', "
        "'lethe_jobs', 'lethe_shared') if m in sys.modules))\n"
        "runpy.run_module('lethe.localcloud.spark_worker_daemon', run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout

    assert out.strip() == "['boto3', 'pandas', 'pyarrow']"
