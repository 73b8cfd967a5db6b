"""What the erase job runs with (lethe_jobs.erase_core): its arguments, its ports, and the
settings every task gets, among them the objects refused because the frozen report's pins do not
hold (lethe_shared.erasure.pins): the datasets are read with the registry's consistent
`registration()` (the document with its matching generation and fingerprint), the key's
fingerprint from the key the job loaded; and the objects a legal hold added after the report
keeps (lethe_shared.erasure.legal_holds.hold_refusals, the holds read when the job starts).

A scheduled retention run (`rt-` id, authorised by the datasets' declared rules:
lethe_shared.erasure.authority.standing_retention) is refused whole, before anything is read of
the lake, unless its manifest is a retention manifest without subject hashes and each dataset's
rule in force now is the one the run recorded (`check_retention_run`): a rule changed since the
plan (shortened, lengthened, removed) removes nothing.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lethe_jobs.erase_rows import SubjectMatcher
from lethe_jobs.job_args import add_required
from lethe_jobs.objects import ObjectKind, object_kind
from lethe_jobs.retention_rows import retention_matcher
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.holds import HoldReader, HoldView
from lethe_shared.datasets.registry import Registration
from lethe_shared.datasets.retention import RetentionSpec, rule_sha256
from lethe_shared.erasure.authority import (
    RETENTION_RUN_PREFIX,
    EraseNotAuthorisedError,
    RequestView,
)
from lethe_shared.erasure.evidence import MODE_ARG, RETENTION_ARG, EvidenceLock
from lethe_shared.erasure.legal_holds import hold_refusals
from lethe_shared.erasure.pins import PinRegistry, refusals, refused_result
from lethe_shared.erasure.report import Manifest, ManifestObject, NotSearched, ObjectResult
from lethe_shared.errors import DatasetNotFoundError
from lethe_shared.subject_hashing.keys import key_fingerprint
from lethe_shared.subject_hashing.shown_keys import KeyNamer

LOG = logging.getLogger("lethe.erase")
MODES = ("erase", "verify")


@dataclass(frozen=True)
class EraseArgs:
    request_id: str
    manifest: str  # s3://<reports>/erasure/<request>/manifest.json
    manifest_sha256: str
    # the request record is read (GetItem only): the job runs only for a request ERASING with a
    # recorded approval whose report is this manifest (lethe_shared.erasure.authority)
    requests_table: str
    raw_bucket: str
    lake_bucket: str
    reports_bucket: str
    datasets_table: str
    catalog_table: str  # the writes ledger: every rewrite is recorded there
    hash_key_secret: str
    correlation_id: str
    mode: str
    # every version of the documents it writes to erasure/ is locked this long, in this mode
    # (lethe_shared.erasure.evidence; "": not locked, a run without the stack)
    evidence_retention_days: str = ""
    evidence_lock_mode: str = ""

    @property
    def buckets(self) -> Buckets:
        return Buckets(raw=self.raw_bucket, lake=self.lake_bucket)

    @property
    def evidence(self) -> EvidenceLock | None:
        return EvidenceLock.from_values(self.evidence_retention_days, self.evidence_lock_mode)


def parse_args(argv: Sequence[str] | None) -> tuple[EraseArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue's own) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="erase", description="Lethe erase job")
    optional = {"mode", "evidence_retention_days", "evidence_lock_mode"}
    add_required(parser, [f for f in EraseArgs.__dataclass_fields__ if f not in optional])
    parser.add_argument("--mode", choices=MODES, default="erase")
    parser.add_argument(RETENTION_ARG, dest="evidence_retention_days", default="")
    parser.add_argument(MODE_ARG, dest="evidence_lock_mode", default="")
    known, unknown = parser.parse_known_args(argv)
    args = EraseArgs(**vars(known))
    _ = args.evidence  # malformed lock settings fail here, before anything is read or erased
    return args, unknown


@dataclass(frozen=True)
class EraseSettings:
    """What every task needs; travels to the executors with the task."""

    request_id: str
    correlation_id: str
    buckets: Buckets
    datasets: dict[str, Dataset]
    hashes: frozenset[str]
    hash_key: bytes = field(repr=False)
    # the writes ledger's table ("": rewrites are not recorded, and no version is known as an
    # erasure's: nothing credited from an earlier run, no later erasure accepted by verify)
    catalog_table: str = ""
    # each dataset's hashes (Manifest.hashes_for): an object is matched with its dataset's only
    # (a dataset not listed: every hash, as a manifest without per-dataset hashes says)
    dataset_hashes: dict[str, frozenset[str]] = field(default_factory=dict)
    widened: frozenset[str] = frozenset()  # URLs of the manifest's widened raw keys
    # the objects refused because the report's pins do not hold (by URL, with the gap naming
    # each): never read or touched (lethe_shared.erasure.pins)
    refused: dict[str, NotSearched] = field(default_factory=dict)
    # where each finished object's progress is recorded as the job goes, and under which report
    # (lethe_jobs.erase_progress; "": none is written)
    reports_bucket: str = ""
    manifest_sha256: str = ""
    # how a task locks the documents it writes under erasure/ (its per-object progress):
    # lethe_shared.erasure.evidence.put_arguments(key, evidence); None: not locked
    evidence: EvidenceLock | None = None
    # a retention run's rules per dataset (Manifest.retention): its objects are matched by
    # lethe_jobs.retention_rows.RetentionMatcher (expired rows, held subjects kept), not hashes
    retention: dict[str, RetentionSpec] = field(default_factory=dict)

    def matcher(self, dataset_id: str) -> SubjectMatcher:
        spec = self.retention.get(dataset_id)
        if spec is not None:
            dataset = self.datasets[dataset_id]
            return retention_matcher(dataset, spec.rule(), self.hash_key, spec.held_hashes)
        hashes = self.dataset_hashes.get(dataset_id, self.hashes)
        return SubjectMatcher(self.datasets[dataset_id], hashes, self.hash_key)

    def kind(self, item: ManifestObject) -> ObjectKind:
        return object_kind(item.dataset_id, item.bucket, item.key, self.buckets)

    def shown(self, url: str) -> str:
        """An object's URL as logs and errors name it: its shown key (a subject column's
        partition value or a producer's key hashed; lethe_shared.subject_hashing.shown_keys)."""
        return self.namer().url(url)

    def namer(self) -> KeyNamer:
        return KeyNamer(self.hash_key, self.datasets.get)


