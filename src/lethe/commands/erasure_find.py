"""`lethe erasure find (--subject ID | --subject-key K) ...`: a subject's erasure requests and
their certificates, months later, without any raw id stored anywhere.

A request record holds its subjects as keyed hashes only (`subject_hashes`, per dataset in
`hash_groups`) and the fingerprint of the subject hash key they were computed with
(`key_fingerprint`). So the subjects given here are hashed exactly as a request naming them
would hash them (`erasure.subjects.hash_subjects`: per registered dataset, as a value of its
subject column's type), under **every version of the key Secrets Manager still holds**
(`ListSecretVersionIds` with deprecated versions, then `GetSecretValue` of each): a request
filed before a key rotation is matched under the key of its own fingerprint. A request matches
when, for one dataset of its hash groups, the subject's hash in that dataset is among the
group's hashes (a dataset registered no more: any of the subject's hashes); a request filed
before hashes were per dataset (no groups) when one of its hashes is one of the subject's. A
request whose key Secrets Manager no longer holds cannot be matched: it is counted and its
fingerprint named, never guessed.

Records come from `GET /erasure-requests` (the permission of `lethe erasure list`); the key
needs `secretsmanager:ListSecretVersionIds` and `GetSecretValue` on `SubjectHashKeySecretArn`
(without the listing, only the current key is used, and stderr says so). Raw ids are never
printed: subjects are numbered in the order given (#1 the first `--subject`, each
`--subject-key` after the ids).

Limits: the hash of a subject in a dataset depends on its subject columns and their types
today; a request filed when they were others is matched only through another dataset it named,
or not at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any, Final

from botocore.exceptions import ClientError
from pydantic import ValidationError

from lethe.commands import CommandError, UsageError, add_subject_argument
from lethe.commands.erasure_records import refusal, status_text
from lethe.commands.subject_keys import add_subject_key_argument, check_subject_keys
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.erasure.requests import ErasureRequest
from lethe_shared.erasure.subjects import (
    ErasureRequestBody,
    ErasureRequestError,
    SubjectSet,
    hash_subjects,
)
from lethe_shared.subject_hashing.keys import (
    hash_of_id,
    key_fingerprint,
    key_from_secret,
    load_hash_key,
)

FINGERPRINT_SHOWN: Final = 16


def add_find_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    find = commands.add_parser(
        "find",
        help="a subject's erasure requests and certificates (by keyed hash)",
        description="Lists the erasure requests (and their certificates) that named a subject: "
        "the ids are hashed as a request would hash them, under every version of the subject "
        "hash key Secrets Manager holds, and matched with the hashes the requests stored. Raw "
        "ids are never printed.",
    )
    add_subject_argument(find)
    add_subject_key_argument(find)
    find.add_argument("--json", action="store_true", help="print a JSON list")
    add_target_arguments(find)
    find.set_defaults(func=find_requests)


def hash_keys(target: Target) -> tuple[dict[str, bytes], str]:
    """{fingerprint: key} of every version of the subject hash key secret still held, and a
    note ("" or why only the current key is used). Keys are never printed."""
    secrets = target.client("secretsmanager")
    secret_id = target.output("SubjectHashKeySecretArn")
    current = load_hash_key(secrets, secret_id)
    keys = {key_fingerprint(current): current}
    try:
        versions: list[str] = []
        token: dict[str, str] = {}
        while True:  # not pageable through boto3's paginators: NextToken by hand
            page = secrets.list_secret_version_ids(
                SecretId=secret_id, IncludeDeprecated=True, MaxResults=100, **token
            )
            versions += [v["VersionId"] for v in page.get("Versions", [])]
            if not page.get("NextToken"):
                break
            token = {"NextToken": page["NextToken"]}
        for version in versions:
            text = secrets.get_secret_value(SecretId=secret_id, VersionId=version).get(
                "SecretString"
            )
            try:
                key = key_from_secret(str(text or ""))
            except ValueError:
                continue  # not a usable key: nothing was ever hashed with it
            keys.setdefault(key_fingerprint(key), key)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        return keys, f"older key versions not read ({code}): only the current key was used"
    return keys, ""


def _subject_sets(
    args: argparse.Namespace, key: bytes, datasets: list[Any]
) -> list[tuple[SubjectSet, set[str]]]:
    """Each subject hashed under `key` per registered dataset, with the hashes an unscoped
    request of an older Lethe (no hash groups) would hold for it."""
    asked: list[dict[str, Any]] = [{"subject_ids": [s]} for s in dict.fromkeys(args.subject)]
    asked += [{"subject_keys": [k]} for k in args.subject_key]
    found = []
    for body in asked:
        try:
            request = ErasureRequestBody.model_validate({**body, "requested_by": "lethe find"})
            subject = hash_subjects(request, key, datasets)
        except ValidationError as exc:
            problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise UsageError(_named(problems)) from None
        except ErasureRequestError as exc:
            raise UsageError(_named("; ".join(exc.problems))) from None
        plain = {hash_of_id(key, s) for s in body.get("subject_ids", [])}
        found.append((subject, set(subject.hashes) | plain))
    return found


def _named(problems: str) -> str:
    named = problems.replace("subject_ids[0]", "--subject")
    return named.replace("subject_keys[0]", "--subject-key")


def matches(record: ErasureRequest, subject: SubjectSet, loose: set[str]) -> bool:
    """Whether `record` named `subject` (module docstring)."""
    if not record.hash_groups:
        return bool(loose & set(record.subject_hashes))
    mine = subject.by_dataset
    for group in record.hash_groups:
        for dataset_id in group.datasets:
            hashes = mine.get(dataset_id, subject.hashes)
            if set(hashes) & set(group.hashes):
                return True
    return False


def _records(target: Target) -> list[ErasureRequest]:
    status, answer = target.call_api("GET", "/erasure-requests")
    if status >= 400:
        raise CommandError(refusal("cannot list requests", status, answer))
    records = []
    for item in answer.get("requests") or []:
        try:
            records.append(ErasureRequest.model_validate(item))
        except ValidationError:
            continue  # not a request record: nothing to match
    return records


def _row(record: ErasureRequest, numbers: Iterable[int]) -> dict[str, Any]:
    extra = record.model_extra or {}
    return {
        "request_id": record.request_id,
        "status": record.status.value,
        "outcome": record.outcome,
        "created_at": record.created_at,
        "subjects": sorted(numbers),
        "key_fingerprint": record.key_fingerprint,
        "certificate": dict(record.certificate) or None,
        "partial_certificates": list(extra.get("partial_certificates") or []),
    }


def find_requests(args: argparse.Namespace) -> int:
    if not args.subject and not args.subject_key:
        raise UsageError("give --subject ID or --subject-key COLUMN=VALUE[,COLUMN=VALUE...]")
    check_subject_keys(args.subject_key)
    target = resolve(args)
    from lethe_shared.datasets.registry import DynamoDatasetRegistry  # noqa: PLC0415

    datasets = list(
        DynamoDatasetRegistry(
            target.resource("dynamodb").Table(target.output("DatasetsTableName"))
        ).list()
    )
    keys, note = hash_keys(target)
    hashed = {fp: _subject_sets(args, key, datasets) for fp, key in keys.items()}
    rows, unmatched = [], {}
    for record in _records(target):
        if record.key_fingerprint and record.key_fingerprint not in hashed:
            unmatched[record.request_id] = record.key_fingerprint
            continue
        fingerprints = [record.key_fingerprint] if record.key_fingerprint else list(hashed)
        numbers = {
            number
            for fp in fingerprints
            for number, (subject, loose) in enumerate(hashed[fp], start=1)
            if matches(record, subject, loose)
        }
        if numbers:
            rows.append(_row(record, numbers))
    rows.sort(key=lambda r: r["created_at"], reverse=True)
    if note:
        print(f"lethe: {note}", file=sys.stderr)
    if unmatched:
        held = sorted(set(unmatched.values()))
        print(
            f"lethe: {len(unmatched)} request(s) were hashed with a key Secrets Manager no longer "
            f"holds (fingerprint {', '.join(held)}): they cannot be matched",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    _print(rows, len(hashed))
    return 0


def _print(rows: list[dict[str, Any]], keys: int) -> None:
    if not rows:
        print(f"no erasure request names these subjects (searched under {keys} key version(s))")
        return
    print(f"{'REQUEST':36} {'STATUS':28} {'CREATED':32} {'SUBJECTS':8}  CERTIFICATE")
    for row in rows:
        certificate = row["certificate"] or {}
        shown = str(certificate.get("url") or "-")
        if certificate.get("partial"):
            shown += f" (partial, run {certificate.get('run', '?')})"
        status = status_text({"status": row["status"], "outcome": row["outcome"]})
        numbers = ",".join(f"#{n}" for n in row["subjects"])
        print(f"{row['request_id']:36} {status:28} {row['created_at']:32} {numbers:8}  {shown}")
    print("check one with `lethe erasure certificate ID --verify`")
