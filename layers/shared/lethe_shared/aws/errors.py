"""What an AWS error code means: the one place Lethe classifies a `ClientError`.

Every "not found", "condition failed" or "credentials refused" decision in Lethe's product code
(functions, layer, CLI, local cloud) asks one of the predicates here, never a code spelled at
the call site. Typed errors that Lethe raises itself live in `lethe_shared.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from botocore.exceptions import ClientError

# S3: the object or version asked for is not there. HEAD answers a bare 404 (NotFound), GET names
# it (NoSuchKey, NoSuchVersion); a delete marker is 405 MethodNotAllowed on a GET or HEAD of its
# version; a version id S3 cannot parse names no version (InvalidArgument on GET).
S3_NOT_FOUND: Final = frozenset(
    {"404", "NotFound", "NoSuchKey", "NoSuchVersion", "405", "MethodNotAllowed", "InvalidArgument"}
)
# S3, for a request on one exact version: a HEAD of a version id S3 cannot parse answers a bare
# 400 with no code, which names no version either. Without a version id a 400 is a real error.
S3_VERSION_NOT_FOUND: Final = S3_NOT_FOUND | {"400"}
# S3: a conditional write whose condition failed (412), or that raced another conditional
# write (409).
S3_CONDITION_FAILED: Final = frozenset(
    {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
)
# DynamoDB: a ConditionExpression did not hold.
DYNAMODB_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
# DynamoDB: a TransactWriteItems was cancelled whole; its CancellationReasons hold one reason per
# action, in order ("None": nothing wrong with that one; "ConditionalCheckFailed": its condition
# did not hold; others, such as "TransactionConflict", are worth sending again).
DYNAMODB_TRANSACTION_CANCELLED: Final = "TransactionCanceledException"
DYNAMODB_ACTION_CONDITION_FAILED: Final = "ConditionalCheckFailed"
DYNAMODB_ACTION_FINE: Final = "None"
# Step Functions: no execution of that ARN (moto and older endpoints answer ResourceNotFound).
SFN_EXECUTION_NOT_FOUND: Final = frozenset({"ExecutionDoesNotExist", "ResourceNotFound"})
# Lambda: no function, or no event source mapping, of that name or id.
LAMBDA_NOT_FOUND: Final = "ResourceNotFoundException"
# IAM: no entity (role, policy) of that name or ARN.
IAM_NO_SUCH_ENTITY: Final = "NoSuchEntity"
# Any service: these credentials are not (or no longer) good.
CREDENTIALS_REFUSED: Final = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
    }
)


def error_code(exc: ClientError) -> str:
    """The error code AWS answered with ("" when the answer had none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_s3_not_found(exc: ClientError, *, version_id: str | None = None) -> bool:
    """S3 has no such object (or no such version, when `version_id` names one)."""
    codes = S3_VERSION_NOT_FOUND if version_id else S3_NOT_FOUND
    return error_code(exc) in codes


def is_s3_condition_failed(exc: ClientError) -> bool:
    return error_code(exc) in S3_CONDITION_FAILED


def is_condition_failed(exc: ClientError) -> bool:
    """A DynamoDB write's ConditionExpression did not hold."""
    return error_code(exc) == DYNAMODB_CONDITION_FAILED


def cancellation_reasons(exc: ClientError) -> list[dict[str, Any]] | None:
    """The per-action reasons of a cancelled DynamoDB transaction, in the order of its actions;
    None when `exc` is not a cancelled transaction."""
    if error_code(exc) != DYNAMODB_TRANSACTION_CANCELLED:
        return None
    return [dict(r) for r in exc.response.get("CancellationReasons", [])]


def is_action_condition_failed(reason: Mapping[str, Any]) -> bool:
    """One action of a cancelled DynamoDB transaction failed its ConditionExpression."""
    return str(reason.get("Code", "")) == DYNAMODB_ACTION_CONDITION_FAILED


def is_action_fine(reason: Mapping[str, Any]) -> bool:
    """One action of a cancelled DynamoDB transaction had nothing wrong (another one failed)."""
    return str(reason.get("Code", "")) == DYNAMODB_ACTION_FINE


def is_execution_not_found(exc: ClientError) -> bool:
    return error_code(exc) in SFN_EXECUTION_NOT_FOUND


def is_lambda_not_found(exc: ClientError) -> bool:
    return error_code(exc) == LAMBDA_NOT_FOUND


def is_no_such_entity(exc: ClientError) -> bool:
    return error_code(exc) == IAM_NO_SUCH_ENTITY


def is_credentials_refused(exc: ClientError) -> bool:
    return error_code(exc) in CREDENTIALS_REFUSED
