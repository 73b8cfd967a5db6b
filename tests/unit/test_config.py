from __future__ import annotations

import os

import pytest
from pydantic import Field

from lethe_shared.config import Settings, apply_endpoint_override, load_settings
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


def test_an_empty_endpoint_override_changes_nothing() -> None:
    environ = {"LETHE_ENDPOINT_URL": ""}
    assert apply_endpoint_override(environ) is None
    assert environ == {"LETHE_ENDPOINT_URL": ""}
    assert apply_endpoint_override({}) is None


def test_an_endpoint_override_becomes_botocores_endpoint() -> None:
    environ = {"LETHE_ENDPOINT_URL": " http://127.0.0.1:4566 "}
    assert apply_endpoint_override(environ) == "http://127.0.0.1:4566"
    assert environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4566"


def test_an_endpoint_already_set_wins_over_the_override() -> None:
    environ = {"LETHE_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ENDPOINT_URL": "http://a:2"}
    assert apply_endpoint_override(environ) == "http://a:2"
    assert environ["AWS_ENDPOINT_URL"] == "http://a:2"


def test_an_override_that_is_no_url_fails_at_cold_start() -> None:
    with pytest.raises(ConfigurationError, match=r"LETHE_ENDPOINT_URL: '127\.0\.0\.1:4566' is not"):
        apply_endpoint_override({"LETHE_ENDPOINT_URL": "127.0.0.1:4566"})


def test_reading_the_process_environment_applies_the_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environ = {"LETHE_ENDPOINT_URL": "http://127.0.0.1:4566", "TABLE": "t", "DAYS": "1"}
    monkeypatch.setattr(os, "environ", environ)  # a copy: nothing leaks into other tests
    load_settings(ExampleSettings)
    assert environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4566"
