"""JSON, query and REST calls -> the IAM requests AWS authorises, per service Lethe calls.

Each function takes a `Call` (http_calls) and returns the `Request`s (evaluate) to decide, or a
text saying why the call is not understood (the enforcer denies it: an unknown call must not
pass silently). Resources are resolved as AWS names them, with moto's state where the request
does not carry the ARN (a KMS alias to its key, a secret's name to its ARN, a task token to its
state machine, a queue URL to its ARN, a DynamoDB table's key schema for `dynamodb:LeadingKeys`).

Modelled condition keys (anything else named in a matching statement is `Unevaluable`):
DynamoDB `dynamodb:LeadingKeys` (the partition key values an item request names; for Query the
`=` value of the queried table's or index's partition key), `dynamodb:Attributes` (the key
attributes plus the projected, written or updated top-level attribute names; a read with no
projection adds `*`, so a `ForAllValues` list of attributes refuses it, the strict reading),
`dynamodb:Select` (Query and Scan), `dynamodb:ReturnValues`; KMS `kms:EncryptionContext:<key>`,
`kms:EncryptionContextKeys`, `kms:SigningAlgorithm`, `kms:RequestAlias`; EventBridge
`events:source`, `events:detail-type`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from lethe.localcloud.iam.evaluate import Request
from lethe.localcloud.iam.http_calls import Call

Requests = list[Request] | str

DYNAMODB_KEYS: Final = frozenset(
    {"dynamodb:leadingkeys", "dynamodb:attributes", "dynamodb:select", "dynamodb:returnvalues"}
)
KMS_KEYS: Final = frozenset(
    {"kms:encryptioncontextkeys", "kms:signingalgorithm", "kms:requestalias"}
)
EVENTS_KEYS: Final = frozenset({"events:source", "events:detail-type"})


def _arn(service: str, call: Call, account: str, resource: str) -> str:
    return f"arn:aws:{service}:{call.region}:{account}:{resource}"


# -- DynamoDB


def _table(call: Call, account: str, name: str) -> Any:
    from moto.dynamodb.models import dynamodb_backends  # noqa: PLC0415

    name = name.rsplit("/", 1)[-1] if name.startswith("arn:") else name
    return dynamodb_backends[account][call.region].tables.get(name)


def _ddb_value(value: Mapping[str, Any]) -> str:
    for kind, inner in value.items():
        return str(inner) if kind in {"S", "N"} else base64.b64encode(str(inner).encode()).decode()
    return ""


_NAME_TOKEN = re.compile(r"#[A-Za-z0-9_]+|[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_WORDS: Final = frozenset(
    {
        "and",
        "or",
        "not",
        "between",
        "in",
        "set",
        "remove",
        "add",
        "delete",
        "if_not_exists",
        "attribute_exists",
        "attribute_not_exists",
        "attribute_type",
        "begins_with",
        "contains",
        "size",
        "list_append",
    }
)


def _expression_names(expression: str, names: Mapping[str, str]) -> set[str]:
    """Top-level attribute names an expression names (`:values` and functions left out)."""
    found: set[str] = set()
    for path in re.split(r"[\s,()=<>+\-]+", re.sub(r":[A-Za-z0-9_]+", " ", expression)):
        head = re.split(r"[.\[]", path, maxsplit=1)[0]
        if not head or head.lower() in _RESERVED_WORDS:
            continue
        found.add(names.get(head, head) if head.startswith("#") else head)
    return found


def _item_request(
    action: str, call: Call, account: str, table_name: str, params: Mapping[str, Any]
) -> Request:
    table = _table(call, account, table_name)
    arn = (
        table.table_arn
        if table is not None
        else _arn("dynamodb", call, account, f"table/{table_name}")
    )
    key = params.get("Key") or params.get("Item") or {}
    context: dict[str, list[str]] = {}
    names = params.get("ExpressionAttributeNames") or {}
    if table is not None and table.hash_key_attr in key:
        context["dynamodb:leadingkeys"] = [_ddb_value(key[table.hash_key_attr])]
    attributes = set(params.get("Key") or {}) | set(params.get("Item") or {})
    read = action in {"dynamodb:GetItem", "dynamodb:BatchGetItem"}
    projection = params.get("ProjectionExpression") or ""
    if projection or params.get("AttributesToGet"):
        attributes |= _expression_names(projection, names) | set(
            params.get("AttributesToGet") or []
        )
    elif read:
        attributes.add("*")
    if params.get("UpdateExpression"):
        attributes |= _expression_names(params["UpdateExpression"], names)
    if params.get("ReturnValues"):
        context["dynamodb:returnvalues"] = [params["ReturnValues"]]
    context["dynamodb:attributes"] = sorted(attributes)
    return Request(action, arn, context, DYNAMODB_KEYS)


_TRANSACT_ACTIONS: Final = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_TABLE_OPERATIONS: Final = frozenset(
    {
        "DescribeTable",
        "DescribeTimeToLive",
        "DescribeContinuousBackups",
        "CreateTable",
        "DeleteTable",
        "UpdateTable",
        "UpdateTimeToLive",
        "ListTagsOfResource",
        "TagResource",
    }
)


def dynamodb_requests(call: Call, account: str) -> Requests:
    op, params = call.operation, call.params
    if op in {"GetItem", "PutItem", "UpdateItem", "DeleteItem"}:
        return [_item_request(f"dynamodb:{op}", call, account, params.get("TableName", ""), params)]
    if op in {"BatchGetItem", "BatchWriteItem", "TransactWriteItems", "TransactGetItems"}:
        return _multi_item_requests(call, account)
    if op in {"Query", "Scan"}:
        return [_query_request(call, account, op, params)]
    if op in _TABLE_OPERATIONS:
        name = params.get("TableName") or str(params.get("ResourceArn", "")).rsplit("/", 1)[-1]
        return [Request(f"dynamodb:{op}", _arn("dynamodb", call, account, f"table/{name}"))]
    if op not in {"ListTables", "DescribeLimits", "DescribeEndpoints"}:
        return f"DynamoDB {op} is not mapped to IAM locally"
    return [Request(f"dynamodb:{op}", "*")]


def _multi_item_requests(call: Call, account: str) -> list[Request]:
    """Batch: the batch's action on each item; a transaction: each item's own action."""
    op = call.operation
    if op.startswith("Transact"):
        return [
            _item_request(
                f"dynamodb:{_TRANSACT_ACTIONS.get(kind, kind)}",
                call,
                account,
                body.get("TableName", ""),
                body,
            )
            for entry in call.params.get("TransactItems") or []
            for kind, body in entry.items()
        ]
    requests = []
    for table_name, entries in (call.params.get("RequestItems") or {}).items():
        items: Iterable[Mapping[str, Any]]
        if op == "BatchGetItem":
            items = [{**entries, "Key": key} for key in entries.get("Keys", [])] or [entries]
        else:
            items = [e.get("PutRequest") or e.get("DeleteRequest") or {} for e in entries]
        requests += [_item_request(f"dynamodb:{op}", call, account, table_name, i) for i in items]
    return requests


def _query_request(call: Call, account: str, op: str, params: Mapping[str, Any]) -> Request:
    name = params.get("TableName", "")
    table = _table(call, account, name)
    base = (
        table.table_arn if table is not None else _arn("dynamodb", call, account, f"table/{name}")
    )
    index = params.get("IndexName")
    arn = f"{base}/index/{index}" if index else base
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    context: dict[str, list[str]] = {}
    hash_key = _partition_key(table, index)
    attributes: set[str] = set()
    for part in re.split(r"(?i)\s+and\s+", params.get("KeyConditionExpression") or ""):
        match = re.match(r"\s*\(?\s*([#A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)", part)
        if match:
            attribute = str(names.get(match.group(1), match.group(1)))
            attributes.add(attribute)
            if attribute == hash_key and match.group(2) in values:
                context["dynamodb:leadingkeys"] = [_ddb_value(values[match.group(2)])]
    projection = params.get("ProjectionExpression") or ""
    select = params.get("Select") or ("SPECIFIC_ATTRIBUTES" if projection else "ALL_ATTRIBUTES")
    context["dynamodb:select"] = [select]
    attributes |= _expression_names(projection, names) if projection else {"*"}
    context["dynamodb:attributes"] = sorted(attributes)
    return Request(f"dynamodb:{op}", arn, context, DYNAMODB_KEYS)


def _partition_key(table: Any, index: str | None) -> str | None:
    if table is None:
        return None
    if not index:
        return str(table.hash_key_attr)
    for candidate in table.indexes + table.global_indexes:
        if candidate.name == index:
            for element in candidate.schema:
                if element.get("KeyType") == "HASH":
                    return str(element["AttributeName"])
    return None


# -- Step Functions


def states_requests(call: Call, account: str) -> Requests:
    op, params = call.operation, call.params
    action = f"states:{op}"
    for field in ("stateMachineArn", "executionArn", "mapRunArn", "activityArn"):
        if params.get(field):
            return [Request(action, str(params[field]))]
    if op in {"SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"}:
        machine = _machine_waiting_on(str(params.get("taskToken", "")))
        return [Request(action, machine)] if machine else []  # unknown token: moto says so
    if op in {
        "ListStateMachines",
        "ListActivities",
        "CreateStateMachine",
        "ValidateStateMachineDefinition",
    }:
        return [Request(action, "*")]
    return f"Step Functions {op} is not mapped to IAM locally"


def _machine_waiting_on(token: str) -> str:
    """The state machine whose running execution waits on `token`. Executions run by moto's
    interpreter (execute_state_machine, as the local cloud runs them) live in the parser
    backend, not in `stepfunctions_backends`: both are searched."""
    from moto.stepfunctions.models import stepfunctions_backends  # noqa: PLC0415
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends  # noqa: PLC0415

    backend_dicts: list[Any] = [stepfunctions_parser_backends, stepfunctions_backends]
    for per_region in (region for backends in backend_dicts for region in backends.values()):
        for backend in per_region.values():
            for machine in getattr(backend, "state_machines", []):
                for execution in machine.executions:
                    worker = getattr(execution, "exec_worker", None)
                    pool = getattr(getattr(worker, "env", None), "callback_pool_manager", None)
                    if pool is not None and pool.get(token) is not None:
                        return str(machine.arn)
    return ""


# -- KMS, Secrets Manager, SQS, SNS, EventBridge, SES, Lambda, Logs, Glue, EMR Serverless, STS


def kms_requests(call: Call, account: str) -> Requests:
    from moto.kms.models import kms_backends  # noqa: PLC0415

    params = call.params
    backend = kms_backends[account][call.region]
    key_id = str(params.get("KeyId") or params.get("DestinationKeyId") or "")
    if not key_id and params.get("CiphertextBlob"):
        key_id = base64.b64decode(params["CiphertextBlob"])[:36].decode("utf-8", "replace")
    context: dict[str, list[str]] = {}
    if key_id.startswith("alias/") or ":alias/" in key_id:
        context["kms:requestalias"] = [key_id.rsplit(":", 1)[-1]]
    if call.operation in {"ListKeys", "ListAliases", "CreateKey"}:
        return [Request(f"kms:{call.operation}", "*")]
    try:
        raw = backend.any_id_to_key_id(key_id)
        arn = backend.keys[raw].arn
    except Exception:
        return f"KMS {call.operation}: key {key_id!r} not found"
    encryption_context = params.get("EncryptionContext") or {}
    for name, value in encryption_context.items():
        context[f"kms:encryptioncontext:{name.lower()}"] = [str(value)]
    if encryption_context:
        context["kms:encryptioncontextkeys"] = sorted(encryption_context)
    if params.get("SigningAlgorithm"):
        context["kms:signingalgorithm"] = [params["SigningAlgorithm"]]
    modelled = KMS_KEYS | {f"kms:encryptioncontext:{n.lower()}" for n in encryption_context}
    return [
        Request(
            f"kms:{call.operation}", arn, context, _with_prefix(modelled, "kms:encryptioncontext:")
        )
    ]


class _PrefixKeys(frozenset[str]):
    """A key set that also contains every key starting with `prefix` (absent from the request)."""

    prefix = ""

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (isinstance(key, str) and key.startswith(self.prefix))


def _with_prefix(keys: frozenset[str], prefix: str) -> frozenset[str]:
    result = _PrefixKeys(keys)
    result.prefix = prefix
    return result


def secretsmanager_requests(call: Call, account: str) -> Requests:
    from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

    secret_id = str(call.params.get("SecretId", ""))
    if not secret_id:
        return [Request(f"secretsmanager:{call.operation}", "*")]
    store = secretsmanager_backends[account][call.region].secrets
    try:
        arn = store[secret_id].arn
    except Exception:
        return f"Secrets Manager {call.operation}: secret {secret_id!r} not found"
    return [Request(f"secretsmanager:{call.operation}", arn)]


_SQS_SINGLE: Final = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def sqs_requests(call: Call, account: str) -> Requests:
    action = f"sqs:{_SQS_SINGLE.get(call.operation, call.operation)}"
    url = str(call.params.get("QueueUrl", ""))
    name = url.rstrip("/").rsplit("/", 1)[-1] if url else str(call.params.get("QueueName", ""))
    if call.operation == "ListQueues":
        return [Request(action, "*")]
    if not name:
        return f"SQS {call.operation}: no queue"
    owner = url.rstrip("/").rsplit("/", 2)[-2] if url.count("/") >= 2 else account
    return [Request(action, f"arn:aws:sqs:{call.region}:{owner}:{name}")]


def sns_requests(call: Call, account: str) -> Requests:
    arn = (
        call.params.get("TopicArn")
        or call.params.get("TargetArn")
        or call.params.get("ResourceArn")
    )
    if call.operation == "PublishBatch":
        return [Request("sns:Publish", str(arn))]
    if call.operation in {"ListTopics", "ListSubscriptions", "CreateTopic"}:
        return [Request(f"sns:{call.operation}", "*")]
    if not arn:
        return f"SNS {call.operation}: no topic"
    return [Request(f"sns:{call.operation}", str(arn))]


def events_requests(call: Call, account: str) -> Requests:
    if call.operation != "PutEvents":
        bus = str(call.params.get("EventBusName") or "default")
        name = call.params.get("Name") or call.params.get("Rule")
        resource = (
            _arn("events", call, account, f"rule/{name}") if name else _bus_arn(call, account, bus)
        )
        return [Request(f"events:{call.operation}", resource)]
    requests = []
    for entry in call.params.get("Entries") or []:
        context = {
            "events:source": [str(entry.get("Source", ""))],
            "events:detail-type": [str(entry.get("DetailType", ""))],
        }
        bus = _bus_arn(call, account, str(entry.get("EventBusName") or "default"))
        requests.append(Request("events:PutEvents", bus, context, EVENTS_KEYS))
    return requests


def _bus_arn(call: Call, account: str, bus: str) -> str:
    return bus if bus.startswith("arn:") else _arn("events", call, account, f"event-bus/{bus}")


def ses_requests(call: Call, account: str) -> Requests:
    op, params = call.operation, call.params
    if op in {"SendEmail", "SendRawEmail"}:
        source = str(params.get("Source") or params.get("FromArn") or "")
        if not source:
            return f"SES {op} without Source is not mapped locally"
        address = source.rsplit("<", 1)[-1].rstrip(">").strip()
        requests = [Request(f"ses:{op}", _ses_identity(call, account, address))]
        configuration_set = params.get("ConfigurationSetName")
        if configuration_set:
            requests.append(
                Request(
                    f"ses:{op}",
                    _arn("ses", call, account, f"configuration-set/{configuration_set}"),
                )
            )
        return requests
    if op in {"GetSendQuota", "ListIdentities", "GetAccount", "ListVerifiedEmailAddresses"}:
        return [Request(f"ses:{op}", "*")]
    return f"SES {op} is not mapped to IAM locally"


def _ses_identity(call: Call, account: str, address: str) -> str:
    """The identity AWS authorises: the address if it is a verified identity, else its domain."""
    from moto.ses.models import ses_backends  # noqa: PLC0415

    backend = ses_backends[account][call.region]
    verified = set(getattr(backend, "addresses", [])) | set(
        getattr(backend, "email_identities", {})
    )
    identity = address if address in verified else address.rsplit("@", 1)[-1]
    return _arn("ses", call, account, f"identity/{identity}")


def lambda_requests(call: Call, account: str) -> Requests:
    op = call.operation
    name = str(call.params.get("FunctionName", ""))
    if not op:
        return f"Lambda {call.method} {call.path} is not a known operation"
    action = {"Invoke": "InvokeFunction", "InvokeAsync": "InvokeAsync"}.get(op, op)
    if not name:
        return [Request(f"lambda:{action}", "*")]
    if not name.startswith("arn:"):
        name = _arn("lambda", call, account, f"function:{name}")
    return [Request(f"lambda:{action}", name)]


def logs_requests(call: Call, account: str) -> Requests:
    group = call.params.get("logGroupName")
    stream = call.params.get("logStreamName")
    if not group:
        return [Request(f"logs:{call.operation}", "*")]
    resource = f"log-group:{group}" + (f":log-stream:{stream}" if stream else ":*")
    return [Request(f"logs:{call.operation}", _arn("logs", call, account, resource))]


def glue_requests(call: Call, account: str) -> Requests:
    job = call.params.get("JobName")
    resource = _arn("glue", call, account, f"job/{job}") if job else "*"
    return [Request(f"glue:{call.operation}", resource)]


def emr_serverless_requests(call: Call, account: str) -> Requests:
    application = call.params.get("applicationId")
    job_run = call.params.get("jobRunId")
    resource = "*"
    if application:
        resource = _arn("emr-serverless", call, account, f"/applications/{application}")
        if job_run:
            resource += f"/jobruns/{job_run}"
    return [Request(f"emr-serverless:{call.operation}", resource)]


def sts_requests(call: Call, account: str) -> Requests:
    if call.operation == "GetCallerIdentity":
        return []  # needs no permission on AWS
    if call.operation == "AssumeRole":
        return [Request("sts:AssumeRole", str(call.params.get("RoleArn", "")))]
    return f"STS {call.operation} is not mapped to IAM locally"


def cloudwatch_requests(call: Call, account: str) -> Requests:
    return [Request(f"cloudwatch:{call.operation}", "*")]  # PutMetricData takes no resource


SERVICES: Final[dict[str, Callable[[Call, str], Requests]]] = {
    "dynamodb": dynamodb_requests,
    "states": states_requests,
    "kms": kms_requests,
    "secretsmanager": secretsmanager_requests,
    "sqs": sqs_requests,
    "sns": sns_requests,
    "events": events_requests,
    "ses": ses_requests,
    "email": ses_requests,
    "lambda": lambda_requests,
    "logs": logs_requests,
    "glue": glue_requests,
    "emr-serverless": emr_serverless_requests,
    "sts": sts_requests,
    "monitoring": cloudwatch_requests,
}
