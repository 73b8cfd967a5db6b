"""The IAM statements no local run can exercise, held to what AWS's documentation requires.

Some statements of the template are used by AWS on a role's behalf, outside any call the local
cloud can check (docs/SECURITY.md "Local IAM check"): Step Functions' log delivery, the
Distributed Map starting and watching its child executions, Glue and EMR Serverless shipping a
Spark job's logs, Lambda delivering a failed asynchronous invocation to its destination, SNS
encrypting a notification with the topic's key, and the customer-key statements that exist
only with `KmsKeyArn` (S3, DynamoDB, SQS, SNS and Secrets Manager call KMS for the caller).
For each such statement a test here asserts its exact actions, resources and conditions as the
cited AWS page gives them, in the translated template: removing the statement, dropping an
action or narrowing a resource fails the named test (and so does widening it: least privilege).
tests/unit/test_iam_statement_coverage.py checks that every statement of the template has
either such a test or a local run that needs it.
"""

from __future__ import annotations

from typing import Any

import pytest

from lethe.localcloud.template import REPO_ROOT, translated_template

pytestmark = pytest.mark.unit

STATE_MACHINES = {  # the role -> its state machine
    "IngestionStateMachineRole": "IngestionStateMachine",
    "ErasureStateMachineRole": "ErasureStateMachine",
    "IndexBackfillStateMachineRole": "IndexBackfillStateMachine",
    "IndexReconcileStateMachineRole": "IndexReconcileStateMachine",
    "IndexCompactionStateMachineRole": "IndexCompactionStateMachine",
}
# every state machine that logs (the retention machine publishes no notice, so it has no
# NotifyEncrypted statement and is not in STATE_MACHINES)
LOGGING_STATE_MACHINES = {**STATE_MACHINES, "RetentionStateMachineRole": "RetentionStateMachine"}
ACCOUNT_ARN = "arn:${AWS::Partition}:{service}:${AWS::Region}:${AWS::AccountId}:"
BACKFILL = "lethe-${Stage}-index-backfill"


@pytest.fixture(scope="module")
def translated() -> dict[str, Any]:
    return translated_template()


def _sub(service: str, rest: str) -> dict[str, str]:
    return {"Fn::Sub": ACCOUNT_ARN.replace("{service}", service) + rest}


def _as_set(value: Any) -> set[Any]:
    items = value if isinstance(value, list) else [value]
    return {item if isinstance(item, str) else repr(item) for item in items}


def statement(translated: dict[str, Any], name: str) -> dict[str, Any]:
    """`<Role>/<PolicyName>/<Sid or #n>` of the translated template, in either branch of an
    `Fn::If` policy; fails naming it when it is gone."""
    role, policy_name, sid = name.split("/")
    resource = translated["Resources"].get(role)
    assert resource is not None, f"no role {role}"
    for policy in resource["Properties"].get("Policies", []):
        branches = policy["Fn::If"][1:] if "Fn::If" in policy else [policy]
        for branch in branches:
            if not isinstance(branch, dict) or branch.get("PolicyName") != policy_name:
                continue
            for index, found in enumerate(branch["PolicyDocument"]["Statement"]):
                if (found.get("Sid") or f"#{index}") == sid:
                    assert isinstance(found, dict)
                    return found
    raise AssertionError(f"no statement {name}: removed from the template")


def assert_grants(
    found: dict[str, Any], actions: set[str], resources: list[Any], condition: Any = None
) -> None:
    assert found["Effect"] == "Allow"
    assert _as_set(found["Action"]) == actions
    assert _as_set(found["Resource"]) == _as_set(resources)
    assert found.get("Condition") == condition


# ------------------------------------------------------------------ Step Functions log delivery


