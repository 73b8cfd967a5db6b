"""LambdaRuntime: real handlers in worker processes, moto's Invoke API and Step Functions tasks.

A ThreadedMotoServer on 127.0.0.1 (free port) serves the AWS APIs; the handlers are the tiny
folders under tests/integration/fixtures/localcloud/.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.awslambda_simple.models import LambdaSimpleBackend

from lethe.localcloud import lambdas
from lethe.localcloud.deployment import AsyncInvokeConfig, Deployment, Endpoints, FunctionSpec
from lethe.localcloud.lambdas import LambdaRuntime
from tests.integration.conftest import moto_server

REGION = "us-east-1"
ACCOUNT = "123456789012"
FIXTURES = Path(__file__).parent / "fixtures" / "localcloud"
FAILURE_QUEUE = "lt-lambda-failures"
ECHO_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lt-echo"
FAILING_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lt-failing"


def _spec(
    logical_id: str,
    name: str,
    folder: str,
    *,
    handler: str = "app.handler",
    env: dict[str, str] | None = None,
    timeout: int = 3,
    async_config: AsyncInvokeConfig | None = None,
) -> FunctionSpec:
    return FunctionSpec(
        logical_id=logical_id,
        name=name,
        arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}",
        code_uri=FIXTURES / folder,
        handler=handler,
        layer_paths=(FIXTURES / "layer",),
        environment=env or {},
        timeout_seconds=timeout,
        memory_mb=256,
        async_config=async_config or AsyncInvokeConfig(),
    )


@pytest.fixture(scope="module")
def endpoints() -> Iterator[Endpoints]:
    with moto_server(ACCOUNT) as started:
        yield started


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("localcloud-lambdas")


@pytest.fixture(scope="module")
def deployment(endpoints: Endpoints, state_dir: Path) -> Deployment:
    failure_queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{FAILURE_QUEUE}"
    specs = [
        _spec("Echo", "lt-echo", "echo", env={"GREETING": "hello from echo"}),
        _spec("Shout", "lt-shout", "shout", env={"GREETING": "hello from shout"}),
        _spec("Failing", "lt-failing", "failing"),
        _spec("Sleepy", "lt-sleepy", "sleepy", timeout=1),
        _spec("Printer", "lt-printer", "printer"),
        _spec(
            "Recorder", "lt-recorder", "recorder", env={"RECORD_FILE": str(state_dir / "r.jsonl")}
        ),
        _spec("NoModule", "lt-no-module", "echo", handler="missing_module.handler"),
        _spec("NoHandler", "lt-no-handler", "shout", handler="app.nope"),
        _spec(
            "FailingAsync",
            "lt-failing-async",
            "failing",
            env={"COUNT_FILE": str(state_dir / "attempts.txt")},
            async_config=AsyncInvokeConfig(
                maximum_retry_attempts=2, on_failure_arn=failure_queue_arn
            ),
        ),
        _spec(
            "FailingOnce",
            "lt-failing-once",
            "failing",
            env={"COUNT_FILE": str(state_dir / "attempts-once.txt")},
            async_config=AsyncInvokeConfig(maximum_retry_attempts=0, on_failure_arn=None),
        ),
    ]
    return Deployment(
        endpoints=endpoints,
        repo_root=FIXTURES,
        state_dir=state_dir,
        stack_name="lt-lambdas",
        parameters={},
        physical_ids={},
        attributes={},
        outputs={},
        functions={spec.logical_id: spec for spec in specs},
    )


_ORIGINAL_INVOKE = LambdaSimpleBackend.invoke  # captured at import, before any install
_UNINSTALL: dict[str, Callable[[], None]] = {}


@pytest.fixture(scope="module")
def runtime(deployment: Deployment) -> Iterator[LambdaRuntime]:
    runtime = LambdaRuntime(deployment)
    _UNINSTALL["lambdas"] = lambdas.install(runtime)
    try:
        yield runtime
    finally:
        _UNINSTALL.pop("lambdas")()
        runtime.shutdown()


@pytest.fixture(scope="module")
def moto_functions(endpoints: Endpoints, deployment: Deployment) -> str:
    """Create the functions in moto (dummy code) so the Invoke API knows them; returns the role."""
    iam = endpoints.client("iam")
    role = iam.create_role(
        RoleName="lt-lambda-role",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("app.py", "def handler(event, context):\n    return 'moto'\n")
    lam = endpoints.client("lambda")
    for name in ("lt-echo", "lt-failing", "lt-recorder"):
        lam.create_function(
            FunctionName=name,
            Runtime="python3.11",
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": archive.getvalue()},
        )
    return str(role)


def test_invoke_runs_the_handler_with_the_function_environment(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "host-profile")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
    runtime = LambdaRuntime(deployment)  # workers of this runtime start with the patched env
    try:
        result = runtime.invoke("Echo", b'{"dataset": "reviews"}')
    finally:
        runtime.shutdown()

    assert result.function_error is None
    body = result.json()
    del body["pid"]
    assert body == {
        "event": {"dataset": "reviews"},
        "greeting": "hello from echo",
        "layer": "from the layer",
        "function_name": "lt-echo",
        "function_version": "$LATEST",
        "memory_limit_in_mb": "256",
        "invoked_function_arn": ECHO_ARN,
        "has_time_left": True,
        "task_root_is_cwd": True,
        "host_secret": "testing",
        "host_profile": None,
        "trace_disabled": "true",
        "execution_env": "AWS_Lambda_python3.11",
    }


def test_functions_with_the_same_module_name_are_isolated_and_stay_warm(
    runtime: LambdaRuntime,
) -> None:
    first = runtime.invoke("lt-echo", b"{}").json()
    shout = runtime.invoke(ECHO_ARN.replace("lt-echo", "lt-shout"), b"{}").json()
    again = runtime.invoke(ECHO_ARN, b"{}").json()

    assert first["greeting"] == "hello from echo"
    assert shout == {"shout": "HELLO FROM SHOUT", "module_file": "app.py"}
    assert again["greeting"] == "hello from echo"
    assert again["pid"] == first["pid"]  # the same warm worker


def test_handler_error_has_lambdas_shape(runtime: LambdaRuntime) -> None:
    result = runtime.invoke("Failing", b'{"dataset": "reviews"}')

    assert result.function_error == "Unhandled"
    error = result.json()
    assert error["errorType"] == "DatasetNotFoundError"
    assert error["errorMessage"] == "no dataset 'reviews'"
    assert len(error["stackTrace"]) == 1
    assert "fixtures/localcloud/failing/app.py" in error["stackTrace"][0]
    assert "in handler" in error["stackTrace"][0]


def test_init_errors_have_lambdas_error_types(runtime: LambdaRuntime) -> None:
    missing = runtime.invoke("NoModule", b"{}")
    no_handler = runtime.invoke("NoHandler", b"{}")

    assert missing.function_error == "Unhandled"
    assert missing.json()["errorType"] == "Runtime.ImportModuleError"
    assert missing.json()["errorMessage"] == (
        "Unable to import module 'missing_module': No module named 'missing_module'"
    )
    assert no_handler.function_error == "Unhandled"
    assert no_handler.json()["errorType"] == "Runtime.HandlerNotFound"
    assert no_handler.json()["errorMessage"] == "Handler 'nope' missing on module 'app'"


def test_timeout_kills_the_worker_and_the_next_invoke_cold_starts(runtime: LambdaRuntime) -> None:
    before = runtime.invoke("Sleepy", b'{"seconds": 0}').json()["pid"]

    started = time.monotonic()
    timed_out = runtime.invoke("Sleepy", b'{"seconds": 30}')
    elapsed = time.monotonic() - started
    after = runtime.invoke("Sleepy", b'{"seconds": 0}')

    assert timed_out.function_error == "Unhandled"
    assert timed_out.json()["errorType"] == "Sandbox.Timedout"
    assert timed_out.json()["errorMessage"].endswith("Task timed out after 1.00 seconds")
    assert elapsed < 5
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)  # the timed-out worker is gone
    assert after.function_error is None
    assert after.json()["slept"] == 0
    assert after.json()["pid"] != before


def test_concurrent_invocations_get_separate_workers(runtime: LambdaRuntime) -> None:
    results: list[dict[str, Any]] = []

    def call() -> None:
        results.append(runtime.invoke("Sleepy", b'{"seconds": 0.4}').json())

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert [r["slept"] for r in results] == [0.4, 0.4]
    assert results[0]["pid"] != results[1]["pid"]


def test_functions_behind_the_rest_api_get_more_execution_environments(
    deployment: Deployment,
) -> None:
    """API Gateway does not queue a burst: a function behind the REST API may run up to
    `max_api_workers` environments at once, every other function `max_workers_per_function`."""
    from dataclasses import replace  # noqa: PLC0415

    from lethe.localcloud.deployment import ApiRoute  # noqa: PLC0415

    routed = replace(deployment, api_routes=[ApiRoute("POST", "/echo", "Echo", "AWS_IAM")])
    runtime = LambdaRuntime(routed, max_workers_per_function=3, max_api_workers=7)
    try:
        assert runtime.max_workers(routed.functions["Echo"]) == 7
        assert runtime.max_workers(routed.functions["Shout"]) == 3
    finally:
        runtime.shutdown()


def test_function_output_goes_to_its_log_file_not_to_the_protocol(
    runtime: LambdaRuntime, deployment: Deployment
) -> None:
    result = runtime.invoke("Printer", b'{"word": "kittens"}')

    assert result.function_error is None
    assert result.json() == "printed"
    log = (deployment.logs_dir / "lt-printer.log").read_text()
    assert "hello from printer: kittens\n" in log
    assert "a warning on stderr\n" in log
    assert "START RequestId: " in log
    assert "INIT_START " in log


@pytest.mark.usefixtures("moto_functions")
def test_boto3_invoke_against_moto_runs_the_real_handler(
    runtime: LambdaRuntime, endpoints: Endpoints, state_dir: Path
) -> None:
    lam = endpoints.client("lambda")

    ok = lam.invoke(FunctionName="lt-echo", Payload=b'{"via": "boto3"}')
    failed = lam.invoke(FunctionName=FAILING_ARN, Payload=b'{"dataset": "orders"}')
    queued = lam.invoke(FunctionName="lt-recorder", InvocationType="Event", Payload=b'{"n": 1}')

    ok_body = json.loads(ok["Payload"].read())
    assert ok["StatusCode"] == 200
    assert "FunctionError" not in ok
    assert ok_body["event"] == {"via": "boto3"}
    assert ok_body["greeting"] == "hello from echo"
    assert failed["FunctionError"] == "Unhandled"
    assert json.loads(failed["Payload"].read())["errorType"] == "DatasetNotFoundError"
    assert queued["StatusCode"] == 202
    assert runtime.wait_idle(10)
    assert (state_dir / "r.jsonl").read_text() == '{"n": 1}\n'


def _wait_for_execution(sfn: Any, arn: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        execution = sfn.describe_execution(executionArn=arn)
        if execution["status"] != "RUNNING":
            return dict(execution)
        time.sleep(0.1)
    raise AssertionError(f"execution {arn} still running after {timeout} s")


def test_step_functions_lambda_tasks_run_the_handler_and_surface_its_error(
    runtime: LambdaRuntime, endpoints: Endpoints, moto_functions: str
) -> None:
    sfn = endpoints.client("stepfunctions")
    definition = {
        "StartAt": "Echo",
        "States": {
            "Echo": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": ECHO_ARN, "Payload.$": "$"},
                "ResultSelector": {
                    "greeting.$": "$.Payload.greeting",
                    "event.$": "$.Payload.event",
                },
                "ResultPath": "$.echo",
                "Next": "Fail",
            },
            "Fail": {"Type": "Task", "Resource": FAILING_ARN, "End": True},
        },
    }
    machine = sfn.create_state_machine(
        name="lt-echo-then-fail", definition=json.dumps(definition), roleArn=moto_functions
    )["stateMachineArn"]

    started = sfn.start_execution(
        stateMachineArn=machine, name="lt-run-1", input=json.dumps({"dataset": "payments"})
    )
    execution = _wait_for_execution(sfn, started["executionArn"])
    history = sfn.get_execution_history(executionArn=started["executionArn"])["events"]

    assert execution["status"] == "FAILED"
    assert execution["error"] == "DatasetNotFoundError"
    assert json.loads(execution["cause"])["errorMessage"] == "no dataset 'payments'"
    echo_done = [e for e in history if e["type"] == "TaskStateExited"]
    assert json.loads(echo_done[0]["stateExitedEventDetails"]["output"]) == {
        "dataset": "payments",
        "echo": {"greeting": "hello from echo", "event": {"dataset": "payments"}},
    }


def test_async_invoke_retries_then_sends_one_destination_record(
    runtime: LambdaRuntime, endpoints: Endpoints, state_dir: Path
) -> None:
    sqs = endpoints.client("sqs")
    queue_url = sqs.create_queue(QueueName=FAILURE_QUEUE)["QueueUrl"]
    event = {"dataset": "orders", "attempt_marker": "x"}

    runtime.invoke_async("FailingAsync", event)
    assert runtime.wait_idle(20)
    messages = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
    ).get("Messages", [])

    assert (state_dir / "attempts.txt").read_text() == "x\nx\nx\n"  # 1 attempt + 2 retries
    assert len(messages) == 1
    record = json.loads(messages[0]["Body"])
    assert record["version"] == "1.0"
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestContext"]["functionArn"] == (
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lt-failing-async:$LATEST"
    )
    assert record["requestPayload"] == {"dataset": "orders", "attempt_marker": "x"}
    assert record["responseContext"] == {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    }
    assert record["responsePayload"]["errorType"] == "DatasetNotFoundError"
    assert record["responsePayload"]["errorMessage"] == "no dataset 'orders'"
    assert record["timestamp"].endswith("Z")


def test_async_invoke_without_retries_runs_once(runtime: LambdaRuntime, state_dir: Path) -> None:
    runtime.invoke_async("FailingOnce", {"attempt_marker": "once"})

    assert runtime.wait_idle(10)
    assert (state_dir / "attempts-once.txt").read_text() == "once\n"


def test_install_is_guarded_and_reversible(runtime: LambdaRuntime, deployment: Deployment) -> None:
    patched = LambdaSimpleBackend.invoke

    with pytest.raises(RuntimeError, match="already installed"):
        lambdas.install(LambdaRuntime(deployment))
    assert LambdaSimpleBackend.invoke is patched
    assert patched is not _ORIGINAL_INVOKE

    _UNINSTALL.pop("lambdas")()
    assert LambdaSimpleBackend.invoke is _ORIGINAL_INVOKE
    _UNINSTALL["lambdas"] = lambdas.install(runtime)  # the module fixture uninstalls it again
    assert LambdaSimpleBackend.invoke is not _ORIGINAL_INVOKE
