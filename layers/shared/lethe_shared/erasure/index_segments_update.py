"""The index update's rounds on the segment store (lethe_shared.erasure.index_segments): the
same judgement as lethe_shared.erasure.index_update per object, removals grouped into one
segment erasure per dataset and round, every erased dataset scrubbed of the request's hashes'
dead rows in the first round, every other dataset of the manifest after.

On a dataset of 48-bit prefixes (lethe_shared.index.subject_ids) the by-object read names each
subject by its prefix and the by-key read by the request's hash: the two are one row. A request
subject's entry on the version the erasure left is kept (`_not_verified_clean`), and a row two
subjects of one version share stays (`SegmentErasure.kept_shared`); both are in the evidence
(`SegmentEvidence.prefix_rows`) and make `hashes_left_index` false."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lethe_shared.aws.s3 import ObjectStore, split_s3_url
from lethe_shared.erasure.index_segments import (
    SegmentEvidence,
    SegmentStore,
    erase_in_segments,
    scrub_datasets,
)
from lethe_shared.erasure.index_update import (
    _REMOVE,
    MAX_ROUNDS,
    IndexUpdate,
    _judge,
    _keep,
    _target,
    same_version,
)
from lethe_shared.erasure.report import EraseResults, ObjectResult
from lethe_shared.index.entry_removal import EntryState
from lethe_shared.index.subject_ids import ids_of, is_prefix_dataset

_Pending = dict[str, tuple[ObjectResult, frozenset[str], list[EntryState]]]


def _every_version_gone(result: ObjectResult, objects: ObjectStore) -> bool:
    """A key the erasure deleted that keeps no version holding data: its pointer may go."""
    if result.version_after is not None:
        return False
    return all(v.delete_marker for v in objects.versions_of(*split_s3_url(result.object_url)))


@dataclass
class _Rounds:
    subjects: frozenset[str]
    of: Callable[[str], frozenset[str]]
    index: SegmentStore
    objects: ObjectStore
    update: IndexUpdate
    evidence: SegmentEvidence = field(default_factory=SegmentEvidence)
    scrubbed: set[str] = field(default_factory=set)

    def first(self, results: EraseResults) -> _Pending:
        """Each erased object's entries: all of them (by_object) and the request's (by key)."""
        searched: Any = self.index  # the SubjectIndex reads of the same store
        pending: _Pending = {}
        for result in results.objects:
            if result.refused:  # untouched: every entry of it stays
                continue
            url, mine = result.object_url, self.of(result.dataset_id)
            ids = ids_of(self.index, result.dataset_id)
            found = {s.subject_hash: s for s in searched.entry_states(url)}
            by_key = searched.entry_states(url, mine)
            for state in by_key:  # prefixes: the same row, named by its prefix: one state
                if ids(state.subject_hash) != state.subject_hash:
                    found.pop(ids(state.subject_hash), None)
            found.update((s.subject_hash, s) for s in by_key)
            pending[url] = (result, mine, list(found.values()))
        return pending

    def round(self, pending: _Pending, erased: set[str]) -> _Pending:
        """Judge, then one segment erasure per dataset; the entries found changed, as now."""
        going: dict[str, dict[str, dict[str, tuple[EntryState, str]]]] = {}
        for url, (result, mine, states) in pending.items():
            chosen = _judge(states, result, mine, self.objects, self.update)
            if chosen and is_prefix_dataset(self.index, result.dataset_id):
                chosen = self._not_verified_clean(result, mine, chosen)
            if chosen:
                going.setdefault(result.dataset_id, {})[url] = chosen
        changed_now: _Pending = {}
        for dataset_id in sorted(set(going) | (erased - self.scrubbed)):
            of_dataset = going.get(dataset_id, {})
            for url, state in self._erase(dataset_id, of_dataset, pending):
                result, mine, _ = pending[url]
                changed_now.setdefault(url, (result, mine, []))[2].append(state)
        return changed_now

    def _not_verified_clean(
        self,
        result: ObjectResult,
        mine: frozenset[str],
        chosen: dict[str, tuple[EntryState, str]],
    ) -> dict[str, tuple[EntryState, str]]:
        """Prefixes: a request subject's entry describing the version the erasure left is not
        removed. The erase job verified, on the full keyed hash, that this version holds none of
        the subject's rows, so the row is another subject's sharing the 48-bit prefix (or a
        stale entry); removing it could lose that subject from the index. The evidence names it
        (`prefix_rows`, reason `verified_clean`)."""
        after = result.version_after
        if after is None:
            return chosen
        kept = {
            h: (state, target)
            for h, (state, target) in chosen.items()
            if h in mine and target == _REMOVE and same_version(state.version_id, state.etag, after)
        }
        for state, _ in kept.values():
            self.evidence.keep_prefix(
                result.dataset_id, result.object_url, state.version_id, "verified_clean"
            )
        return {h: v for h, v in chosen.items() if h not in kept}

    def _erase(
        self,
        dataset_id: str,
        of_dataset: dict[str, dict[str, tuple[EntryState, str]]],
        pending: _Pending,
    ) -> list[tuple[str, EntryState]]:
        drop = [u for u in of_dataset if _every_version_gone(pending[u][0], self.objects)]
        scrub = frozenset() if dataset_id in self.scrubbed else self.of(dataset_id) & self.subjects
        removed, changed, shared = erase_in_segments(
            self.index, dataset_id,
            {u: [state for state, _ in g.values()] for u, g in of_dataset.items()},
            scrub=scrub, drop_pointers=drop, evidence=self.evidence,
        )  # fmt: skip
        self.scrubbed.add(dataset_id)
        for url, state in shared:  # a row two subjects of one version share: it stays
            self.evidence.keep_prefix(dataset_id, url, state.version_id, "shared")
        for url, state in removed:
            what = of_dataset.get(url, {}).get(state.subject_hash)
            if what is not None and what[1] == _REMOVE:
                self.update.entries_removed += 1
            elif what is not None:
                self.update.flagged_pruned += 1
        self.update.conditions_failed += len(changed)
        return changed


def settle_segments(
    results: EraseResults,
    subjects: frozenset[str],
    of: Callable[[str], frozenset[str]],
    index: SegmentStore,
    *,
    objects: ObjectStore,
    update: IndexUpdate,
) -> None:
    """The update's removals on the segment store (module docstring); the evidence goes to
    `update.segments`."""
    rounds = _Rounds(subjects, of, index, objects, update)
    update.segments = rounds.evidence
    pending = rounds.first(results)
    erased = {r.dataset_id for r in results.objects if not r.refused}
    for _ in range(MAX_ROUNDS):
        pending = rounds.round(pending, erased)
        if not pending:
            break
    for result, mine, states in pending.values():
        for state in states:
            if _target(state, result, mine) is not None:
                _keep(update, state, mine, "still_changing")
    scrub_datasets(index, subjects, of, rounds.evidence, rounds.scrubbed)
