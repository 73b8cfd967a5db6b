"""Driving statemachines/erasure.asl.json on an in-process local cloud, as its users do: the
reviews sample ingested by the object events path, requests filed through the REST API, the
approver's email read from the captured mail, and decisions made on the approval page."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import requests

from lethe.localcloud.mail import fetch_mail
from lethe.target import Target
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureRequestBody,
    hash_subjects,
    new_request,
    new_request_id,
)
from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key
from tests.sfn.conftest import SAMPLES, Cloud

REVIEWS_KEY = "reviews/2026/11/21/batch-001.csv"
REQUESTER = "privacy@example.com"
TERMINAL = {"REJECTED", "EXPIRED", "COMPLETED", "FAILED"}
_CODE = re.compile(r'<code id="confirmation-code">([^<]+)</code>')
_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
_OUTCOME = re.compile(r'data-outcome="([^"]+)"')


class ErasureDriver:
    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        state = cloud.state
        self.target = Target(
            outputs=dict(state["outputs"]),
            region=state["region"],
            api_url=state["api_url"],
            endpoint_url=state["endpoint_url"],
            credentials={"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
        )
        self.raw = cloud.outputs["RawBucketName"]

    def ingest_reviews(self) -> str:
        """Register the reviews dataset and upload its sample; wait until it is ingested."""
        status, _ = self.target.call_api(
            "PUT", "/datasets/reviews", json.loads((SAMPLES / "reviews.dataset.json").read_text())
        )
        assert status in (200, 201)
        s3 = self.cloud.client("s3")
        body = (SAMPLES / "reviews-2026-11-21.csv").read_bytes()
        version = str(s3.put_object(Bucket=self.raw, Key=REVIEWS_KEY, Body=body)["VersionId"])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                item = self.cloud.catalog_item(self.raw, REVIEWS_KEY, version)
                if item["status"] in {"INGESTED", "QUARANTINED", "FAILED"}:
                    assert item["status"] == "INGESTED", item
                    return version
            except KeyError:
                pass
            time.sleep(0.25)
        raise AssertionError("the reviews sample was not ingested")

    def raw_bytes(self) -> bytes:
        return bytes(
            self.cloud.client("s3").get_object(Bucket=self.raw, Key=REVIEWS_KEY)["Body"].read()
        )

    def file(self, *subjects: str) -> str:
        status, body = self.target.call_api(
            "POST",
            "/erasure-requests",
            {"subject_ids": list(subjects), "reason": "art. 17", "requested_by": REQUESTER},
        )
        assert status == 202, body
        return str(body["request_id"])

    def record(self, request_id: str) -> dict[str, Any]:
        status, body = self.target.call_api("GET", f"/erasure-requests/{request_id}")
        assert status == 200, body
        return body

    def wait(self, request_id: str, *statuses: str, timeout: float = 300) -> dict[str, Any]:
        wanted = set(statuses) | TERMINAL
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.record(request_id)
            if record["status"] in wanted:
                return record
            time.sleep(0.5)
        raise AssertionError(f"{request_id} did not reach {statuses} in {timeout} s")

    def execution(self, request_id: str, timeout: float = 300) -> dict[str, Any]:
        """The request's execution once it ended, with its history."""
        return self.wait_execution(self.record(request_id)["execution_arn"], timeout=timeout)

    def wait_execution(self, arn: str, timeout: float = 300) -> dict[str, Any]:
        sfn = self.cloud.client("stepfunctions")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                history = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
                return {"execution": described, "history": history}
            time.sleep(0.25)
        raise AssertionError(f"{arn} is still running")

    def stored_request(self, *subjects: str) -> str:
        """A request record as the API stores it, but with no workflow started (a test starts
        one itself)."""
        key = load_hash_key(
            self.cloud.client("secretsmanager"), self.cloud.outputs["SubjectHashKeySecretArn"]
        )
        body = ErasureRequestBody(subject_ids=list(subjects), requested_by=REQUESTER)
        request_id = new_request_id()
        table = self.target.resource("dynamodb").Table(
            self.cloud.outputs["ErasureRequestsTableName"]
        )
        DynamoErasureRequests(table).create(
            new_request(
                request_id,
                body,
                hash_subjects(body, key, []),
                via="test",
                key_fingerprint=key_fingerprint(key),
            )
        )
        return request_id

    def link(self, request_id: str, timeout: float = 30) -> str:
        """The approval link of the email about this request. The workflow records the request
        AWAITING_APPROVAL (with its task token) before it sends the email
        (`approval_flow.request_approval`), so the email may follow the status by a moment: it
        is waited for."""
        deadline = time.monotonic() + timeout
        while True:
            mail = fetch_mail(self.cloud.state["control_url"])
            found = [m for m in mail if request_id in m["subject"]]
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        assert found, f"no email about {request_id} within {timeout:.0f} s"
        (link,) = found[-1]["links"]
        return str(link)

    def decide(self, link: str, decision: str) -> str:
        """Open the link, type the code, press the button; returns the page's outcome (the
        outcome of the opened page itself when it offers no decision)."""
        session = requests.Session()
        page = session.get(link, timeout=30)
        code = _CODE.search(page.text)
        token = _TOKEN.search(page.text)
        if code is None or token is None:
            found = _OUTCOME.search(page.text)
            assert found, page.text
            return found.group(1)
        answer = session.post(
            link,
            data={
                "csrf_token": token.group(1),
                "confirmation": code.group(1),
                "decision": decision,
            },
            timeout=30,
        )
        found = _OUTCOME.search(answer.text)
        assert found, answer.text
        return found.group(1)


def states_entered(history: list[dict[str, Any]]) -> list[str]:
    return [
        e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e
    ]


WATERMARK = ["Watch Ingestion", "Ingestion Settled"]


def polls_folded(states: list[str]) -> list[str]:
    """The states entered with the ingestion watermark's polls folded into its last look: each
    "Wait For Ingestion" must follow a look ("Watch Ingestion", "Ingestion Settled") and be
    followed by the next one. How many polls a request takes depends on how soon after filing
    its first look runs (lethe_shared.erasure.scope.QUIET_SECONDS), not on what it does."""
    folded: list[str] = []
    for state in states:
        if state == "Wait For Ingestion":
            assert folded[-2:] == WATERMARK, states
            del folded[-2:]
            continue
        folded.append(state)
    return folded


def published(cloud: Cloud, queue: str, request_id: str, timeout: float = 30) -> list[Any]:
    """Messages of a capture queue about one request (SNS raw messages or EventBridge events)."""
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not found:
        found = [m for m in cloud.messages(queue, timeout=2) if request_id in json.dumps(m)]
    return found
