"""Issue 19 (item 5): immutable erasure evidence.

What lethe_shared.erasure.evidence asks of each PUT of an `erasure/` document, that its writers
(S3Documents for the functions, the erase job's `_write` and its tasks' settings) pass it on, and
what template.yaml must keep so that S3 enforces it: Object Lock on the reports bucket, no
lifecycle expiry reaching `erasure/` while every other prefix of the bucket still expires, the
writers allowed `s3:PutObjectRetention`, nobody `s3:BypassGovernanceRetention`, the settings
reaching the function and the erase job. Each template check is shown to fail on a copy broken
on purpose. What S3 does with the lock is tested against moto in
tests/integration/test_evidence_lock.py.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe.localcloud.template import REPO_ROOT, TEMPLATE_PATH, load_template
from lethe_jobs.erase_settings import parse_args
from lethe_shared.erasure.evidence import (
    EvidenceLock,
    EvidenceSettingsError,
    is_evidence,
    put_arguments,
)
from lethe_shared.erasure.workflow import S3Documents
from tests.unit.template_rules import Template, function_settings, properties_of
from tests.unit.test_iam_policy import _as_list, _translated, identity_statements

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 10, 30, 15, 123456, tzinfo=UTC)
BUCKET = "ReportsBucket"
EVIDENCE = "erasure/"
BYPASS = "s3:BypassGovernanceRetention"

# ------------------------------------------------------------------------------- the settings


def test_the_settings_come_from_the_environment_or_the_job_arguments() -> None:
    env = {"EVIDENCE_RETENTION_DAYS": "2190", "EVIDENCE_LOCK_MODE": "compliance"}
    assert EvidenceLock.from_environ(env) == EvidenceLock(days=2190, mode="COMPLIANCE")
    assert EvidenceLock.from_environ({"EVIDENCE_RETENTION_DAYS": "30"}) == EvidenceLock(30)
    assert EvidenceLock.from_environ({}) is None  # a run without the stack: nothing locked
    assert EvidenceLock.from_values(" ", "GOVERNANCE") is None
    assert EvidenceLock(7, "GOVERNANCE").job_arguments() == {
        "--evidence-retention-days": "7",
        "--evidence-lock-mode": "GOVERNANCE",
    }


@pytest.mark.parametrize(
    ("days", "mode", "message"),
    [
        ("0", "GOVERNANCE", "evidence retention must be 1 to 3650 days, not 0"),
        ("3651", "GOVERNANCE", "evidence retention must be 1 to 3650 days, not 3651"),
        ("ten", "GOVERNANCE", "evidence retention must be a whole number of days, not 'ten'"),
        ("10", "LEGAL_HOLD", "evidence lock mode must be one of GOVERNANCE, COMPLIANCE"),
    ],
)
def test_malformed_settings_are_refused(days: str, mode: str, message: str) -> None:
    with pytest.raises(EvidenceSettingsError, match=message):
        EvidenceLock.from_values(days, mode)


def test_an_erasure_document_is_put_locked_until_now_plus_the_retention() -> None:
    lock = EvidenceLock(days=2190, mode="GOVERNANCE")

    arguments = put_arguments("erasure/er-1/results.json", lock, NOW)

    assert arguments == {
        "ObjectLockMode": "GOVERNANCE",
        "ObjectLockRetainUntilDate": datetime(2032, 11, 25, 10, 30, 15, tzinfo=UTC),
        "ChecksumAlgorithm": "SHA256",  # S3 refuses a locked PUT without an integrity checksum
    }
    assert arguments["ObjectLockRetainUntilDate"] - NOW.replace(microsecond=0) == timedelta(2190)


@pytest.mark.parametrize(
    "key", ["manifests/ingest/run.json", "reconcile/ds/run.json", "erasurex/a", "x/erasure/a"]
)
def test_other_documents_are_not_locked(key: str) -> None:
    assert not is_evidence(key)
    assert put_arguments(key, EvidenceLock(days=10), NOW) == {}


def test_no_lock_configured_means_plain_puts() -> None:
    assert put_arguments("erasure/er-1/audit.json", None, NOW) == {}


class _RecordingS3:
    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs)
        return {}


def test_the_functions_document_store_locks_every_put_and_put_once() -> None:
    client = _RecordingS3()
    documents = S3Documents(client, "reports", lock=EvidenceLock(days=5, mode="COMPLIANCE"))

    documents.put("erasure/er-1/manifest.json", b"{}", "application/json")
    documents.put_once("erasure/_chain/000000000001.json", b"{}", "application/json")

    for put in client.puts:
        assert put["ObjectLockMode"] == "COMPLIANCE"
        assert put["ChecksumAlgorithm"] == "SHA256"
        until = put["ObjectLockRetainUntilDate"]
        assert (
            timedelta(days=5) - timedelta(minutes=1)
            < until - datetime.now(UTC)
            <= (timedelta(days=5))
        )
    assert client.puts[1]["IfNoneMatch"] == "*"  # still a create-only write


def _erase_argv(*extra: str) -> list[str]:
    names = (
        "request-id", "manifest", "manifest-sha256", "requests-table", "raw-bucket",
        "lake-bucket", "reports-bucket", "datasets-table", "catalog-table", "hash-key-secret",
        "correlation-id",
    )  # fmt: skip
    return [token for name in names for token in (f"--{name}", "x")] + list(extra)


def test_the_erase_job_takes_the_settings_as_arguments() -> None:
    args, _ = parse_args(
        _erase_argv("--evidence-retention-days", "30", "--evidence-lock-mode", "COMPLIANCE")
    )
    assert args.evidence == EvidenceLock(days=30, mode="COMPLIANCE")
    assert parse_args(_erase_argv())[0].evidence is None  # a local run: nothing locked
    with pytest.raises(EvidenceSettingsError):  # refused before anything is read or erased
        parse_args(_erase_argv("--evidence-retention-days", "0"))


# ------------------------------------------------------------------------------- the template


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _bucket(sam: Template) -> dict[str, Any]:
    return properties_of(sam["Resources"][BUCKET])


def object_lock_off(sam: Template, translated: Template) -> list[str]:
    """The reports bucket has Object Lock enabled (both properties: new stacks and the update
    of an existing one), versioning on, and no default retention (manifests/ must expire)."""
    props = _bucket(sam)
    offenders = []
    if props.get("ObjectLockEnabled") is not True:
        offenders.append(f"{BUCKET}: ObjectLockEnabled is not true")
    lock = props.get("ObjectLockConfiguration") or {}
    if lock.get("ObjectLockEnabled") != "Enabled":
        offenders.append(f"{BUCKET}: ObjectLockConfiguration.ObjectLockEnabled is not Enabled")
    if "Rule" in lock:
        offenders.append(f"{BUCKET}: a default retention would lock manifests/ and reconcile/")
    if (props.get("VersioningConfiguration") or {}).get("Status") != "Enabled":
        offenders.append(f"{BUCKET}: not versioned")
    return offenders


def _overlaps_evidence(prefix: str) -> bool:
    return EVIDENCE.startswith(prefix) or prefix.startswith(EVIDENCE)


def expiry_reaches_evidence(sam: Template, translated: Template) -> list[str]:
    """No enabled lifecycle rule that expires or deletes versions applies to erasure/ (a rule
    without a prefix applies to the whole bucket); only the abort of incomplete uploads may."""
    offenders = []
    for rule in (_bucket(sam).get("LifecycleConfiguration") or {}).get("Rules", []):
        if rule.get("Status") != "Enabled":
            continue
        expires = set(rule) & {
            "ExpirationInDays", "ExpirationDate", "ExpiredObjectDeleteMarker",
            "NoncurrentVersionExpiration", "NoncurrentVersionExpirationInDays",
            "Transitions", "Transition", "NoncurrentVersionTransitions",
            "NoncurrentVersionTransition",
        }  # fmt: skip
        prefix = rule.get("Prefix", "")
        if expires and (not isinstance(prefix, str) or _overlaps_evidence(prefix)):
            offenders.append(f"{BUCKET} rule {rule.get('Id')}: {', '.join(sorted(expires))}")
    return offenders


def _reports_prefixes(translated: Template) -> set[str]:
    """The top-level prefixes of the reports bucket any role may write (from its policies)."""
    prefixes = set()
    for _, _, statement in identity_statements(translated):
        actions = [str(a) for a in _as_list(statement.get("Action"))]
        if statement.get("Effect") != "Allow" or "s3:PutObject" not in actions:
            continue
        for text in _strings(statement.get("Resource")):
            head = "${ReportsBucket.Arn}/"
            if text.startswith(head):
                prefixes.add(text[len(head) :].split("/", 1)[0] + "/")
    return prefixes


def other_prefixes_keep_no_expiry(sam: Template, translated: Template) -> list[str]:
    """Every prefix of the reports bucket written by a role, but erasure/, still has its
    noncurrent versions expire (NoncurrentVersionExpirationDays)."""
    covered = {
        str(rule.get("Prefix"))
        for rule in (_bucket(sam).get("LifecycleConfiguration") or {}).get("Rules", [])
        if rule.get("Status") == "Enabled"
        and (rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
        == {"Ref": "NoncurrentVersionExpirationDays"}
    }
    return [
        f"{BUCKET}: noncurrent versions of {prefix} never expire"
        for prefix in sorted(_reports_prefixes(translated) - {EVIDENCE})
        if not any(prefix.startswith(c) for c in covered)
    ]


def _allowed(statement: dict[str, Any], action: str) -> bool:
    return statement.get("Effect") == "Allow" and any(
        fnmatch.fnmatch(action.lower(), str(a).lower()) for a in _as_list(statement.get("Action"))
    )


def writers_cannot_lock(sam: Template, translated: Template) -> list[str]:
    """Each role allowed to PUT erasure/ documents is allowed s3:PutObjectRetention on them (a
    PUT with Object Lock headers needs it)."""
    offenders = []
    writes: dict[str, bool] = {}
    for lid, _, statement in identity_statements(translated):
        targets = list(_strings(statement.get("Resource")))
        if not any(t.startswith("${ReportsBucket.Arn}/erasure/") for t in targets):
            continue
        if _allowed(statement, "s3:PutObject"):
            writes.setdefault(lid, False)
        if _allowed(statement, "s3:PutObjectRetention"):
            writes[lid] = True
    offenders += [f"{lid}: writes erasure/ without s3:PutObjectRetention" for lid, ok in
                  sorted(writes.items()) if not ok]  # fmt: skip
    if not writes:
        offenders.append("no role writes erasure/ (the check sees nothing)")
    return offenders


def someone_may_bypass(sam: Template, translated: Template) -> list[str]:
    """No role of the stack may bypass a governance-mode retention."""
    return sorted(
        {
            f"{lid} {statement.get('Sid', '(no Sid)')}: {BYPASS}"
            for lid, _, statement in identity_statements(translated)
            if _allowed(statement, BYPASS)
        }
    )


def settings_do_not_reach_writers(sam: Template, translated: Template) -> list[str]:
    """The two parameters exist with their bounds, reach the erasure steps function's
    environment and the erase job's arguments (state machine substitutions)."""
    offenders = []
    parameters = sam.get("Parameters", {})
    days, mode = parameters.get("EvidenceRetentionDays", {}), parameters.get("EvidenceLockMode", {})
    if (days.get("MinValue"), days.get("MaxValue")) != (1, 3650) or not (
        1 <= int(days.get("Default", 0)) <= 3650
    ):
        offenders.append("EvidenceRetentionDays: not a number of days from 1 to 3650")
    if mode.get("AllowedValues") != ["GOVERNANCE", "COMPLIANCE"]:
        offenders.append("EvidenceLockMode: not GOVERNANCE or COMPLIANCE")
    env = (function_settings(sam, "ErasureStepsFunction").get("Environment") or {}).get(
        "Variables", {}
    )
    for name, parameter in (
        ("EVIDENCE_RETENTION_DAYS", "EvidenceRetentionDays"),
        ("EVIDENCE_LOCK_MODE", "EvidenceLockMode"),
    ):
        if env.get(name) != {"Ref": parameter}:
            offenders.append(f"ErasureStepsFunction: {name} is not the parameter {parameter}")
    machine = properties_of(sam["Resources"]["ErasureStateMachine"])
    substitutions = machine.get("DefinitionSubstitutions", {})
    definition = (REPO_ROOT / str(machine["DefinitionUri"])).read_text()
    arguments = json.dumps(json.loads(definition)["States"]["Select Spark Engine"]["Assign"])
    for argument, parameter in (
        ("--evidence-retention-days", "EvidenceRetentionDays"),
        ("--evidence-lock-mode", "EvidenceLockMode"),
    ):
        if substitutions.get(parameter) != {"Ref": parameter}:
            offenders.append(f"ErasureStateMachine: substitution {parameter} is not the parameter")
        if f'"{argument}": "${{{parameter}}}"' not in arguments:
            offenders.append(f"ErasureStateMachine: the erase job gets no {argument}")
    return offenders


