"""statemachines/ingestion.asl.json with SparkEngine=GLUE: a batch ingested on the Glue path.

The states after the Spark task are shared by both engines; their failure paths are tested with
EMR Serverless in test_ingestion_state_machine.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sfn.conftest import (
    Cloud,
    check_ingests_a_batch_and_announces_each_version,
    start_cloud,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="GLUE") as started:
        yield started


def test_ingests_a_batch_and_announces_each_version(cloud: Cloud) -> None:
    check_ingests_a_batch_and_announces_each_version(cloud)
