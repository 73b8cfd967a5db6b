"""Which datasets of a request's scope its report cannot trust the index of: a pending
re-index (lethe_shared.erasure.scope's watermark and report scope, module docstring there).

A dataset's re-index is pending when its matching generation moved past the one its index was
built for (lethe_shared.datasets.matching), or, given the current subject hash key's
fingerprint, when its index was built with another key than the request's ids were hashed with
(the registry's `indexed_key_fingerprint`, the request's `key_fingerprint`; "" is an
unknown key, which counts as another), or when the request's key is not the current one (the
erase job hashes rows with the current key). Each is named `reindex_pending`, by the dataset's
raw prefix, with what changed (fingerprints only, never a key) and what the operator does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from lethe_shared.aws.s3 import s3_url
from lethe_shared.datasets.registry import Registrations
from lethe_shared.erasure.report import NotSearched
from lethe_shared.erasure.requests import ErasureRequest
from lethe_shared.models import Model


class PendingReindex(Model):
    """A dataset whose index was built for an older matching generation than its current one,
    or with another subject hash key than the request's (`key_changed`: then the request's and
    the index's key fingerprints, "" for an unknown one, and the current key's when the
    request's is no longer current; never a key)."""

    model_config = ConfigDict(frozen=True)

    matching_generation: int = Field(ge=1)
    indexed_generation: int = Field(ge=0)
    key_fingerprint: str | None = None  # the request's key, when the key differs (additive)
    indexed_key_fingerprint: str | None = None  # the index's key, when the key differs
    current_key_fingerprint: str | None = None  # the current key, when not the request's

    @property
    def key_changed(self) -> bool:
        return self.key_fingerprint is not None

    @model_serializer(mode="wrap")
    def _without_unset_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The key fields only when the key differs: a generation alone reads as before."""
        dumped = dict(handler(self))
        return {k: v for k, v in dumped.items() if v is not None}


def pending_reindexes(
    registry: Registrations,
    dataset_ids: Iterable[str],
    key_fingerprint: str | None = None,
    current_key: str | None = None,
) -> dict[str, PendingReindex]:
    """The datasets among `dataset_ids` whose re-index is pending, by id (sorted): their
    matching generation moved, or (when `key_fingerprint` is given: the key the request's ids
    were hashed with, "" when unknown) their index was built with another or an unknown key, or
    the request's key is not `current_key` (the key the erase job will hash rows with), which
    makes every dataset of the scope unsearchable for it."""
    stale = (
        key_fingerprint is not None and current_key is not None and key_fingerprint != current_key
    )
    found: dict[str, PendingReindex] = {}
    for dataset_id in dict.fromkeys(dataset_ids):
        registration = registry.registration(dataset_id)
        if registration is None:
            continue  # unregistered: nothing to wait for
        key_changed = key_fingerprint is not None and (
            stale or registration.key_reindex_pending(key_fingerprint)
        )
        if not (registration.reindex_pending or key_changed):
            continue
        found[dataset_id] = PendingReindex(
            matching_generation=registration.matching_generation,
            indexed_generation=registration.indexed_generation,
            key_fingerprint=key_fingerprint if key_changed else None,
            indexed_key_fingerprint=registration.indexed_key_fingerprint if key_changed else None,
            current_key_fingerprint=current_key if key_changed and stale else None,
        )
    return dict(sorted(found.items()))


def request_keys(record: ErasureRequest, current_key: str | None) -> tuple[str | None, str | None]:
    """What the scope compares each dataset's index key with: the key the request's ids were
    hashed with ("" when the record does not say: unknown) and the current key, or (None, None)
    without a `current_key` (no key check)."""
    if current_key is None:
        return None, None
    return record.key_fingerprint, current_key


def reindex_gaps(
    registry: Registrations,
    dataset_ids: Iterable[str],
    raw_bucket: str,
    key_fingerprint: str | None = None,
    current_key: str | None = None,
) -> list[NotSearched]:
    """A `reindex_pending` gap per dataset among `dataset_ids` whose re-index is pending now
    (with `key_fingerprint`, the request's key, and `current_key`: also one indexed with another
    key, and every one when the request's key is not current), named by its
    raw prefix (the dataset's place: every object of it, raw and lake, was found through an
    index of the old definition or key), with its generations and what the operator does."""
    return [
        NotSearched(
            object_url=s3_url(raw_bucket, f"{dataset_id}/"),
            dataset_id=dataset_id,
            reason="reindex_pending",
            detail=_reindex_detail(dataset_id, pending),
        )
        for dataset_id, pending in pending_reindexes(
            registry, dataset_ids, key_fingerprint, current_key
        ).items()
    ]


def _fingerprint_text(fingerprint: str | None) -> str:
    return f"key {fingerprint}" if fingerprint else "an unknown key (recorded by an older Lethe)"


def _reindex_detail(dataset_id: str, pending: PendingReindex) -> str:
    """What a `reindex_pending` gap says: which change is not re-indexed yet, and what to do
    (fingerprints only, never a key)."""
    parts = []
    if pending.indexed_generation < pending.matching_generation:
        parts.append(
            f"the dataset's matching definition changed (matching generation "
            f"{pending.matching_generation}) and its subject index was last built for "
            f"generation {pending.indexed_generation}: objects of the dataset that hold the "
            "subjects under the current definition only were not found"
        )
    if pending.current_key_fingerprint is not None:
        parts.append(
            "the subject hash key changed after the request's subject ids were hashed (with "
            f"{_fingerprint_text(pending.key_fingerprint)}; the current key is key "
            f"{pending.current_key_fingerprint}): they match nothing indexed or erased with the "
            "current key. File the request again"
        )
        return "; ".join(parts)
    if pending.key_changed:
        parts.append(
            "the subject hash key changed: the request's subject ids were hashed with "
            f"{_fingerprint_text(pending.key_fingerprint)} and the dataset's subject index was "
            f"last built with {_fingerprint_text(pending.indexed_key_fingerprint)}, so no entry "
            "of it could be found. Re-index the dataset with the current key (`lethe datasets "
            f"reindex {dataset_id}`, or `--all` after a rotation; `lethe datasets get "
            f"{dataset_id}` says when it is done)"
        )
        return "; ".join(parts) + ", then file the request again"
    return (
        "; ".join(parts)
        + f". Let its re-index succeed (`lethe datasets get {dataset_id}` says when; a failed "
        f"one: `lethe datasets reindex {dataset_id}`), then file the request again"
    )
