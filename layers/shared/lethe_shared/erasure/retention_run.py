"""A retention run's frozen report: the erase job's manifest built from retention plans
(lethe_shared.datasets.retention) instead of the subject index.

Each planned object (expired whole, or read row by row) becomes a `ManifestObject` like an
erasure's: its zone and format, the key's state and **every stored version and delete marker**
as S3 lists it now (the erase job rewrites the current version and deletes every older one), no
subjects (no index entry describes the run's rows, so the job never compares counts with the
index). The manifest records the rule of each dataset (`Manifest.retention`: column, cutoff, the
held subjects' hashes), which makes the erase job match with lethe_jobs.retention_rows'
`RetentionMatcher` instead of subject hashes, and is pinned like an erasure's report
(lethe_shared.erasure.pins: the key fingerprint, each dataset's matching generation), so a
dataset whose definition changed after the plan is refused, untouched. A held dataset has no
rule (its plan has none): it contributes nothing.

Scheduled runs build it through lethe_shared.erasure.retention_runs (the plan, the run record
with its standing authorisation, the notice period), statemachines/retention.asl.json runs the
erase job, its verify run and the index job on it, and lethe_shared.erasure.
retention_certificate certifies it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from lethe_shared.aws.s3 import ObjectStore, key_state, s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import Dataset, is_quarantine_key
from lethe_shared.datasets.retention import RetentionPlan
from lethe_shared.erasure.pins import PinRegistry, pin_manifest
from lethe_shared.erasure.report import Manifest, ManifestObject, version_ref


def _format(dataset: Dataset, zone: str, key: str) -> str:
    if zone == "lake":
        return "jsonl" if is_quarantine_key(key) else "parquet"
    return dataset.format.value


def retention_manifest(
    run_id: str,
    plans: Iterable[tuple[Dataset, RetentionPlan]],
    *,
    objects: ObjectStore,
    now: datetime,
    key_fingerprint: str,
    registry: PinRegistry,
) -> Manifest:
    """The frozen report of a retention run over `plans` (module docstring)."""
    items: list[ManifestObject] = []
    specs = []
    for dataset, plan in plans:
        spec = plan.spec()
        if spec is None:
            continue
        specs.append(spec)
        for stored in plan.objects:
            versions = objects.versions_of(stored.bucket, stored.key)
            if not versions:
                continue  # gone since the listing
            items.append(
                ManifestObject(
                    object_url=s3_url(stored.bucket, stored.key),
                    bucket=stored.bucket,
                    key=stored.key,
                    dataset_id=dataset.dataset_id,
                    zone=Zone(stored.zone),
                    format=_format(dataset, stored.zone, stored.key),
                    state=key_state(versions),
                    expected_rows=0,
                    subjects=(),
                    versions=tuple(version_ref(v) for v in versions),
                )
            )
    manifest = Manifest(
        request_id=run_id,
        created_at=now.isoformat(),
        subject_hashes=(),
        subject_count=0,
        scope=tuple(s.dataset_id for s in specs),
        objects=tuple(sorted(items, key=lambda o: o.object_url)),
        retention=tuple(specs),
    )
    return pin_manifest(manifest, key_fingerprint=key_fingerprint, registry=registry)
