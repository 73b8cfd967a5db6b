"""Retention (storage limitation): the plan (lethe_shared.datasets.retention: which objects, which
cutoff, a held dataset untouched) and the row-removal core (lethe_jobs.retention_rows: expired
rows removed with erasure's own rewriters, held subjects' rows kept, undecidable rows kept and
named)."""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_jobs.erase_rows import ErasureVerificationError, SubjectMatcher
from lethe_jobs.objects import ObjectKind
from lethe_jobs.retention_rows import expire_rows, expired_rows, verify_expired
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.holds import HoldView, new_hold
from lethe_shared.datasets.retention import (
    RetentionRule,
    StoredObject,
    plan_retention,
    retention_rule,
)
from lethe_shared.subject_hashing.keys import subject_hash

KEY = b"retention-unit-test-key-0123456789ab"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NOW = datetime(2026, 11, 27, 15, 30, tzinfo=UTC)
RAW, LAKE, QUARANTINE = ObjectKind.RAW, ObjectKind.LAKE_PARQUET, ObjectKind.QUARANTINE_ROWS
SCHEMA = [
    {"name": "user_id", "type": "string"},
    {"name": "event_date", "type": "date"},
    {"name": "note", "type": "string"},
]


def dataset(fmt: str = "csv", retention: Any = None, **more: Any) -> Dataset:
    return parse_dataset({
        "dataset_id": "events", "format": fmt, "subject_columns": ["user_id"], "schema": SCHEMA,
        "retention": retention or {"column": "event_date", "days": 365}, **more,
    })  # fmt: skip


def rule(ds: Dataset) -> RetentionRule:
    found = retention_rule(ds, NOW)
    assert found is not None
    return found


def held(ds: Dataset, *ids: str) -> SubjectMatcher:
    return SubjectMatcher(ds, frozenset(subject_hash(KEY, ["user_id"], [i]) for i in ids), KEY)


