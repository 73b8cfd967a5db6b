"""Scheduled retention runs (statemachines/retention.asl.json): which datasets run, and each
run's frozen report and record, before anything is destroyed.

A run is planned per registered dataset that declares `retention`
(lethe_shared.datasets.retention), at the schedule's time:

- **legal hold**: a dataset under a hold is skipped whole, the hold's id and reason recorded in
  the dataset's run state (below) and in the run's output; subjects under a hold are carried as
  keyed hashes and their rows kept (lethe_jobs.retention_rows);
- **notice period**: the declared rule is the run's standing authorisation (no email approval);
  a rule is applied only once it has been in force, unchanged, for `notice_days` (the stack's
  RetentionNoticeDays) since a run first saw it: a new, shortened or lengthened rule is
  recorded, shown by `lethe datasets show`, and applied from `applies_from` on. Until then the
  dataset is skipped (`notice`);
- **nothing expired**: recorded, no run;
- otherwise the run's frozen report is written under `erasure/<run id>/` in the reports bucket
  before anything is removed: `manifest.json` (lethe_shared.erasure.retention_run: every object
  with every version, the rule and cutoff, the pins, the rule's SHA-256) and `report.json` (what
  a reader needs: the rule in words and as declared, its SHA-256, the dataset's version, the
  cutoff, each object with its zone and whether it expired whole or is read row by row, the
  holds honoured; no subject). A run takes at most MAX_RUN_OBJECTS objects (in key order); the
  rest are named `deferred` (the certificate then says the run is not complete; the next run
  takes them);
- the run's record is an item of ErasureRequestsTable (`rt-<dataset>-<time>-<hex>`, kind
  `retention`, no subject, status ERASING) whose `approval` is the standing authorisation (the
  rule's SHA-256, the dataset's version, when the rule was first seen) and whose `report` is the
  manifest (URL, SHA-256): the erase job checks it as it checks an erasure's approval
  (lethe_shared.erasure.authority.standing_retention).

The run state of each dataset is an item of DatasetsTable, `retention#<dataset_id>` (kind
`retention_runs`): the rule's SHA-256 and since when a run saw it, and the last run (id, time,
outcome, counts, or why it was skipped). The registry skips items without a `document`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import Field

from lethe_shared.aws.s3 import ObjectStore, s3_url
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.holds import HoldView
from lethe_shared.datasets.registry import Registration
from lethe_shared.datasets.retention import RetentionPlan, StoredObject, plan_retention
from lethe_shared.erasure.authority import RETENTION_RUN_PREFIX, STANDING_RETENTION
from lethe_shared.erasure.pins import PinRegistry
from lethe_shared.erasure.report import canonical_json, report_key, sha256_hex
from lethe_shared.erasure.requests import ErasureRequest, ErasureRequests, ErasureStatus
from lethe_shared.erasure.retention_run import retention_manifest
from lethe_shared.models import Model

RUN_STATE_PREFIX = "retention#"
RUN_STATE_KIND = "retention_runs"
RUN_KIND = "retention"
SCHEDULER = "lethe retention schedule"  # the record's requested_by
MAX_RUN_OBJECTS = 500  # per run: bounds the state machine's payload and one run's work
DEFAULT_NOTICE_DAYS = 7
_JSON = "application/json"


def new_run_id(dataset_id: str, now: datetime) -> str:
    """`rt-<dataset>-<UTC time to the second>-<6 hex digits>`."""
    return f"{RETENTION_RUN_PREFIX}{dataset_id}-{now.strftime('%Y%m%dT%H%M%SZ')}-" + (
        secrets.token_hex(3)
    )


class RunState(Model):
    """A dataset's retention run state (module docstring)."""

    dataset_id: str
    rule_sha256: str = ""
    rule_since: str = ""  # ISO 8601: when a run first saw this rule
    applies_from: str = ""  # ISO 8601: rule_since + the notice days as that run read them
    last_run: dict[str, Any] = Field(default_factory=dict)

    def applied_after(self, notice_days: int) -> datetime | None:
        if not self.rule_since:
            return None
        return datetime.fromisoformat(self.rule_since) + timedelta(days=notice_days)


class RunStates(Protocol):
    def get(self, dataset_id: str) -> RunState | None: ...

    def put(self, state: RunState) -> None: ...