CHECKS: dict[str, Callable[[Template, Template], list[str]]] = {
    "object_lock_off": object_lock_off,
    "expiry_reaches_evidence": expiry_reaches_evidence,
    "other_prefixes_keep_no_expiry": other_prefixes_keep_no_expiry,
    "writers_cannot_lock": writers_cannot_lock,
    "someone_may_bypass": someone_may_bypass,
    "settings_do_not_reach_writers": settings_do_not_reach_writers,
}


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def translated(template: Template) -> Template:
    return _translated(template)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_template_keeps_the_evidence_immutable(
    template: Template, translated: Template, check: str
) -> None:
    assert CHECKS[check](template, translated) == []


def test_the_reports_bucket_prefixes_are_the_ones_the_code_writes(translated: Template) -> None:
    # erasure/ (functions, erase job), manifests/ (ingestion), reconcile/ (reconcile job)
    assert _reports_prefixes(translated) == {"erasure/", "manifests/", "reconcile/"}


def _break_lock(t: Template) -> str:
    del t["Resources"][BUCKET]["Properties"]["ObjectLockEnabled"]
    return "ObjectLockEnabled is not true"


def _break_expiry(t: Template) -> str:  # the old whole-bucket rule back
    rules = t["Resources"][BUCKET]["Properties"]["LifecycleConfiguration"]["Rules"]
    rules.append(
        {"Id": "ExpireNoncurrentVersions", "Status": "Enabled",
         "NoncurrentVersionExpiration": {"NoncurrentDays": 30}}
    )  # fmt: skip
    return "rule ExpireNoncurrentVersions"


