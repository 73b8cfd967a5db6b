"""The local cloud's Step Functions hooks, on real executions.

A ThreadedMotoServer on 127.0.0.1 runs the state machines in tests/sfn/fixtures/hooks/ with
lethe.localcloud.sfn_hooks installed: JSONata states, and Glue / EMR Serverless .sync tasks that
run the real PySpark script fixtures/hooks/spark_job.py (two full Spark runs in this file; the
failing runs fail before Spark starts).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import jsonata
import pytest
from moto.core import config as moto_config
from moto.server import ThreadedMotoServer
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_factory
from moto.stepfunctions.parser.asl.jsonata import jsonata as engine_jsonata
from moto.stepfunctions.parser.asl.parse import preprocessor

from lethe.localcloud import sfn_hooks
from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.spark_runner import extract_error_message, run_spark_job
from lethe.localcloud.spark_submit import parse_spark_submit_parameters

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "lethe-hooks-artifacts"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/lethe-sfn"
GLUE_JOB = "lethe-hooks-test"
SCRIPT_URL = f"s3://{BUCKET}/scripts/spark_job.py"
HELPER_ZIP_URL = f"s3://{BUCKET}/deps/lethe_hooks_helper.zip"
EXECUTION_DEADLINE_SECONDS = 240
# What only AWS applies to an EMR Serverless run (docs/SPARK.md): the local run checks and skips it.
PYTHON_ENV = (
    f"--conf spark.archives=s3://{BUCKET}/spark_jobs/pyspark_env.tar.gz#environment"
    " --conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python"
    " --conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python"
    " --conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python"
)
CLOUDWATCH = {
    "Enabled": True,
    "LogGroupName": "lethe-hooks-spark",
    "LogStreamNamePrefix": "hooks",
    "LogTypes": {"SPARK_DRIVER": ["STDOUT", "STDERR"], "SPARK_EXECUTOR": ["STDOUT", "STDERR"]},
}
EXPECTED_BUCKETS = {"0": 34, "1": 33, "2": 33}


@dataclass
class LocalCloud:
    endpoints: Endpoints
    logs_dir: Path
    uninstall: Callable[[], None]
    moto_port_before: str | None
    execute_before: bool

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoints.endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    logs_dir = tmp_path_factory.mktemp("localcloud-logs")
    moto_port_before = os.environ.get("MOTO_PORT")
    execute_before = moto_config.default_user_config["stepfunctions"]["execute_state_machine"]
    endpoints = Endpoints(
        endpoint_url=f"http://127.0.0.1:{port}", region=REGION, account_id=ACCOUNT
    )
    uninstall = sfn_hooks.install(
        sfn_hooks.HookContext(
            endpoints=endpoints, logs_dir=logs_dir, repo_root=REPO_ROOT, max_run_seconds=180
        )
    )
    local = LocalCloud(endpoints, logs_dir, uninstall, moto_port_before, execute_before)
    try:
        _upload_artifacts(local, tmp_path_factory.mktemp("artifacts"))
        yield local
    finally:
        local.uninstall()
        server.stop()


def _upload_artifacts(cloud: LocalCloud, workdir: Path) -> None:
    s3 = cloud.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.upload_file(str(FIXTURES / "spark_job.py"), BUCKET, "scripts/spark_job.py")
    helper_zip = workdir / "lethe_hooks_helper.zip"
    with zipfile.ZipFile(helper_zip, "w") as archive:
        archive.write(FIXTURES / "lethe_hooks_helper.py", "lethe_hooks_helper.py")
    s3.upload_file(str(helper_zip), BUCKET, "deps/lethe_hooks_helper.zip")


def _state_machine(cloud: LocalCloud, name: str, definition_file: str) -> str:
    sfn = cloud.client("stepfunctions")
    definition = (FIXTURES / definition_file).read_text()
    return str(
        sfn.create_state_machine(name=name, definition=definition, roleArn=ROLE)["stateMachineArn"]
    )


def _execute(
    cloud: LocalCloud, machine_arn: str, name: str, payload: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sfn = cloud.client("stepfunctions")
    arn = sfn.start_execution(stateMachineArn=machine_arn, name=name, input=json.dumps(payload))[
        "executionArn"
    ]
    deadline = time.monotonic() + EXECUTION_DEADLINE_SECONDS
    while True:
        execution = sfn.describe_execution(executionArn=arn)
        if execution["status"] != "RUNNING":
            break
        assert time.monotonic() < deadline, f"execution {name} still running"
        time.sleep(0.5)
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return execution, events


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def _caught_error(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The error the Catch handed to the Fail state (the input of FailStateEntered)."""
    entered = [e for e in events if e["type"] == "FailStateEntered"]
    assert len(entered) == 1
    state_input = json.loads(entered[0]["stateEnteredEventDetails"]["input"])
    return dict(state_input.get("error", state_input))


