"""How each Spark engine gets the jobs' Python dependencies (docs/SPARK.md), read from the
deployed files: every Glue job installs the uploaded requirements file (no inline pin left), and
every EMR Serverless task of the state machines runs with the uploaded Python environment archive
(its SparkSubmitParameters, said once per state machine in template.yaml's
DefinitionSubstitutions) and sends its driver and executor logs to CloudWatch."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from lethe import artifacts
from lethe.localcloud import sfn_hooks
from lethe.localcloud.spark_submit import parse_spark_submit_parameters, usable_spark_conf
from lethe.localcloud.template import load_template
from tests.conftest import REPO_ROOT

GLUE_JOBS = {"IngestGlueJob", "IndexGlueJob", "ReconcileGlueJob", "EraseGlueJob", "CompactGlueJob"}
REQUIREMENTS_URL = "s3://${ArtifactsBucket}/spark_jobs/requirements.txt"
ARCHIVE_URL = "s3://${ArtifactsBucket}/spark_jobs/pyspark_env.tar.gz"
PYTHON = "./environment/bin/python"
# The machines this work covers; ingestion.asl.json gets the same change separately.
EMR_MACHINES = (
    "ingestion.asl.json",
    "index_backfill.asl.json",
    "index_reconcile.asl.json",
    "index_compaction.asl.json",
    "erasure.asl.json",
)
EMR_RESOURCE = "arn:aws:states:::emr-serverless:startJobRun.sync"
SUBMIT_PLACEHOLDER = "${SparkSubmitParameters}"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return dict(load_template()["Resources"])


def test_every_glue_job_installs_the_uploaded_requirements_file(resources: dict[str, Any]) -> None:
    jobs = {lid: r for lid, r in resources.items() if r["Type"] == "AWS::Glue::Job"}
    assert set(jobs) == GLUE_JOBS

    for lid, job in jobs.items():
        arguments = job["Properties"]["DefaultArguments"]
        assert arguments["--additional-python-modules"] == {"Fn::Sub": REQUIREMENTS_URL}, lid
        assert arguments["--python-modules-installer-option"] == "-r", lid
        assert job["Properties"]["GlueVersion"] == "5.0", lid  # requirements files: Glue 5.0+
        inline = [v for v in arguments.values() if isinstance(v, str) and re.search(r"==\d", v)]
        assert not inline, f"{lid} pins {inline} inline: spark_jobs/requirements.txt pins them"


def test_the_requirements_url_is_where_the_upload_puts_the_file() -> None:
    assert REQUIREMENTS_URL.endswith(artifacts.S3_PREFIX + artifacts.REQUIREMENTS)
    assert ARCHIVE_URL.endswith(artifacts.S3_PREFIX + artifacts.PYTHON_ENV_ARCHIVE)


def test_the_emr_application_runs_on_the_archive_architecture(resources: dict[str, Any]) -> None:
    application = resources["SparkApplication"]["Properties"]

    assert application["Architecture"] == artifacts.ARCHITECTURES["x86_64"]  # the build default
    assert application["ReleaseLabel"].startswith("emr-7.")  # Python 3.11 from emr-7.1.0 on


def _tasks(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state.get("Type") == "Task" and state.get("Resource") == EMR_RESOURCE:
            yield name, state
        for branch in state.get("Branches", []):
            yield from _tasks(branch["States"])
        if "ItemProcessor" in state:
            yield from _tasks(state["ItemProcessor"]["States"])
        if "Iterator" in state:
            yield from _tasks(state["Iterator"]["States"])


def _emr_tasks() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for machine in EMR_MACHINES:
        definition = json.loads((REPO_ROOT / "statemachines" / machine).read_text())
        found += [(machine, name, state) for name, state in _tasks(definition["States"])]
    return found


def submit_parameters(machine: str) -> str:
    """The SparkSubmitParameters substitution of the state machine deployed from `machine`: the
    text of its Fn::Sub (`${ArtifactsBucket}` left in, as the ASL files had it)."""
    (value,) = [
        r["Properties"]["DefinitionSubstitutions"]["SparkSubmitParameters"]
        for r in load_template()["Resources"].values()
        if r["Type"] == "AWS::Serverless::StateMachine"
        and r["Properties"]["DefinitionUri"] == f"statemachines/{machine}"
    ]
    return str(value["Fn::Sub"])


EMR_TASKS = _emr_tasks()
EMR_TASK_PARAMS = [pytest.param(*task, id=f"{task[0]}:{task[1]}") for task in EMR_TASKS]


def test_the_machines_have_emr_serverless_tasks() -> None:
    assert {machine for machine, _, _ in EMR_TASKS} == set(EMR_MACHINES)
    assert len(EMR_TASKS) == 6  # ingest, backfill x2, reconcile, erase (verify: --mode), compact


@pytest.mark.parametrize(("machine", "name", "state"), EMR_TASK_PARAMS)
def test_each_emr_task_runs_with_the_python_environment_archive(
    machine: str, name: str, state: dict[str, Any]
) -> None:
    arguments = state.get("Arguments") or state["Parameters"]
    assert arguments["JobDriver"]["SparkSubmit"]["SparkSubmitParameters"] == SUBMIT_PLACEHOLDER
    submit = submit_parameters(machine)
    options = parse_spark_submit_parameters(submit)

    assert options.conf["spark.archives"] == f"{ARCHIVE_URL}#environment"
    assert options.conf["spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON"] == PYTHON
    assert options.conf["spark.emr-serverless.driverEnv.PYSPARK_PYTHON"] == PYTHON
    assert options.conf["spark.executorEnv.PYSPARK_PYTHON"] == PYTHON
    assert options.py_files == ["s3://${ArtifactsBucket}/spark_jobs/lethe_shared.zip"]
    assert options.ignored == []
    assert sfn_hooks.emr_python_env_problems(options.conf) == []
    # none of it reaches the local run, which uses this venv's Python
    kept = usable_spark_conf(options.conf)
    assert not [k for k in kept if "archives" in k or "PYTHON" in k], kept
    assert len(shlex.split(submit)) == 2 * (len(options.conf) + 1)  # nothing else on the line


@pytest.mark.parametrize(("machine", "name", "state"), EMR_TASK_PARAMS)
def test_each_emr_task_logs_driver_and_executor_to_cloudwatch(
    machine: str, name: str, state: dict[str, Any]
) -> None:
    arguments = state.get("Arguments") or state["Parameters"]
    logging = arguments["ConfigurationOverrides"]["MonitoringConfiguration"][
        "CloudWatchLoggingConfiguration"
    ]

    assert logging["Enabled"] is True
    assert logging["LogGroupName"] == "${SparkLogGroupName}"
    assert re.fullmatch(r"[^:*]{1,512}", logging["LogStreamNamePrefix"])
    assert logging["LogTypes"] == {
        "SPARK_DRIVER": ["STDOUT", "STDERR"],
        "SPARK_EXECUTOR": ["STDOUT", "STDERR"],
    }
    # the shape StartJobRun accepts (botocore's EMR Serverless model), as the local cloud checks
    request = {
        "ApplicationId": "00app",
        "ExecutionRoleArn": "arn:aws:iam::123456789012:role/lethe-local-spark",
        "JobDriver": {"SparkSubmit": {"EntryPoint": "s3://bucket/spark_jobs/index.py"}},
        "ConfigurationOverrides": arguments["ConfigurationOverrides"],
    }
    assert sfn_hooks.emr_request_problems(request) == []


def test_the_local_cloud_refuses_a_request_emr_would_refuse() -> None:
    request = {
        "ApplicationId": "00app",
        "ExecutionRoleArn": "arn:aws:iam::123456789012:role/lethe-local-spark",
        "JobDriver": {"SparkSubmit": {"EntryPoint": "s3://b/k.py", "EntryPointArguments": "x"}},
        "ConfigurationOverrides": {
            "MonitoringConfiguration": {
                "CloudWatchLoggingConfiguration": {"LogGroupName": "g", "LogTypes": ["STDERR"]},
                "CloudWatchLogging": {},
            }
        },
    }

    problems = "\n".join(sfn_hooks.emr_request_problems(request))

    assert "jobDriver.sparkSubmit.entryPointArguments" in problems
    monitoring = "configurationOverrides.monitoringConfiguration"
    assert (
        f'Missing required parameter in {monitoring}.cloudWatchLoggingConfiguration: "enabled"'
        in (problems)
    )
    assert f"{monitoring}.cloudWatchLoggingConfiguration.logTypes" in problems
    assert f'Unknown parameter in {monitoring}: "cloudWatchLogging"' in problems


@pytest.mark.parametrize(
    ("conf", "problem"),
    [
        (
            {"spark.executorEnv.PYSPARK_PYTHON": PYTHON},
            "no spark.archives entry is unpacked as 'environment'",
        ),
        (
            {
                "spark.archives": "s3://b/env.tar.gz#venv",
                "spark.executorEnv.PYSPARK_PYTHON": PYTHON,
            },
            "unpacked as 'environment'",
        ),
        ({"spark.archives": "/tmp/env.tar.gz#environment"}, "is not an S3 object URL"),
    ],
)
def test_an_interpreter_outside_the_unpacked_archives_is_a_problem(
    conf: dict[str, str], problem: str
) -> None:
    assert problem in "\n".join(sfn_hooks.emr_python_env_problems(conf))


def test_an_archive_without_alias_unpacks_under_its_file_name() -> None:
    conf = {
        "spark.archives": "s3://b/a/one.tar.gz, s3://b/env.tar.gz#environment",
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": "./one.tar.gz/bin/python",
        "spark.executorEnv.PYSPARK_PYTHON": PYTHON,
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": "/usr/bin/python3.11",
    }

    assert sfn_hooks.emr_python_env_problems(conf) == []


def test_the_docs_describe_this() -> None:
    docs = (REPO_ROOT / "docs" / "SPARK.md").read_text()
    for needle in (
        "pyspark_env.tar.gz",
        "--python-modules-installer-option",
        "SparkLogGroupName",
        "manylinux_2_34",
        "/usr/bin/python3.11",
    ):
        assert needle in docs, needle
