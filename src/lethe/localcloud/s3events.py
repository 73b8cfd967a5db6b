"""AWS-shaped S3 -> EventBridge events ("Object Created", "Object Deleted").

moto's own EventBridge events differ from AWS where Lethe depends on them
(moto/s3/notifications.py ``_send_event_bridge_message``, moto/s3/models.py ``delete_object``):
``eTag`` instead of ``etag``, ``reason: ObjectCreated`` instead of the API name, a constant
sequencer, no ``deletion-type``, nothing at all for a delete that creates a delete marker, the
wrong version for a permanent delete of one version, an extra PutObject event before every
CompleteMultipartUpload, and delivery inline in the S3 request. `install(dispatch)` replaces them:

1. ``moto.s3.notifications._send_event_bridge_message`` becomes a function that emits only
   "Object Created", built here, for PutObject, POST Object, CopyObject and
   CompleteMultipartUpload (the PutObject that moto's multipart completion performs internally
   is skipped). moto's other notification paths (SQS/SNS/Lambda notification configurations)
   are untouched.
2. ``moto.s3.models.S3Backend.delete_object`` is wrapped to emit "Object Deleted" after a
   successful delete: "Permanently Deleted" for an unversioned object or a specific version (the
   version deleted), "Delete Marker Created" (with the new marker's version id) for a delete
   without version id on a versioned bucket. ``DeleteObjects`` calls ``delete_object`` per key,
   so it is covered by the same wrapper (wrapping both would emit twice).

Events are emitted only for buckets whose notification configuration enables EventBridge
(``bucket.notification_configuration.event_bridge is not None``). Not emitted (Lethe does not
use them): Object Restore, Object Tags Added/Deleted, Object ACL Updated, Object Storage Class
Changed, lifecycle expirations. The object key is reported as stored (not URL-encoded).

The event is built synchronously inside the S3 call (so sequencers follow the order of the
operations) and handed to ``dispatch(event)`` (`EventDispatcher.dispatch`), which delivers it
asynchronously: the S3 request returns before any target runs, as on AWS.

Sequencer: a process-wide, monotonically increasing counter seeded from the clock (so it also
grows across restarts of the local cloud), rendered as 18 uppercase hex digits: a later event on
the same key always compares greater, as a string and as a number.
"""

from __future__ import annotations

import random
import string
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moto.s3 import models as s3_models
from moto.s3 import notifications

Dispatch = Callable[[dict[str, Any]], None]

SEQUENCER_DIGITS = 18
SOURCE_IP = "127.0.0.1"

_CREATED_REASONS = {
    "s3:ObjectCreated:Put": "PutObject",
    "s3:ObjectCreated:Post": "POST Object",
    "s3:ObjectCreated:Copy": "CopyObject",
    "s3:ObjectCreated:CompleteMultipartUpload": "CompleteMultipartUpload",
}
PERMANENTLY_DELETED = "Permanently Deleted"
DELETE_MARKER_CREATED = "Delete Marker Created"


class _Sequencer:
    lock = threading.Lock()
    last = 0


