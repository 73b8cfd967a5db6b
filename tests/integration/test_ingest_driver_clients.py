"""The ingest driver's clients hold a connection for each of its concurrent calls: HEAD_THREADS
look-ups at once through one client discard no connection (botocore's default pool of 10 did,
one new connection per call above it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from lethe_jobs.ingest_core import _parallel
from lethe_jobs.ingest_planning import DRIVER_CLIENT_CONFIG, HEAD_THREADS

pytestmark = pytest.mark.integration

POOL_FULL = "Connection pool is full"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _client(endpoint: str, **kwargs: Any) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        **kwargs,
    )


def _discarded(client: Any, caplog: pytest.LogCaptureFixture) -> int:
    """HEAD_THREADS x 4 HEADs, HEAD_THREADS at a time (the driver's `_parallel`); how many
    connections the client's pool discarded."""
    client.create_bucket(Bucket="raw")
    keys = [f"k{i}" for i in range(HEAD_THREADS * 4)]
    for key in keys:
        client.put_object(Bucket="raw", Key=key, Body=b"x")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        heads = _parallel(lambda key: client.head_object(Bucket="raw", Key=key), keys)
    assert [h["ContentLength"] for h in heads] == [1] * len(keys)
    return sum(POOL_FULL in r.getMessage() for r in caplog.records)


def test_the_driver_s_clients_keep_a_connection_per_concurrent_call(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert DRIVER_CLIENT_CONFIG.max_pool_connections >= HEAD_THREADS
    assert _discarded(_client(endpoint, config=DRIVER_CLIENT_CONFIG), caplog) == 0


def test_a_default_client_discards_connections_under_the_same_calls(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The control: what the driver did before (this test fails if botocore's default changes,
    and the one above would then prove nothing)."""
    assert _discarded(_client(endpoint), caplog) > 0
