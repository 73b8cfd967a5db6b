"""The runbooks' commands on the local cloud (issue 23), as an operator types them: while a
request awaits approval `lethe key rotate-check` refuses a key rotation naming it; an approval
email that never arrived is sent again with `lethe erasure resend` (the same link, which then
approves); months later `lethe erasure find --subject` lists the subject's request and its
certificate, which verifies and names the key it was hashed with; `lethe index compact
--dataset D --wait` compacts a dataset's segment index by hand (no level-0 segment left, lookups
unchanged; once its level-0 segments are older than the 60 s settle time); `lethe datasets
retention D --run --wait` runs a dataset's retention by hand (first skipped for the rule's
notice period, RetentionNoticeDays 7 as deployed; then, the rule seen 8 days ago, COMPLETED, as
`lethe datasets show` reports; its certificate verifies and `lethe erasure status rt-...` reads
its record). The key is not rotated here: the session's other modules share this local cloud,
so these tests use datasets of their own."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lethe.commands.index_compact import SETTLE_SECONDS
from lethe_shared.erasure.retention_runs import DynamoRunStates
from lethe_shared.index.segments import SegmentSubjectIndex
from lethe_shared.index.segments.format import seq_ns
from lethe_shared.index.segments.manifest import ACTIVE
from tests.e2e.test_erasure import _upload_and_ingest
from tests.localcloud_support import (
    SAMPLES,
    LocalCloud,
    cli,
    decide_on_approval_page,
    sample_dataset_as,
    wait_for,
)

DATASET = "runbook-reviews"
SUBJECT = "rb-7001"
# the module's fixture ingests, files, approves and erases (and, run alone, starts the cloud)
pytestmark = pytest.mark.timeout(1200)
BODY = (
    b"user_id,review_date,stars,text\r\nrb-7001,2026-11-20,5,first\r\nrb-7002,2026-11-21,3,kept\r\n"
)


def _mail(cloud: LocalCloud, request_id: str) -> list[dict[str, Any]]:
    mail = json.loads(cli(cloud, "local", "mail", "--json").stdout)
    return [m for m in mail if request_id in m["subject"]]


@pytest.fixture(scope="module")
def runbook(local_cloud: LocalCloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cloud = local_cloud
    folder: Path = tmp_path_factory.mktemp("runbook-datasets")
    assert (
        cli(cloud, "datasets", "put", str(sample_dataset_as("reviews", DATASET, folder))).returncode
        == 0
    )
    _upload_and_ingest(cloud, (f"{DATASET}/2026/11/batch-1.csv", BODY))
    filed = cli(
        cloud, "erasure", "request", "--subject", SUBJECT, "--dataset", DATASET,
        "--requested-by", "privacy@example.com",
    )  # fmt: skip
    assert filed.returncode == 0, filed.stderr
    request_id = filed.stdout.strip()
    waited = cli(
        cloud, "erasure", "status", request_id, "--wait", "--until", "AWAITING_APPROVAL",
        "--timeout", "300",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    check = cli(cloud, "key", "rotate-check", "--json")
    resent = cli(cloud, "erasure", "resend", request_id)
    mail = _mail(cloud, request_id)
    answer = decide_on_approval_page(mail[-1]["links"][0], "approve", timeout=30)
    finished = cli(cloud, "erasure", "status", request_id, "--wait", "--timeout", "600")
    return {
        "cloud": cloud, "request_id": request_id, "check": check, "resent": resent,
        "mail": mail, "answer": answer, "finished": finished,
    }  # fmt: skip


def test_rotate_check_refuses_while_the_request_is_open(runbook: dict[str, Any]) -> None:
    check = runbook["check"]
    assert check.returncode == 1, check.stderr
    document = json.loads(check.stdout)
    assert document["ready"] is False
    assert {"request_id": runbook["request_id"], "status": "AWAITING_APPROVAL"} in document[
        "open_requests"
    ]


def test_resend_sends_the_same_link_which_approves(runbook: dict[str, Any]) -> None:
    resent = runbook["resent"]
    assert resent.returncode == 0, resent.stderr
    assert "approval email sent again to 1 approver(s)" in resent.stdout
    first, again = runbook["mail"]
    assert first["links"] == again["links"]
    assert first["to"] == again["to"]
    assert 'data-outcome="approved"' in runbook["answer"].text
    assert runbook["finished"].returncode == 0, runbook["finished"].stderr
    refused = cli(runbook["cloud"], "erasure", "resend", runbook["request_id"])
    assert refused.returncode == 1
    assert "is COMPLETED" in refused.stderr


def test_find_lists_the_request_and_its_certificate_months_later(runbook: dict[str, Any]) -> None:
    cloud, request_id = runbook["cloud"], runbook["request_id"]
    found = cli(cloud, "erasure", "find", "--subject", SUBJECT, "--json")
    assert found.returncode == 0, found.stderr
    (row,) = [r for r in json.loads(found.stdout) if r["request_id"] == request_id]
    assert row["status"] == "COMPLETED"
    assert row["certificate"]["url"].endswith(f"/erasure/{request_id}/certificate.json")
    assert SUBJECT not in found.stdout + found.stderr
    assert (
        cli(cloud, "erasure", "find", "--subject", "rb-7002", "--json").stdout.count(request_id)
        == 0
    )
    checked = cli(cloud, "erasure", "certificate", request_id, "--verify")
    assert checked.returncode == 0, checked.stderr
    assert f"key {row['key_fingerprint']})" in checked.stdout


# ------------------------------------------------ runs started by hand: compaction, retention

COMPACTED = "runbook-compact"
RETAINED = "runbook-retention"
TODAY = datetime.now(UTC).date()
OLD, RECENT = (TODAY - timedelta(days=400)).isoformat(), (TODAY - timedelta(days=1)).isoformat()
COMPACTED_UPLOADS = {
    f"{COMPACTED}/2026/11/batch-1.csv": (
        b"user_id,review_date,stars,text\r\nrb-8001,2026-11-20,5,one\r\nrb-8002,2026-11-21,3,two\r\n"
    ),
    f"{COMPACTED}/2026/11/batch-2.csv": (
        b"user_id,review_date,stars,text\r\nrb-8001,2026-11-22,4,three\r\n"
    ),
}
RETAINED_KEY = f"{RETAINED}/2026/batch-1.csv"
HEADER = "user_id,review_date,stars,text\r\n"
RETAINED_BODY = (
    f"{HEADER}rb-9001,{OLD},5,expired one\r\nrb-9002,{OLD},2,expired two\r\n"
    f"rb-9001,{RECENT},4,recent one\r\n"
).encode()
CLI_TIMEOUT = 900.0  # Spark runs: the erase job, its verify run and the index job


@pytest.fixture(scope="module")
def operator_datasets(
    local_cloud: LocalCloud, tmp_path_factory: pytest.TempPathFactory
) -> LocalCloud:
    """Two datasets of this module's own, copies of the reviews sample: one to compact, one
    keeping rows 30 days by `review_date`, each with its uploads ingested."""
    cloud = local_cloud
    folder: Path = tmp_path_factory.mktemp("runbook-operator")
    document = json.loads((SAMPLES / "reviews.dataset.json").read_text())
    retained = folder / f"{RETAINED}.json"
    retained.write_text(json.dumps(
        {**document, "dataset_id": RETAINED, "retention": {"column": "review_date", "days": 30}}
    ))  # fmt: skip
    for path in (sample_dataset_as("reviews", COMPACTED, folder), retained):
        put = cli(cloud, "datasets", "put", str(path))
        assert put.returncode == 0, put.stderr
    _upload_and_ingest(cloud, *COMPACTED_UPLOADS.items(), (RETAINED_KEY, RETAINED_BODY))
    return cloud


def _active_segments(cloud: LocalCloud, dataset_id: str, level: int) -> int:
    """The dataset's active segments of one level, as the manifest lists them."""
    index = SegmentSubjectIndex(
        cloud.client("s3"), cloud.outputs["IndexBucketName"], cloud.table("IndexManifestTableName")
    )
    listed = index.manifest.listing(dataset_id)
    return sum(1 for s in listed if s.level == level and s.state == ACTIVE)