class RequestReader(Protocol):
    """The request record as the job may read it (lethe_shared.erasure.authority)."""

    def read(self, request_id: str) -> RequestView | None: ...


@dataclass(frozen=True)
class ErasePorts:
    reports: S3ObjectStore
    datasets: PinRegistry  # read with `registration()`: the document with its generations
    hash_key: bytes = field(repr=False)
    requests: RequestReader | None = None  # None: every run is refused (no request to check)
    # the legal holds as the DatasetsTable holds them when the job starts (a hold added after
    # the report still wins: lethe_shared.erasure.legal_holds); None: not checked (unit tests)
    holds: HoldReader | None = None


def _registration(ports: ErasePorts, dataset_id: str) -> Registration:
    found = ports.datasets.registration(dataset_id)
    if found is None:
        raise DatasetNotFoundError(f"dataset {dataset_id!r} is not registered")
    return found


def _hold_view(manifest: Manifest, ports: ErasePorts) -> HoldView | None:
    """The legal holds of the manifest's datasets now (None: not checked)."""
    if ports.holds is None:
        return None
    datasets = {o.dataset_id for o in manifest.objects} | {s.dataset_id for s in manifest.retention}
    holds = ports.holds.active_for(datasets)  # one GetItem per dataset
    return HoldView.of(holds, manifest.key_fingerprint)


def _retention(manifest: Manifest, view: HoldView | None) -> dict[str, RetentionSpec]:
    """A retention run's rules, each with the subjects held now added to those held when it
    was planned (a hold added since still wins)."""
    found = {}
    for spec in manifest.retention:
        late = set(view.subject_holds(spec.dataset_id)) if view is not None else set()
        held = tuple(sorted(set(spec.held_hashes) | late))
        found[spec.dataset_id] = spec.model_copy(update={"held_hashes": held})
    return found


def check_retention_run(
    request_id: str, manifest: Manifest, registrations: dict[str, Registration]
) -> None:
    """Refuse (EraseNotAuthorisedError) a retention run whose manifest is not a retention
    manifest, or whose rules are not the ones in force now (module docstring); a manifest with
    retention rules is only ever a retention run's."""
    retention = bool(manifest.retention)
    if request_id.startswith(RETENTION_RUN_PREFIX) != retention or (
        retention and manifest.subject_hashes
    ):
        raise EraseNotAuthorisedError(
            f"{request_id}: a retention run's report holds retention rules and no subject, and "
            "only a retention run's does: nothing is erased"
        )
    if not retention:
        return  # an erasure's report
    specs = {s.dataset_id: s for s in manifest.retention}
    for item in manifest.objects:
        spec = specs.get(item.dataset_id)
        found = registrations.get(item.dataset_id)
        if spec is None or found is None or not spec.rule_sha256:
            raise EraseNotAuthorisedError(
                f"{request_id}: dataset {item.dataset_id} has no recorded retention rule in the "
                "run's report: nothing is erased"
            )
        if rule_sha256(found.dataset) != spec.rule_sha256:
            raise EraseNotAuthorisedError(
                f"{request_id}: the retention rule of dataset {item.dataset_id} changed since "
                "the run was planned: nothing is erased (the next run plans with the new rule)"
            )


def job_settings(args: EraseArgs, manifest: Manifest, ports: ErasePorts) -> EraseSettings:
    ids = sorted({o.dataset_id for o in manifest.objects})
    registrations = {d: _registration(ports, d) for d in ids}
    check_retention_run(args.request_id, manifest, registrations)
    view = _hold_view(manifest, ports)
    return EraseSettings(
        request_id=args.request_id,
        correlation_id=args.correlation_id,
        buckets=args.buckets,
        datasets={d: r.dataset for d, r in registrations.items()},
        hashes=frozenset(manifest.subject_hashes),
        hash_key=ports.hash_key,
        catalog_table=args.catalog_table,
        dataset_hashes={d: frozenset(manifest.hashes_for(d)) for d in ids},
        widened=frozenset(o.object_url for o in manifest.objects if o.widened_from),
        # a legal hold now (a broken pin, checked after, names its own reason)
        refused=(hold_refusals(manifest, view) if view is not None else {})
        | refusals(
            manifest, key_fingerprint=key_fingerprint(ports.hash_key), registrations=registrations
        ),
        reports_bucket=args.reports_bucket,
        manifest_sha256=args.manifest_sha256,
        evidence=args.evidence,
        retention=_retention(manifest, view),
    )


def refused_results(manifest: Manifest, ctx: EraseSettings) -> dict[str, ObjectResult]:
    """The results of the objects refused on the report's pins: untouched, each named."""
    refused = {
        o.object_url: refused_result(o, ctx.refused[o.object_url])
        for o in manifest.objects
        if o.object_url in ctx.refused
    }
    if refused:
        reasons = sorted({ctx.refused[url].reason for url in refused})
        LOG.warning(
            "%d object(s) refused, left untouched: the report's pins do not hold (%s)",
            len(refused), ", ".join(reasons),
        )  # fmt: skip
    return refused
