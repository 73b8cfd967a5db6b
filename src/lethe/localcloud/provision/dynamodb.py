"""AWS::DynamoDB::Table in moto's DynamoDB."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.provision.coercion import pick, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::DynamoDB::Table")
def _dynamodb_table(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("TableName"), 255)
    params: dict[str, Any] = {
        "TableName": name,
        **pick(
            props,
            [
                "AttributeDefinitions",
                "KeySchema",
                "BillingMode",
                "ProvisionedThroughput",
                "LocalSecondaryIndexes",
                "DeletionProtectionEnabled",
                "TableClass",
            ],
        ),
    }
    if "GlobalSecondaryIndexes" in props:
        params["GlobalSecondaryIndexes"] = [
            {k: v for k, v in index.items() if k != "ContributorInsightsSpecification"}
            for index in props["GlobalSecondaryIndexes"]
        ]
    if "StreamSpecification" in props:
        params["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    sse = props.get("SSESpecification")
    if sse:
        params["SSESpecification"] = {
            "Enabled": sse.get("SSEEnabled", False),
            **pick(sse, ["SSEType", "KMSMasterKeyId"]),
        }
    if "Tags" in props:
        params["Tags"] = tag_list(props["Tags"])
    table = stack.call("dynamodb", "create_table", **params)["TableDescription"]
    _table_settings(stack, name, props)
    stack.warn_unhandled(
        lid,
        props,
        {
            *params,
            "TimeToLiveSpecification",
            "PointInTimeRecoverySpecification",
            "ContributorInsightsSpecification",
        },
    )
    attributes = {"Arn": table["TableArn"]}
    if table.get("LatestStreamArn"):
        attributes["StreamArn"] = table["LatestStreamArn"]
    return Created(name, attributes)


def _table_settings(stack: Stack, name: str, props: dict[str, Any]) -> None:
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled") in (True, "true"):
        stack.call(
            "dynamodb",
            "update_time_to_live",
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    pitr = props.get("PointInTimeRecoverySpecification", {})
    if pitr.get("PointInTimeRecoveryEnabled") in (True, "true"):
        stack.call(
            "dynamodb",
            "update_continuous_backups",
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )
