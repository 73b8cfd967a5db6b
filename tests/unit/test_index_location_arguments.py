"""Every Spark run a state machine starts with the subject index's location gets all of it.

The jobs open the index through `lethe_shared.index.opening` (`--index-store` segments by default,
with `--index-bucket` and `--manifest-table`; `--index-table` for the DynamoDB store kept for the
migration). A definition that passes only `--index-table` starts a job that refuses its arguments
at the first run on AWS: the retention machine did, until this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

LOCATION = ("--index-table", "--index-store", "--index-bucket", "--manifest-table")
DEFINITIONS = sorted((REPO_ROOT / "statemachines").glob("*.asl.json"))


def test_there_are_definitions_that_pass_the_index_location() -> None:
    assert sum("--index-table" in p.read_text() for p in DEFINITIONS) >= 4


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_a_definition_passes_every_part_of_the_index_location_or_none(path: Path) -> None:
    text = path.read_text()
    counts = {
        argument: text.count(f"'{argument}'") + text.count(f'"{argument}"') for argument in LOCATION
    }
    assert len(set(counts.values())) == 1, f"{path.name}: {counts}"
