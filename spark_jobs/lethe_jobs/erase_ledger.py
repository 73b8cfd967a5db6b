"""Which object versions an erasure wrote, and for which request: the writes ledger's answer
(lethe_shared.catalog.writes_ledger), never the versions' metadata.

The erase job writes `lethe-producer: erase`, `lethe-erasure: <request id>` and
`lethe-erased-rows: <n>` on every version it writes, for people reading an object's headers.
Any producer can set those headers, and `aws s3 cp` / CopyObject copy them, so two decisions of
the erase job rest on the ledger instead:

- a re-run of a request credits the rows an earlier run of *the same request* removed
  (`lethe-erased-rows`) only when the ledger records the version it reads as written by the
  erase job for that request (erase_core);
- verification accepts a version newer than the one erasure left only when the ledger records
  it as written by the erase job for *another* request (erase_verify).

The erase job records its writes with the request id as the ledger's run id (`job_writes`). A
version the ledger does not know is a producer's, whatever its metadata claims.
"""

from __future__ import annotations

from typing import Protocol

import boto3

from lethe_shared.catalog.writes_ledger import (
    DynamoLedgerWriter,
    DynamoWritesLedger,
    Writer,
    Written,
)

LEGACY_RUN_PREFIX = "erasure-"  # request ids start with "er-", never with this


class LedgerReader(Protocol):
    """What the erase job asks of the writes ledger (`WritesLedger.written`)."""

    def written(self, bucket: str, key: str, version_id: str) -> Written | None: ...


def job_ledger(catalog_table: str) -> DynamoWritesLedger | None:
    """The writes ledger on `catalog_table` (the job's `--catalog-table`); None without one
    (then no version is known as an erasure's)."""
    if not catalog_table:
        return None
    return DynamoWritesLedger(boto3.resource("dynamodb").Table(catalog_table))


def job_writes(ledger: DynamoWritesLedger | None, request_id: str) -> DynamoLedgerWriter | None:
    """The WriteLog of the erase job's run for `request_id`: every rewrite recorded as the
    erase job's, with the request id as the run id (what `erased_by` reads back)."""
    return ledger.writer(Writer.ERASE, request_id) if ledger is not None else None


def erased_by(ledger: LedgerReader | None, bucket: str, key: str, version_id: str) -> str | None:
    """The id of the erasure request whose erase job wrote this exact version, as the ledger
    recorded it; None for any other version (a producer's, the ingest job's, or one the ledger
    does not know, whatever its metadata claims) and without a ledger."""
    if ledger is None:
        return None
    found = ledger.written(bucket, key, version_id)
    if found is None or found.writer != Writer.ERASE.value or not found.run_id:
        return None
    # a record from before the run id was the request id: the execution's name,
    # `erasure-<request id>` (lethe_shared.erasure.intake.erasure_execution_name)
    return found.run_id.removeprefix(LEGACY_RUN_PREFIX)