def next_sequencer() -> str:
    """The next sequencer: strictly greater than every one before it in this process."""
    with _Sequencer.lock:
        _Sequencer.last = max(_Sequencer.last + 1, time.time_ns() // 1000)
        return f"{_Sequencer.last:0{SEQUENCER_DIGITS}X}"


def _request_id() -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "".join(random.choices(alphabet, k=16))  # noqa: S311 - an id, not a secret


def _envelope(
    detail_type: str, account_id: str, bucket: Any, detail: dict[str, Any]
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "aws.s3",
        "account": account_id,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": bucket.region_name,
        "resources": [f"arn:aws:s3:::{bucket.name}"],
        "detail": detail,
    }


def object_created_event(account_id: str, bucket: Any, key: Any, reason: str) -> dict[str, Any]:
    """An AWS "Object Created" event for moto's FakeKey `key` in FakeBucket `bucket`."""
    obj: dict[str, Any] = {
        "key": key.name,
        "size": key.size,
        "etag": key.etag.replace('"', ""),
    }
    if bucket.is_versioned:
        obj["version-id"] = key.version_id
    obj["sequencer"] = next_sequencer()
    detail = {
        "version": "0",
        "bucket": {"name": bucket.name},
        "object": obj,
        "request-id": _request_id(),
        "requester": account_id,
        "source-ip-address": SOURCE_IP,
        "reason": reason,
    }
    return _envelope("Object Created", account_id, bucket, detail)


def object_deleted_event(
    account_id: str, bucket: Any, key_name: str, version_id: str | None, deletion_type: str
) -> dict[str, Any]:
    """An AWS "Object Deleted" event (reason DeleteObject)."""
    obj: dict[str, Any] = {"key": key_name}
    if version_id is not None:
        obj["version-id"] = version_id
    obj["sequencer"] = next_sequencer()
    detail = {
        "version": "0",
        "bucket": {"name": bucket.name},
        "object": obj,
        "request-id": _request_id(),
        "requester": account_id,
        "source-ip-address": SOURCE_IP,
        "reason": "DeleteObject",
        "deletion-type": deletion_type,
    }
    return _envelope("Object Deleted", account_id, bucket, detail)


def eventbridge_enabled(bucket: Any) -> bool:
    config = getattr(bucket, "notification_configuration", None)
    return config is not None and getattr(config, "event_bridge", None) is not None


# -- moto hook ---------------------------------------------------------------------------------


class _Hook:
    """The installed dispatch function and moto's originals (one install per process)."""

    lock = threading.Lock()
    dispatch: Dispatch | None = None
    original_send: Callable[..., None] | None = None
    original_delete: Callable[..., tuple[bool, dict[str, Any]]] | None = None


def _send_event_bridge_message(account_id: str, bucket: Any, event_name: Any, key: Any) -> None:
    """Replacement of moto.s3.notifications._send_event_bridge_message (same signature)."""
    dispatch = _Hook.dispatch
    reason = _CREATED_REASONS.get(str(getattr(event_name, "value", event_name)))
    if dispatch is None or reason is None or key is None:
        return  # deletes come from the delete_object wrapper; other event types are not emitted
    if reason == "PutObject" and getattr(key, "multipart", None) is not None:
        return  # moto's CompleteMultipartUpload puts the object first: not an event of its own
    dispatch(object_created_event(account_id, bucket, key, reason))


def _deleted_event(
    backend: Any,
    bucket: Any,
    *,
    key_name: str,
    version_id: str | None,
    existing_versions: list[str],
    meta: dict[str, Any],
) -> dict[str, Any] | None:
    """The Object Deleted event for a successful delete_object call, if it deleted anything."""
    account_id = backend.account_id
    if not bucket.is_versioned:
        if not existing_versions:
            return None
        return object_deleted_event(account_id, bucket, key_name, None, PERMANENTLY_DELETED)
    if version_id is None:
        if meta.get("delete-marker") != "true" or not meta.get("version-id"):
            return None
        marker = str(meta["version-id"])
        return object_deleted_event(account_id, bucket, key_name, marker, DELETE_MARKER_CREATED)
    if str(version_id) not in existing_versions:
        return None
    return object_deleted_event(account_id, bucket, key_name, str(version_id), PERMANENTLY_DELETED)


def _delete_object(
    backend: Any,
    bucket_name: str,
    key_name: str,
    version_id: str | None = None,
    bypass: bool = False,
) -> tuple[bool, dict[str, Any]]:
    """Wrapper of moto.s3.models.S3Backend.delete_object (same signature) that emits events."""
    original, dispatch = _Hook.original_delete, _Hook.dispatch
    assert original is not None
    try:
        bucket = backend.get_bucket(bucket_name)
    except Exception:
        return original(backend, bucket_name, key_name, version_id, bypass)
    existing = [str(k.version_id) for k in bucket.keys.getlist(key_name, [])]
    success, meta = original(backend, bucket_name, key_name, version_id, bypass)
    if success and dispatch is not None and eventbridge_enabled(bucket):
        event = _deleted_event(
            backend,
            bucket,
            key_name=key_name,
            version_id=version_id,
            existing_versions=existing,
            meta=meta,
        )
        if event is not None:
            dispatch(event)
    return success, meta


def install(dispatch: Dispatch) -> Callable[[], None]:
    """Replace moto's S3 EventBridge events with AWS-shaped ones; returns the undo callable.

    Patches ``moto.s3.notifications._send_event_bridge_message`` and
    ``moto.s3.models.S3Backend.delete_object`` (see the module docstring). Raises RuntimeError
    if already installed.
    """
    with _Hook.lock:
        if _Hook.dispatch is not None:
            raise RuntimeError("lethe.localcloud.s3events is already installed")
        original_send = notifications._send_event_bridge_message
        original_delete = s3_models.S3Backend.delete_object
        _Hook.dispatch = dispatch
        _Hook.original_send, _Hook.original_delete = original_send, original_delete
        notifications._send_event_bridge_message = _send_event_bridge_message
        s3_models.S3Backend.delete_object = _delete_object  # type: ignore[method-assign,assignment]

    def uninstall() -> None:
        with _Hook.lock:
            if _Hook.dispatch is not dispatch:
                return
            notifications._send_event_bridge_message = original_send
            s3_models.S3Backend.delete_object = original_delete  # type: ignore[method-assign]
            _Hook.dispatch = _Hook.original_send = _Hook.original_delete = None

    return uninstall