@pytest.mark.parametrize("role", sorted(LOGGING_STATE_MACHINES))
def test_state_machine_log_delivery_is_what_step_functions_documents(
    translated: dict[str, Any], role: str
) -> None:
    """`DeliverLogs`: Step Functions sets up the delivery of a state machine's execution logs
    to CloudWatch Logs with the state machine's role; AWS's "IAM policies for logging to
    CloudWatch Logs" lists these eight actions on Resource "*" (the log delivery APIs take no
    resource-level permissions): https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html
    The statement is needed because the state machine logs to a log group."""
    machine = translated["Resources"][LOGGING_STATE_MACHINES[role]]["Properties"]
    assert machine["LoggingConfiguration"]["Destinations"], "the state machine logs"
    assert translated["Resources"][LOGGING_STATE_MACHINES[role]]["Properties"]["RoleArn"] == {
        "Fn::GetAtt": [role, "Arn"]
    }
    assert_grants(
        statement(translated, f"{role}/{role}Policy0/DeliverLogs"),
        {
            "logs:CreateLogDelivery",
            "logs:GetLogDelivery",
            "logs:UpdateLogDelivery",
            "logs:DeleteLogDelivery",
            "logs:ListLogDeliveries",
            "logs:PutResourcePolicy",
            "logs:DescribeResourcePolicies",
            "logs:DescribeLogGroups",
        },
        ["*"],
    )


# ------------------------------------------------------------- Distributed Map child executions


def _backfill_has_a_distributed_map(translated: dict[str, Any]) -> None:
    machine = translated["Resources"]["IndexBackfillStateMachine"]["Properties"]
    assert machine["StateMachineName"] == {"Fn::Sub": BACKFILL}
    text = str(machine.get("DefinitionS3Location") or machine.get("Definition"))
    assert (
        "index_backfill" in text
    )  # its Distributed Map: tests/sfn/test_localcloud_distributed_map


def test_distributed_map_may_start_its_child_executions(translated: dict[str, Any]) -> None:
    """`RunDistributedMapChildren`: a Distributed Map starts its child workflow executions as
    the state machine's role; AWS's "IAM policies for using Distributed Map states" grants
    states:StartExecution on the state machine's own ARN (by name here: a !Ref would be
    circular): https://docs.aws.amazon.com/step-functions/latest/dg/iam-policies-eg-dist-map.html"""
    _backfill_has_a_distributed_map(translated)
    assert_grants(
        statement(
            translated,
            "IndexBackfillStateMachineRole/IndexBackfillStateMachineRolePolicy0/"
            "RunDistributedMapChildren",
        ),
        {"states:StartExecution"},
        [_sub("states", f"stateMachine:{BACKFILL}")],
    )


def test_distributed_map_may_watch_and_stop_its_child_executions(
    translated: dict[str, Any],
) -> None:
    """`TrackDistributedMapChildren`: the same page grants states:DescribeExecution and
    states:StopExecution on the child executions, `execution:<stateMachineName>/*` (a child
    is `<name>/<map run label>:<id>`):
    https://docs.aws.amazon.com/step-functions/latest/dg/iam-policies-eg-dist-map.html"""
    _backfill_has_a_distributed_map(translated)
    assert_grants(
        statement(
            translated,
            "IndexBackfillStateMachineRole/IndexBackfillStateMachineRolePolicy0/"
            "TrackDistributedMapChildren",
        ),
        {"states:DescribeExecution", "states:StopExecution"},
        [_sub("states", f"execution:{BACKFILL}/*")],
    )


# --------------------------------------------------------------------------------- Spark logs