def _read_result(cloud: LocalCloud, prefix: str) -> dict[str, Any]:
    body = cloud.client("s3").get_object(Bucket=BUCKET, Key=f"{prefix}/result.json")["Body"]
    return dict(json.loads(body.read()))


def _has_result(cloud: LocalCloud, prefix: str) -> bool:
    listing = cloud.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return int(listing["KeyCount"]) > 0


# ------------------------------------------------------------------------------------------------
# JSONata


def test_jsonata_pass_choice_assign_task_and_catch(cloud: LocalCloud) -> None:
    machine = _state_machine(cloud, "lethe-hooks-jsonata", "jsonata.asl.json")
    payload = {
        "name": 'Ada "the" Lovelace',
        "bucket": BUCKET,
        "items": [{"sku": "a", "qty": 7}, {"sku": "b", "qty": 5}],
    }

    execution, _ = _execute(cloud, machine, "jsonata-big", payload)

    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {
        "size": "big",
        "total": 12,
        "greeting": 'She said "hi" to Ada "the" Lovelace',
        "execName": "jsonata-big",
        "depCount": 1,
        "firstKey": "deps/lethe_hooks_helper.zip",
        "asl": {
            "partition": [[1, 2], [3, 4], [5]],
            "range": [0, 2, 4, 6],
            "hash": hashlib.sha256(b"abc").hexdigest(),
            "parsed": {"a": [1, 2]},
            "uuidLength": 36,
            "seededRandomRepeats": True,
        },
        "caughtError": "States.QueryEvaluationError",
        "causeNamesMessage": True,
    }


def test_jsonata_choice_default_branch(cloud: LocalCloud) -> None:
    machine = _state_machine(cloud, "lethe-hooks-jsonata-small", "jsonata.asl.json")
    payload = {"name": "Grace\\Hopper\n", "bucket": BUCKET, "items": [{"sku": "a", "qty": 4}]}

    execution, _ = _execute(cloud, machine, "jsonata-small", payload)

    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {
        "size": "small",
        "total": 4,
        "greeting": 'She said "hi" to Grace\\Hopper\n',
    }


# ------------------------------------------------------------------------------------------------
# Glue


@pytest.fixture(scope="module")
def glue_machine(cloud: LocalCloud) -> str:
    cloud.client("glue").create_job(
        Name=GLUE_JOB,
        Role=ROLE,
        GlueVersion="5.0",
        Command={"Name": "glueetl", "ScriptLocation": SCRIPT_URL, "PythonVersion": "3"},
        DefaultArguments={
            "--extra-py-files": HELPER_ZIP_URL,
            "--enable-metrics": "true",
            "--job-language": "python",
            "--TempDir": f"s3://{BUCKET}/tmp/",
            "--label": "from-defaults",
            "--output": f"s3://{BUCKET}/out/overridden",
        },
    )
    return _state_machine(cloud, "lethe-hooks-glue", "glue_sync.asl.json")


def test_glue_sync_runs_the_job_script(cloud: LocalCloud, glue_machine: str) -> None:
    output_url = f"s3://{BUCKET}/out/glue-ok"
    payload = {"job_name": GLUE_JOB, "arguments": {"--output": output_url, "--label": "glue-run"}}

    execution, events = _execute(cloud, glue_machine, "glue-ok", payload)

    assert execution["status"] == "SUCCEEDED", execution
    job_run = json.loads(execution["output"])["job_run"]
    assert job_run["JobRunState"] == "SUCCEEDED"
    assert job_run["JobName"] == GLUE_JOB
    assert job_run["Arguments"] == {"--output": output_url, "--label": "glue-run"}
    assert job_run["GlueVersion"] == "5.0"
    assert job_run["Id"].startswith("jr_")
    assert isinstance(job_run["StartedOn"], int)
    assert isinstance(job_run["CompletedOn"], int)
    assert job_run["CompletedOn"] >= job_run["StartedOn"]
    assert job_run["ExecutionTime"] >= 1
    assert "ErrorMessage" not in job_run
    assert _types(events).count("TaskSubmitted") == 1
    assert _types(events).count("TaskSucceeded") == 1

    assert _read_result(cloud, "out/glue-ok") == {
        "label": "glue-run",
        "buckets": EXPECTED_BUCKETS,
        "helper_version": "helper-1",
        "argv": [
            "--JOB_NAME",
            GLUE_JOB,
            "--JOB_RUN_ID",
            job_run["Id"],
            "--label",
            "glue-run",
            "--output",
            output_url,
        ],
        "conf_marker": "",
        "defaults_marker": "",
    }
    assert not _has_result(cloud, "out/overridden")

    recorded = cloud.client("glue").get_job_run(JobName=GLUE_JOB, RunId=job_run["Id"])["JobRun"]
    assert recorded["JobRunState"] == "SUCCEEDED"
    assert recorded["Arguments"] == {"--output": output_url, "--label": "glue-run"}
    log_text = (cloud.logs_dir / f"spark-{job_run['Id']}.log").read_text()
    assert "# exit code 0" in log_text


