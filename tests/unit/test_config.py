from __future__ import annotations

import pytest
from pydantic import Field

from lethe_shared.config import Settings, load_settings
from lethe_shared.errors import ConfigurationError

pytestmark = pytest.mark.lambda_runtime


class ExampleSettings(Settings):
    table: str = Field(alias="TABLE", min_length=1)
    days: int = Field(alias="DAYS", ge=1)


def test_valid_environment() -> None:
    settings = load_settings(ExampleSettings, {"TABLE": "t", "DAYS": "3", "OTHER": "x"})

    assert (settings.table, settings.days) == ("t", 3)


def test_every_problem_is_named() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(ExampleSettings, {"DAYS": "0"})

    assert str(caught.value) == (
        "ExampleSettings: TABLE: Field required; DAYS: Input should be greater than or equal to 1"
    )
