"""The index backfill on the Glue branch (SparkEngine=GLUE). The workflow's other paths
(objects mode, retries, notification, reconcile) are engine-independent after the Spark task and
are tested with EMR Serverless in test_index_workflows.py, whose legacy-lake fixtures this module
reuses with a Glue cloud (a process holds one local cloud at a time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.test_index_workflows import (  # noqa: F401 - module fixtures bound to this cloud
    DATASET,
    EXPECTED,
    Workflows,
    backfilled,
    flows,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory, SparkEngine="GLUE") as started:
        yield started


def test_backfill_runs_the_index_job_on_glue(
    flows: Workflows,  # noqa: F811 - the imported fixture
    backfilled: dict[str, Any],  # noqa: F811 - the imported fixture
) -> None:
    execution = backfilled["execution"]

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"])["batches"] == 4
    runs = flows.cloud.client("glue").get_job_runs(JobName="lethe-local-index")["JobRuns"]
    assert len(runs) == 4
    assert {r["JobRunState"] for r in runs} == {"SUCCEEDED"}
    assert flows.entries() == flows.hashed(EXPECTED)
