"""What the erase job's matcher could not search (lethe_jobs.erase_rows.gaps): records that could
not be parsed, a subject column missing or ambiguous (by the one name rule of
lethe_shared.datasets.field_names), and the matched rows per subject that the job compares with
the index. Erasure fails closed: each is reported, never folded into "nothing found"."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lethe_jobs.erase_rows import erase_rows, match_rows
from lethe_jobs.erase_rows.model import Gap, RowMatches
from lethe_jobs.objects import ObjectKind
from tests.unit.test_erase_rows import (
    COMPOSITE_SCHEMA,
    NESTED_SCHEMA,
    QUARANTINE_LINES,
    hashed,
    make_dataset,
    matcher,
    parquet_bytes,
    put,
)

RAW, LAKE, QUARANTINE = ObjectKind.RAW, ObjectKind.LAKE_PARQUET, ObjectKind.QUARANTINE_ROWS
SECRET = "u-secret-77"  # the subject erased; it must never appear in a gap


def reasons(found: RowMatches) -> list[str]:
    return [g.reason for g in found.gaps]


def no_value_in(gaps: tuple[Gap, ...], *values: str) -> bool:
    text = " ".join(g.detail for g in gaps)
    return not any(v in text for v in values)


# ------------------------------------------------------------------ unparseable records


def test_a_json_lines_line_that_cannot_be_parsed_is_kept_and_named(tmp_path: Path) -> None:
    # Given a JSON Lines object whose line 2 is not JSON (it holds the subject's id as text)
    dataset = make_dataset("jsonl")
    data = (
        f'{{"user_id": "{SECRET}", "note": "a"}}\n'
        f"user_id={SECRET} note=b\n"
        '{"user_id": "u2", "note": "c"}\n'
    ).encode()
    source = put(tmp_path, "in.jsonl", data)
    target = tmp_path / "out.jsonl"

    # When the subject is erased
    result = erase_rows(
        RAW, source, target, "ds/in.jsonl", matcher(dataset, hashed(dataset, SECRET)),
        workdir=tmp_path,
    )  # fmt: skip

    # Then its parsed line goes, the unparsed line stays as it was, and the result says so
    assert (result.rows_before, result.rows_removed, result.written) == (3, 1, True)
    assert target.read_bytes() == data.split(b"\n", 1)[1]
    (gap,) = result.gaps
    assert (gap.reason, gap.count) == ("unparseable_records", 1)
    assert "line 2" in gap.detail
    assert no_value_in(result.gaps, SECRET, "note=b")
    assert result.by_subject == ((hashed(dataset, SECRET), 1),)


def test_a_rejected_csv_record_the_erasure_removes_is_no_gap(tmp_path: Path) -> None:
    """A record with the wrong number of fields is still matched by the subject it names; once
    removed, nothing unparsed is left of it."""
    dataset = make_dataset("csv")
    data = f"user_id,note\n{SECRET},a,extra\nu2,b\nu3\n".encode()
    path = put(tmp_path, "in.csv", data)

    found = match_rows(
        RAW, path, "ds/in.csv", matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path
    )

    assert found.positions == (2,)
    (gap,) = found.gaps  # only line 4 ("u3", one field) is left unparsed
    assert (gap.reason, gap.count) == ("unparseable_records", 1)
    assert "line 4" in gap.detail


def test_quarantine_lines_that_cannot_be_parsed_are_counted_and_kept(tmp_path: Path) -> None:
    # Given a quarantine file with a rejected record kept as raw text, and a line that is not
    # JSON at all (which used to stop the erasure with an error)
    dataset = make_dataset("csv")
    data = QUARANTINE_LINES + (
        b'{"reasons":["not a JSON object"],"record":{"_raw":"garbled u-secret-77"}}\n'  # 6
        b"not json\n"  # 7
    )
    source = put(tmp_path, "q.jsonl", data)
    target = tmp_path / "out.jsonl"

    # When u2 is erased
    result = erase_rows(
        QUARANTINE, source, target, "ds/_quarantine/q.jsonl",
        matcher(dataset, hashed(dataset, "u2")), workdir=tmp_path,
    )  # fmt: skip

    # Then u2's line goes; lines 5 (fields beyond the header), 6 and 7 stay and are counted
    assert (result.rows_before, result.rows_removed) == (6, 1)
    assert b"u2" not in target.read_bytes()
    assert b"not json\n" in target.read_bytes()
    (gap,) = result.gaps
    assert (gap.reason, gap.count) == ("unparseable_records", 3)
    assert "line 5" in gap.detail
    assert no_value_in(result.gaps, SECRET, "garbled")


def test_a_clean_object_has_no_gap(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    path = put(tmp_path, "in.csv", b"user_id,note\nu1,a\nu2,b\n")

    found = match_rows(
        RAW, path, "ds/in.csv", matcher(dataset, hashed(dataset, "u1")), workdir=tmp_path
    )

    assert (found.positions, found.gaps) == ((2,), ())
    assert found.by_subject == ((hashed(dataset, "u1"), 1),)


# ------------------------------------------------------------------ the subject column


def test_a_csv_without_the_subject_column_is_not_searched(tmp_path: Path) -> None:
    dataset = make_dataset("csv", csv={"header": True})
    source = put(tmp_path, "in.csv", f"customer,note\n{SECRET},a\nu2,b\n".encode())

    result = erase_rows(
        RAW, source, tmp_path / "out.csv", "ds/in.csv",
        matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path,
    )  # fmt: skip

    assert (result.rows_before, result.rows_removed, result.written) == (2, 0, False)
    (gap,) = result.gaps
    assert (gap.reason, gap.count) == ("missing_subject_column", 2)
    assert "'user_id'" in gap.detail
    assert no_value_in(result.gaps, SECRET, "customer")


def test_a_csv_whose_header_has_only_a_case_variant_is_matched_by_it(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    path = put(tmp_path, "in.csv", f"USER_ID,note\n{SECRET},a\nu2,b\n".encode())

    found = match_rows(
        RAW, path, "ds/in.csv", matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path
    )

    assert (found.positions, found.gaps) == ((2,), ())


def test_a_csv_whose_header_is_ambiguous_is_not_searched(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    path = put(tmp_path, "in.csv", f"User_Id,USER_ID,note\n{SECRET},{SECRET},a\n".encode())

    found = match_rows(
        RAW, path, "ds/in.csv", matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path
    )

    assert found.positions == ()
    (gap,) = found.gaps
    # The reader refuses such a header before it reads a record (the ingest job quarantines
    # the file whole for it), so the rows concerned are not counted: 0, "not known".
    assert (gap.reason, gap.count) == ("ambiguous_subject_column", 0)
    assert gap.detail.startswith("2 fields equal subject column 'user_id'")
    assert "USER_ID" not in gap.detail
    assert "User_Id" not in gap.detail


def test_a_composite_key_with_one_column_missing_is_not_searched(tmp_path: Path) -> None:
    dataset = make_dataset("csv", COMPOSITE_SCHEMA, ("tenant", "user_id"))
    path = put(tmp_path, "in.csv", b"user_id,note\n1,a\n")

    found = match_rows(
        RAW, path, "ds/in.csv", matcher(dataset, hashed(dataset, "acme", 1)), workdir=tmp_path
    )

    assert reasons(found) == ["missing_subject_column"]
    assert "'tenant'" in found.gaps[0].detail


def test_an_object_without_rows_has_no_gap(tmp_path: Path) -> None:
    dataset = make_dataset("csv")
    path = put(tmp_path, "in.csv", b"customer,note\n")

    found = match_rows(RAW, path, "ds/in.csv", matcher(dataset), workdir=tmp_path)

    assert (found.rows, found.gaps) == (0, ())


def test_json_lines_none_of_whose_records_has_the_column_are_not_searched(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("jsonl")
    path = put(tmp_path, "in.jsonl", f'{{"uid": "{SECRET}"}}\n{{"uid": "u2"}}\n'.encode())

    found = match_rows(
        RAW, path, "ds/in.jsonl", matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path
    )

    assert found.positions == ()
    assert [(g.reason, g.count) for g in found.gaps] == [("missing_subject_column", 2)]


def test_a_json_record_with_two_case_variants_is_ambiguous_the_others_are_matched(
    tmp_path: Path,
) -> None:
    # Given records naming the subject column exactly, by one variant, and by two variants
    dataset = make_dataset("jsonl")
    data = (
        f'{{"user_id": "{SECRET}"}}\n'  # 1
        '{"USER_ID": "u2"}\n'  # 2: the one variant (the index's rule reads it)
        f'{{"User_Id": "{SECRET}", "USER_ID": "u3"}}\n'  # 3: ambiguous
        f'{{"user_id": "{SECRET}", "USER_ID": "u4"}}\n'  # 4: exact wins
    ).encode()
    path = put(tmp_path, "in.jsonl", data)

    found = match_rows(
        RAW, path, "ds/in.jsonl", matcher(dataset, hashed(dataset, SECRET)), workdir=tmp_path
    )

    # Then line 3 is named ambiguous, never guessed; the exact lines are matched
    assert set(found.positions) >= {1, 4}
    assert 3 not in found.positions
    (gap,) = found.gaps
    assert (gap.reason, gap.count) == ("ambiguous_subject_column", 1)


def test_raw_parquet_without_the_subject_column_is_not_searched(tmp_path: Path) -> None:
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])
    table = pa.table({"customer": pa.array([1, 2, 3], pa.int64())})
    path = put(tmp_path, "in.parquet", parquet_bytes(table))

    found = match_rows(
        RAW, path, "ds/in.parquet", matcher(dataset, hashed(dataset, 1)), workdir=tmp_path
    )

    assert (found.rows, found.positions) == (3, ())
    assert [(g.reason, g.count) for g in found.gaps] == [("missing_subject_column", 3)]


def test_lake_parquet_whose_struct_lacks_the_subject_field_is_not_searched(
    tmp_path: Path,
) -> None:
    dataset = make_dataset("parquet", NESTED_SCHEMA, ("customer.id",))
    table = pa.table({"customer": [{"name": "a"}, {"name": "b"}], "n": [1, 2]})
    path = put(tmp_path, "part-0.parquet", parquet_bytes(table))

    found = match_rows(
        LAKE, path, "ds/part-0.parquet", matcher(dataset, hashed(dataset, "c1")), workdir=tmp_path
    )

    assert [(g.reason, g.count) for g in found.gaps] == [("missing_subject_column", 2)]
    assert "'customer.id'" in found.gaps[0].detail


def test_parquet_columns_are_found_by_the_one_name_rule(tmp_path: Path) -> None:
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])
    one = pa.table({"User_ID": pa.array([1, 2, 1], pa.int64())})
    two = pa.table({"User_ID": pa.array([1], pa.int64()), "USER_ID": pa.array([1], pa.int64())})
    chosen = matcher(dataset, hashed(dataset, 1))

    variant = match_rows(
        RAW, put(tmp_path, "one.parquet", parquet_bytes(one)), "ds/one.parquet", chosen,
        workdir=tmp_path,
    )  # fmt: skip
    ambiguous = match_rows(
        RAW, put(tmp_path, "two.parquet", parquet_bytes(two)), "ds/two.parquet", chosen,
        workdir=tmp_path,
    )  # fmt: skip

    assert (variant.positions, variant.gaps) == ((0, 2), ())
    assert variant.by_subject == ((hashed(dataset, 1), 2),)
    assert ambiguous.positions == ()
    assert reasons(ambiguous) == ["ambiguous_subject_column"]


def test_a_partition_subject_column_is_no_missing_column(tmp_path: Path) -> None:
    dataset = make_dataset(
        "parquet", COMPOSITE_SCHEMA, ("tenant", "user_id"), partition_by=["user_id"]
    )
    path = put(tmp_path, "p.parquet", parquet_bytes(pa.table({"tenant": ["acme", "beta"]})))

    found = match_rows(
        LAKE, path, "ds/user_id=7/p.parquet", matcher(dataset, hashed(dataset, "acme", 7)),
        workdir=tmp_path,
    )  # fmt: skip

    assert (found.positions, found.gaps) == ((0,), ())


def test_matches_are_counted_per_subject(tmp_path: Path) -> None:
    dataset = make_dataset("parquet", [{"name": "user_id", "type": "long"}])
    table = pa.table({"user_id": pa.array([1, 2, 1, 3, 1, 2], pa.int64())})
    path = put(tmp_path, "in.parquet", parquet_bytes(table, row_group_size=4))

    found = match_rows(
        RAW, path, "ds/in.parquet", matcher(dataset, hashed(dataset, 1), hashed(dataset, 2)),
        workdir=tmp_path,
    )  # fmt: skip

    assert found.positions == (0, 1, 2, 4, 5)
    assert dict(found.by_subject) == {hashed(dataset, 1): 3, hashed(dataset, 2): 2}
