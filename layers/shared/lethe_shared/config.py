"""Settings models read from the environment once, at cold start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from lethe_shared.errors import ConfigurationError


class Settings(BaseModel):
    """Base for a component's settings: fields are aliased to environment variable names."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


SettingsT = TypeVar("SettingsT", bound=Settings)


def _comma_separated(value: Any) -> Any:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value


# A list given as one comma-separated variable (a CommaDelimitedList parameter, !Join-ed).
CommaList = Annotated[list[str], BeforeValidator(_comma_separated)]


def load_settings(model: type[SettingsT], environ: Mapping[str, str] | None = None) -> SettingsT:
    """Validate `environ` (default: the process environment) into `model`.

    Raises ConfigurationError naming every missing or invalid variable, so a bad deployment fails
    at cold start with one clear log line instead of deep inside a request.
    """
    source = dict(os.environ if environ is None else environ)
    try:
        return model.model_validate(source)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigurationError(f"{model.__name__}: " + "; ".join(problems)) from exc
