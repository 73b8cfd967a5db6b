"""What the Spark jobs need of the subject index beyond lethe_shared.subjects.DynamoSubjectIndex:
the hash key, whether an object's entries describe a given version, and a dataset's entries.

The key is read once, in the driver, and travels to the tasks as bytes. It is never logged and
never part of an error message.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from lethe_jobs.errors import HashKeyError
from lethe_jobs.s3io import error_code
from lethe_shared.subjects import key_from_secret

BATCH_GET_LIMIT = 100


def load_hash_key(secrets: Any, secret_id: str) -> bytes:
    """The HMAC key: the SecretString of the secret (ARN or name). Raises HashKeyError."""
    try:
        response = secrets.get_secret_value(SecretId=secret_id)
    except ClientError as exc:
        raise HashKeyError(
            f"the subject hash key secret {secret_id} cannot be read: {error_code(exc)}"
        ) from exc
    text = response.get("SecretString")
    if not text:
        raise HashKeyError(f"the subject hash key secret {secret_id} has no SecretString")
    try:
        return key_from_secret(str(text))
    except ValueError as exc:
        raise HashKeyError(f"the subject hash key secret {secret_id}: {exc}") from None


def describe_version(
    dynamodb: Any,
    table_name: str,
    object_url: str,
    subjects: Sequence[str],
    *,
    version_id: str,
    etag: str,
) -> bool:
    """Whether every one of the object's entries (one per subject in `subjects`) describes
    exactly this version and ETag and is not flagged deleted: then the object is indexed."""
    for start in range(0, len(subjects), BATCH_GET_LIMIT):
        keys = [
            {"subject_hash": s, "object_url": object_url}
            for s in subjects[start : start + BATCH_GET_LIMIT]
        ]
        found = list(_batch_get(dynamodb, table_name, keys))
        if len(found) != len(keys):
            return False  # an entry went away meanwhile
        for item in found:
            if (item.get("version_id"), item.get("etag")) != (version_id, etag) or item.get(
                "deleted"
            ):
                return False
    return True


def _batch_get(dynamodb: Any, table_name: str, keys: list[dict[str, str]]) -> Iterator[Any]:
    request: dict[str, Any] = {
        table_name: {
            "Keys": keys,
            "ProjectionExpression": "subject_hash, version_id, etag, deleted",
            "ConsistentRead": True,
        }
    }
    while request:
        response = dynamodb.batch_get_item(RequestItems=request)
        yield from response.get("Responses", {}).get(table_name, [])
        request = response.get("UnprocessedKeys") or {}


@dataclass(frozen=True)
class FoundEntry:
    """An index entry as GSI by_dataset shows it."""

    object_url: str
    subject_hash: str
    rows: int
    deleted: bool


def dataset_entries(table: Any, dataset_id: str) -> Iterator[FoundEntry]:
    """Every entry of the dataset (GSI by_dataset: keys, rows, deleted). Eventually
    consistent, as every GSI read."""
    kwargs: dict[str, Any] = {
        "IndexName": "by_dataset",
        "KeyConditionExpression": "dataset_id = :d",
        "ExpressionAttributeValues": {":d": dataset_id},
    }
    while True:
        page = table.query(**kwargs)
        for item in page.get("Items", []):
            yield FoundEntry(
                str(item["object_url"]),
                str(item["subject_hash"]),
                int(item.get("rows", 0)),
                bool(item.get("deleted", False)),
            )
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
