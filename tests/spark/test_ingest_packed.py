"""Plain CSV rows packed by the read task (lethe_jobs.ingest_tasks.packed) against every row on
its own (`--pack-rows 0`): the same lake files (rows, their order, values), the same quarantine
records and the same index entries, whole or in pieces, with runs of a few rows or of many;
and the datasets whose rows are never packed."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from lethe_jobs.ingest_tasks import TaskSettings, pack_plan
from lethe_shared.datasets.document import parse_dataset
from tests.spark.cloud import Cloud
from tests.spark.test_ingest_batch import Runner, _snapshot

ORDERS: dict[str, Any] = {
    "dataset_id": "orders",
    "format": "csv",
    "subject_columns": ["user_id"],
    "partition_by": ["day"],
    "schema": [
        {"name": "user_id", "type": "string", "nullable": False},
        {"name": "day", "type": "date"},
        {"name": "n", "type": "int"},
        {"name": "at", "type": "timestamp"},
        {"name": "amount", "type": "decimal(10,2)"},
        {"name": "ok", "type": "boolean"},
        {"name": "ref", "type": "long", "nullable": False},
        {"name": "note", "type": "string"},
    ],
}
# per column: canonical texts (converted by the read task) and texts Spark must read (valid or
# not: spaces, signs, exponents, impossible dates, empty)
_TEXTS = {
    "day": (
        ["2026-11-20", "2026-11-21", "2026-11-22"],
        ["", "2026-02-30", "2026-1-3", " 2026-11-20"],
    ),
    "n": (["0", "7", "-12", "123456789"], ["", " 5", "+5", "05", "x", "1e3", "2147483648"]),
    "at": (
        ["2026-11-20 10:00:00", "2026-11-21 23:59:59.5", "2026-11-22 00:00:01.000001"],
        ["", "2026-11-20T10:00:00", "2026-11-20 10:00:00.50", "2026-11-20 24:00:00"],
    ),
    "amount": (["0.00", "12.50", "-3.25"], ["", "1.5", "1e2", "0.005", " 2.00", "-0.00"]),
    "ok": (["true", "false"], ["", "TRUE", "yes", "1"]),
    "ref": (["1", "42", "-9"], ["", "x", "+1", "007"]),
}
PIECES = re.compile(r"lethe\.ingest: object (\S+): (\d+) piece\(s\)")
PACKED = re.compile(r"(\d+) valid without Spark's checks \(packed\)")


def _orders_csv(rng: random.Random, rows: int, *, extra: bool) -> bytes:
    """Rows mostly of canonical texts, each column's other texts one time in eight; user ids
    empty now and then (a value: valid, nobody's); an undeclared column with `extra`."""
    header = ["user_id", "day", "n", "at", "amount", "ok", "ref", "note"]
    if extra:
        header.insert(3, "undeclared")
    lines = [",".join(header)]
    for i in range(rows):
        values = {"user_id": "" if i % 41 == 3 else f"u{rng.randrange(30)}"}
        for name, (plain, other) in _TEXTS.items():
            values[name] = rng.choice(other if rng.random() < 0.125 else plain)
        values["note"] = rng.choice(["", "plain", '"a ""quoted"", note"', '"two\nlines"'])
        values["undeclared"] = str(i)
        lines.append(",".join(values[name] for name in header))
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def run(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Runner:
    return Runner(capsys)


@pytest.mark.parametrize(("extra", "split"), [(False, False), (True, True)])
def test_packed_rows_give_what_rows_on_their_own_give(
    cloud: Cloud, run: Runner, extra: bool, split: bool
) -> None:
    # Given a CSV object of mostly canonical texts, with texts Spark must read in every column
    cloud.register(ORDERS)
    body = _orders_csv(random.Random(7), 1500, extra=extra)
    key = "orders/mixed.csv"
    version = cloud.upload(key, body, "orders")
    reading = ["--batch-rows", "200", *(["--piece-bytes", "16384"] if split else [])]

    # When it is ingested with every row on its own, then with plain rows packed in runs of 7
    # and of the default size
    alone = _snapshot(cloud, run([("orders", key, version)], *reading, "--pack-rows", "0"))
    assert PACKED.search(run.logs).group(1) == "0"  # type: ignore[union-attr]
    snapshots = {}
    for rows in ("7", None):
        cloud.clear_index()
        packing = ["--pack-rows", rows] if rows else []
        snapshots[rows] = _snapshot(cloud, run([("orders", key, version)], *reading, *packing))
        packed = sum(int(m.group(1)) for m in PACKED.finditer(run.logs))  # the last run's

        # Then most rows travelled packed
        assert packed > 1500 // 3
        assert packed < alone["counts"]["rows_written"]
    if split:
        assert int(PIECES.search(run.logs).group(2)) >= 3  # type: ignore[union-attr]

    # and the lake files, the quarantine and the index entries are those of rows on their own
    assert alone["counts"]["rows_quarantined"] > 100
    assert snapshots["7"] == alone
    assert snapshots[None] == alone


def _settings(
    document: dict[str, Any], pack_rows: int = 4096, lake_bucket: str = "lake"
) -> TaskSettings:
    dataset = parse_dataset(document)
    return TaskSettings(
        dataset=dataset, raw_bucket="raw", lake_bucket=lake_bucket, index=None,  # type: ignore[arg-type]
        correlation_id="c", now="n", objects={0: None}, hash_key=b"k" * 32,  # type: ignore[dict-item]
        pack_rows=pack_rows,
    )  # fmt: skip


def test_only_csv_datasets_of_converted_or_string_columns_are_packed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(TaskSettings, "digest", lambda self, index: "0" * 16)
    assert pack_plan(_settings(ORDERS)) is not None
    assert pack_plan(_settings(ORDERS, pack_rows=0)) is None
    unpackable = [
        {**ORDERS, "format": "jsonl"},
        {**ORDERS, "schema": [*ORDERS["schema"], {"name": "x", "type": "double"}]},
        {**ORDERS, "schema": [*ORDERS["schema"], {"name": "s", "type": "struct<a:int>"}]},
        {**ORDERS, "partition_by": ["n"]},  # not a date: placed by a Python task
    ]
    for document in unpackable:
        assert pack_plan(_settings(document)) is None, document
    # a lake key too long for S3 and the index: partition paths are placed by a Python task
    assert pack_plan(_settings(ORDERS, lake_bucket="b" * 980)) is None
    assert pack_plan(_settings({**ORDERS, "partition_by": []}, lake_bucket="b" * 980)) is not None