def _break_other_prefixes(t: Template) -> str:
    props = t["Resources"][BUCKET]["Properties"]["LifecycleConfiguration"]
    props["Rules"] = [r for r in props["Rules"] if r.get("Prefix") != "reconcile/"]
    return "reconcile/ never expire"


def _break_writers(t: Template) -> str:
    role = t["Resources"]["SparkJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    for statement in role["Statement"]:
        if statement.get("Sid") == "ReadManifestsWriteResults":
            statement["Action"] = ["s3:GetObject", "s3:PutObject"]
    return "SparkJobRole: writes erasure/ without s3:PutObjectRetention"


def _break_bypass(t: Template) -> str:
    policies = t["Resources"]["ErasureStepsFunction"]["Properties"]["Policies"]
    policies.append(
        {"Statement": [{"Sid": "Oops", "Effect": "Allow", "Action": "s3:Bypass*",
                        "Resource": {"Fn::Sub": "${ReportsBucket.Arn}/erasure/*"}}]}
    )  # fmt: skip
    return "ErasureStepsFunctionRole Oops"


def _break_settings(t: Template) -> str:
    del t["Resources"]["ErasureStateMachine"]["Properties"]["DefinitionSubstitutions"][
        "EvidenceLockMode"
    ]
    return "substitution EvidenceLockMode"


BREAKERS: dict[str, Callable[[Template], str]] = {
    "object_lock_off": _break_lock,
    "expiry_reaches_evidence": _break_expiry,
    "other_prefixes_keep_no_expiry": _break_other_prefixes,
    "writers_cannot_lock": _break_writers,
    "someone_may_bypass": _break_bypass,
    "settings_do_not_reach_writers": _break_settings,
}


def test_every_check_has_a_breaker() -> None:
    assert sorted(BREAKERS) == sorted(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_check_fails_on_a_template_broken_on_purpose(template: Template, check: str) -> None:
    broken = copy.deepcopy(template)
    culprit = BREAKERS[check](broken)
    offenders = CHECKS[check](broken, _translated(broken))
    assert any(culprit in offender for offender in offenders), (check, culprit, offenders)
