"""The runbooks' commands on the local cloud (issue 23), as an operator types them: while a
request awaits approval `lethe key rotate-check` refuses a key rotation naming it; an approval
email that never arrived is sent again with `lethe erasure resend` (the same link, which then
approves); months later `lethe erasure find --subject` lists the subject's request and its
certificate, which verifies and names the key it was hashed with. The key is not rotated here:
the session's other modules share this local cloud."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_erasure import _upload_and_ingest
from tests.localcloud_support import LocalCloud, cli, decide_on_approval_page, sample_dataset_as

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