def put(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


CSV = (
    b"user_id,event_date,note\r\n"
    b"u-1,2025-11-26,old\r\n"  # line 2: before the cutoff (2025-11-27)
    b'u-2,2025-11-27,"the cutoff day,\r\nkept"\r\n'  # line 3: on the cutoff: kept
    b"u-3,2024-01-05,older\r\n"  # line 5
    b"u-4,,no date\r\n"  # line 6: null: kept
    b"u-5,last tuesday,unreadable\r\n"  # line 7: kept, named
    b"u-6,2026-1-2,recent\r\n"  # line 8
)


# ------------------------------------------------------------------------------- the plan


def test_the_cutoff_is_the_start_of_the_day_n_days_ago_or_now_minus_n_by_age() -> None:
    by_column = rule(dataset())
    by_age = rule(dataset(retention={"object_age_days": 30}))

    assert by_column == RetentionRule("event_date", datetime(2025, 11, 27, tzinfo=UTC))
    assert by_column.expired(date(2025, 11, 26))
    assert not by_column.expired(date(2025, 11, 27))
    assert by_column.expired(datetime(2025, 11, 26, 23, 59))  # naive: UTC
    assert not by_column.expired(None)
    assert by_age.column is None
    assert by_age.cutoff == datetime(2026, 10, 28, 15, 30, tzinfo=UTC)
    assert retention_rule(parse_dataset({**dataset().document(), "retention": None}), NOW) is None


def _objects() -> list[StoredObject]:
    old, new = datetime(2025, 1, 1, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)
    return [
        StoredObject("raw", "raw", "events/2025/upload.csv", old),
        StoredObject("raw", "raw", "events/2026/upload.csv", new),
        StoredObject("lake", "lake", "events/event_date=2025-11-26/part-a.parquet", new),
        StoredObject("lake", "lake", "events/event_date=2025-11-27/part-b.parquet", old),
        StoredObject("lake", "lake", f"events/event_date={NULL_PARTITION}/part-c.parquet", old),
        StoredObject("lake", "lake", "events/_quarantine/q.jsonl", old),
    ]  # fmt: skip


def test_a_partitioned_lake_is_decided_by_its_keys_the_rest_is_scanned() -> None:
    plan = plan_retention(dataset(partition_by=["event_date"]), _objects(), NOW, HoldView((), ""))

    assert [o.key for o in plan.expired] == ["events/event_date=2025-11-26/part-a.parquet"]
    assert [o.key for o in plan.scanned] == [
        "events/_quarantine/q.jsonl", "events/2025/upload.csv", "events/2026/upload.csv",
    ]  # fmt: skip
    assert (plan.left, plan.undated) == (1, 1)
    assert plan.summary()["cutoff"] == "2025-11-27T00:00:00+00:00"


def test_by_object_age_only_old_objects_are_planned() -> None:
    plan = plan_retention(
        dataset(retention={"object_age_days": 30}), _objects(), NOW, HoldView((), "")
    )

    assert {o.key for o in plan.expired} == {
        "events/2025/upload.csv", "events/event_date=2025-11-27/part-b.parquet",
        f"events/event_date={NULL_PARTITION}/part-c.parquet", "events/_quarantine/q.jsonl",
    }  # fmt: skip
    assert (plan.scanned, plan.left) == ((), 2)


def test_a_held_dataset_is_not_planned_and_held_subjects_are_carried() -> None:
    hold = new_hold(dataset_id="events", reason="audit", held_by="dpo@x.eu", now=NOW)
    subject = new_hold(
        dataset_id="events", reason="claim", held_by="dpo@x.eu", now=NOW,
        subject_hashes={"events": "a" * 64}, key_fingerprint="k" * 16,
    )  # fmt: skip

    whole = plan_retention(dataset(), _objects(), NOW, HoldView.of([hold], "k" * 16))
    some = plan_retention(dataset(), _objects(), NOW, HoldView.of([subject], "k" * 16))

    assert (whole.held_by, whole.objects) == (hold.hold_id, ())
    assert some.held_by is None
    assert some.held_hashes == frozenset({"a" * 64})
    assert len(some.objects) == 6  # not partitioned by the column: every object is scanned


# ------------------------------------------------------------------------------- the core


def test_csv_expired_records_go_with_all_their_lines_the_rest_is_byte_for_byte(
    tmp_path: Path,
) -> None:
    ds = dataset()
    source = put(tmp_path, "in.csv", CSV)
    target = tmp_path / "out.csv"

    result = expire_rows(RAW, source, target, "events/a.csv", ds, rule=rule(ds), workdir=tmp_path)

    assert result.written
    assert (result.rows_before, result.positions, result.rows_after) == (6, (2, 5), 4)
    assert target.read_bytes() == (
        b"user_id,event_date,note\r\n"
        b'u-2,2025-11-27,"the cutoff day,\r\nkept"\r\n'
        b"u-4,,no date\r\n"
        b"u-5,last tuesday,unreadable\r\n"
        b"u-6,2026-1-2,recent\r\n"
    )
    (gap,) = result.gaps
    assert (gap.reason, gap.count) == ("unparseable_records", 1)
    assert "last tuesday" not in gap.detail  # never a value
    verify_expired(RAW, target, "events/a.csv", ds, rule(ds), expected_rows=4, workdir=tmp_path)
    with pytest.raises(ErasureVerificationError, match="2 expired row"):
        verify_expired(RAW, source, "events/a.csv", ds, rule(ds), expected_rows=6,
                       workdir=tmp_path)  # fmt: skip


def test_a_held_subjects_rows_survive_retention(tmp_path: Path) -> None:
    ds = dataset()
    source = put(tmp_path, "in.csv", CSV)

    matches = expired_rows(
        RAW, source, "events/a.csv", ds, rule(ds), held=held(ds, "u-3"), workdir=tmp_path
    )

    assert matches.positions == (2,)  # u-3's expired record (line 5) is held


def test_gzip_jsonl_stays_gzip_and_case_variant_fields_are_read(tmp_path: Path) -> None:
    ds = dataset("jsonl")
    lines = [
        {"user_id": "u-1", "Event_Date": "2020-02-02", "note": "old"},
        {"user_id": "u-2", "event_date": "2026-11-01T10:00:00Z", "note": "new"},
        {"user_id": "u-3", "event_date": None},
    ]
    body = "".join(json.dumps(x) + "\n" for x in lines).encode()
    source = put(tmp_path, "in.jsonl.gz", gzip.compress(body))
    target = tmp_path / "out.jsonl.gz"

    result = expire_rows(RAW, source, target, "events/a.jsonl", ds, rule=rule(ds), workdir=tmp_path)

    assert result.positions == (1,)
    assert gzip.decompress(target.read_bytes()) == body.split(b"\n", 1)[1]


def test_every_row_expired_leaves_the_deletion_to_the_caller(tmp_path: Path) -> None:
    ds = dataset(retention={"object_age_days": 30})
    source = put(tmp_path, "in.csv", CSV)
    target = tmp_path / "out.csv"

    result = expire_rows(RAW, source, target, "events/a.csv", ds, rule=rule(ds), workdir=tmp_path)
    kept = expire_rows(RAW, source, target, "events/a.csv", ds, rule=rule(ds),
                       held=held(ds, "u-1"), workdir=tmp_path)  # fmt: skip

    assert (result.written, result.rows_after) == (False, 0)
    assert not target.exists() or kept.written
    assert kept.positions == (3, 5, 6, 7, 8)  # every record but u-1's (line 2)
    assert b"u-1,2025-11-26,old" in target.read_bytes()


def _parquet(tmp_path: Path, name: str, table: pa.Table) -> Path:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=2)
    return put(tmp_path, name, sink.getvalue())


