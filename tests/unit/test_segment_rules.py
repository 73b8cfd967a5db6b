"""The segment index's row rule (lethe_shared.index.segments.rules), table-driven."""

from __future__ import annotations

import pytest

from lethe_shared.index.segments.rules import Pointer, Row, RowStatus, live_entries, row_status

S1, S2, S3 = (
    "00000000000000000001-aaaaaaaa",
    "00000000000000000002-bbbbbbbb",
    "00000000000000000003-cccccccc",
)
URL = "s3://lake/ds/a.parquet"


def pointer(current: str = S2, floor: str = "", deleted: bool = False) -> Pointer:
    return Pointer(URL, current=current, floor=floor, deleted=deleted, version_id="v", etag="e")


@pytest.mark.parametrize(
    ("ptr", "origin", "status"),
    [
        (None, S1, RowStatus.DEAD),  # no pointer
        (pointer(current=""), S1, RowStatus.DEAD),  # removed
        (pointer(current="", floor=S2 + "~"), S2, RowStatus.DEAD),
        (pointer(), S2, RowStatus.CURRENT),
        (pointer(deleted=True), S2, RowStatus.OLDER),  # delete marker: flagged
        (pointer(), S1, RowStatus.OLDER),  # an older write: flagged
        (pointer(deleted=True), S1, RowStatus.OLDER),
        (pointer(floor=S2), S1, RowStatus.DEAD),  # below the floor: its versions are gone
        (pointer(floor=S2), S2, RowStatus.CURRENT),  # floor == current keeps current
        (pointer(floor=S1), S1, RowStatus.OLDER),  # floor is inclusive
        (pointer(), S3, RowStatus.DEAD),  # above current: not committed
        (pointer(floor=S2 + "~", deleted=True), S2, RowStatus.DEAD),  # pruned while deleted
        (pointer(floor=S2 + "~"), S3, RowStatus.DEAD),
    ],
)
def test_row_status(ptr: Pointer | None, origin: str, status: RowStatus) -> None:
    assert row_status(origin, ptr) is status


def test_a_floor_just_above_a_seq_sorts_below_every_later_seq() -> None:
    assert S2 < S2 + "~" < S3
    assert S2 + "~" < "00000000000000000002-bbbbbbbc"


def row(h: str, origin: str, version: str, rows: int = 1) -> Row:
    return Row(h, URL, origin, rows, version, f"e{version}", "lake", "parquet", "", "", "")


def test_the_live_row_with_the_highest_origin_gives_the_entry() -> None:
    h, g, k = "a" * 64, "b" * 64, "c" * 64
    rows = [
        row(h, S1, "v1", 3),
        row(h, S2, "v2", 4),
        row(h, S2, "v2", 4),  # the same row read from two segments
        row(g, S1, "v1"),
        row(k, S3, "v3"),  # not committed
    ]
    found = live_entries(rows, {URL: pointer()})
    assert set(found) == {(h, URL), (g, URL)}
    assert (found[(h, URL)].row.version_id, found[(h, URL)].deleted, found[(h, URL)].row.rows) == (
        "v2",
        False,
        4,
    )
    assert (found[(g, URL)].row.version_id, found[(g, URL)].deleted) == ("v1", True)
    assert live_entries(rows, {}) == {}
    flagged = live_entries(rows, {URL: pointer(deleted=True)})
    assert all(e.deleted for e in flagged.values())
    pruned = live_entries(rows, {URL: pointer(floor=S2)})
    assert set(pruned) == {(h, URL)}