def test_glue_sync_failure_is_retried_then_caught(cloud: LocalCloud, glue_machine: str) -> None:
    payload = {
        "job_name": GLUE_JOB,
        "arguments": {
            "--output": f"s3://{BUCKET}/out/glue-fail",
            "--fail": "glue says no: bad input",
        },
    }

    execution, events = _execute(cloud, glue_machine, "glue-fail", payload)

    assert execution["status"] == "FAILED", execution
    assert execution["error"] == "SparkJobFailed"
    assert _caught_error(events)["Error"] == "States.TaskFailed"
    cause = json.loads(execution["cause"])
    assert cause["JobRunState"] == "FAILED"
    assert cause["JobName"] == GLUE_JOB
    assert cause["ErrorMessage"] == "RuntimeError: glue says no: bad input"
    types = _types(events)
    assert types.count("TaskScheduled") == 2
    assert types.count("TaskFailed") == 2
    assert types[-2:] == ["FailStateEntered", "ExecutionFailed"]
    failures = [e["taskFailedEventDetails"] for e in events if e["type"] == "TaskFailed"]
    assert [f["error"] for f in failures] == ["States.TaskFailed", "States.TaskFailed"]
    assert [f["resource"] for f in failures] == ["startJobRun.sync", "startJobRun.sync"]
    assert not _has_result(cloud, "out/glue-fail")

    runs = cloud.client("glue").get_job_runs(JobName=GLUE_JOB)["JobRuns"]
    failed = [run for run in runs if run["JobRunState"] == "FAILED"]
    assert len(failed) == 2
    assert {run["ErrorMessage"] for run in failed} == {"RuntimeError: glue says no: bad input"}


def test_glue_sync_unknown_job_fails_with_the_glue_error(
    cloud: LocalCloud, glue_machine: str
) -> None:
    payload = {"job_name": "no-such-job", "arguments": {}}

    execution, events = _execute(cloud, glue_machine, "glue-missing", payload)

    assert execution["status"] == "FAILED"
    assert _caught_error(events) == {
        "Error": "Glue.EntityNotFoundException",
        "Cause": "Job no-such-job not found.",
    }
    # States.TaskFailed in a Retry matches every task error but States.Timeout (AWS semantics).
    assert _types(events).count("TaskScheduled") == 2


# ------------------------------------------------------------------------------------------------
# EMR Serverless


@pytest.fixture(scope="module")
def emr(cloud: LocalCloud) -> tuple[str, str]:
    application_id = cloud.client("emr-serverless").create_application(
        name="lethe-spark", releaseLabel="emr-7.5.0", type="SPARK"
    )["applicationId"]
    machine = _state_machine(cloud, "lethe-hooks-emr", "emr_serverless_sync.asl.json")
    return str(application_id), machine


@pytest.fixture(scope="module")
def emr_aws_only(cloud: LocalCloud) -> tuple[str, str]:
    """An application of its own (its job runs are counted apart from `emr`'s) and the machine
    whose task also sets the Python environment archive and CloudWatch logging, from the input."""
    application_id = cloud.client("emr-serverless").create_application(
        name="lethe-spark-aws-only", releaseLabel="emr-7.5.0", type="SPARK", architecture="X86_64"
    )["applicationId"]
    machine = _state_machine(
        cloud, "lethe-hooks-emr-aws-only", "emr_serverless_sync_aws_only.asl.json"
    )
    return str(application_id), machine


