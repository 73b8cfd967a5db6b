"""`lethe key rotate-check | rotate`: rotating the subject hash key only when nothing is open
(docs/RUNBOOK.md, "Rotating the subject hash key").

Every stored subject hash depends on the key (`SubjectHashKeySecretArn`). A request that is open
(any status but COMPLETED, REJECTED, EXPIRED, FAILED) when the key changes ends INCOMPLETE
(`hash_key_changed`: its ids were hashed with the old key, the erase job refuses every object),
and an ingestion in flight (a raw version RECEIVED or INGESTING) hashes with the old key and can
write entries after the re-index passed its object. So:

- `rotate-check` lists what blocks a rotation: the open requests (id and status, from
  `GET /erasure-requests`, the permission of `lethe erasure list`) and the raw versions still
  RECEIVED or INGESTING per dataset (the object catalog); exit 0 when nothing does, 1 when
  something does. It prints the current key's fingerprint (16 hex digits naming the key,
  `subject_hashing.keys.key_fingerprint`), never the key.
- `rotate --yes` runs the same check, refuses (exit 1, nothing changed) when anything blocks,
  and otherwise puts a new random key (64 hex digits from `secrets`) into the secret
  (`PutSecretValue`: the old value stays as the version AWSPREVIOUS, so `lethe erasure find`
  still matches requests hashed with it) and prints both fingerprints and the next steps (wait
  5 minutes for warm functions, then `lethe datasets reindex --all`). The key itself is never
  printed or logged.

Between the check and the write a request may still be filed (milliseconds); it then ends
INCOMPLETE naming `hash_key_changed` and is filed again: it fails closed, never erases with the
wrong key.
"""

from __future__ import annotations

import argparse
import json
import secrets
from typing import Any, Final

from lethe.commands import CommandError, UsageError
from lethe.commands.erasure_records import refusal
from lethe.target import Target, add_target_arguments, resolve

IN_FLIGHT: Final = ("RECEIVED", "INGESTING")
OPEN_SHOWN: Final = 20  # lines per kind in text output


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "key", help="the subject hash key: check and rotate (no request or ingestion open)"
    )
    commands = parser.add_subparsers(dest="key_command", metavar="COMMAND", required=True)
    check = commands.add_parser(
        "rotate-check",
        help="what blocks a key rotation: open erasure requests, ingestions in flight",
        description="Lists the erasure requests that are open and the raw versions still "
        "RECEIVED or INGESTING; exit 0 when nothing blocks a rotation, 1 when something does. "
        "Prints the current key's fingerprint, never the key.",
    )
    check.add_argument("--json", action="store_true", help="print the check as JSON")
    add_target_arguments(check)
    check.set_defaults(func=rotate_check)

    rotate = commands.add_parser(
        "rotate",
        help="put a new random subject hash key, only when nothing blocks it",
        description="Runs rotate-check and, when nothing blocks, puts a new random key into "
        "the subject hash key secret; prints the old and new fingerprints and what to do next "
        "(lethe datasets reindex --all). Refused (exit 1, nothing changed) otherwise.",
    )
    rotate.add_argument(
        "--yes", action="store_true", help="required: every dataset must be re-indexed after"
    )
    rotate.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_target_arguments(rotate)
    rotate.set_defaults(func=rotate_key)


def _current_fingerprint(target: Target) -> str:
    from lethe_shared.subject_hashing.keys import key_fingerprint, load_hash_key  # noqa: PLC0415

    secret = target.output("SubjectHashKeySecretArn")
    return key_fingerprint(load_hash_key(target.client("secretsmanager"), secret))


def blockers(target: Target) -> dict[str, Any]:
    """The open requests and the ingestions in flight (module docstring)."""
    from lethe.adapters import object_catalog  # noqa: PLC0415
    from lethe_shared.catalog.object_catalog import ObjectStatus, Zone  # noqa: PLC0415
    from lethe_shared.datasets.registry import DynamoDatasetRegistry  # noqa: PLC0415
    from lethe_shared.erasure.requests import TERMINAL  # noqa: PLC0415

    status, answer = target.call_api("GET", "/erasure-requests")
    if status >= 400:
        raise CommandError(refusal("cannot list erasure requests", status, answer))
    terminal = {s.value for s in TERMINAL}
    open_requests = [
        {"request_id": str(r.get("request_id", "")), "status": str(r.get("status", ""))}
        for r in answer.get("requests") or []
        if str(r.get("status", "")) not in terminal
    ]
    registry = DynamoDatasetRegistry(
        target.resource("dynamodb").Table(target.output("DatasetsTableName"))
    )
    catalog = object_catalog(target)
    in_flight = [
        {
            "dataset": dataset.dataset_id,
            "key": item.key,
            "version_id": item.version_id,
            "status": item.status.value,
        }
        for dataset in registry.list()
        for item in catalog.in_status(dataset.dataset_id, [ObjectStatus(s) for s in IN_FLIGHT])
        if item.zone is Zone.RAW
    ]
    return {"open_requests": open_requests, "ingestion_in_flight": in_flight}


def _check(target: Target) -> dict[str, Any]:
    found = blockers(target)
    return {
        "key_fingerprint": _current_fingerprint(target),
        **found,
        "ready": not found["open_requests"] and not found["ingestion_in_flight"],
    }


def _print_check(check: dict[str, Any]) -> None:
    print(f"current key fingerprint {check['key_fingerprint']}")
    opened, flying = check["open_requests"], check["ingestion_in_flight"]
    if opened:
        print(f"{len(opened)} erasure request(s) open: let them end (or cancel them) first")
        for row in opened[:OPEN_SHOWN]:
            print(f"  {row['request_id']}  {row['status']}")
    if flying:
        print(f"{len(flying)} raw version(s) RECEIVED or INGESTING: let their ingestion finish")
        for row in flying[:OPEN_SHOWN]:
            print(f"  {row['dataset']}  {row['status']:10} {row['key']} ({row['version_id']})")
    if check["ready"]:
        print("nothing open: the key may be rotated (`lethe key rotate --yes`)")


def rotate_check(args: argparse.Namespace) -> int:
    check = _check(resolve(args))
    if args.json:
        print(json.dumps(check, indent=2))
    else:
        _print_check(check)
    return 0 if check["ready"] else 1


def rotate_key(args: argparse.Namespace) -> int:
    if not args.yes:
        raise UsageError(
            "rotating the key makes every dataset's index stale until it is re-indexed: "
            "run `lethe key rotate-check` first, then `lethe key rotate --yes`"
        )
    target = resolve(args)
    check = _check(target)
    if not check["ready"]:
        if args.json:
            print(json.dumps({**check, "rotated": None}, indent=2))
        else:
            _print_check(check)
        raise CommandError("not rotated: something above is open; nothing was changed")
    target.client("secretsmanager").put_secret_value(
        SecretId=target.output("SubjectHashKeySecretArn"), SecretString=secrets.token_hex(32)
    )
    rotated = {"from": check["key_fingerprint"], "to": _current_fingerprint(target)}
    if args.json:
        print(json.dumps({**check, "rotated": rotated}, indent=2))
        return 0
    print(f"rotated the subject hash key: fingerprint {rotated['from']} -> {rotated['to']}")
    print(
        "next: wait 5 minutes (warm functions keep the old key until then), then run "
        "`lethe datasets reindex --all` and follow it with `lethe datasets list`"
    )
    return 0
