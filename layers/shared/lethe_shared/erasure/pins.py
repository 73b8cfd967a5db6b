"""Pinned matching: the erase job matches rows only with what the frozen report was built with.

The index, the report and the approver's numbers all come from rows matched with one dataset
definition (its *matching fingerprint*, lethe_shared.datasets.matching) and one subject hash key
(its *key fingerprint*, lethe_shared.subject_hashing.keys). The erase job loads the definition
and the key as they are when it runs. If a PUT changed a dataset's subject columns or types, or
the key was rotated, after the report was frozen, the job would match with another rule: it
would find nothing (recorded as "unchanged"), purge the older versions anyway, and the index
update would remove the subject's entries, so nothing could find the data again.

So the report pins what it was built with (`pin_manifest`, at freezing time, workflow.
build_report):

- `Manifest.key_fingerprint`: the fingerprint of the key the request's ids were hashed with (the
  request records it at intake, `ErasureRequest.key_fingerprint`);
- `Manifest.dataset_pins`: for every dataset looked up in or holding an object of the report,
  the registry's matching generation and fingerprint at that moment (a consistent
  `registration()` read);
- each `SubjectRows` carries the matching and key fingerprints its index entry was computed
  with (`IndexEntry.matching_fingerprint`, `.key_fingerprint`; "" for an entry written before
  pins).

The erase job refuses (`refusals`), per object and before touching anything of it (no read, no
rewrite, no purge of older versions), the first rule that holds, in this order:

1. `report_unpinned`: the manifest records no key fingerprint, or no pin for the object's
   dataset (made before this rule): every such object (fail closed);
2. `hash_key_changed`: the key the job loaded is not the manifest's: every object;
3. `definition_changed`: the dataset's registration now has another matching generation or
   fingerprint than its pin, or the document the job would match with has another fingerprint:
   every object of that dataset;
4. `index_stale`: an index entry of the object was computed with another matching fingerprint
   than the dataset's pin, or another key than the manifest's (an unpinned "" entry counts as
   another): that object. A widened raw key (`ManifestObject.widened_from`) has no entries:
   this rule does not apply to it, the others do.

A refused object's result has action `refused`, no version before or after, nothing removed or
purged, and one gap (report.NotSearched) whose detail says what differed (fingerprints and
generations only) and what the operator does: re-index the dataset (a changed definition: `lethe
datasets reindex`; a rotated key: `lethe datasets reindex --all`, which records the key each
dataset's index was rebuilt with; stale entries: `lethe datasets reindex ID --force`), then file a
new request. The verify run accepts it unread (`accepts_refused`), the index update
keeps every entry of it (lethe_shared.erasure.index_update: `erasure_refused`) so the subjects
stay findable, and the request ends INCOMPLETE naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.datasets.registry import Registration
from lethe_shared.erasure.report import (
    DatasetPin,
    GapReason,
    Manifest,
    ManifestObject,
    NotSearched,
    ObjectResult,
)

REFUSAL_REASONS: frozenset[GapReason] = frozenset(
    # legal_hold: a hold added after the report (lethe_shared.erasure.legal_holds)
    {"report_unpinned", "hash_key_changed", "definition_changed", "index_stale", "legal_hold"}
)
_THEN = "then file a new request for these subjects"


class PinRegistry(Protocol):
    """Where the pins are read (DynamoDatasetRegistry: a consistent read of one item)."""

    def registration(self, dataset_id: str) -> Registration | None: ...


def pin_manifest(manifest: Manifest, *, key_fingerprint: str, registry: PinRegistry) -> Manifest:
    """The manifest with its pins: the request's key fingerprint, and a pin for each dataset
    looked up in or holding one of its objects that is registered now (module docstring)."""
    datasets = sorted(set(manifest.looked_up) | {o.dataset_id for o in manifest.objects})
    pins = []
    for dataset_id in datasets:
        found = registry.registration(dataset_id)
        if found is not None:
            pins.append(
                DatasetPin(
                    dataset_id=dataset_id,
                    matching_generation=found.matching_generation,
                    matching_fingerprint=found.matching_fingerprint,
                )
            )
    return manifest.model_copy(
        update={"key_fingerprint": key_fingerprint, "dataset_pins": tuple(pins)}
    )


def refusals(
    manifest: Manifest, *, key_fingerprint: str, registrations: Mapping[str, Registration]
) -> dict[str, NotSearched]:
    """The objects the erase job must not touch, by URL, each with its gap: `key_fingerprint`
    is the fingerprint of the key the job loaded, `registrations` each object's dataset as the
    registry holds it now (module docstring, rules 1-4)."""
    refused: dict[str, NotSearched] = {}
    for item in manifest.objects:
        gap = _refusal(manifest, item, key_fingerprint, registrations.get(item.dataset_id))
        if gap is not None:
            refused[item.object_url] = gap
    return refused


def _gap(item: ManifestObject, reason: GapReason, detail: str) -> NotSearched:
    return NotSearched(
        object_url=item.object_url, dataset_id=item.dataset_id, reason=reason, detail=detail
    )


def _refusal(
    manifest: Manifest, item: ManifestObject, key_now: str, now: Registration | None
) -> NotSearched | None:
    dataset = item.dataset_id
    pin = manifest.pin_of(dataset)
    if not manifest.key_fingerprint or pin is None:
        missing = "the subject hash key" if not manifest.key_fingerprint else "this dataset"
        return _gap(item, "report_unpinned", (
            f"the frozen report records no pin for {missing} (a report made before reports "
            "recorded the matching definition and key they were built with): erasure cannot "
            "be sure it would match the rows the report counted, so nothing of this object was "
            f"touched; {_THEN}"
        ))  # fmt: skip
    if key_now != manifest.key_fingerprint:
        return _gap(item, "hash_key_changed", (
            f"the request's subject ids were hashed with subject hash key "
            f"{manifest.key_fingerprint}, the erase job loaded key {key_now}: its hashes cannot "
            "match the rows, so nothing of this object was touched. Re-index every dataset "
            f"with the current key (`lethe datasets reindex --all`), {_THEN}"
        ))  # fmt: skip
    document = matching_fingerprint(now.dataset) if now is not None else ""
    if now is None or (
        (now.matching_generation, now.matching_fingerprint, document)
        != (pin.matching_generation, pin.matching_fingerprint, pin.matching_fingerprint)
    ):
        found = (
            f"generation {now.matching_generation}, fingerprint {now.matching_fingerprint or '-'}"
            f", document fingerprint {document}"
            if now is not None
            else "no registration"
        )
        return _gap(item, "definition_changed", (
            f"the dataset's matching definition changed after the report was frozen (report: "
            f"generation {pin.matching_generation}, fingerprint {pin.matching_fingerprint or '-'}"
            f"; now: {found}): erasure would match other rows than the report counted, so "
            f"nothing of this object was touched. Let the dataset's re-index succeed (`lethe "
            f"datasets get {dataset}` says when; `lethe datasets reindex {dataset}` starts it), "
            f"{_THEN}"
        ))  # fmt: skip
    if item.widened_from:
        return None  # a raw key the index cannot know: no entries to check
    stale = [
        s
        for s in item.subjects
        if (s.matching_fingerprint, s.key_fingerprint)
        != (pin.matching_fingerprint, manifest.key_fingerprint)
    ]
    if not stale:
        return None
    unpinned = sum(1 for s in stale if not s.matching_fingerprint or not s.key_fingerprint)
    seen = sorted({f"{s.matching_fingerprint or '-'}/{s.key_fingerprint or '-'}" for s in stale})
    return _gap(item, "index_stale", (
        f"{len(stale)} of {len(item.subjects)} index entr(ies) of this object were computed "
        f"with another matching definition or subject hash key than the report's (report: "
        f"{pin.matching_fingerprint}/{manifest.key_fingerprint}; entries: {', '.join(seen)}"
        f"{f'; {unpinned} written before entries were pinned' if unpinned else ''}): its rows "
        "may not be the ones erasure would match, so nothing of this object was touched. "
        f"Re-index the dataset (`lethe datasets reindex {dataset} --force`), {_THEN}"
    ))  # fmt: skip


def refused_result(item: ManifestObject, gap: NotSearched) -> ObjectResult:
    """What the erase job reports for a refused object: untouched, named by `gap`. No version
    is listed (nothing was read): the certificate lists it as not searched, not as erased."""
    return ObjectResult(
        object_url=item.object_url,
        dataset_id=item.dataset_id,
        zone=item.zone,
        action="refused",
        versions_before=(),
        version_after=None,
        rows_before=0,
        rows_removed=0,
        rows_after=0,
        versions_purged=0,
        attempts=0,
        not_searched=(gap,),
    )


def accepts_refused(result: ObjectResult) -> bool:
    """Whether the verify run accepts the object unread: the erase job refused it and named
    it with a refusal gap (the request then ends INCOMPLETE), and touched nothing of it."""
    return (
        result.refused
        and result.rows_removed == 0
        and result.versions_purged == 0
        and any(g.reason in REFUSAL_REASONS for g in result.not_searched)
    )