def test_emr_serverless_sync_runs_the_entry_point(
    cloud: LocalCloud, emr_aws_only: tuple[str, str]
) -> None:
    # with what only AWS applies: the run uses this venv's Python and logs to logs_dir
    application_id, machine = emr_aws_only
    output_url = f"s3://{BUCKET}/out/emr-ok"
    payload = {
        "application_id": application_id,
        "entry_point": SCRIPT_URL,
        "py_files": HELPER_ZIP_URL,
        "python_env": PYTHON_ENV,
        "cloudwatch": CLOUDWATCH,
        "arguments": ["--output", output_url, "--label", "emr-run"],
    }

    execution, events = _execute(cloud, machine, "emr-ok", payload)

    assert execution["status"] == "SUCCEEDED", execution
    job_run = json.loads(execution["output"])
    assert job_run["State"] == "SUCCESS"
    assert job_run["ApplicationId"] == application_id
    assert job_run["Name"] == "lethe-emr-ok"
    assert job_run["Arn"] == (
        f"arn:aws:emr-serverless:{REGION}:{ACCOUNT}:/applications/"
        f"{application_id}/jobruns/{job_run['JobRunId']}"
    )
    assert job_run["ExecutionRole"] == f"arn:aws:iam::{ACCOUNT}:role/lethe-emr-job"
    assert job_run["JobDriver"]["SparkSubmit"]["EntryPoint"] == SCRIPT_URL
    assert job_run["StateDetails"] == ""
    assert isinstance(job_run["CreatedAt"], int)
    assert job_run["TotalExecutionDurationSeconds"] >= 1
    assert _types(events).count("TaskSucceeded") == 1

    assert _read_result(cloud, "out/emr-ok") == {
        "label": "emr-run",
        "buckets": EXPECTED_BUCKETS,
        "helper_version": "helper-1",
        "argv": ["--output", output_url, "--label", "emr-run"],
        "conf_marker": "from-submit",
        "defaults_marker": "from-defaults",
    }

    recorded = cloud.client("emr-serverless").get_job_run(
        applicationId=application_id, jobRunId=job_run["JobRunId"]
    )["jobRun"]
    assert recorded["state"] == "SUCCESS"

    # CloudWatch logging is recorded on the run, in the API's spelling, log types as given
    monitoring = job_run["ConfigurationOverrides"]["MonitoringConfiguration"]
    assert monitoring["CloudWatchLoggingConfiguration"] == CLOUDWATCH
    assert (
        recorded["configurationOverrides"]["monitoringConfiguration"][
            "cloudWatchLoggingConfiguration"
        ]["logTypes"]
        == CLOUDWATCH["LogTypes"]
    )
    # the archive and its interpreter never reach the local Spark run
    log = (cloud.logs_dir / f"spark-{job_run['JobRunId']}.log").read_text()
    submit_args = next(
        line for line in log.splitlines() if line.startswith("# PYSPARK_SUBMIT_ARGS")
    )
    assert "spark.lethe.marker=from-submit" in submit_args
    assert "archives" not in submit_args
    assert "PYSPARK_PYTHON" not in submit_args
    assert "environment" not in submit_args


def test_emr_serverless_sync_refuses_what_the_api_refuses(
    cloud: LocalCloud, emr_aws_only: tuple[str, str]
) -> None:
    application_id, machine = emr_aws_only
    runs_before = cloud.client("emr-serverless").list_job_runs(applicationId=application_id)
    payload = {
        "application_id": application_id,
        "entry_point": SCRIPT_URL,
        "py_files": HELPER_ZIP_URL,
        "python_env": PYTHON_ENV,
        "cloudwatch": {"LogGroupName": "lethe-hooks-spark", "LogTypes": ["STDERR"]},
        "arguments": ["--output", f"s3://{BUCKET}/out/emr-invalid"],
    }

    execution, events = _execute(cloud, machine, "emr-invalid", payload)

    assert execution["status"] == "FAILED"
    error = _caught_error(events)
    assert error["Error"] == "EMRServerless.ValidationException"
    logging = "configurationOverrides.monitoringConfiguration.cloudWatchLoggingConfiguration"
    assert f'Missing required parameter in {logging}: "enabled"' in error["Cause"]
    assert f"Invalid type for parameter {logging}.logTypes" in error["Cause"]
    runs_after = cloud.client("emr-serverless").list_job_runs(applicationId=application_id)
    assert len(runs_after["jobRuns"]) == len(runs_before["jobRuns"])  # never started


def test_emr_serverless_sync_fails_a_run_whose_python_is_not_unpacked(
    cloud: LocalCloud, emr_aws_only: tuple[str, str]
) -> None:
    application_id, machine = emr_aws_only
    payload = {
        "application_id": application_id,
        "entry_point": SCRIPT_URL,
        "py_files": HELPER_ZIP_URL,
        "python_env": "--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
        "cloudwatch": CLOUDWATCH,
        "arguments": ["--output", f"s3://{BUCKET}/out/emr-no-env"],
    }

    execution, events = _execute(cloud, machine, "emr-no-env", payload)

    assert execution["status"] == "FAILED"
    assert _caught_error(events)["Error"] == "States.TaskFailed"
    cause = json.loads(execution["cause"])
    assert cause["State"] == "FAILED"
    assert cause["StateDetails"].endswith(
        "Last few exceptions: spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python: "
        "no spark.archives entry is unpacked as 'environment'"
    )
    assert not (cloud.logs_dir / f"spark-{cause['JobRunId']}.log").exists()  # Spark never ran
    assert not _has_result(cloud, "out/emr-no-env")


