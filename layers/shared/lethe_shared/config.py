"""Settings models read from the environment once, at cold start."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ConfigDict, ValidationError

from lethe_shared.errors import ConfigurationError
from lethe_shared.models import Model


class Settings(Model):
    """Base for a component's settings: fields are aliased to environment variable names."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


SettingsT = TypeVar("SettingsT", bound=Settings)


def _comma_separated(value: Any) -> Any:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value


# A list given as one comma-separated variable (a CommaDelimitedList parameter, !Join-ed).
CommaList = Annotated[list[str], BeforeValidator(_comma_separated)]


#: Declared empty for every function (template.yaml, Globals): a deployed function never sets it.
#: `sam local invoke` passes only variables the template declares, so this is how a locally
#: invoked function reaches the local cloud (`lethe local sam-env`, events/README.md).
ENDPOINT_OVERRIDE = "LETHE_ENDPOINT_URL"


def apply_endpoint_override(environ: MutableMapping[str, str]) -> str | None:
    """A non-empty LETHE_ENDPOINT_URL becomes botocore's AWS_ENDPOINT_URL (every client then
    calls that endpoint), unless AWS_ENDPOINT_URL is set already. Empty or unset: nothing.
    Returns the endpoint in force. Raises ConfigurationError for a value that is no http URL."""
    value = environ.get(ENDPOINT_OVERRIDE, "").strip()
    if not value:
        return environ.get("AWS_ENDPOINT_URL") or None
    if not value.startswith(("http://", "https://")):
        raise ConfigurationError(f"{ENDPOINT_OVERRIDE}: {value!r} is not an http(s) URL")
    return environ.setdefault("AWS_ENDPOINT_URL", value)


def load_settings(model: type[SettingsT], environ: Mapping[str, str] | None = None) -> SettingsT:
    """Validate `environ` (default: the process environment) into `model`.

    Reading the process environment first applies LETHE_ENDPOINT_URL (apply_endpoint_override):
    handlers read their settings before they create a client.

    Raises ConfigurationError naming every missing or invalid variable, so a bad deployment fails
    at cold start with one clear log line instead of deep inside a request.
    """
    if environ is None:
        apply_endpoint_override(os.environ)
    source = dict(os.environ if environ is None else environ)
    try:
        return model.model_validate(source)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigurationError(f"{model.__name__}: " + "; ".join(problems)) from exc