class DynamoRunStates:
    """Run states as items of DatasetsTable (`retention#<dataset_id>`): GetItem, UpdateItem."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def get(self, dataset_id: str) -> RunState | None:
        item = self.table.get_item(
            Key={"dataset_id": RUN_STATE_PREFIX + dataset_id}, ConsistentRead=True
        ).get("Item")
        if not item or item.get("kind") != RUN_STATE_KIND:
            return None
        return RunState.model_validate_json(str(item["state"]))

    def put(self, state: RunState) -> None:
        self.table.update_item(
            Key={"dataset_id": RUN_STATE_PREFIX + state.dataset_id},
            UpdateExpression="SET #k = :k, #s = :s, #u = :u",
            ExpressionAttributeNames={"#k": "kind", "#s": "state", "#u": "updated_at"},
            ExpressionAttributeValues={
                ":k": RUN_STATE_KIND,
                ":s": state.model_dump_json(),
                ":u": datetime.now(UTC).isoformat(),
            },
        )


@dataclass(frozen=True)
class Skipped:
    dataset_id: str
    reason: str  # legal_hold | notice | nothing_expired
    detail: str
    hold_id: str = ""

    def document(self) -> dict[str, str]:
        return {"dataset_id": self.dataset_id, "reason": self.reason, "detail": self.detail} | (
            {"hold_id": self.hold_id} if self.hold_id else {}
        )


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    dataset_id: str
    manifest_url: str
    manifest_sha256: str
    report_url: str
    objects: tuple[tuple[str, str], ...]  # (bucket, key): the Spark index job re-indexes them

    def document(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "dataset_id": self.dataset_id,
            "manifest": self.manifest_url,
            "manifest_sha256": self.manifest_sha256,
            "report": self.report_url,
            "objects": [{"bucket": b, "key": k} for b, k in self.objects],
        }


class DocumentWriter(Protocol):
    def put(self, key: str, body: bytes, content_type: str) -> str: ...


@dataclass(frozen=True)
class Planner:
    """What planning reads and writes (the retention steps function wires the real ones)."""

    objects: ObjectStore
    buckets: Mapping[str, str]  # zone -> bucket (raw, lake)
    registry: PinRegistry
    states: RunStates
    requests: ErasureRequests
    documents: DocumentWriter
    key_fingerprint: str
    holds: Callable[[Iterable[str]], HoldView]
    notice_days: int = DEFAULT_NOTICE_DAYS
    max_objects: int = MAX_RUN_OBJECTS
    new_id: Callable[[str, datetime], str] = field(default=new_run_id)

    def stored(self, dataset_id: str) -> list[StoredObject]:
        """The current versions of the dataset's objects in both zones."""
        found = []
        for zone, bucket in self.buckets.items():
            for version in self.objects.list_versions(bucket, f"{dataset_id}/"):
                if version.is_latest and not version.delete_marker and version.last_modified:
                    found.append(StoredObject(zone, bucket, version.key, version.last_modified))
        return found

    def plan(
        self, registrations: Iterable[Registration], now: datetime
    ) -> tuple[list[PlannedRun], list[Skipped]]:
        runs: list[PlannedRun] = []
        skipped: list[Skipped] = []
        declared = [r for r in registrations if r.dataset.retention is not None]
        view = self.holds([r.dataset.dataset_id for r in declared])
        for registration in sorted(declared, key=lambda r: r.dataset.dataset_id):
            outcome = self._one(registration, view, now)
            (runs if isinstance(outcome, PlannedRun) else skipped).append(outcome)  # type: ignore[arg-type]
        return runs, skipped

    def _state(self, dataset: Dataset, plan_sha: str, now: datetime) -> RunState:
        state = self.states.get(dataset.dataset_id) or RunState(dataset_id=dataset.dataset_id)
        if state.rule_sha256 != plan_sha:  # a new rule (or the first run): its notice starts
            state = RunState(
                dataset_id=dataset.dataset_id, rule_sha256=plan_sha, rule_since=now.isoformat(),
                last_run=state.last_run,
            )  # fmt: skip
        applies = state.applied_after(self.notice_days)
        return state.model_copy(update={"applies_from": applies.isoformat() if applies else ""})

    def _one(
        self, registration: Registration, view: HoldView, now: datetime
    ) -> PlannedRun | Skipped:
        dataset = registration.dataset
        did = dataset.dataset_id
        hold = view.dataset_hold(did)
        plan = plan_retention(dataset, [] if hold else self.stored(did), now, view)
        state = self._state(dataset, plan.rule_sha256, now)
        if hold is not None:
            return self._skip(state, now, Skipped(
                did, "legal_hold", f"legal hold {hold.hold_id}: {hold.reason}", hold.hold_id,
            ))  # fmt: skip
        applies = state.applied_after(self.notice_days)
        if applies is not None and now < applies:
            return self._skip(state, now, Skipped(
                did, "notice", f"rule {plan.rule_sha256[:12]} first seen {state.rule_since}; "
                f"applied from {applies.isoformat()} (RetentionNoticeDays {self.notice_days})",
            ))  # fmt: skip
        if not plan.objects:
            cutoff = plan.rule.cutoff.isoformat() if plan.rule else ""
            detail = f"no object holds a row before {cutoff}"
            return self._skip(state, now, Skipped(did, "nothing_expired", detail))
        held_by = sorted({h.hold_id for h in view.subject_holds(did).values()})
        return self._freeze(registration, plan, state, now, held_by)

    def _skip(self, state: RunState, now: datetime, skipped: Skipped) -> Skipped:
        last = {"at": now.isoformat(), "outcome": "SKIPPED", **skipped.document()}
        self.states.put(state.model_copy(update={"last_run": last}))
        return skipped

    def _freeze(
        self,
        registration: Registration,
        plan: RetentionPlan,
        state: RunState,
        now: datetime,
        held_by: list[str],
    ) -> PlannedRun:
        dataset = registration.dataset
        run_id = self.new_id(dataset.dataset_id, now)
        taken = set(plan.objects[: self.max_objects])
        deferred = plan.objects[self.max_objects :]
        bounded = RetentionPlan(
            plan.dataset_id, plan.rule, plan.run_at,
            expired=tuple(o for o in plan.expired if o in taken),
            scanned=tuple(o for o in plan.scanned if o in taken),
            left=plan.left, undated=plan.undated, held_hashes=plan.held_hashes,
            rule_sha256=plan.rule_sha256,
        )  # fmt: skip
        manifest = retention_manifest(
            run_id, [(dataset, bounded)], objects=self.objects, now=now,
            key_fingerprint=self.key_fingerprint, registry=self.registry,
        )  # fmt: skip
        body = manifest.bytes()
        manifest_url = self.documents.put(report_key(run_id, "manifest.json"), body, _JSON)
        authorisation = standing_authorisation(registration, state, self.notice_days)
        report = run_report(run_id, registration, bounded, authorisation, now, deferred)
        report["manifest_sha256"] = sha256_hex(body)
        report["subject_holds"] = held_by
        report_url = self.documents.put(
            report_key(run_id, "report.json"), canonical_json(report), _JSON
        )
        record = ErasureRequest.model_validate({
            "request_id": run_id, "status": ErasureStatus.ERASING, "created_at": now.isoformat(),
            "updated_at": now.isoformat(), "requested_by": SCHEDULER,
            "reason": f"retention of dataset {dataset.dataset_id}", "subject_hashes": (),
            "subject_count": 0, "scope": (dataset.dataset_id,),
            "key_fingerprint": self.key_fingerprint,
            "report": {"manifest_url": manifest_url, "manifest_sha256": sha256_hex(body),
                       "report_url": report_url, "objects": len(manifest.objects),
                       "deferred": len(deferred)},
            "approval": authorisation, "kind": RUN_KIND,
        })  # fmt: skip
        self.requests.create(record)
        last = {"at": now.isoformat(), "outcome": "RUNNING", "run_id": run_id}
        self.states.put(state.model_copy(update={"last_run": last}))
        return PlannedRun(
            run_id, dataset.dataset_id, manifest_url, sha256_hex(body), report_url,
            tuple((o.bucket, o.key) for o in manifest.objects),
        )  # fmt: skip