def test_emr_serverless_sync_failure_is_retried_then_caught(
    cloud: LocalCloud, emr: tuple[str, str]
) -> None:
    application_id, machine = emr
    payload = {
        "application_id": application_id,
        "entry_point": SCRIPT_URL,
        "py_files": HELPER_ZIP_URL,
        "arguments": [
            "--output",
            f"s3://{BUCKET}/out/emr-fail",
            "--fail",
            "emr says no: bad input",
        ],
    }

    execution, events = _execute(cloud, machine, "emr-fail", payload)

    assert execution["status"] == "FAILED", execution
    assert execution["error"] == "SparkJobFailed"
    assert _caught_error(events)["Error"] == "States.TaskFailed"
    cause = json.loads(execution["cause"])
    assert cause["State"] == "FAILED"
    assert cause["ApplicationId"] == application_id
    assert cause["StateDetails"] == (
        "Job failed, please check complete logs in configured logging destination. "
        "ExitCode: 1. Last few exceptions: RuntimeError: emr says no: bad input"
    )
    types = _types(events)
    assert types.count("TaskScheduled") == 2
    assert types.count("TaskFailed") == 2
    assert types[-2:] == ["FailStateEntered", "ExecutionFailed"]
    assert not _has_result(cloud, "out/emr-fail")

    runs = cloud.client("emr-serverless").list_job_runs(
        applicationId=application_id, states=["FAILED"]
    )["jobRuns"]
    assert len(runs) == 2


def test_emr_serverless_sync_unknown_application(cloud: LocalCloud, emr: tuple[str, str]) -> None:
    _, machine = emr
    payload = {
        "application_id": "00nosuchapp",
        "entry_point": SCRIPT_URL,
        "py_files": HELPER_ZIP_URL,
        "arguments": ["--output", f"s3://{BUCKET}/out/x"],
    }

    execution, events = _execute(cloud, machine, "emr-missing-app", payload)

    assert execution["status"] == "FAILED"
    assert _caught_error(events) == {
        "Error": "EMRServerless.ResourceNotFoundException",
        "Cause": "Application 00nosuchapp does not exist",
    }
    assert _types(events).count("TaskScheduled") == 2  # retried: see the Glue twin above


# ------------------------------------------------------------------------------------------------
# The hooks' own contract


def test_install_twice_is_refused(cloud: LocalCloud) -> None:
    with pytest.raises(RuntimeError, match="installed already"):
        sfn_hooks.install(
            sfn_hooks.HookContext(
                endpoints=cloud.endpoints, logs_dir=cloud.logs_dir, repo_root=REPO_ROOT
            )
        )


def test_glue_run_plan_merges_arguments_like_glue() -> None:
    plan = sfn_hooks.glue_run_plan(
        job_name="job",
        run_id="jr_1",
        command={"Name": "glueetl", "ScriptLocation": "s3://b/s.py"},
        default_arguments={
            "--extra-py-files": "s3://b/a.zip, s3://b/b.py",
            "--a": "1",
            "--conf": "spark.x=1 --conf spark.y=2",
            "--TempDir": "s3://b/t",
        },
        run_arguments={"--a": "2", "--b": "3"},
        non_overridable_arguments={"--b": "4"},
    )

    assert plan.script == "s3://b/s.py"
    assert plan.py_files == ["s3://b/a.zip", "s3://b/b.py"]
    assert plan.conf == {"spark.x": "1", "spark.y": "2"}
    assert plan.argv == ["--JOB_NAME", "job", "--JOB_RUN_ID", "jr_1", "--a", "2", "--b", "4"]


def test_spark_submit_parameters_keep_py_files_and_conf() -> None:
    options = parse_spark_submit_parameters(
        "--class Main --py-files s3://b/a.zip,s3://b/c.py --conf spark.a=1 "
        "--conf=spark.b=x=y --driver-memory 2g --verbose"
    )

    assert options.py_files == ["s3://b/a.zip", "s3://b/c.py"]
    assert options.conf == {"spark.a": "1", "spark.b": "x=y"}
    assert options.ignored == ["--class Main", "--driver-memory 2g", "--verbose"]