def _settled(cloud: LocalCloud, dataset_id: str) -> bool:
    """Every active level-0 segment of the dataset is older than the compaction's settle time
    (with 5 s to spare), by the time its rows were written (its origin seq)."""
    index = SegmentSubjectIndex(
        cloud.client("s3"), cloud.outputs["IndexBucketName"], cloud.table("IndexManifestTableName")
    )
    level0 = [s for s in index.manifest.listing(dataset_id) if s.level == 0 and s.state == ACTIVE]
    oldest_allowed = time.time_ns() - (SETTLE_SECONDS + 5) * 10**9
    return all(seq_ns(s.origin_seq or s.seq) < oldest_allowed for s in level0)


def _lookup(cloud: LocalCloud, subject: str, dataset_id: str) -> list[dict[str, Any]]:
    found = cli(cloud, "index", "lookup", "--subject", subject, "--dataset", dataset_id, "--json")
    assert found.returncode == 0, found.stderr
    return sorted(json.loads(found.stdout), key=lambda r: (r["zone"], r["key"]))


def test_a_retention_run_by_hand_completes_and_shows_in_datasets_show(
    operator_datasets: LocalCloud,
) -> None:
    cloud = operator_datasets
    raw = cloud.outputs["RawBucketName"]
    # the plan first (a dry run): the raw upload is read row by row, the expired partition goes
    plan = cli(cloud, "datasets", "retention", RETAINED, "--json")
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert f"s3://{raw}/{RETAINED_KEY}" in planned["scanned"]
    assert any(f"review_date={OLD}/" in url for url in planned["expired"])

    # a first run by hand: the local cloud deploys RetentionNoticeDays 7 (the product default),
    # so the run records the rule and skips the dataset, saying when the rule applies
    first = cli(cloud, "datasets", "retention", RETAINED, "--run", "--wait", timeout=CLI_TIMEOUT)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"retention of {RETAINED} skipped (notice): rule " in first.stdout
    assert "(RetentionNoticeDays 7)" in first.stdout
    unchanged = cloud.client("s3").get_object(Bucket=raw, Key=RETAINED_KEY)["Body"].read()
    assert unchanged == RETAINED_BODY  # nothing removed

    # Given the notice passed: the rule first seen 8 days ago, as a run then would have recorded
    # it (only the run state's date moves; the deployment's notice stays 7 days)
    states = DynamoRunStates(cloud.table("DatasetsTableName"))
    state = states.get(RETAINED)
    assert state is not None
    assert state.last_run["reason"] == "notice"
    seen = (datetime.now(UTC) - timedelta(days=8)).isoformat()
    states.put(state.model_copy(update={"rule_since": seen}))

    # When the operator starts a run by hand and waits for it
    ran = cli(cloud, "datasets", "retention", RETAINED, "--run", "--wait", timeout=CLI_TIMEOUT)

    # Then it COMPLETED: the expired rows are gone, the recent one kept
    assert ran.returncode == 0, ran.stdout + ran.stderr
    arn, line = ran.stdout.splitlines()
    assert f":execution:lethe-local-retention:{RETAINED}-retention-" in arn
    done = re.fullmatch(
        rf"retention run (rt-{RETAINED}-\S+) of {RETAINED}: COMPLETED \((\d+) row\(s\) removed, "
        rf"(\d+) version\(s\) purged\); its certificate: `lethe erasure certificate \1 --verify`",
        line,
    )
    assert done, line
    run_id = done.group(1)
    assert int(done.group(2)) == 4  # two raw lines, and the two rows of the expired partition
    body = cloud.client("s3").get_object(Bucket=raw, Key=RETAINED_KEY)["Body"].read()
    assert body == f"{HEADER}rb-9001,{RECENT},4,recent one\r\n".encode()
    # and `lethe datasets show` reports it, in JSON and in words
    shown = cli(cloud, "datasets", "show", RETAINED, "--json")
    assert shown.returncode == 0, shown.stderr
    last = json.loads(shown.stdout)["retention_runs"]["last_run"]
    assert (last["outcome"], last["run_id"]) == ("COMPLETED", run_id)
    assert last["rows_removed"] == int(done.group(2))
    words = cli(cloud, "datasets", "show", RETAINED)
    assert re.search(r"last run \S+: COMPLETED \(\d+ row\(s\) removed", words.stdout), words.stdout
    assert "rule in force since" in words.stdout
    # its certificate verifies, as the runbook's next step says
    checked = cli(cloud, "erasure", "certificate", run_id, "--verify")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "certificate verifies: signed by" in checked.stdout
    # and its record reads through the API as the runbook says
    status = cli(cloud, "erasure", "status", run_id, "--json")
    assert status.returncode == 0, status.stderr
    assert (json.loads(status.stdout)["status"], json.loads(status.stdout)["kind"]) == (
        "COMPLETED", "retention",
    )  # fmt: skip
    everything = "".join(r.stdout + r.stderr for r in (first, ran, shown, words, checked, status))
    assert "rb-900" not in everything