def test_lake_parquet_rows_by_column_and_by_partition_key(tmp_path: Path) -> None:
    ds = dataset("parquet")
    table = pa.table({
        "user_id": ["u-1", "u-2", "u-3", "u-4", "u-5"],
        "event_date": [
            date(2025, 1, 1), date(2026, 1, 1), None, date(2024, 5, 5), date(2026, 6, 6),
        ],
        "note": ["a", "b", "c", "d", "e"],
    })  # fmt: skip
    source = _parquet(tmp_path, "in.parquet", table)
    target = tmp_path / "out.parquet"

    result = expire_rows(LAKE, source, target, "events/part-0.parquet", ds, rule=rule(ds),
                         workdir=tmp_path)  # fmt: skip

    assert result.positions == (0, 3)
    assert pq.read_table(target).column("user_id").to_pylist() == ["u-2", "u-3", "u-5"]
    # a file under an expired partition: every row, whatever its columns
    partitioned = dataset("parquet", partition_by=["event_date"])
    no_date = _parquet(tmp_path, "p.parquet", table.drop_columns(["event_date"]))
    whole = expired_rows(LAKE, no_date, "events/event_date=2025-01-01/part-1.parquet",
                         partitioned, rule(partitioned), workdir=tmp_path)  # fmt: skip
    assert whole.positions == (0, 1, 2, 3, 4)
    recent = expired_rows(LAKE, no_date, "events/event_date=2026-01-01/part-1.parquet",
                          partitioned, rule(partitioned), workdir=tmp_path)  # fmt: skip
    assert recent.positions == ()


def test_quarantine_lines_are_read_by_their_record(tmp_path: Path) -> None:
    ds = dataset()
    lines = [
        json.dumps({"record": json.dumps({"user_id": "u-1", "event_date": "2020-01-01"}),
                    "reason": "stars: not an int"}),
        json.dumps({"record": json.dumps({"user_id": "u-2", "event_date": "2026-11-01"}),
                    "reason": "x"}),
        "not json",
    ]  # fmt: skip
    source = put(tmp_path, "q.jsonl", ("\n".join(lines) + "\n").encode())
    target = tmp_path / "q-out.jsonl"

    result = expire_rows(QUARANTINE, source, target, "events/_quarantine/q.jsonl", ds,
                         rule=rule(ds), workdir=tmp_path)  # fmt: skip

    assert result.positions == (1,)
    assert [g.reason for g in result.gaps] == ["unparseable_records"]
    assert target.read_text().splitlines() == lines[1:]


def test_held_subjects_that_cannot_be_told_apart_keep_the_whole_object(tmp_path: Path) -> None:
    ds = dataset()
    source = put(tmp_path, "in.csv", b"customer,event_date\r\nu-1,2020-01-01\r\n")

    matches = expired_rows(RAW, source, "events/a.csv", ds, rule(ds), held=held(ds, "u-1"),
                           workdir=tmp_path)  # fmt: skip

    assert matches.positions == ()
    assert matches.gaps[0].reason == "missing_subject_column"
    assert "legal hold" in matches.gaps[0].detail
