"""Legal holds in an erasure (GDPR Art. 17(3); the holds: lethe_shared.datasets.holds).

A held dataset, or a held subject in a dataset, is not erased; the request says exactly what was
not erased and why, with the mechanism every other gap uses (report.NotSearched, reason
`legal_hold`), so it ends `FAILED` with outcome `INCOMPLETE`, never `COMPLETED` for less, and the
certificate lists the held places under "not searched". Checked twice:

1. **When the report is frozen** (`apply_holds`, workflow.build_report after the scope's
   widening): a held dataset's objects are left out of the manifest and the dataset is named
   by its raw prefix (one gap, no version); a held subject's hash is taken out of its dataset's
   hashes (`hash_groups`: the erase job never matches it there), out of the objects' `subjects`
   (an object left with none is dropped, a widened raw key stays: it is matched with the other
   subjects' hashes only), and one gap per dataset counts the held subjects. The manifest keeps
   what was held (`Manifest.legal_holds`), so the index update leaves those subjects' entries
   (`hashes_for`: they are not erased, so their index entries stay true) and does not name them
   a second time. The approver sees the gaps and a note per hold before deciding.
2. **When the erase job starts** (`hold_refusals`, called by lethe_jobs.erase_settings with the
   holds as the DatasetsTable holds them then): a hold added after the report still wins. Each
   object of a dataset held now, each object whose subjects include a subject held now, and
   each widened raw key of a dataset where a request's subject is held now is refused, untouched
   (action `refused`, as for broken pins: lethe_shared.erasure.pins), with a `legal_hold` gap.
   The verify run accepts it unread, the index update keeps its entries (`erasure_refused`).

Never a subject id: holds and gaps carry hashes and counts only; a hold's free-text reason is not
copied into reports or certificates (its id is: `lethe hold list` shows the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from lethe_shared.aws.s3 import s3_url
from lethe_shared.datasets.holds import HoldView, LegalHold
from lethe_shared.erasure.report import HeldPlace, Manifest, ManifestObject, NotSearched
from lethe_shared.erasure.subjects import group_hashes

_THEN = "when the hold is released (`lethe hold remove`), file a new request for these subjects"


def _dataset_gap(dataset_id: str, hold: LegalHold, raw_bucket: str) -> NotSearched:
    return NotSearched(
        object_url=s3_url(raw_bucket, f"{dataset_id}/"),
        dataset_id=dataset_id,
        reason="legal_hold",
        detail=(
            f"dataset {dataset_id} is under legal hold {hold.hold_id} (since {hold.held_at}, "
            f"by {hold.held_by}; `lethe hold list`): none of its rows were erased; {_THEN}"
        ),
    )


def _subject_gap(dataset_id: str, held: dict[str, LegalHold], raw_bucket: str) -> NotSearched:
    ids = ", ".join(sorted({h.hold_id for h in held.values()}))
    return NotSearched(
        object_url=s3_url(raw_bucket, f"{dataset_id}/"),
        dataset_id=dataset_id,
        reason="legal_hold",
        count=len(held),
        detail=(
            f"{len(held)} subject(s) of this request are under legal hold ({ids}; `lethe hold "
            f"list`) in dataset {dataset_id}: their rows there were not erased; {_THEN}"
        ),
    )


def _strip(item: ManifestObject, held: frozenset[str]) -> ManifestObject | None:
    """The object without the held subjects (None: nothing of the request is left in it)."""
    kept = tuple(s for s in item.subjects if s.subject_hash not in held)
    if len(kept) == len(item.subjects):
        return item
    if not kept and not item.widened_from:
        return None
    expected = sum(s.rows for s in kept if not s.older_versions_only)
    return item.model_copy(update={"subjects": kept, "expected_rows": expected})


def apply_holds(manifest: Manifest, holds: HoldView, raw_bucket: str) -> Manifest:
    """The report without what the holds keep (module docstring, 1)."""
    datasets = sorted(set(manifest.looked_up) | {o.dataset_id for o in manifest.objects})
    held_places: list[HeldPlace] = []
    gaps: list[NotSearched] = []
    whole: set[str] = set()
    held_hashes: dict[str, frozenset[str]] = {}
    for dataset_id in datasets:
        hold = holds.dataset_hold(dataset_id)
        if hold is not None:
            whole.add(dataset_id)
            held_places.append(HeldPlace(hold_id=hold.hold_id, dataset_id=dataset_id))
            gaps.append(_dataset_gap(dataset_id, hold, raw_bucket))
            continue
        wanted = set(manifest.hashes_for(dataset_id))
        held = {h: hold for h, hold in holds.subject_holds(dataset_id).items() if h in wanted}
        if not held:
            continue
        held_hashes[dataset_id] = frozenset(held)
        for hold_id in sorted({h.hold_id for h in held.values()}):
            held_places.append(
                HeldPlace(
                    hold_id=hold_id,
                    dataset_id=dataset_id,
                    subject_hashes=tuple(
                        sorted(h for h, x in held.items() if x.hold_id == hold_id)
                    ),
                )
            )
        gaps.append(_subject_gap(dataset_id, held, raw_bucket))
    if not held_places:
        return manifest
    objects = []
    for item in manifest.objects:
        if item.dataset_id in whole:
            continue
        stripped = _strip(item, held_hashes.get(item.dataset_id, frozenset()))
        if stripped is not None:
            objects.append(stripped)
    groups = manifest.hash_groups
    if held_hashes:
        # per dataset without its held hashes (a request from before hashes were per dataset
        # matched every hash everywhere: its datasets get explicit groups now)
        by_dataset = (
            {d: list(g.hashes) for g in groups for d in g.datasets}
            if groups
            else {d: list(manifest.subject_hashes) for d in datasets}
        )
        groups = group_hashes(
            {d: [h for h in hs if h not in held_hashes.get(d, frozenset())]
             for d, hs in by_dataset.items()}
        )  # fmt: skip
    return manifest.model_copy(
        update={
            "objects": tuple(objects),
            "hash_groups": groups,
            "not_searched": (*manifest.not_searched, *gaps),
            "legal_holds": tuple(held_places),
        }
    )


def without_held(
    manifest: Manifest, hashes_for: Callable[[str], Iterable[str]]
) -> Callable[[str], tuple[str, ...]]:
    """`hashes_for` without what the report's holds kept (the index update: a held subject's
    entries stay, and are not named again)."""
    whole = {p.dataset_id for p in manifest.legal_holds if not p.subject_hashes}
    held: dict[str, set[str]] = {}
    for place in manifest.legal_holds:
        held.setdefault(place.dataset_id, set()).update(place.subject_hashes)

    def of(dataset_id: str) -> tuple[str, ...]:
        if dataset_id in whole:
            return ()
        return tuple(h for h in hashes_for(dataset_id) if h not in held.get(dataset_id, set()))

    return of


def hold_refusals(manifest: Manifest, holds: HoldView) -> dict[str, NotSearched]:
    """The objects the erase job must not touch because of a hold it finds when it starts
    (module docstring, 2), by URL, each with its gap."""
    refused: dict[str, NotSearched] = {}
    for item in manifest.objects:
        dataset = item.dataset_id
        hold = holds.dataset_hold(dataset)
        if hold is not None:
            refused[item.object_url] = _refused(item, hold, "the dataset is")
            continue
        wanted = set(manifest.hashes_for(dataset))
        held = {h: x for h, x in holds.subject_holds(dataset).items() if h in wanted}
        hit = [held[s.subject_hash] for s in item.subjects if s.subject_hash in held]
        if item.widened_from and held:
            hit = list(held.values())
        if hit:
            refused[item.object_url] = _refused(item, hit[0], "a subject of this request is")
    return refused


def _refused(item: ManifestObject, hold: LegalHold, what: str) -> NotSearched:
    return NotSearched(
        object_url=item.object_url,
        dataset_id=item.dataset_id,
        reason="legal_hold",
        detail=(
            f"{what} under legal hold {hold.hold_id} (added {hold.held_at}, after the report was "
            "frozen; `lethe hold list`): nothing of this object was touched; " + _THEN
        ),
    )
