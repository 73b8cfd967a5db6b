"""AWS::S3::Bucket (with its settings) and AWS::S3::BucketPolicy in moto's S3."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from lethe.localcloud.provision.coercion import json_text, pick, tag_list
from lethe.localcloud.provision.stack import Created, Stack, handles

logger = logging.getLogger("lethe.localcloud.provision")


@handles("AWS::S3::Bucket")
def _s3_bucket(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    name = stack.name(lid, props.get("BucketName"), 63, lowercase=True)
    params: dict[str, Any] = {"Bucket": name}
    if stack.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": stack.region}
    if props.get("ObjectLockEnabled") in (True, "true"):
        params["ObjectLockEnabledForBucket"] = True
    stack.call("s3", "create_bucket", **params)
    for prop, configure in _BUCKET_SETTINGS.items():
        if prop in props:
            configure(stack, name, props[prop])
    stack.warn_unhandled(lid, props, {"BucketName", "ObjectLockEnabled", *_BUCKET_SETTINGS})
    return Created(
        name,
        {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": f"{name}.s3.amazonaws.com",
            "RegionalDomainName": f"{name}.s3.{stack.region}.amazonaws.com",
            "DualStackDomainName": f"{name}.s3.dualstack.{stack.region}.amazonaws.com",
            "WebsiteURL": f"http://{name}.s3-website-{stack.region}.amazonaws.com",
        },
    )


def _bucket_versioning(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call(
        "s3",
        "put_bucket_versioning",
        Bucket=bucket,
        VersioningConfiguration=pick(value, ["Status"]),
    )


def _bucket_object_lock(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    """ObjectLockConfiguration: Object Lock on (and the default retention, when a Rule is
    given). moto 5.2 accepts it on an empty versioned bucket only (AWS also on an existing one)."""
    stack.call(
        "s3",
        "put_object_lock_configuration",
        Bucket=bucket,
        ObjectLockConfiguration=pick(value, ["ObjectLockEnabled", "Rule"]),
    )


def _bucket_encryption(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    rules = [
        {
            ("ApplyServerSideEncryptionByDefault" if k == "ServerSideEncryptionByDefault" else k): v
            for k, v in rule.items()
        }
        for rule in value.get("ServerSideEncryptionConfiguration", [])
    ]
    stack.call(
        "s3",
        "put_bucket_encryption",
        Bucket=bucket,
        ServerSideEncryptionConfiguration={"Rules": rules},
    )


def _bucket_ownership(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call("s3", "put_bucket_ownership_controls", Bucket=bucket, OwnershipControls=value)


def _bucket_public_access(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    stack.call("s3", "put_public_access_block", Bucket=bucket, PublicAccessBlockConfiguration=value)


def _bucket_tags(stack: Stack, bucket: str, value: Any) -> None:
    stack.call("s3", "put_bucket_tagging", Bucket=bucket, Tagging={"TagSet": tag_list(value)})


def _bucket_cors(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    renames = {"ExposedHeaders": "ExposeHeaders", "MaxAge": "MaxAgeSeconds", "Id": "ID"}
    rules = [{renames.get(k, k): v for k, v in rule.items()} for rule in value.get("CorsRules", [])]
    stack.call("s3", "put_bucket_cors", Bucket=bucket, CORSConfiguration={"CORSRules": rules})


def _bucket_logging(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    target = {
        "TargetBucket": value.get("DestinationBucketName", bucket),
        "TargetPrefix": value.get("LogFilePrefix", ""),
    }

    def configure() -> None:
        if _moto_cannot_check_logging_target(stack, target["TargetBucket"]):
            logger.info(
                "bucket %s: logging to %s not recorded in moto (moto 5.2 cannot read a target "
                'policy with Principal "*"); access logs are not delivered locally anyway',
                bucket,
                target,
            )
            return
        try:
            stack.call(
                "s3",
                "put_bucket_logging",
                Bucket=bucket,
                BucketLoggingStatus={"LoggingEnabled": target},
            )
        except ClientError as error:
            # moto 5.2 checks the target's policy for the log service and fails on any
            # statement whose Principal is "*" (a TLS-only Deny). Access logs are not
            # delivered locally either way, so the setting is only missing from moto.
            logger.warning(
                "bucket %s: logging to %s not recorded in moto: %s", bucket, target, error
            )

    # The target bucket's policy (which lets the log service write) may come later.
    stack.defer(f"logging of bucket {bucket}", configure)


def _moto_cannot_check_logging_target(stack: Stack, target_bucket: str) -> bool:
    """moto's PutBucketLogging crashes (HTTP 500) on a target policy statement whose
    Principal is the string "*", which every TLS-only Deny statement has."""
    try:
        policy = stack.call("s3", "get_bucket_policy", Bucket=target_bucket)["Policy"]
    except ClientError:
        return False
    statements = json.loads(policy).get("Statement", [])
    return any(isinstance(statement.get("Principal"), str) for statement in statements)


def _bucket_notifications(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    config: dict[str, Any] = {}
    if value.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled") in (True, "true"):
        config["EventBridgeConfiguration"] = {}
    for cfn_key, boto_key, target_key, arn_key in (
        ("QueueConfigurations", "QueueConfigurations", "Queue", "QueueArn"),
        ("TopicConfigurations", "TopicConfigurations", "Topic", "TopicArn"),
        ("LambdaConfigurations", "LambdaFunctionConfigurations", "Function", "LambdaFunctionArn"),
    ):
        items = [_notification(item, target_key, arn_key) for item in value.get(cfn_key, [])]
        if items:
            config[boto_key] = items
    stack.call(
        "s3",
        "put_bucket_notification_configuration",
        Bucket=bucket,
        NotificationConfiguration=config,
    )


def _notification(item: dict[str, Any], target_key: str, arn_key: str) -> dict[str, Any]:
    result: dict[str, Any] = {arn_key: item[target_key], "Events": [item["Event"]]}
    rules = item.get("Filter", {}).get("S3Key", {}).get("Rules")
    if rules:
        result["Filter"] = {"Key": {"FilterRules": rules}}
    return result


def _bucket_lifecycle(stack: Stack, bucket: str, value: dict[str, Any]) -> None:
    rules = [_lifecycle_rule(rule) for rule in value.get("Rules", [])]
    stack.call(
        "s3",
        "put_bucket_lifecycle_configuration",
        Bucket=bucket,
        LifecycleConfiguration={"Rules": rules},
    )


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's flat lifecycle rule -> the S3 API's nested one."""
    result: dict[str, Any] = {"Status": rule["Status"], "Filter": _lifecycle_filter(rule)}
    if "Id" in rule:
        result["ID"] = rule["Id"]
    expiration = {
        boto: rule[cfn]
        for cfn, boto in (
            ("ExpirationInDays", "Days"),
            ("ExpirationDate", "Date"),
            ("ExpiredObjectDeleteMarker", "ExpiredObjectDeleteMarker"),
        )
        if cfn in rule
    }
    if expiration:
        result["Expiration"] = expiration
    noncurrent = dict(rule.get("NoncurrentVersionExpiration", {}))
    if "NoncurrentVersionExpirationInDays" in rule:
        noncurrent["NoncurrentDays"] = rule["NoncurrentVersionExpirationInDays"]
    if noncurrent:
        result["NoncurrentVersionExpiration"] = noncurrent
    result.update(_lifecycle_transitions(rule))
    if "AbortIncompleteMultipartUpload" in rule:
        result["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return result


def _lifecycle_transitions(rule: dict[str, Any]) -> dict[str, Any]:
    current = [
        *rule.get("Transitions", []),
        *([rule["Transition"]] if "Transition" in rule else []),
    ]
    noncurrent = [
        *rule.get("NoncurrentVersionTransitions", []),
        *([rule["NoncurrentVersionTransition"]] if "NoncurrentVersionTransition" in rule else []),
    ]
    renames = {"TransitionInDays": "Days", "TransitionDate": "Date"}
    result: dict[str, Any] = {}
    if current:
        result["Transitions"] = [{renames.get(k, k): v for k, v in t.items()} for t in current]
    if noncurrent:
        result["NoncurrentVersionTransitions"] = [
            {"NoncurrentDays" if k == "TransitionInDays" else k: v for k, v in t.items()}
            for t in noncurrent
        ]
    return result


def _lifecycle_filter(rule: dict[str, Any]) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if "Prefix" in rule:
        conditions["Prefix"] = rule["Prefix"]
    if rule.get("TagFilters"):
        conditions["Tags"] = rule["TagFilters"]
    for key in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
        if key in rule:
            conditions[key] = rule[key]
    tags = conditions.get("Tags", [])
    if len(conditions) > 1 or len(tags) > 1:
        return {"And": conditions}
    if tags:
        return {"Tag": tags[0]}
    return conditions or {"Prefix": ""}


_BUCKET_SETTINGS: dict[str, Callable[[Stack, str, Any], None]] = {
    "VersioningConfiguration": _bucket_versioning,
    "ObjectLockConfiguration": _bucket_object_lock,  # after versioning, which it needs
    "BucketEncryption": _bucket_encryption,
    "OwnershipControls": _bucket_ownership,
    "PublicAccessBlockConfiguration": _bucket_public_access,
    "LifecycleConfiguration": _bucket_lifecycle,
    "NotificationConfiguration": _bucket_notifications,
    "CorsConfiguration": _bucket_cors,
    "LoggingConfiguration": _bucket_logging,
    "Tags": _bucket_tags,
}


@handles("AWS::S3::BucketPolicy")
def _s3_bucket_policy(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    bucket = props["Bucket"]
    stack.call("s3", "put_bucket_policy", Bucket=bucket, Policy=json_text(props["PolicyDocument"]))
    return Created(bucket)
