"""Faults of the erasure workflow's Lambda steps, on statemachines/erasure.asl.json as deployed
by the local cloud: a step whose function raises or times out (tests/sfn/fixtures/faulty stands
in for the real function through LambdaRuntime.redeploy and fails the step it is told to), and
SES refusing the approval email (the sender's identity removed). Each is retried as the ASL
says; once the retries are spent the request ends FAILED, the FAILED outcome is published on
the notifications topic, and the execution fails, which is what ErasureExecutionsFailedAlarm
counts (tests/unit/test_observability.py checks that every state machine has that alarm). A
fault that clears before the retries are spent loses nothing: the request goes on.

No Spark job runs here: every request fails or is cancelled before erasing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lethe.localcloud.deployment import FunctionSpec
from lethe.localcloud.mail import fetch_mail
from tests.sfn.conftest import Cloud, start_cloud
from tests.sfn.erasure_flow import ErasureDriver, polls_folded, published, states_entered

FAULTY = Path(__file__).parent / "fixtures" / "faulty"
# "Was Erasing": a request that never got past Mark Erasing gets no partial certificate
FAILED_TAIL = ["Mark Failed", "Was Erasing", "Publish Outcome", "Announce Outcome", "Which Outcome"]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with start_cloud(tmp_path_factory) as started:
        yield started


@pytest.fixture(scope="module")
def driver(cloud: Cloud) -> ErasureDriver:
    return ErasureDriver(cloud)


@pytest.fixture(scope="module")
def notifications(cloud: Cloud) -> str:
    return cloud.capture("faults-sns", topic=cloud.outputs["NotificationsTopicArn"])


class Faults:
    """Deploys the faulty stand-in over a function, and the real one back afterwards."""

    def __init__(self, cloud: Cloud, workdir: Path) -> None:
        self.runtime = cloud.cloud.dispatcher.runtime
        self.workdir = workdir
        self._replaced: list[FunctionSpec] = []

    def inject(
        self, logical_id: str, *, kind: str, step: str = "*", times: int = 1_000_000,
        timeout_seconds: int | None = None,
    ) -> Path:  # fmt: skip
        real = self.runtime.deployment.functions[logical_id]
        counter = self.workdir / f"{logical_id}.failed"
        faulty = dataclasses.replace(
            real,
            code_uri=FAULTY,
            handler="faulty.handler",
            environment={
                **real.environment,
                "LETHE_FAULT_CODE": str(real.code_uri),
                "LETHE_FAULT_STEP": step,
                "LETHE_FAULT_KIND": kind,
                "LETHE_FAULT_TIMES": str(times),
                "LETHE_FAULT_COUNTER": str(counter),
            },
            timeout_seconds=timeout_seconds or real.timeout_seconds,
        )
        self._replaced.append(self.runtime.redeploy(faulty))
        return counter

    def restore(self) -> None:
        while self._replaced:
            self.runtime.redeploy(self._replaced.pop())


@pytest.fixture
def faults(cloud: Cloud, tmp_path: Path) -> Iterator[Faults]:
    injected = Faults(cloud, tmp_path)
    yield injected
    injected.restore()


@pytest.fixture
def ses_refuses(cloud: Cloud) -> Iterator[str]:
    """SES refuses every message (MessageRejected: the sender is no verified identity) until
    the test verifies the sender again; verified again afterwards in any case."""
    ses = cloud.client("ses")
    sender = cloud.state["parameters"]["SenderEmail"]
    ses.delete_identity(Identity=sender)
    yield sender
    ses.verify_email_identity(EmailAddress=sender)


def _task_failures(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["taskFailedEventDetails"] for e in history if e["type"] == "TaskFailed"]


def _assert_failed_and_published(
    cloud: Cloud, driver: ErasureDriver, notifications: str, request_id: str, error: str
) -> dict[str, Any]:
    ended = driver.execution(request_id, timeout=240)
    assert ended["execution"]["status"] == "FAILED"  # an ExecutionsFailed datum: the alarm's
    assert ended["execution"]["error"] == "ErasureFailed"
    assert states_entered(ended["history"])[-6:] == [*FAILED_TAIL, "Erasure Failed"]
    record = driver.record(request_id)
    assert record["status"] == "FAILED"
    assert record["error"]["error"] == error
    (message,) = published(cloud, notifications, request_id)
    assert (message["status"], message["error"]) == ("FAILED", error)
    return ended


def test_the_alarm_on_failed_erasure_executions_is_deployed(cloud: Cloud) -> None:
    name = f"lethe-{cloud.state['parameters']['Stage']}-erasure-executions-failed"
    (alarm,) = cloud.client("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"]
    watched = {
        (
            q["MetricStat"]["Metric"]["MetricName"],
            q["MetricStat"]["Metric"]["Dimensions"][0]["Value"],
        )
        for q in alarm["Metrics"]
        if "MetricStat" in q
    }
    assert ("ExecutionsFailed", cloud.outputs["ErasureStateMachineArn"]) in watched
    assert alarm["AlarmActions"] == [cloud.outputs["NotificationsTopicArn"]]


def test_a_step_that_raises_is_retried_twice_then_the_request_fails_and_is_published(
    cloud: Cloud, driver: ErasureDriver, notifications: str, faults: Faults
) -> None:
    counter = faults.inject("ErasureStepsFunction", kind="raise", step="report")

    request_id = driver.file("u-1001")

    ended = _assert_failed_and_published(
        cloud, driver, notifications, request_id, "InjectedFaultError"
    )
    assert [f["error"] for f in _task_failures(ended["history"])] == ["InjectedFaultError"] * 3
    assert polls_folded(states_entered(ended["history"]))[2:6] == [
        "Watch Ingestion", "Ingestion Settled", "Build Report", "Mark Failed",
    ]  # fmt: skip
    assert counter.read_text() == "3"  # the first attempt and two retries
    assert [h["status"] for h in driver.record(request_id)["history"]] == ["RECEIVED", "FAILED"]


def test_a_step_that_times_out_is_retried_twice_then_the_request_fails_and_is_published(
    cloud: Cloud, driver: ErasureDriver, notifications: str, faults: Faults
) -> None:
    # the timeout is the whole function's, every step and attempt: long enough for the real
    # steps of a loaded machine (2 s made a slow step time out too), short enough to wait for
    counter = faults.inject("ErasureStepsFunction", kind="hang", step="report", timeout_seconds=10)

    request_id = driver.file("u-1001")

    ended = _assert_failed_and_published(
        cloud, driver, notifications, request_id, "Sandbox.Timedout"
    )
    failures = _task_failures(ended["history"])
    assert [f["error"] for f in failures] == ["Sandbox.Timedout"] * 3
    assert "Task timed out after 10.00 seconds" in failures[0]["cause"]
    assert counter.read_text() == "3"


def test_a_step_that_fails_once_is_retried_and_the_request_goes_on(
    cloud: Cloud, driver: ErasureDriver, faults: Faults
) -> None:
    # every step of the function and its retry get this timeout: at 2 s the retried report
    # step (a cold worker) timed out again at load 15 and the history held two timeouts
    faults.inject("ErasureStepsFunction", kind="hang", step="report", times=1, timeout_seconds=15)

    request_id = driver.file("u-1001")

    assert driver.wait(request_id, "AWAITING_APPROVAL")["status"] == "AWAITING_APPROVAL"
    assert driver.decide(driver.link(request_id), "reject") == "rejected"
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    # the timeout was retried; the rejection (a task failure too) was not
    assert [f["error"] for f in _task_failures(ended["history"])] == [
        "Sandbox.Timedout", "ErasureRejected",
    ]  # fmt: skip
    assert driver.record(request_id)["status"] == "REJECTED"


def test_ses_refusing_the_approval_email_is_retried_then_the_request_fails(
    cloud: Cloud, driver: ErasureDriver, notifications: str, ses_refuses: str
) -> None:
    request_id = driver.file("u-1001")

    ended = _assert_failed_and_published(
        cloud, driver, notifications, request_id, "MessageRejected"
    )
    failures = _task_failures(ended["history"])
    assert [f["error"] for f in failures] == ["MessageRejected"] * 3
    assert states_entered(ended["history"]).count("Wait For Approval") == 1
    assert not [m for m in fetch_mail(cloud.state["control_url"]) if request_id in m["subject"]]


def test_ses_refusing_once_is_retried_and_the_approvers_are_emailed(
    cloud: Cloud, driver: ErasureDriver, ses_refuses: str
) -> None:
    request_id = driver.file("u-1001")
    arn = driver.wait(request_id, "AWAITING_APPROVAL")["execution_arn"]
    sfn = cloud.client("stepfunctions")
    deadline = time.monotonic() + 60
    while not _task_failures(sfn.get_execution_history(executionArn=arn)["events"]):
        assert time.monotonic() < deadline, "the approval email was never refused"
        time.sleep(0.2)
    cloud.client("ses").verify_email_identity(EmailAddress=ses_refuses)  # SES accepts again

    link = None
    while link is None:
        assert time.monotonic() < deadline + 60, "no approval email after the retry"
        mail = [m for m in fetch_mail(cloud.state["control_url"]) if request_id in m["subject"]]
        link = mail[0]["links"][0] if mail else None
        time.sleep(0.5)

    assert driver.decide(link, "reject") == "rejected"  # (approving would run Spark)
    ended = driver.execution(request_id)
    assert ended["execution"]["status"] == "SUCCEEDED"
    assert [f["error"] for f in _task_failures(ended["history"])] == [
        "MessageRejected", "ErasureRejected",
    ]  # fmt: skip
    assert driver.record(request_id)["status"] == "REJECTED"