def test_error_message_is_the_last_traceback_line() -> None:
    stderr = [
        "26/01/02 10:11:12 INFO SparkContext: Running Spark version 3.5.9\n",
        "Traceback (most recent call last):\n",
        '  File "/tmp/x/job.py", line 9, in <module>\n',
        "    main()\n",
        "py4j.protocol.Py4JJavaError: An error occurred while calling o45.save.\n",
        ": org.apache.spark.SparkException: Job aborted.\n",
        "\tat org.apache.spark.Foo(Foo.scala:1)\n",
        "26/01/02 10:11:13 INFO ShutdownHookManager: Shutdown hook called\n",
    ]

    assert extract_error_message(stderr, 1) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o45.save.\n"
        ": org.apache.spark.SparkException: Job aborted."
    )
    assert extract_error_message(
        [
            "usage: job.py [-h] --output OUTPUT\n",
            "job.py: error: the following arguments are required: --output\n",
        ],
        2,
    ) == (
        "usage: job.py [-h] --output OUTPUT\n"
        "job.py: error: the following arguments are required: --output"
    )
    assert extract_error_message([], -9) == "the job exited with code -9"


def test_run_is_killed_at_its_timeout(cloud: LocalCloud, tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(120)\n")
    started = time.monotonic()

    result = run_spark_job(
        str(script),
        [],
        [],
        endpoints=cloud.endpoints,
        logs_dir=tmp_path,
        run_id="sleeper",
        timeout_seconds=2,
    )

    assert time.monotonic() - started < 20
    assert (result.succeeded, result.timed_out) == (False, True)
    assert result.error_message == "the job run timed out after 2 s"
    assert "sleeping" in result.log_path.read_text()


def test_missing_script_fails_the_run(cloud: LocalCloud, tmp_path: Path) -> None:
    result = run_spark_job(
        f"s3://{BUCKET}/scripts/missing.py",
        [],
        [],
        endpoints=cloud.endpoints,
        logs_dir=tmp_path,
        run_id="missing",
        timeout_seconds=30,
    )

    assert (result.succeeded, result.exit_code) == (False, None)
    assert result.error_message.startswith("could not download the job's files:")


def test_job_sees_the_local_cloud_environment(cloud: LocalCloud, tmp_path: Path) -> None:
    script = tmp_path / "env_probe.py"
    script.write_text(
        "import json, os, sys\n"
        "keys = ['AWS_ENDPOINT_URL', 'LETHE_SPARK_MASTER', 'SPARK_LOCAL_IP', 'PYSPARK_PYTHON',\n"
        "        'PYSPARK_SUBMIT_ARGS']\n"
        "print(json.dumps({k: os.environ.get(k) for k in keys}))\n"
        "print(json.dumps(sys.argv[1:]))\n"
    )

    result = run_spark_job(
        str(script),
        ["--x", "1"],
        [],
        endpoints=cloud.endpoints,
        logs_dir=tmp_path,
        run_id="probe",
        timeout_seconds=30,
        spark_conf={"spark.lethe.a": "1", "spark.jars.packages": "x:y:1"},
    )

    assert result.succeeded
    lines = [
        line
        for line in result.log_path.read_text().splitlines()
        if not line.startswith("#") and line
    ]
    assert json.loads(lines[0]) == {
        "AWS_ENDPOINT_URL": cloud.endpoints.endpoint_url,
        "LETHE_SPARK_MASTER": "local[2]",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_SUBMIT_ARGS": "--conf spark.driver.host=127.0.0.1 "
        "--conf spark.driver.bindAddress=127.0.0.1 "
        "--conf spark.ui.enabled=false "
        "--conf spark.python.daemon.module=lethe.localcloud.spark_worker_daemon "
        "--conf spark.lethe.a=1 "
        "pyspark-shell",
    }
    assert json.loads(lines[1]) == ["--x", "1"]


def test_uninstall_restores_moto_and_install_works_again(cloud: LocalCloud) -> None:
    """Runs last: it swaps the module's installation for a fresh one."""
    cloud.uninstall()
    cloud.uninstall()  # a second call is a no-op

    assert engine_jsonata._eval_jsonata is None
    assert vars(preprocessor)["state_task_for"] is state_task_factory.state_task_for
    assert "Function $uuid is currently not supported" in (
        vars(string_expression)["get_intrinsic_functions_declarations"]({"$uuid"})
    )
    assert os.environ.get("MOTO_PORT") == cloud.moto_port_before
    assert moto_config.default_user_config["stepfunctions"]["execute_state_machine"] is (
        cloud.execute_before
    )

    cloud.uninstall = sfn_hooks.install(
        sfn_hooks.HookContext(
            endpoints=cloud.endpoints, logs_dir=cloud.logs_dir, repo_root=REPO_ROOT
        )
    )
    assert engine_jsonata._eval_jsonata is sfn_hooks.evaluate_jsonata
    assert os.environ["MOTO_PORT"] == cloud.endpoints.endpoint_url.rsplit(":", 1)[1]


def test_definitions_parse_in_parallel(cloud: LocalCloud) -> None:
    """P8: every execution parses its definition in its own thread; moto's parser shares its
    query language scopes between parses, so the erasure definition (JSONata with one JSONPath
    state) parsed by several threads at once failed "Cannot downgrade from JSONata context"."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from moto.stepfunctions.parser.asl.parse.asl_parser import (  # noqa: PLC0415
        AmazonStateLanguageParser,
    )

    definition = (REPO_ROOT / "statemachines" / "erasure.asl.json").read_text()

    def parse(_: int) -> str:
        try:
            AmazonStateLanguageParser.parse(definition)
        except Exception as exc:  # the failure is what is counted
            return f"{type(exc).__name__}: {exc}"
        return ""

    with ThreadPoolExecutor(8) as pool:
        failures = [f for f in pool.map(parse, range(24)) if f]
    assert failures == []


def test_a_definition_is_parsed_by_antlr_once_and_each_execution_gets_its_own_program(
    cloud: LocalCloud,
) -> None:
    """P9: the parse tree is kept per definition; the preprocessor still builds new program
    components for each parse (they hold evaluation state), and a definition with a syntax error
    is refused every time, never kept."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import (  # noqa: PLC0415
        AmazonStateLanguageParser,
        ASLParserException,
    )

    definition = (REPO_ROOT / "statemachines" / "erasure.asl.json").read_text()
    first_program, first_tree = AmazonStateLanguageParser.parse(definition)
    second_program, second_tree = AmazonStateLanguageParser.parse(definition)
    assert second_tree is first_tree
    assert second_program is not first_program
    assert second_program.states is not first_program.states
    assert list(second_program.states.states) == list(first_program.states.states)

    broken = definition.replace('"StartAt"', '"StartsAt"', 1)
    for _ in range(2):
        with pytest.raises(ASLParserException):
            AmazonStateLanguageParser.parse(broken)


