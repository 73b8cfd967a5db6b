"""Handler wiring: a function's settings and AWS clients, built once per execution environment.

Every handler in functions/ declares its settings model (a lethe_shared.config.Settings, fields
aliased to its environment variables) and a builder that turns those settings and an `Aws` (the
boto3 clients and DynamoDB tables it asks for) into what its domain functions take:

    def _build(settings: MySettings, aws: Aws) -> _Dependencies:
        return _Dependencies(requests=DynamoErasureRequests(aws.table(settings.requests_table)))

    _dependencies = wiring(MySettings, _build)

`_dependencies()` builds them at the first call, i.e. the first invocation, never at import: a
bad deployment fails there with one ConfigurationError naming every missing or invalid variable
(load_settings), and a cold start's import stays the libraries' import. Later calls return the
same object (the execution environment's clients are reused across invocations);
`_dependencies.cache_clear()` forgets it, for tests that change the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Generic, TypeVar

from lethe_shared.config import Settings, load_settings

SettingsT = TypeVar("SettingsT", bound=Settings)
DepsT = TypeVar("DepsT")


class Aws:
    """The boto3 clients and DynamoDB tables of one handler: one client per service and one
    DynamoDB resource, created when first asked for and shared by everything built from it."""

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._dynamodb: Any = None

    def client(self, service: str) -> Any:
        """The boto3 client of `service` ("s3", "stepfunctions", ...)."""
        if service not in self._clients:
            import boto3  # noqa: PLC0415  (the Lambda runtime's; imported once settings are read)

            self._clients[service] = boto3.client(service)  # type: ignore[call-overload]
        return self._clients[service]

    def table(self, name: str) -> Any:
        """The boto3 DynamoDB Table resource named `name`."""
        if self._dynamodb is None:
            import boto3  # noqa: PLC0415

            self._dynamodb = boto3.resource("dynamodb")
        return self._dynamodb.Table(name)


class Wiring(Generic[SettingsT, DepsT]):
    """A handler's dependencies, built once from its settings: call it for them."""

    def __init__(
        self, settings_model: type[SettingsT], build: Callable[[SettingsT, Aws], DepsT]
    ) -> None:
        self.settings_model = settings_model
        self.build = build
        self._built = cache(self._build)

    def _build(self) -> DepsT:
        settings = load_settings(self.settings_model)  # before any client: LETHE_ENDPOINT_URL
        return self.build(settings, Aws())

    def __call__(self) -> DepsT:
        return self._built()

    def cache_clear(self) -> None:
        """Forget the built dependencies: the next call reads the environment again."""
        self._built.cache_clear()


def wiring(
    settings_model: type[SettingsT], build: Callable[[SettingsT, Aws], DepsT]
) -> Wiring[SettingsT, DepsT]:
    """The cached dependencies of a handler whose settings are `settings_model`, made by
    `build(settings, aws)` at the first call."""
    return Wiring(settings_model, build)
