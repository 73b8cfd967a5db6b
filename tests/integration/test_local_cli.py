"""`lethe local up | status | mail | down` in subprocesses, exactly as a user runs them.

One local cloud for the module, started with `lethe local up --detach`; the finalizer stops it
even when a test fails (and SIGKILLs its process group if `down` could not). Every wait is
bounded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe.commands.local import DOWN_TIMEOUT_SECONDS, KILL_WAIT_SECONDS
from tests.conftest import REPO_ROOT

LETHE = str(Path(sys.executable).parent / "lethe")
ACCOUNT = "123456789012"
REGION = "us-east-1"
RAW_BUCKET = f"lethe-local-raw-{ACCOUNT}-{REGION}"


def _environment() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "LETHE_STATE_FILE"
    }


# `lethe local down` waits up to its --timeout (30 s) for the cloud to stop, then SIGKILLs it and
# waits 5 s more; at load 13 the CLI's own start took the rest of a 60 s budget
DOWN_PATIENCE = DOWN_TIMEOUT_SECONDS + KILL_WAIT_SECONDS + 60


def lethe(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LETHE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_environment(),
        check=False,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def state_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("local-cli") / "local.json"


@pytest.fixture(scope="module")
def cloud(state_file: Path) -> Iterator[dict[str, Any]]:
    pid: int | None = None
    try:
        started = lethe("local", "up", "--detach", "--state-file", str(state_file), timeout=240)
        assert started.returncode == 0, f"local up failed:\n{started.stdout}\n{started.stderr}"
        state = json.loads(started.stdout)
        pid = state["pid"]
        yield state
    finally:
        lethe("local", "down", "--state-file", str(state_file), timeout=DOWN_PATIENCE)
        if pid is not None and not _wait_gone(pid, 5):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def aws(state: dict[str, Any], service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=state["endpoint_url"],
        region_name=state["region"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_up_prints_and_writes_the_state(cloud: dict[str, Any], state_file: Path) -> None:
    assert json.loads(state_file.read_text()) == cloud
    assert cloud["endpoint_url"].startswith("http://127.0.0.1:")
    assert cloud["region"] == REGION
    assert cloud["api_url"].startswith("http://127.0.0.1:")
    assert cloud["api_url"].endswith("/local")
    assert cloud["ready"] is True
    assert cloud["outputs"]["RawBucketName"] == RAW_BUCKET
    assert cloud["outputs"]["ApiUrl"] == cloud["api_url"]
    assert cloud["parameters"]["Stage"] == "local"
    assert cloud["parameters"]["SparkEngine"] == "EMR_SERVERLESS"
    assert _alive(cloud["pid"])
    logs = Path(cloud["state_dir"]) / "logs"
    assert (logs / "localcloud.log").is_file()
    assert (logs / "moto.log").is_file()


def test_the_raw_bucket_is_reachable_with_boto3(cloud: dict[str, Any]) -> None:
    names = {b["Name"] for b in aws(cloud, "s3").list_buckets()["Buckets"]}
    assert RAW_BUCKET in names


def test_spark_artifacts_were_uploaded(cloud: dict[str, Any], state_file: Path) -> None:
    bucket = cloud["outputs"]["ArtifactsBucketName"]
    scripts = {f"spark_jobs/{p.name}" for p in (REPO_ROOT / "spark_jobs").glob("*.py")}
    # all but the EMR Serverless Python environment: the local Spark runs use the local venv
    expected = {*scripts, "spark_jobs/lethe_shared.zip", "spark_jobs/requirements.txt"}
    keys = {o["Key"] for o in aws(cloud, "s3").list_objects_v2(Bucket=bucket)["Contents"]}
    # ... whose stand-in is there for the state machines' pre-flight (Check Spark Artifacts)
    assert keys == {*expected, "spark_jobs/pyspark_env.tar.gz"}
    stand_in = aws(cloud, "s3").get_object(Bucket=bucket, Key="spark_jobs/pyspark_env.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(stand_in["Body"].read()), mode="r:gz") as archive:
        assert archive.getnames() == ["lethe-python-env.json"]
        manifest = json.loads(archive.extractfile("lethe-python-env.json").read())  # type: ignore[union-attr]
    assert manifest["local_stand_in"] is True
    # the same code path a real deployment uses after `sam deploy` (which adds the archive)
    uploaded = lethe("artifacts", "upload", "--no-python-env", "--state-file", str(state_file))
    assert uploaded.returncode == 0, uploaded.stderr
    assert set(uploaded.stdout.split()) == {f"s3://{bucket}/{key}" for key in expected}


def test_a_second_up_is_refused(cloud: dict[str, Any], state_file: Path) -> None:
    again = lethe("local", "up", "--detach", "--state-file", str(state_file))
    assert again.returncode == 1
    assert f"describes a running local cloud (pid {cloud['pid']})" in again.stderr


def test_status(cloud: dict[str, Any], state_file: Path) -> None:
    status = lethe("local", "status", "--state-file", str(state_file))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["endpoint_url"] == cloud["endpoint_url"]


def test_mail_is_captured(cloud: dict[str, Any], state_file: Path) -> None:
    # Given no mail was sent yet
    before = lethe("local", "mail", "--state-file", str(state_file), "--json")
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout) == []
    # When the verified sender sends one
    aws(cloud, "ses").send_email(
        Source="lethe@example.com",
        Destination={"ToAddresses": ["approver@example.com"]},
        Message={
            "Subject": {"Data": "Erasure request waiting"},
            "Body": {"Text": {"Data": "Review it at https://approve.example/r/42. Thanks"}},
        },
    )
    # Then it is listed with its link
    after = lethe("local", "mail", "--state-file", str(state_file), "--json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == [
        {
            "to": ["approver@example.com"],
            "subject": "Erasure request waiting",
            "text": "Review it at https://approve.example/r/42. Thanks",
            "html": "",
            "links": ["https://approve.example/r/42"],
        }
    ]
    readable = lethe("local", "mail", "--state-file", str(state_file))
    assert "Subject: Erasure request waiting" in readable.stdout


def test_usage_errors_exit_2(state_file: Path) -> None:
    assert lethe("local", "up").returncode == 2  # no --state-file
    bad = lethe("local", "up", "--state-file", str(state_file), "--parameter-overrides", "Stage")
    assert bad.returncode == 2
    assert "not Key=Value" in bad.stderr


def test_a_failing_start_shows_the_log(tmp_path: Path) -> None:
    failed = lethe(
        "local",
        "up",
        "--detach",
        "--state-file",
        str(tmp_path / "bad.json"),
        "--parameter-overrides",
        "Stage=NOT_VALID",
        timeout=120,
    )
    assert failed.returncode == 1
    assert "exited with status 1 before it was ready" in failed.stderr
    assert "Parameters.Stage: 'NOT_VALID' does not match" in failed.stderr
    assert not (tmp_path / "bad.json").exists()


def test_down_stops_it_and_is_idempotent(cloud: dict[str, Any], state_file: Path) -> None:
    stopped = lethe("local", "down", "--state-file", str(state_file), timeout=DOWN_PATIENCE)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the local cloud (pid {cloud['pid']})" in stopped.stdout
    assert _wait_gone(cloud["pid"], 5)
    assert not state_file.exists()
    again = lethe("local", "down", "--state-file", str(state_file))
    assert again.returncode == 0
    assert "not running" in again.stdout
    mail = lethe("local", "mail", "--state-file", str(state_file), "--json")
    assert mail.returncode == 4  # ExitCode.UNREACHABLE: no local cloud
    assert mail.stderr.startswith("lethe: error: no local cloud state")
    assert "lethe local up --detach --state-file" in mail.stderr