def test_glue_jobs_may_write_their_logs(translated: dict[str, Any]) -> None:
    """`JobLogs`: Glue writes a job run's driver and executor logs (continuous logging, job
    insights, the `--custom-logGroup-prefix` groups /aws-glue/jobs/lethe-<stage>/...) as the
    job's role; AWS's Glue service policy grants logs:CreateLogGroup, CreateLogStream and
    PutLogEvents on the /aws-glue/* log groups:
    https://docs.aws.amazon.com/glue/latest/dg/create-service-policy.html
    and https://docs.aws.amazon.com/glue/latest/dg/monitor-continuous-logging.html
    (EMR Serverless writes only to SparkLogGroup, below: no /aws/emr-serverless/* grant.)"""
    for job in ("IngestGlueJob", "IndexGlueJob", "ReconcileGlueJob", "EraseGlueJob"):
        arguments = translated["Resources"][job]["Properties"]["DefaultArguments"]
        assert arguments["--custom-logGroup-prefix"] == {
            "Fn::Sub": "/aws-glue/jobs/lethe-${Stage}"
        }, job
    assert_grants(
        statement(translated, "SparkJobRole/spark-data-access/JobLogs"),
        {"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"},
        [_sub("logs", "log-group:/aws-glue/*")],
    )


def test_emr_serverless_jobs_may_write_to_the_spark_log_group(translated: dict[str, Any]) -> None:
    """`SparkLogGroup`: with a CloudWatchLoggingConfiguration (every state machine's EMR
    Serverless task names SparkLogGroup), EMR Serverless writes the job's logs as its runtime
    role; AWS's "Logging for EMR Serverless with Amazon CloudWatch" requires logs:CreateLogStream,
    logs:PutLogEvents and logs:DescribeLogStreams on that log group:
    https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/logging.html#jobs-log-storage-cw"""
    for role in STATE_MACHINES:
        machine = translated["Resources"][STATE_MACHINES[role]]["Properties"]
        substitutions = machine.get("DefinitionSubstitutions", {})
        assert substitutions.get("SparkLogGroupName") == {"Ref": "SparkLogGroup"}, role
    assert_grants(
        statement(translated, "SparkJobRole/spark-data-access/SparkLogGroup"),
        {"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"},
        [{"Fn::GetAtt": ["SparkLogGroup", "Arn"]}],
    )


def test_emr_serverless_jobs_may_find_the_spark_log_group(translated: dict[str, Any]) -> None:
    """`FindSparkLogGroup`: the same page requires logs:DescribeLogGroups, which takes no
    resource narrower than the account's log groups (`log-group:*`):
    https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/logging.html#jobs-log-storage-cw"""
    assert_grants(
        statement(translated, "SparkJobRole/spark-data-access/FindSparkLogGroup"),
        {"logs:DescribeLogGroups"},
        [_sub("logs", "log-group:*")],
    )


# ------------------------------------------------------------- Lambda's failure destination


def test_index_object_function_may_deliver_failures_to_its_destination(
    translated: dict[str, Any],
) -> None:
    """`IndexObjectFunctionEventInvokeConfigOnFailureSQSPolicy` (SAM writes it from
    EventInvokeConfig): Lambda sends the record of an asynchronous invocation that failed
    every attempt to the on-failure SQS queue with the function's execution role, which needs
    sqs:SendMessage on that queue:
    https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html"""
    function = next(
        resource["Properties"]
        for resource in translated["Resources"].values()
        if resource["Type"] == "AWS::Lambda::EventInvokeConfig"
        and resource["Properties"]["FunctionName"] == {"Ref": "IndexObjectFunction"}
    )
    destination = function["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": ["WorkflowDeadLetterQueue", "Arn"]}
    assert_grants(
        statement(
            translated,
            "IndexObjectFunctionRole/IndexObjectFunctionEventInvokeConfigOnFailureSQSPolicy/#0",
        ),
        {"sqs:SendMessage"},
        [destination],
    )


# ------------------------------------------------------------------ encrypted notifications