def test_the_kept_parse_tree_holds_no_program(cloud: LocalCloud) -> None:
    """P9 keeps one tree per definition and nothing of the programs made from it: a program an
    execution no longer holds is freed (a tree that held its programs would keep every
    execution's components alive for as long as the local cloud runs)."""
    import gc  # noqa: PLC0415
    import weakref  # noqa: PLC0415

    from moto.stepfunctions.parser.asl.parse.asl_parser import (  # noqa: PLC0415
        AmazonStateLanguageParser,
    )

    definition = (REPO_ROOT / "statemachines" / "erasure.asl.json").read_text()
    programs = []
    for _ in range(50):
        program, _tree = AmazonStateLanguageParser.parse(definition)
        programs.append(weakref.ref(program))
        del program
    gc.collect()
    assert [p for p in programs if p() is not None] == []


WARM_PROBE = """
import json, os, sys
import probe_helper
from pyspark.sql import SparkSession

spark = SparkSession.builder.master(os.environ["LETHE_SPARK_MASTER"]).getOrCreate()
try:
    # before the task imports anything: what the worker daemon preloaded (spark_warmth)
    helper_in_worker, preloaded_in_worker = spark.sparkContext.parallelize([0], 1).map(
        lambda _: ("pandas" in sys.modules, __import__("probe_helper").VERSION)[::-1]
    ).collect()[0]
    marker = spark.conf.get("spark.lethe.marker", "")
finally:
    spark.stop()
probe_helper.CALLS.append(1)
print(json.dumps({
    "pid": os.getpid(), "argv": sys.argv[1:], "label": os.environ.get("PROBE_LABEL"),
    "helper": probe_helper.VERSION, "helper_in_worker": helper_in_worker,
    "preloaded_in_worker": preloaded_in_worker,
    "calls": len(probe_helper.CALLS), "marker": marker, "cwd_is_run": os.getcwd() != "/",
}))
if sys.argv[1:] == ["fail"]:
    raise RuntimeError("the probe failed on purpose")
"""


def _warm_run(
    cloud: LocalCloud, tmp_path: Path, slots: Any, name: str, version: str, *args: str
) -> tuple[Any, dict[str, Any]]:
    from lethe.localcloud.spark_slots import RunSlots  # noqa: PLC0415

    assert isinstance(slots, RunSlots)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "probe.py").write_text(WARM_PROBE)
    (folder / "probe_helper.py").write_text(f"VERSION = {version!r}\nCALLS = []\n")
    result = run_spark_job(
        str(folder / "probe.py"),
        list(args),
        [str(folder / "probe_helper.py")],
        endpoints=cloud.endpoints,
        logs_dir=tmp_path / "logs",
        run_id=name,
        timeout_seconds=240,
        spark_conf={"spark.lethe.marker": name},
        extra_env={"PROBE_LABEL": name},
        slots=slots,
    )
    lines = [line for line in result.log_path.read_text().splitlines() if line.startswith("{")]
    return result, (json.loads(lines[-1]) if lines else {})