_CRON_DAILY = re.compile(r"^cron\((\d{1,2}) (\d{1,2}) \* \* \? \*\)$")
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")


def next_scheduled(expression: str, now: datetime) -> datetime | None:
    """The next time a schedule expression fires after `now`, for a daily cron
    (`cron(M H * * ? *)`) or a rate (from `now`: EventBridge counts a rate from the rule's
    creation, so this is an upper bound); None for any other expression."""
    daily = _CRON_DAILY.match(expression.strip())
    if daily:
        minute, hour = int(daily.group(1)), int(daily.group(2))
        at = now.astimezone(UTC).replace(hour=hour, minute=minute, second=0, microsecond=0)
        return at if at > now else at + timedelta(days=1)
    rate = _RATE.match(expression.strip())
    if rate:
        unit = rate.group(2).rstrip("s")
        return now + timedelta(**{f"{unit}s": int(rate.group(1))})
    return None


def standing_authorisation(
    registration: Registration, state: RunState, notice_days: int
) -> dict[str, Any]:
    """The run record's `approval`: the declared rule as the standing authorisation."""
    dataset = registration.dataset
    retention = dataset.retention
    return {
        "decision": "approve",
        "standing": STANDING_RETENTION,
        "decided_by": f"the retention declared by dataset {dataset.dataset_id}",
        "decided_at": state.rule_since,
        "rule": retention.document() if retention else {},
        "rule_text": retention.text() if retention else "",
        "rule_sha256": state.rule_sha256,
        "dataset_version": registration.version,
        "notice_days": notice_days,
    }


def run_report(  # noqa: PLR0917 - one call site
    run_id: str,
    registration: Registration,
    plan: RetentionPlan,
    authorisation: Mapping[str, Any],
    now: datetime,
    deferred: Iterable[StoredObject],
) -> dict[str, Any]:
    """The run's report.json (module docstring): no subject, no row value."""
    expired = set(plan.expired)
    return {
        "kind": "retention_run",
        "run_id": run_id,
        "dataset_id": plan.dataset_id,
        "planned_at": now.isoformat(),
        "authorisation": dict(authorisation),
        "column": plan.rule.column if plan.rule else None,
        "cutoff": plan.rule.cutoff.isoformat() if plan.rule else None,
        "objects": [
            {
                "object_url": s3_url(o.bucket, o.key),
                "zone": o.zone,
                "decided": "expired_whole" if o in expired else "read_row_by_row",
            }
            for o in plan.objects
        ],
        "deferred": [s3_url(o.bucket, o.key) for o in deferred],
        "left_objects": plan.left,
        "undated_objects": plan.undated,
        "held_subjects": len(plan.held_hashes),
        "expected_rows": None,  # known only once read: results.json counts them
        "dataset_version": registration.version,
    }
