"""moto's models are tracked weakly in the local cloud, so that what AWS would free is freed.

Where: ``moto/core/common_models.py``, ``BaseModel.__new__`` (moto 5.2.5), with the
``instances_tracked`` list ``moto/core/base_backend.py``'s ``InstanceTrackerMeta`` gives every
model class. Why: ``BaseModel.__new__`` appends every instance of every moto model to its
class's list and nothing ever removes it before a backend reset, which the local cloud never
does. So every object moto creates stays alive for the process's life, including its
temporaries: ``S3Backend.list_object_versions`` deep-copies every version of every key of the
bucket on each call (value buffer included), and every copy stayed. Under ``make soak`` a
heaptrack profile of the local cloud (``LETHE_LOCAL_HEAPTRACK``, docs/RELIABILITY.md) found
601 MB of S3 key buffers alive while S3 held 2.6 MB of objects, and 434 MB of their attribute
dicts, within the ingestion phase of a 400-object soak; a bucket of 1,000 keys listed 100 times
kept 101,000 keys alive.

What: ``BaseModel.__new__`` records each instance in a ``WeakInstances`` of its class instead
of a list: it holds weak references, so an instance the backends no longer reference is freed
as it would be without tracking, and iterating it yields the instances still alive, which is
all its two readers need (``S3Backend.reset`` disposes the keys still alive, the moto server's
``/moto-api/data.json`` lists the live models). An instance that cannot be weakly referenced
is not tracked (none of moto 5.2.5's models is such).

`patch_version_listing` (same cause, its CPU side): a version listing under a prefix copies
only the keys under it (its docstring).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from lethe.localcloud.common import PINNED_MOTO_VERSION, CloudError

_LOCK = threading.Lock()


class WeakInstances:
    """`instances_tracked` of one model class: its live instances, weakly held."""

    def __init__(self, initial: list[Any] | None = None) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}
        for instance in initial or []:
            self.append(instance)

    def append(self, instance: Any) -> None:
        key = id(instance)
        refs = self._refs
        try:
            # the callback runs when the instance is freed, before its id can be reused
            refs[key] = weakref.ref(instance, lambda _ref: refs.pop(key, None))
        except TypeError:
            return

    def __iter__(self) -> Iterator[Any]:
        alive = (ref() for ref in list(self._refs.values()))
        return iter([instance for instance in alive if instance is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


_CONVERTED: list[type] = []  # classes whose list became a WeakInstances (undone by restore)


def _tracked(cls: type) -> WeakInstances:
    found = cls.__dict__.get("instances_tracked")
    if isinstance(found, WeakInstances):
        return found
    with _LOCK:
        found = cls.__dict__.get("instances_tracked")
        if not isinstance(found, WeakInstances):
            found = WeakInstances(list(found or []))
            cls.instances_tracked = found  # type: ignore[attr-defined]
            _CONVERTED.append(cls)
        return found


def patch_weak_instances() -> Callable[[], None]:
    """Apply the patch (module docstring); returns the undo callable."""
    import moto  # noqa: PLC0415 - heavy
    from moto.core.common_models import BaseModel  # noqa: PLC0415 - heavy

    if moto.__version__ != PINNED_MOTO_VERSION or "__new__" not in BaseModel.__dict__:
        raise CloudError(
            f"lethe.localcloud.moto_instances patches moto {PINNED_MOTO_VERSION} (found "
            f"{moto.__version__}): re-check BaseModel.__new__ before changing the pin"
        )
    original = BaseModel.__dict__["__new__"]

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        instance = super(BaseModel, cls).__new__(cls)  # type: ignore[misc]
        _tracked(cls).append(instance)
        return instance

    BaseModel.__new__ = staticmethod(__new__)  # type: ignore[method-assign]

    def restore() -> None:
        BaseModel.__new__ = original  # type: ignore[method-assign]
        with _LOCK:  # moto's strong lists again, holding what is still alive
            for converted in _CONVERTED:
                converted.instances_tracked = list(_tracked_now(converted))  # type: ignore[attr-defined]
            _CONVERTED.clear()

    return restore


def _tracked_now(cls: type) -> list[Any]:
    found = cls.__dict__.get("instances_tracked")
    return list(found) if found is not None else []


class _PrefixKeys:
    """A bucket's key store as `list_object_versions` reads it: only the keys under `prefix`."""

    def __init__(self, keys: Any, prefix: str) -> None:
        self._keys, self._prefix = keys, prefix

    def iterlists(self) -> Iterator[tuple[str, Any]]:
        return ((k, v) for k, v in self._keys.iterlists() if k.startswith(self._prefix))


class _PrefixBucket:
    def __init__(self, bucket: Any, prefix: str) -> None:
        self.keys = _PrefixKeys(bucket.keys, prefix)


class _PrefixBackend:
    """What `S3Backend.list_object_versions` asks of its backend: `get_bucket`."""

    def __init__(self, backend: Any, prefix: str) -> None:
        self._backend, self._prefix = backend, prefix

    def get_bucket(self, bucket_name: str) -> _PrefixBucket:
        return _PrefixBucket(self._backend.get_bucket(bucket_name), self._prefix)


def patch_version_listing() -> Callable[[], None]:
    """`S3Backend.list_object_versions` deep-copies every version of every key of the bucket
    (bodies included) and only then keeps those under the prefix: O(bucket) per call, and a
    key's version listing (`lethe_shared.aws.s3.ObjectStore.versions_of`, `Prefix=<key>`) is
    called per object by ingestion, erasure and the index. Without a key marker the versions
    outside the prefix are skipped before anything else reads them (moto 5.2.5's loop
    `continue`s on them first), so the listing copies only the keys under the prefix then; a
    page with a key marker (its pagination looks at every name) runs moto's code as it is."""
    from moto.s3.models import S3Backend  # noqa: PLC0415 - heavy

    original = S3Backend.list_object_versions

    def list_object_versions(self: Any, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        names = ("delimiter", "key_marker", "max_keys", "prefix", "version_id_marker")
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        prefix = given.get("prefix") or ""
        if given.get("key_marker") is not None or not prefix:
            return original(self, bucket_name, *args, **kwargs)
        view: Any = _PrefixBackend(self, prefix)  # what the method asks of its backend
        return original(view, bucket_name, *args, **kwargs)

    S3Backend.list_object_versions = list_object_versions  # type: ignore[method-assign]

    def restore() -> None:
        S3Backend.list_object_versions = original  # type: ignore[method-assign]

    return restore


def patch_moto_memory() -> Callable[[], None]:
    """Both patches of this module; returns the undo callable. Applied by the local cloud's
    own process (`python -m lethe.localcloud serve`: `lethe local up`, the e2e tier, `make
    demo`, `make soak`), never in a process shared with pytest: there, the keys weak tracking
    frees run moto's `FakeKey.__del__` (a ResourceWarning) on whatever thread collects them,
    and the integration tier's in-process moto servers hung on the logging module's lock
    with it (2026-11-28, not understood further)."""
    untracked = patch_weak_instances()
    unlisted = patch_version_listing()

    def restore() -> None:
        unlisted()
        untracked()

    return restore
