"""Provisioning the REAL template.yaml into a moto server (lethe.localcloud.provision).

A ThreadedMotoServer on 127.0.0.1 (free port) with the local cloud's moto configuration; the
template is deployed twice, once per SparkEngine, under different stages so names never clash.
Expected values are written here from the template's naming scheme, not read from the result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

from lethe.localcloud import sfn_hooks
from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.deployment import Deployment, Endpoints
from lethe.localcloud.provision import (
    NOT_EMULATED,
    ProvisionError,
    check_coverage,
    localize_outputs,
    provision,
    substitute_definition,
)
from lethe.localcloud.s3events import eventbridge_enabled
from lethe.localcloud.sfn_hooks import HookContext
from lethe.localcloud.template import load_template, translate
from tests.conftest import REPO_ROOT

REGION = "us-east-1"
ACCOUNT = "123456789012"
STAGE = "itest"  # EMR_SERVERLESS deployment
GLUE_STAGE = "itglue"  # GLUE deployment


# The GLUE deployment also sets the deploy parameters away from their defaults.
GLUE_DEPLOY_PARAMETERS = {
    "AlertEmail": "oncall@example.com",
    "LogRetentionDays": "30",
    "ReservedConcurrency": "20",
    "CreateApiGatewayAccountRole": "false",
}


def parameters(stage: str, engine: str) -> dict[str, str]:
    return {
        "Stage": stage,
        "ApproverEmails": "approver@example.com,second@example.com",
        "SenderEmail": "lethe@example.com",
        "SparkEngine": engine,
        **(GLUE_DEPLOY_PARAMETERS if engine == "GLUE" else {}),
    }


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """The server, with the Step Functions hooks the local cloud installs before it provisions:
    creating a state machine parses its definition, and moto's parser reads ItemBatcher only
    with them (sfn_hooks)."""
    restore = configure_moto()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        port = server.get_host_and_port()[1]
        found = Endpoints(f"http://127.0.0.1:{port}", REGION, ACCOUNT)
        logs = tmp_path_factory.mktemp("provision-logs")
        uninstall = sfn_hooks.install(HookContext(found, logs, REPO_ROOT))
        try:
            yield found
        finally:
            uninstall()
    finally:
        server.stop()
        restore()


@pytest.fixture(scope="module")
def deployment(endpoints: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    state_dir = tmp_path_factory.mktemp("provision-emr")
    return provision(
        endpoints, REPO_ROOT, state_dir, parameters(STAGE, "EMR_SERVERLESS"), f"lethe-{STAGE}"
    )


@pytest.fixture(scope="module")
def glue_deployment(endpoints: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    state_dir = tmp_path_factory.mktemp("provision-glue")
    return provision(
        endpoints, REPO_ROOT, state_dir, parameters(GLUE_STAGE, "GLUE"), f"lethe-{GLUE_STAGE}"
    )


GLUE_LOG_GROUPS = ("GlueOutputLogGroup", "GlueErrorLogGroup")


def translated_resources(stage: str, engine: str) -> dict[str, Any]:
    return dict(translate(load_template(), parameters(stage, engine))["Resources"])


def raw_bucket(stage: str) -> str:
    return f"lethe-{stage}-raw-{ACCOUNT}-{REGION}"


# ------------------------------------------------------------------------------ coverage


@pytest.mark.parametrize(
    ("fixture", "stage", "engine"),
    [("deployment", STAGE, "EMR_SERVERLESS"), ("glue_deployment", GLUE_STAGE, "GLUE")],
)
def test_every_logical_id_is_created_or_explained(
    request: pytest.FixtureRequest, fixture: str, stage: str, engine: str
) -> None:
    result: Deployment = request.getfixturevalue(fixture)
    resources = translated_resources(stage, engine)
    assert set(resources) == set(result.physical_ids) | set(result.not_created)
    assert not set(result.physical_ids) & set(result.not_created)
    for logical_id, reason in result.not_created.items():
        resource = resources[logical_id]
        if "Condition" in resource and reason == f"condition {resource['Condition']} is false":
            continue  # a false condition comes first, whatever the type
        assert resource["Type"] in NOT_EMULATED, (logical_id, reason)
        assert reason == NOT_EMULATED[resource["Type"]]
    permissions = [lid for lid, r in resources.items() if r["Type"] == "AWS::Lambda::Permission"]
    assert permissions, "SAM's API and EventBridge events give Lambda permissions"
    assert all("not enforced" in result.not_created[lid] for lid in permissions)


def test_the_translated_template_is_kept_in_the_state_dir(deployment: Deployment) -> None:
    kept = json.loads((deployment.state_dir / "translated-template.json").read_text())
    assert set(kept["Resources"]) == set(translated_resources(STAGE, "EMR_SERVERLESS"))


def test_check_coverage_refuses_a_lost_resource(deployment: Deployment) -> None:
    template: dict[str, Any] = {"Resources": {"RawBucket": {}, "Ghost": {}}}
    with pytest.raises(ProvisionError, match="neither created nor explained: Ghost"):
        check_coverage(template, deployment)


def test_an_unknown_resource_type_fails_naming_it(endpoints: Endpoints, tmp_path: Path) -> None:
    # Given a copy of the repository whose template has a type without a handler
    for folder in ("functions", "layers", "statemachines", "spark_jobs"):
        if (REPO_ROOT / folder).exists():
            (tmp_path / folder).symlink_to(REPO_ROOT / folder)
    template = load_template()
    template["Resources"]["Mystery"] = {"Type": "AWS::Mystery::Thing", "Properties": {}}
    (tmp_path / "template.yaml").write_text(json.dumps(template))
    # When it is provisioned, Then it fails before creating anything, naming the type
    with pytest.raises(ProvisionError, match=r"Mystery \(AWS::Mystery::Thing\)"):
        provision(endpoints, tmp_path, tmp_path / "state", parameters("unknown", "GLUE"), "x")
    buckets = endpoints.client("s3").list_buckets()["Buckets"]
    assert raw_bucket("unknown") not in {b["Name"] for b in buckets}


def test_an_event_target_with_an_input_transformer_fails_naming_it(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    # Given a copy of the repository whose EventBridge rule transforms its target's input
    for folder in ("functions", "layers", "statemachines", "spark_jobs"):
        if (REPO_ROOT / folder).exists():
            (tmp_path / folder).symlink_to(REPO_ROOT / folder)
    template = load_template()
    (target,) = template["Resources"]["ObjectChangedRule"]["Properties"]["Targets"]
    target["InputTransformer"] = {
        "InputPathsMap": {"key": "$.detail.object.key"},
        "InputTemplate": '{"key": <key>}',
    }
    (tmp_path / "template.yaml").write_text(json.dumps(template))
    # When it is provisioned, Then it fails naming the rule, instead of delivering other input
    with pytest.raises(
        ProvisionError,
        match=r"^ObjectChangedRule: target \S+ uses InputTransformer, which",
    ):
        provision(endpoints, tmp_path, tmp_path / "state", parameters("transform", "GLUE"), "y")
    rules = endpoints.client("events").list_rules()["Rules"]
    assert "lethe-transform-object-events" not in {r["Name"] for r in rules}


# ------------------------------------------------------------------------------ storage


@pytest.mark.parametrize("kind", ["raw", "lake"])
def test_data_buckets_are_versioned_with_eventbridge_notifications(
    endpoints: Endpoints, deployment: Deployment, kind: str
) -> None:
    s3 = endpoints.client("s3")
    bucket = f"lethe-{STAGE}-{kind}-{ACCOUNT}-{REGION}"
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    # moto's GetBucketNotificationConfiguration leaves EventBridgeConfiguration out: ask the
    # backend, the way the local cloud's S3 events hook decides to emit events.
    assert eventbridge_enabled(s3_backends[ACCOUNT]["aws"].buckets[bucket])
    encryption = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]
    assert encryption["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    access = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert access == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    expire = next(r for r in rules if r["ID"] == "ExpireNoncurrentVersions")
    assert expire["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30


def test_tls_only_buckets_accept_local_requests(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    # The TLS-only bucket policy is in place, and local (plain HTTP) requests still work.
    s3 = endpoints.client("s3")
    bucket = raw_bucket(STAGE)
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    version = s3.put_object(Bucket=bucket, Key="reviews/a.csv", Body=b"user_id\nu1\n")["VersionId"]
    assert (
        s3.get_object(Bucket=bucket, Key="reviews/a.csv", VersionId=version)["Body"].read()
        == b"user_id\nu1\n"
    )


def test_object_catalog_table(endpoints: Endpoints, deployment: Deployment) -> None:
    dynamodb = endpoints.client("dynamodb")
    name = f"lethe-{STAGE}-object-catalog"
    table = dynamodb.describe_table(TableName=name)["Table"]
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {
        "object_url": "HASH",
        "version_id": "RANGE",
    }
    indexes = {index["IndexName"]: index for index in table["GlobalSecondaryIndexes"]}
    assert sorted(indexes) == ["by_dataset", "by_dataset_status"]
    # the erasure watermark's index: a dataset's versions by status
    assert {
        k["AttributeName"]: k["KeyType"] for k in indexes["by_dataset_status"]["KeySchema"]
    } == {"dataset_id": "HASH", "status": "RANGE"}
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
    backups = dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    assert deployment.physical_ids["ObjectCatalogTable"] == name
    assert deployment.attributes["ObjectCatalogTable"]["Arn"] == (
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
    )


def test_sender_identity_is_verified(endpoints: Endpoints, deployment: Deployment) -> None:
    ses = endpoints.client("ses")
    assert "lethe@example.com" in ses.list_identities(IdentityType="EmailAddress")["Identities"]


# ------------------------------------------------------------------------------ functions


def test_object_events_function_spec(deployment: Deployment) -> None:
    spec = deployment.functions["ObjectEventsFunction"]
    assert spec.name == f"lethe-{STAGE}-object-events"
    assert spec.arn == f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:lethe-{STAGE}-object-events"
    assert spec.code_uri == REPO_ROOT / "functions" / "object_events"
    assert spec.handler == "app.handler"
    assert spec.layer_paths == (
        REPO_ROOT / "layers" / "shared",
        REPO_ROOT / "layers" / "arrow",
    )  # reading index segments needs pyarrow
    assert spec.environment["CATALOG_TABLE"] == f"lethe-{STAGE}-object-catalog"
    assert spec.environment["STAGE"] == STAGE
    assert spec.environment["IGNORED_RETENTION_DAYS"] == "30"  # a Number parameter, as a string
    assert spec.environment["REPORTS_BUCKET"] == f"lethe-{STAGE}-reports-{ACCOUNT}-{REGION}"
    assert spec.timeout_seconds == 60
    assert spec.memory_mb == 256
    # invoked synchronously by its SQS event source: no asynchronous retries or destination
    assert spec.async_config.on_failure_arn is None
    assert deployment.function(spec.arn) is spec


def test_functions_exist_in_moto_with_the_role(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    lam = endpoints.client("lambda")
    config = lam.get_function_configuration(FunctionName=f"lethe-{STAGE}-object-events")
    assert config["Role"] == deployment.attributes["ObjectEventsFunctionRole"]["Arn"]
    assert config["Environment"]["Variables"]["CATALOG_TABLE"] == f"lethe-{STAGE}-object-catalog"
    # ReservedConcurrency defaults to 0: nothing reserved
    concurrency = lam.get_function_concurrency(FunctionName=f"lethe-{STAGE}-object-events")
    assert "ReservedConcurrentExecutions" not in concurrency
    iam = endpoints.client("iam")
    role = deployment.physical_ids["ObjectEventsFunctionRole"]
    assert "ObjectEventsFunctionRolePolicy0" in iam.list_role_policies(RoleName=role)["PolicyNames"]


def test_reserved_concurrency_parameter(endpoints: Endpoints, glue_deployment: Deployment) -> None:
    lam = endpoints.client("lambda")
    for function in ("object-events", "datasets-api", "index-object", "erasure-api"):
        concurrency = lam.get_function_concurrency(FunctionName=f"lethe-{GLUE_STAGE}-{function}")
        assert concurrency["ReservedConcurrentExecutions"] == 20, function
    steps = lam.get_function_concurrency(FunctionName=f"lethe-{GLUE_STAGE}-erasure-steps")
    assert "ReservedConcurrentExecutions" not in steps


@pytest.mark.parametrize(
    ("fixture", "stage", "days"), [("deployment", STAGE, 365), ("glue_deployment", GLUE_STAGE, 30)]
)
def test_every_log_group_keeps_log_retention_days(
    request: pytest.FixtureRequest, endpoints: Endpoints, fixture: str, stage: str, days: int
) -> None:
    result: Deployment = request.getfixturevalue(fixture)
    logs = endpoints.client("logs")
    groups = [
        lid
        for lid, resource in translated_resources(stage, result.parameters["SparkEngine"]).items()
        if resource["Type"] == "AWS::Logs::LogGroup"
    ]
    # the Glue jobs' log groups exist only on Glue (condition UseGlue); no other is conditional
    skipped = {lid: result.not_created[lid] for lid in groups if lid in result.not_created}
    glue = result.parameters["SparkEngine"] == "GLUE"
    assert skipped == ({} if glue else dict.fromkeys(GLUE_LOG_GROUPS, "condition UseGlue is false"))
    names = [result.physical_ids[lid] for lid in groups if lid not in skipped]
    assert f"/lethe/{stage}/lambda/object-events" in names
    assert f"lethe-{stage}-spark" in names
    if glue:
        assert f"/aws-glue/jobs/lethe-{stage}/output" in names
        assert f"/aws-glue/jobs/lethe-{stage}/error" in names
    api = result.physical_ids["LetheApi"]
    assert f"API-Gateway-Execution-Logs_{api}/{stage}" in names
    for name in names:
        (group,) = logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"]
        assert group["retentionInDays"] == days, name


def test_approval_emails_go_out_with_a_configuration_set_whose_bounces_reach_the_topic(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    ses = endpoints.client("ses")
    name = deployment.physical_ids["SesConfigurationSet"]
    assert name == f"lethe-{STAGE}"
    described = ses.describe_configuration_set(
        ConfigurationSetName=name, ConfigurationSetAttributeNames=["eventDestinations"]
    )
    (destination,) = described["EventDestinations"]
    assert destination["Enabled"] is True
    assert {"bounce", "complaint"} <= set(destination["MatchingEventTypes"])
    assert destination["SNSDestination"]["TopicARN"] == deployment.outputs["NotificationsTopicArn"]
    lam = endpoints.client("lambda")
    config = lam.get_function_configuration(FunctionName=f"lethe-{STAGE}-approval-request")
    assert config["Environment"]["Variables"]["SES_CONFIGURATION_SET"] == name
    # the identity is created on a fresh account (CreateSenderIdentity defaults to true)
    assert "SenderIdentity" in deployment.physical_ids
    assert deployment.not_created["MonthlyBudget"] == "condition HasBudget is false"


def test_topic_is_encrypted_with_the_stack_key_and_admits_alarms(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    sns = endpoints.client("sns")
    topic = deployment.outputs["NotificationsTopicArn"]
    attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert attributes["KmsMasterKeyId"] == deployment.attributes["NotificationsKey"]["Arn"]
    key = endpoints.client("kms").describe_key(KeyId=attributes["KmsMasterKeyId"])
    assert key["KeyMetadata"]["KeyManager"] == "CUSTOMER"
    policy = json.loads(attributes["Policy"])
    services = {s["Sid"]: s["Principal"].get("Service") for s in policy["Statement"]}
    assert services["CloudWatchAlarmsOfThisStack"] == "cloudwatch.amazonaws.com"
    assert services["EventBridgeRulesOfThisStack"] == "events.amazonaws.com"
    # no AlertEmail: no subscription
    assert deployment.not_created["AlertEmailSubscription"] == "condition HasAlertEmail is false"
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []


def test_alert_email_is_subscribed(endpoints: Endpoints, glue_deployment: Deployment) -> None:
    topic = glue_deployment.outputs["NotificationsTopicArn"]
    subscriptions = endpoints.client("sns").list_subscriptions_by_topic(TopicArn=topic)
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions["Subscriptions"]] == [
        ("email", "oncall@example.com")
    ]


@pytest.mark.parametrize(
    ("machine", "name"),
    [
        ("IngestionStateMachine", "ingestion"),
        ("IndexBackfillStateMachine", "index-backfill"),
        ("IndexReconcileStateMachine", "index-reconcile"),
        ("ErasureStateMachine", "erasure"),
    ],
)
def test_state_machines_run_as_roles_that_trust_only_them(
    endpoints: Endpoints, deployment: Deployment, machine: str, name: str
) -> None:
    """The explicit role of each state machine (template.yaml, not SAM's) is created with its
    trust condition and inline policies, and the state machine runs as it."""
    sfn = endpoints.client("stepfunctions")
    described = sfn.describe_state_machine(stateMachineArn=deployment.physical_ids[machine])
    assert described["roleArn"] == deployment.attributes[f"{machine}Role"]["Arn"]
    iam = endpoints.client("iam")
    role = iam.get_role(RoleName=deployment.physical_ids[f"{machine}Role"])["Role"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:lethe-{STAGE}-{name}"
    assert statement["Principal"] == {"Service": "states.amazonaws.com"}
    # the index backfill's Distributed Map children assume it as stateMachine:<name>/<label>
    children = [f"{arn}/*"] if machine == "IndexBackfillStateMachine" else []
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": [arn, f"{arn}:*", *children]},
    }
    assert described["stateMachineArn"] == arn
    policies = iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"]
    assert policies == [f"{machine}RolePolicy0"]  # Policy1 only with KmsKeyArn


def test_api_gateway_account_role_follows_its_parameter(
    deployment: Deployment, glue_deployment: Deployment
) -> None:
    assert deployment.not_created["ApiGatewayAccount"] == NOT_EMULATED["AWS::ApiGateway::Account"]
    assert "ApiGatewayCloudWatchRole" in deployment.physical_ids
    assert glue_deployment.not_created["ApiGatewayCloudWatchRole"] == (
        "condition CreateApiGatewayAccount is false"
    )


def test_object_events_rule_targets_the_queue(endpoints: Endpoints, deployment: Deployment) -> None:
    events = endpoints.client("events")
    rule = events.describe_rule(Name=f"lethe-{STAGE}-object-events")
    pattern = json.loads(rule["EventPattern"])
    assert pattern["source"] == ["aws.s3"]
    assert pattern["detail"]["bucket"]["name"] == [
        raw_bucket(STAGE),
        f"lethe-{STAGE}-lake-{ACCOUNT}-{REGION}",
    ]
    targets = events.list_targets_by_rule(Rule=f"lethe-{STAGE}-object-events")["Targets"]
    assert [t["Arn"] for t in targets] == [
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events"
    ]
    assert targets[0]["RetryPolicy"]["MaximumRetryAttempts"] == 185
    assert targets[0]["DeadLetterConfig"]["Arn"] == (
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events-dlq"
    )


def test_object_events_queue_redrives_to_the_dead_letter_queue(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    sqs = endpoints.client("sqs")
    url = deployment.physical_ids["ObjectEventsQueue"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert url.endswith(f"/{ACCOUNT}/lethe-{STAGE}-object-events")
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events-dlq",
        "maxReceiveCount": 5,
    }
    # at least 6x the function timeout plus the largest batching window, as AWS recommends
    assert int(attributes["VisibilityTimeout"]) >= 6 * 60 + 300
    policy = json.loads(attributes["Policy"])
    (allow,) = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    assert allow["Condition"]["ArnEquals"]["aws:SourceArn"] == (
        f"arn:aws:events:{REGION}:{ACCOUNT}:rule/lethe-{STAGE}-object-events"
    )


def test_dead_letter_queue_allows_redrive_from_the_object_events_queue_only() -> None:
    props = translated_resources(STAGE, "EMR_SERVERLESS")["ObjectEventsDeadLetterQueue"][
        "Properties"
    ]
    assert props["RedriveAllowPolicy"] == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": [
            {
                "Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:"
                "lethe-${Stage}-object-events"
            }
        ],
    }


def test_object_events_function_polls_the_queue_in_batches(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    lam = endpoints.client("lambda")
    function = deployment.functions["ObjectEventsFunction"]
    # by name: moto 5.2.5 filters on the name it was created with, where AWS also takes the ARN
    (mapping,) = lam.list_event_source_mappings(FunctionName=function.name)["EventSourceMappings"]
    assert mapping["FunctionArn"] == function.arn
    assert mapping["UUID"] == deployment.physical_ids["ObjectEventsSourceMapping"]
    assert (
        mapping["EventSourceArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events"
    )
    assert mapping["BatchSize"] == 100  # IngestionBatchSize's default
    assert mapping["MaximumBatchingWindowInSeconds"] == 60  # IngestionBatchWindowSeconds'
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["State"] == "Enabled"
    # the function's role reads this queue only (no account-wide SQS managed policy)
    policies = translated_resources(STAGE, "EMR_SERVERLESS")["ObjectEventsFunctionRole"]
    documents = [
        p["PolicyDocument"] for p in policies["Properties"]["Policies"] if "PolicyDocument" in p
    ]
    statements = [st for d in documents for st in d["Statement"]]
    (consume,) = [st for st in statements if st.get("Sid") == "ConsumeObjectEvents"]
    assert consume["Resource"] == {"Fn::GetAtt": ["ObjectEventsQueue", "Arn"]}
    managed = policies["Properties"].get("ManagedPolicyArns", [])
    assert not any("SQSQueueExecutionRole" in str(arn) for arn in managed)


@pytest.mark.parametrize(
    ("stage", "change", "message"),
    [
        (
            "esmkinesis",
            {"EventSourceArn": "arn:aws:kinesis:us-east-1:123456789012:stream/s"},
            r"^M: event source arn:aws:kinesis:\S+ is not emulated \(only SQS queues",
        ),
        (
            "esmfilter",
            {"FilterCriteria": {"Filters": [{"Pattern": "{}"}]}},
            r"^M: FilterCriteria is not emulated",
        ),
    ],
)
def test_event_source_mappings_the_local_cloud_cannot_run_fail_naming_them(
    endpoints: Endpoints, tmp_path: Path, stage: str, change: dict[str, Any], message: str
) -> None:
    for folder in ("functions", "layers", "statemachines", "spark_jobs"):
        if (REPO_ROOT / folder).exists():
            (tmp_path / folder).symlink_to(REPO_ROOT / folder)
    template = load_template()
    template["Resources"]["M"] = {
        "Type": "AWS::Lambda::EventSourceMapping",
        "Properties": {
            "FunctionName": {"Ref": "ObjectEventsFunction"},
            "EventSourceArn": {"Fn::GetAtt": ["ObjectEventsQueue", "Arn"]},
            **change,
        },
    }
    (tmp_path / "template.yaml").write_text(json.dumps(template))

    with pytest.raises(ProvisionError, match=message):
        provision(endpoints, tmp_path, tmp_path / "state", parameters(stage, "GLUE"), stage)


# ------------------------------------------------------------------------------ API


def test_api_routes_and_stage(endpoints: Endpoints, deployment: Deployment) -> None:
    routes = {(r.method, r.path): r for r in deployment.api_routes}
    for method in ("PUT", "GET"):
        route = routes[(method, "/datasets/{dataset_id}")]
        assert route.function_logical_id == "DatasetsApiFunction"
        assert route.authorization == "AWS_IAM"
    assert deployment.api_stage == STAGE
    api_id = deployment.physical_ids["LetheApi"]
    assert (
        endpoints.client("apigateway").get_rest_api(restApiId=api_id)["name"]
        == f"lethe-{STAGE}-api"
    )


def test_outputs_resolve_to_created_names(deployment: Deployment) -> None:
    outputs = deployment.outputs
    assert outputs["RawBucketName"] == raw_bucket(STAGE)
    assert outputs["LakeBucketName"] == f"lethe-{STAGE}-lake-{ACCOUNT}-{REGION}"
    assert outputs["ArtifactsBucketName"] == f"lethe-{STAGE}-artifacts-{ACCOUNT}-{REGION}"
    assert outputs["ObjectCatalogTableName"] == f"lethe-{STAGE}-object-catalog"
    assert outputs["DatasetsTableName"] == f"lethe-{STAGE}-datasets"
    assert (
        outputs["NotificationsTopicArn"]
        == f"arn:aws:sns:{REGION}:{ACCOUNT}:lethe-{STAGE}-notifications"
    )
    assert outputs["ObjectEventsDeadLetterQueueUrl"].endswith(
        f"/{ACCOUNT}/lethe-{STAGE}-object-events-dlq"
    )
    assert outputs["ObjectEventsDeadLetterQueueArn"] == (
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events-dlq"
    )
    assert outputs["ObjectEventsQueueUrl"].endswith(f"/{ACCOUNT}/lethe-{STAGE}-object-events")
    assert outputs["ObjectEventsQueueArn"] == (
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:lethe-{STAGE}-object-events"
    )
    # SparkJobRole has no RoleName (CAPABILITY_IAM suffices): the output is the created role's ARN
    spark_role = deployment.physical_ids["SparkJobRole"]
    assert outputs["SparkJobRoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/{spark_role}"
    assert outputs["SparkJobRoleArn"] == deployment.attributes["SparkJobRole"]["Arn"]
    api_id = deployment.physical_ids["LetheApi"]
    assert outputs["ApiUrl"] == f"https://{api_id}.execute-api.{REGION}.amazonaws.com/{STAGE}"


def test_local_api_url_replaces_the_execute_api_url(deployment: Deployment) -> None:
    outputs = localize_outputs(deployment, "http://127.0.0.1:4567/itest")
    assert outputs["ApiUrl"] == "http://127.0.0.1:4567/itest"
    assert outputs["RawBucketName"] == raw_bucket(STAGE)


# ------------------------------------------------------------------------------ engines


def test_emr_serverless_engine(endpoints: Endpoints, deployment: Deployment) -> None:
    application_id = deployment.physical_ids["SparkApplication"]
    application = endpoints.client("emr-serverless").get_application(applicationId=application_id)
    assert application["application"]["name"] == f"lethe-{STAGE}"
    assert application["application"]["releaseLabel"] == "emr-7.5.0"
    assert deployment.outputs["SparkApplicationId"] == application_id
    assert deployment.not_created["IngestGlueJob"] == "condition UseGlue is false"
    assert "IngestGlueJobName" not in deployment.outputs


def test_glue_engine(endpoints: Endpoints, glue_deployment: Deployment) -> None:
    job = endpoints.client("glue").get_job(JobName=f"lethe-{GLUE_STAGE}-ingest")["Job"]
    artifacts = f"lethe-{GLUE_STAGE}-artifacts-{ACCOUNT}-{REGION}"
    assert job["Command"]["ScriptLocation"] == f"s3://{artifacts}/spark_jobs/ingest.py"
    assert (
        job["DefaultArguments"]["--extra-py-files"]
        == f"s3://{artifacts}/spark_jobs/lethe_shared.zip"
    )
    assert job["GlueVersion"] == "5.0"
    assert glue_deployment.outputs["IngestGlueJobName"] == f"lethe-{GLUE_STAGE}-ingest"
    assert glue_deployment.not_created["SparkApplication"] == "condition UseEmrServerless is false"
    assert "SparkApplicationId" not in glue_deployment.outputs


def test_state_machines_get_their_substitutions(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    sam = load_template()["Resources"]
    machines = {lid: r for lid, r in sam.items() if r["Type"] == "AWS::Serverless::StateMachine"}
    assert machines, "the template has state machines"
    sfn = endpoints.client("stepfunctions")
    for logical_id, resource in machines.items():
        arn = deployment.physical_ids[logical_id]
        definition = sfn.describe_state_machine(stateMachineArn=arn)["definition"]
        for name in resource["Properties"].get("DefinitionSubstitutions", {}):
            assert "${" + name + "}" not in definition, f"{logical_id}: ${{{name}}} left"
        json.loads(definition)
    ingestion = sfn.describe_state_machine(
        stateMachineArn=deployment.physical_ids["IngestionStateMachine"]
    )
    assert ingestion["name"] == f"lethe-{STAGE}-ingestion"
    assert f"lethe-{STAGE}-object-catalog" in ingestion["definition"]


def test_substitution_is_textual_and_leaves_unknown_names() -> None:
    text = '{"T": "${Table}", "N": ${Count}, "B": ${Flag}, "Keep": "${Other}"}'
    assert substitute_definition(text, {"Table": "t1", "Count": 3, "Flag": True}) == (
        '{"T": "t1", "N": 3, "B": true, "Keep": "${Other}"}'
    )


def test_reports_bucket_locks_erasure_documents_and_expires_the_rest(
    endpoints: Endpoints, deployment: Deployment
) -> None:
    """ReportsBucket as provisioned: Object Lock on with no default retention; an erasure/
    document written by the functions' store is locked (a rewrite is a new version, the old one
    cannot be deleted); manifests/ stays unlocked; no expiry rule reaches erasure/."""
    from lethe_shared.erasure.evidence import EvidenceLock  # noqa: PLC0415
    from lethe_shared.erasure.workflow import S3Documents  # noqa: PLC0415

    s3 = endpoints.client("s3")
    bucket = f"lethe-{STAGE}-reports-{ACCOUNT}-{REGION}"
    lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    assert lock == {"ObjectLockEnabled": "Enabled"}
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    expiring = {r["ID"]: r["Filter"] for r in rules if "AbortIncompleteMultipartUpload" not in r}
    assert expiring == {
        "ExpireRunManifests": {"Prefix": "manifests/"},
        "ExpireNoncurrentRunManifests": {"Prefix": "manifests/"},
        "ExpireNoncurrentReconcileReports": {"Prefix": "reconcile/"},
    }

    documents = S3Documents(s3, bucket, lock=EvidenceLock(days=1))
    key = "erasure/er-provision/results.json"
    documents.put(key, b'{"run":1}', "application/json")
    documents.put(key, b'{"run":2}', "application/json")
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
    assert len(versions) == 2
    older = next(v for v in versions if not v["IsLatest"])
    head = s3.head_object(Bucket=bucket, Key=key, VersionId=older["VersionId"])
    assert head["ObjectLockMode"] == "GOVERNANCE"
    with pytest.raises(s3.exceptions.ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=bucket, Key=key, VersionId=older["VersionId"])
    assert s3.get_object(Bucket=bucket, Key=key, VersionId=older["VersionId"])["Body"].read() == (
        b'{"run":1}'
    )

    documents.put("manifests/ingest/run.json", b"{}", "application/json")
    manifest = s3.head_object(Bucket=bucket, Key="manifests/ingest/run.json")
    assert "ObjectLockMode" not in manifest
    s3.delete_object(
        Bucket=bucket, Key="manifests/ingest/run.json", VersionId=manifest["VersionId"]
    )