def test_a_compaction_by_hand_leaves_no_level0_segment(operator_datasets: LocalCloud) -> None:
    cloud = operator_datasets
    assert cloud.outputs["IndexStore"] == "segments"
    level0 = _active_segments(cloud, COMPACTED, 0)
    assert level0 >= 2, "each ingested upload wrote level-0 segments"
    # a compaction leaves level-0 segments younger than its settle time (60 s, as deployed) for
    # the next run, as the runbook says: wait until they are older (the retention test before
    # this one usually took longer)
    wait_for(
        lambda: _settled(cloud, COMPACTED), timeout=SETTLE_SECONDS + 120, every=2,
        what=f"the level-0 segments of {COMPACTED} to be older than the settle time",
    )  # fmt: skip
    before = {s: _lookup(cloud, s, COMPACTED) for s in ("rb-8001", "rb-8002")}
    assert before["rb-8001"]
    assert before["rb-8002"]

    # the runbook's command, as an operator types it
    compacted = cli(
        cloud, "index", "compact", "--dataset", COMPACTED, "--wait", timeout=CLI_TIMEOUT
    )

    assert compacted.returncode == 0, compacted.stdout + compacted.stderr
    arn, summary = compacted.stdout.splitlines()
    assert f":execution:lethe-local-index-compaction:{COMPACTED}-compact-" in arn
    level1 = _active_segments(cloud, COMPACTED, 1)
    assert summary == (
        f"compaction of {COMPACTED} SUCCEEDED: active level-0 segments {level0} -> 0, "
        f"level-1 segments 0 -> {level1}"
    )
    assert _active_segments(cloud, COMPACTED, 0) == 0
    assert level1 >= 1
    after = {s: _lookup(cloud, s, COMPACTED) for s in ("rb-8001", "rb-8002")}
    assert after == before  # the same entries, read from level 1
    assert "settle time" not in compacted.stdout + compacted.stderr
    assert "rb-800" not in compacted.stdout + compacted.stderr
