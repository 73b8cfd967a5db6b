"""A Distributed Map's items from S3 (patch P7, applied by `install()`).

P7  ItemReader `arn:aws:states:::s3:listObjectsV2`.
    Where: `ResourceEvalS3._handle_list_objects_v2` (`.../item_reader/eval/resource_eval_s3.py`).
    Why:   moto lists one page (1,000 keys), fails on an empty listing (`response["Contents"]`)
           and passes boto3's objects on (datetimes the engine cannot serialise, `ETag`). The
           replacement reads every page and makes the items AWS documents ("ItemReader (Map)"):
           `{Etag, Key, LastModified (epoch seconds), Size, StorageClass}`; an S3 error fails
           the Map with States.ItemReaderFailed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval.resource_eval_s3 import (  # noqa: E501
    ResourceEvalS3 as _ResourceEvalS3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceRuntimePart,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment

from lethe.localcloud.sfn_hooks.context import states_failure


def s3_list_item(content: Mapping[str, Any]) -> dict[str, Any]:
    """One item of an `s3:listObjectsV2` ItemReader, as "ItemReader (Map)" shows it: `Etag`,
    `Key`, `LastModified` (epoch seconds), `Size`, `StorageClass`."""
    modified = content.get("LastModified")
    if isinstance(modified, datetime):
        aware = modified if modified.tzinfo else modified.replace(tzinfo=UTC)
        modified = int(aware.timestamp())
    return {
        "Etag": content.get("ETag"),
        "Key": content["Key"],
        "LastModified": modified,
        "Size": content.get("Size"),
        "StorageClass": content.get("StorageClass", "STANDARD"),
    }


def list_objects_v2(
    env: Environment, resource_runtime_part: ResourceRuntimePart, state_credentials: Any
) -> None:
    """P7: every page of the listing (moto reads one page of 1,000 keys and fails on an empty
    prefix), each object in the ItemReader's item shape; S3 errors fail the Map with
    States.ItemReaderFailed."""
    s3 = _ResourceEvalS3._get_s3_client(
        resource_runtime_part=resource_runtime_part, state_credentials=state_credentials
    )
    parameters = dict(env.stack.pop() or {})
    items: list[dict[str, Any]] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(**parameters):
            items.extend(s3_list_item(content) for content in page.get("Contents", []))
    except (ClientError, ParamValidationError) as exc:
        raise states_failure(
            env, StatesErrorNameType.StatesItemReaderFailed, f"s3:listObjectsV2 failed: {exc}"
        ) from exc
    env.stack.append(items)