@pytest.mark.parametrize("role", sorted(STATE_MACHINES))
def test_state_machines_may_publish_to_the_encrypted_topic(
    translated: dict[str, Any], role: str
) -> None:
    """`NotifyEncrypted`: the notifications topic is encrypted with a customer key
    (NotificationsKey, or KmsKeyArn when given); SNS calls KMS for the publisher, who needs
    kms:GenerateDataKey* and kms:Decrypt on the topic's key:
    https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html
    The local check does not model SNS's KMS calls (docs/SECURITY.md), so no run covers it."""
    topic = translated["Resources"]["NotificationsTopic"]["Properties"]
    notifications_key = {"Fn::GetAtt": ["NotificationsKey", "Arn"]}
    key = {"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, notifications_key]}
    assert topic["KmsMasterKeyId"] == key
    assert_grants(
        statement(translated, f"{role}/{role}Policy0/NotifyEncrypted"),
        {"kms:GenerateDataKey*", "kms:Decrypt"},
        [key],
    )


# --------------------------------------------------------- the customer key (KmsKeyArn given)

# Roles whose HasKmsKey policy grants the key to read and write encrypted data (S3 SSE-KMS:
# GenerateDataKey to write, Decrypt to read; SQS and Secrets Manager the same) and the one
# that only reads (the metrics function reads the requests table).
CUSTOMER_KEY_POLICIES = {
    "ApprovalPageFunctionRole/ApprovalPageFunctionRolePolicy1/#0": "read-write",
    "ApprovalRequestFunctionRole/ApprovalRequestFunctionRolePolicy1/#0": "read-write",
    "DatasetsApiFunctionRole/DatasetsApiFunctionRolePolicy1/#0": "read-write",
    "ErasureApiFunctionRole/ErasureApiFunctionRolePolicy1/#0": "read-write",
    "ErasureMetricsFunctionRole/ErasureMetricsFunctionRolePolicy1/#0": "read",
    "ErasureStateMachineRole/ErasureStateMachineRolePolicy1/#0": "read-write",
    "ErasureStepsFunctionRole/ErasureStepsFunctionRolePolicy1/#0": "read-write",
    "IndexBackfillStateMachineRole/IndexBackfillStateMachineRolePolicy1/#0": "read-write",
    "IndexObjectFunctionRole/IndexObjectFunctionRolePolicy1/#0": "read-write",
    "IndexReconcileStateMachineRole/IndexReconcileStateMachineRolePolicy1/#0": "read-write",
    "IndexCompactionStateMachineRole/IndexCompactionStateMachineRolePolicy1/#0": "read-write",
    "IngestionStateMachineRole/IngestionStateMachineRolePolicy1/#0": "read-write",
    "IngestionStepsFunctionRole/IngestionStepsFunctionRolePolicy1/#0": "read-write",
    "RetentionStateMachineRole/RetentionStateMachineRolePolicy1/#0": "read-write",
    "RetentionStepsFunctionRole/RetentionStepsFunctionRolePolicy1/#0": "read-write",
    "ObjectEventsFunctionRole/ObjectEventsFunctionRolePolicy1/#0": "read-write",
    "SparkJobRole/spark-kms/#0": "read-write",
}


@pytest.mark.parametrize("name", sorted(CUSTOMER_KEY_POLICIES))
def test_customer_key_statements_grant_the_key_and_nothing_else(
    translated: dict[str, Any], name: str
) -> None:
    """With `KmsKeyArn` the buckets, tables, queues, topics and secrets are encrypted with that
    key, and AWS evaluates the caller's permission on the key when the service calls KMS for
    it: S3 SSE-KMS needs kms:GenerateDataKey to write and kms:Decrypt to read
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html), SQS the
    same for producers and consumers
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html).
    The statement exists only under HasKmsKey, on exactly that key."""
    role, policy_name, _ = name.split("/")
    policies = translated["Resources"][role]["Properties"]["Policies"]
    conditional = [
        p for p in policies if "Fn::If" in p and p["Fn::If"][1].get("PolicyName") == policy_name
    ]
    assert len(conditional) == 1, f"{name} is not under one Fn::If"
    assert conditional[0]["Fn::If"][0] == "HasKmsKey"
    actions = {"kms:Decrypt"} | (
        {"kms:GenerateDataKey"} if CUSTOMER_KEY_POLICIES[name] == "read-write" else set()
    )
    assert_grants(statement(translated, name), actions, [{"Ref": "KmsKeyArn"}])


# ------------------------------------------------------------------------ retention (issue 23)


def test_the_retention_schedule_may_start_the_retention_machine_and_nothing_else(
    translated: dict[str, Any],
) -> None:
    """`StartRetentionRuns`: EventBridge starts the rule's Step Functions target with the
    target's role, which "needs states:StartExecution on the state machine" (EventBridge's
    "Step Functions state machine target":
    https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-custom-bus-target-sfn.html).
    The local cloud fires no schedule (tests/sfn/test_retention_run.py starts the machine as
    the rule does), so no run covers it."""
    rule = translated["Resources"]["RetentionScheduleRule"]["Properties"]
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Ref": "RetentionStateMachine"}
    assert target["RoleArn"] == {"Fn::GetAtt": ["RetentionScheduleRole", "Arn"]}
    role = translated["Resources"]["RetentionScheduleRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert_grants(
        statement(
            translated, "RetentionScheduleRole/RetentionScheduleRolePolicy0/StartRetentionRuns"
        ),
        {"states:StartExecution"},
        [{"Ref": "RetentionStateMachine"}],
    )


def test_the_retention_machine_on_glue_may_run_exactly_the_jobs_its_definition_starts(
    translated: dict[str, Any],
) -> None:
    """`RunSparkOnGlue` of the retention machine: with `SparkEngine=GLUE` its definition starts
    the erase job (erase, verify) and the index job with `glue:startJobRun.sync`, which needs
    glue:StartJobRun, GetJobRun, GetJobRuns and BatchStopJobRun on those jobs ("Run AWS Glue
    jobs with Step Functions":
    https://docs.aws.amazon.com/step-functions/latest/dg/connect-glue.html). The Glue variant
    of the run is not executed locally (its EMR Serverless variant is:
    tests/sfn/test_retention_run.py); this holds the statement to the jobs the definition names."""
    definition = (REPO_ROOT / "statemachines" / "retention.asl.json").read_text()
    assert "arn:aws:states:::glue:startJobRun.sync" in definition
    jobs = {
        name for name in ("EraseGlueJobName", "IndexGlueJobName") if f"${{{name}}}" in definition
    }
    assert jobs == {"EraseGlueJobName", "IndexGlueJobName"}
    substitutions = translated["Resources"]["RetentionStateMachine"]["Properties"][
        "DefinitionSubstitutions"
    ]
    assert substitutions["EraseGlueJobName"]["Fn::If"][1] == {"Ref": "EraseGlueJob"}
    assert substitutions["IndexGlueJobName"]["Fn::If"][1] == {"Ref": "IndexGlueJob"}
    job = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:job/lethe-${Stage}-"
    assert_grants(
        statement(
            translated, "RetentionStateMachineRole/RetentionStateMachineRolePolicy0/RunSparkOnGlue"
        ),
        {"glue:StartJobRun", "glue:GetJobRun", "glue:GetJobRuns", "glue:BatchStopJobRun"},
        [{"Fn::Sub": job + "erase"}, {"Fn::Sub": job + "index"}],
    )


# ---------------------------------------------------------------- index compaction (issue 20)


def test_the_compaction_schedule_may_start_the_compaction_machine_and_nothing_else(
    translated: dict[str, Any],
) -> None:
    """`StartCompactionRuns`: EventBridge starts the rule's Step Functions target with the
    target's role, which "needs states:StartExecution on the state machine" (EventBridge's
    "Step Functions state machine target":
    https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-custom-bus-target-sfn.html).
    The local cloud fires no schedule (tests/sfn/test_index_compaction.py starts the machine as
    the rule does), so no run covers it."""
    rule = translated["Resources"]["IndexCompactionScheduleRule"]["Properties"]
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Ref": "IndexCompactionStateMachine"}
    assert target["RoleArn"] == {"Fn::GetAtt": ["IndexCompactionScheduleRole", "Arn"]}
    assert rule["ScheduleExpression"] == {"Ref": "CompactionSchedule"}
    role = translated["Resources"]["IndexCompactionScheduleRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert_grants(
        statement(
            translated,
            "IndexCompactionScheduleRole/IndexCompactionScheduleRolePolicy0/StartCompactionRuns",
        ),
        {"states:StartExecution"},
        [{"Ref": "IndexCompactionStateMachine"}],
    )


def test_the_compaction_machine_on_glue_may_run_exactly_the_compaction_job(
    translated: dict[str, Any],
) -> None:
    """`RunSparkOnGlue` of the compaction machine: with `SparkEngine=GLUE` its definition starts
    the compaction job with `glue:startJobRun.sync`, which needs glue:StartJobRun, GetJobRun,
    GetJobRuns and BatchStopJobRun on that job ("Run AWS Glue jobs with Step Functions":
    https://docs.aws.amazon.com/step-functions/latest/dg/connect-glue.html). The Glue variant
    is not executed locally (its EMR Serverless variant is: tests/sfn/test_index_compaction.py);
    this holds the statement to the one job the definition names."""
    definition = (REPO_ROOT / "statemachines" / "index_compaction.asl.json").read_text()
    assert "arn:aws:states:::glue:startJobRun.sync" in definition
    assert "${CompactGlueJobName}" in definition
    substitutions = translated["Resources"]["IndexCompactionStateMachine"]["Properties"][
        "DefinitionSubstitutions"
    ]
    assert substitutions["CompactGlueJobName"]["Fn::If"][1] == {"Ref": "CompactGlueJob"}
    assert translated["Resources"]["CompactGlueJob"]["Properties"]["Name"] == {
        "Fn::Sub": "lethe-${Stage}-compact"
    }
    job = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:job/lethe-${Stage}-compact"
    assert_grants(
        statement(
            translated,
            "IndexCompactionStateMachineRole/IndexCompactionStateMachineRolePolicy0/RunSparkOnGlue",
        ),
        {"glue:StartJobRun", "glue:GetJobRun", "glue:GetJobRuns", "glue:BatchStopJobRun"},
        [{"Fn::Sub": job}],
    )


# ------------------------------------------------ the segment index's bucket: 404, not 403


LIST_INDEX_BUCKET = (
    "ErasureStepsFunctionRole/ErasureStepsFunctionRolePolicy0/ListIndexBucket",
    "IndexObjectFunctionRole/IndexObjectFunctionRolePolicy0/ListIndexBucket",
    "ObjectEventsFunctionRole/ObjectEventsFunctionRolePolicy0/ListIndexBucket",
    "SparkJobRole/spark-data-access/ListIndexBucket",
)


@pytest.mark.parametrize("name", LIST_INDEX_BUCKET)
def test_roles_reading_segments_may_list_the_index_bucket_so_a_gone_segment_is_a_404(
    translated: dict[str, Any], name: str
) -> None:
    """`ListIndexBucket`: "If the object you request doesn't exist, the error that Amazon S3
    returns depends on whether you also have the s3:ListBucket permission": 404 with it, 403
    ("access denied") without (the GetObject and HeadObject API references:
    https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html). A reader of segments
    meets a segment compaction or an erasure deleted (it reads the manifest again on 404), and the
    erasure proves an old file gone by HeadObject's 404 (INDEX_SEGMENTS.md): without the statement
    both fail closed on AWS. The local IAM check authorises the GetObject/HeadObject call itself
    but does not model this 404/403 rule, so no local run needs the statement."""
    assert_grants(
        statement(translated, name), {"s3:ListBucket"}, [{"Fn::GetAtt": ["IndexBucket", "Arn"]}]
    )
    role, policy, _ = name.split("/")
    reads = statement(translated, f"{role}/{policy}/IndexSegments")
    assert "s3:GetObject" in _as_set(reads["Action"])
