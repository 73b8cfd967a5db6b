"""The erasure workflow's ingestion watermark as deployed: statemachines/erasure.asl.json takes
the catalog's delay it allows for (`ingestion_settle_seconds`) from the DefinitionSubstitution
`IngestionSettleSeconds`, which template.yaml sets to the batch window + 30 s (a JSONata sum).
Only a local cloud started for tests overrides it (`LETHE_LOCAL_DEFINITION_SUBSTITUTIONS`,
lethe.localcloud.provision.stepfunctions; tests/sfn/conftest.py), so the deployed value is
checked here, on the definition with the template's substitutions applied."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lethe.localcloud.provision import ProvisionError
from lethe.localcloud.provision.stepfunctions import (
    OVERRIDES_ENV,
    overridden,
    substitute_definition,
    substitution_overrides,
)
from lethe.localcloud.template import translated_template
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def substitutions() -> dict[str, Any]:
    machine = translated_template()["Resources"]["ErasureStateMachine"]["Properties"]
    return dict(machine["DefinitionSubstitutions"])


def test_the_template_allows_the_batch_window_and_30_seconds(
    substitutions: dict[str, Any],
) -> None:
    assert substitutions["IngestionSettleSeconds"] == {
        "Fn::Sub": "${IngestionBatchWindowSeconds} + 30"
    }


def test_the_deployed_definition_settles_after_the_window_and_30_seconds(
    substitutions: dict[str, Any],
) -> None:
    text = (REPO_ROOT / "statemachines" / "erasure.asl.json").read_text()
    values = {
        **{name: f"x-{name}" for name in substitutions},
        "IngestionWaitMinutes": 30,
        "IngestionSettleSeconds": "60 + 30",  # the Fn::Sub above with the window's default
    }

    states = json.loads(substitute_definition(text, values))["States"]

    assigned = states["Read Input"]["Assign"]
    assert assigned["ingestion_settle_seconds"] == "{% 60 + 30 %}"
    assert assigned["ingestion_max_wait_seconds"] == "{% $round(30 * 60) %}"
    poll = states["Wait For Ingestion"]
    assert (poll["Type"], poll["Seconds"]) == ("Wait", 30)


def test_overrides_replace_only_declared_substitutions() -> None:
    declared = {"IngestionSettleSeconds": "60 + 30", "RawBucket": "raw"}

    assert overridden("M", declared, {"IngestionSettleSeconds": 0, "Other": 2}) == {
        "IngestionSettleSeconds": 0,
        "RawBucket": "raw",
    }
    assert overridden("M", declared, {}) == declared


def test_overrides_come_from_the_environment_as_a_json_object() -> None:
    assert substitution_overrides({}) == {}
    assert substitution_overrides({OVERRIDES_ENV: " "}) == {}
    assert substitution_overrides({OVERRIDES_ENV: '{"IngestionSettleSeconds": 0}'}) == {
        "IngestionSettleSeconds": 0
    }
    with pytest.raises(ProvisionError, match="not JSON"):
        substitution_overrides({OVERRIDES_ENV: "IngestionSettleSeconds=0"})
    with pytest.raises(ProvisionError, match="JSON object"):
        substitution_overrides({OVERRIDES_ENV: "[0]"})
