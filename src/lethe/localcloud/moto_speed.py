"""What the local cloud's moto server spent CPU on per request that no answer depends on
(moto 5.2.5; docs/LOCAL_CLOUD.md, "Other adjustments to moto"). Measured with py-spy on the
`lethe.localcloud serve` process of a full soak beside `make test` (load about 13; the
process at about 60 % of one core; its `moto.log` lines are `cloud._failed_requests`):

- `DomainDispatcherApplication.get_backend_for_host`: every request lists moto's package
  folder (`backends.list_of_moto_modules`: `os.listdir` and an `isdir` per entry) and then
  tries each backend's URL patterns, under the dispatcher's one lock. The folder does not
  change while the process runs, and the answer depends on the host only: both are computed
  once (`patch_dispatch`).
- `Queue.messages` (SQS): every `SendMessage` reads `queue.attributes`, which counts the
  queue's visible messages, reading the clock twice per message: O(messages) clock reads per
  send, quadratic over a burst of uploads. The clock is read once per count
  (`patch_sqs_counts`); the same messages count, as before.
- DynamoDB's responses (a third of the process while erasures ran): moto's serializer walks
  each response along its botocore shape and, for every member of every attribute value
  (`AttributeValue`: ten members, S to BOOL), asks an attribute picker for the value, which
  tries each alias provider and the snake_case form of the name. For an attribute value that is
  a plain dict holding only member names (what moto's DynamoDB handler returns), the picker's
  first match is the member's own name, so the value is read from the dict directly
  (`patch_dynamodb_serializer`); everything else, the members' own serialization included, is
  moto's code.

None changes an answer: the same backend serves the same host, the same messages are counted,
the same bytes answer a DynamoDB call (tests/integration/test_localcloud_moto_speed.py compares
them). Applied by `cloud.configure_moto` (every process that runs the local cloud's moto).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def patch_dispatch() -> Callable[[], None]:
    """Cache moto's module list and the backend of each host; returns the undo callable."""
    from moto import backends  # noqa: PLC0415 - heavy
    from moto.moto_server import werkzeug_app  # noqa: PLC0415 - heavy

    listed = backends.list_of_moto_modules
    modules = tuple(listed())
    backends.list_of_moto_modules = lambda: modules

    dispatcher = werkzeug_app.DomainDispatcherApplication
    original = dispatcher.get_backend_for_host

    @functools.wraps(original)
    def get_backend_for_host(self: Any, host: str | None) -> Any:
        cache: dict[str | None, Any] = self.__dict__.setdefault("_lethe_backends", {})
        if host not in cache:
            cache[host] = original(self, host)
        return cache[host]

    dispatcher.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]

    def undo() -> None:
        dispatcher.get_backend_for_host = original  # type: ignore[method-assign]
        backends.list_of_moto_modules = listed

    return undo


def patch_sqs_counts() -> Callable[[], None]:
    """`Queue.messages` (visible, not delayed) with one clock read; returns the undo callable."""
    from moto.core.utils import unix_time_millis  # noqa: PLC0415 - heavy
    from moto.sqs.models import Queue  # noqa: PLC0415 - heavy

    original = Queue.messages

    def messages(self: Any) -> list[Any]:
        now = unix_time_millis()
        # Message.visible: now > visible_at; Message.delayed: now < delayed_until
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    Queue.messages = property(messages)  # type: ignore[assignment,method-assign]

    def undo() -> None:
        Queue.messages = original  # type: ignore[method-assign]

    return undo


def patch_dynamodb_serializer() -> Callable[[], None]:
    """DynamoDB's JSON serializer reads a plain attribute value's members directly (module
    docstring); returns the undo callable."""
    from moto.core import serialize  # noqa: PLC0415 - heavy

    specific = serialize.SERVICE_SPECIFIC_SERIALIZERS
    saved = specific.get("dynamodb")
    base = serialize.get_serializer_class("dynamodb", "json")

    class DirectAttributeValues(base):  # type: ignore[valid-type,misc]
        def _serialize_type_structure(
            self, serialized: Any, value: Any, shape: Any, key: str
        ) -> None:
            if (
                shape.name != "AttributeValue"
                or type(value) is not dict
                or not value.keys() <= shape.members.keys()
            ):
                super()._serialize_type_structure(serialized, value, shape, key)
                return
            wrapper: Any = self.MAP_TYPE() if key else serialized
            for member_key, member_shape in shape.members.items():
                member_value = value.get(member_key)
                if member_value is not None:
                    self._serialize(wrapper, member_value, member_shape, member_key)
            if key:
                self._default_serialize(serialized, wrapper, shape, key)

    specific["dynamodb"] = {**(saved or {}), "json": DirectAttributeValues}

    def undo() -> None:
        if saved is None:
            specific.pop("dynamodb", None)
        else:
            specific["dynamodb"] = saved

    return undo