def test_warm_driver_runs_each_job_in_isolation(cloud: LocalCloud, tmp_path: Path) -> None:
    """One warm driver, three runs: each sees its own argv, environment, Spark configuration
    and py-files (in the driver and in the Python workers), nothing a run imported from its
    folder survives it, and a failed run retires the driver without touching the next run."""
    from lethe.localcloud.spark_slots import RunSlots  # noqa: PLC0415

    slots = RunSlots(1, warm=True)
    try:
        first, seen1 = _warm_run(cloud, tmp_path, slots, "first", "v1", "--a", "1")
        second, seen2 = _warm_run(cloud, tmp_path, slots, "second", "v2", "fail")
        third, seen3 = _warm_run(cloud, tmp_path, slots, "third", "v3")
    finally:
        slots.shutdown()

    assert first.succeeded, first.log_path.read_text()
    assert seen1 == {
        "pid": seen1["pid"], "argv": ["--a", "1"], "label": "first", "helper": "v1",
        "helper_in_worker": "v1", "calls": 1, "marker": "first", "cwd_is_run": True,
        "preloaded_in_worker": True,  # the worker daemon's libraries, not the run's py-files
    }  # fmt: skip
    assert (second.succeeded, second.exit_code) == (False, 1)
    assert second.error_message == "RuntimeError: the probe failed on purpose"
    assert (seen2["pid"], seen2["helper"], seen2["calls"]) == (seen1["pid"], "v2", 1)  # warm
    assert third.succeeded, third.log_path.read_text()
    assert seen3["pid"] != seen1["pid"]  # the failed run retired its driver
    assert (seen3["helper"], seen3["helper_in_worker"], seen3["marker"]) == ("v3", "v3", "third")
    assert "on warm driver pid" in third.log_path.read_text()
    assert re.search(
        r"# driver timings: enter [\d.]+ s, script [\d.]+ s \(SparkContext start [\d.]+ s, "
        r"stop [\d.]+ s\), leave [\d.]+ s",
        third.log_path.read_text(),
    )
    assert seen3["preloaded_in_worker"] is True


def test_warm_run_is_killed_at_its_timeout(cloud: LocalCloud, tmp_path: Path) -> None:
    from lethe.localcloud.spark_slots import RunSlots  # noqa: PLC0415

    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(120)\n")
    slots = RunSlots(1, warm=True)
    try:
        started = time.monotonic()
        result = run_spark_job(
            str(script), [], [], endpoints=cloud.endpoints, logs_dir=tmp_path,
            run_id="warm-sleeper", timeout_seconds=2, slots=slots,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    finally:
        slots.shutdown()

    assert (result.succeeded, result.timed_out) == (False, True)
    assert elapsed < 300  # the driver's start (a JVM) and 2 s
    assert "sleeping" in result.log_path.read_text()


def test_declared_values_are_bound_not_parsed() -> None:
    """P1: the engine's `($states:=...;$var:=...;EXPR)` gives the same result when the JSON
    values are bound as variables (null at the top stays JSONata's null)."""
    expression = (
        '($states:={"input":{"a":null,"s":"q\\"uote;$x:=1;","n":[1,2]}};$v:=null;$w:=3;'
        "[$states.input.s, $states.input.a = null, $v = null, $exists($v), $w * 2,"
        " $states.input.n[1]])"
    )
    rest, bindings = sfn_hooks.lift_declarations(expression)

    assert rest.startswith("([$states.input.s")
    assert set(bindings) == {"states", "v", "w"}
    assert sfn_hooks.evaluate_jsonata(expression) == [
        'q"uote;$x:=1;', True, True, True, 6, 2,
    ]  # fmt: skip
    unlifted = jsonata.Jsonata(expression).evaluate(None)  # what JSONata's parser gives
    assert sfn_hooks.evaluate_jsonata(expression) == unlifted
    assert sfn_hooks.lift_declarations("$states.input") == ("$states.input", {})
    typed = f"$type({expression})"  # how moto checks a string result's type
    assert sfn_hooks.lift_declarations(typed) == (f"$type({rest})", bindings)
    assert sfn_hooks.evaluate_jsonata(typed) == "array"
