"""The segment index's row rule (lethe_shared.index.segments.rules), table-driven."""

from __future__ import annotations

import pytest

from lethe_shared.index.segments.rules import (
    Pointer,
    Row,
    RowStatus,
    effective,
    live_entries,
    row_status,
)

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


def test_compaction_drops_exactly_the_rows_the_rule_calls_dead() -> None:
    import random  # noqa: PLC0415

    import pyarrow as pa  # noqa: PLC0415

    from lethe_shared.index.segments.compaction import dead_mask, merge  # noqa: PLC0415
    from lethe_shared.index.segments.format import wide_rows  # noqa: PLC0415

    rng = random.Random(3)
    seqs = [S1, S2, S3]
    urls = [f"s3://lake/ds/{i}" for i in range(5)]
    pointers: dict[str, Pointer | None] = {
        u: Pointer(
            u,
            current=rng.choice(["", *seqs]),
            floor=rng.choice(["", *seqs, S2 + "~"]),
            deleted=rng.random() < 0.3,
        )
        for u in urls[:4]
    }  # the last URL has no pointer
    parts = []
    for u in urls:
        for origin in seqs:
            fields = dict.fromkeys(
                (
                    "version_id",
                    "etag",
                    "zone",
                    "format",
                    "matching_fingerprint",
                    "key_fingerprint",
                    "updated_at",
                ),
                "x",
            ) | {"object_url": u, "origin_seq": origin}
            parts.append(wide_rows([f"{i:064x}" for i in range(3)], [1, 2, 3], fields))
    merged = merge([*parts, parts[0]])  # a row read twice is one row
    assert merged.num_rows == sum(p.num_rows for p in parts)
    dead = dead_mask(merged, pointers).to_pylist()
    for i, (u, origin) in enumerate(
        zip(merged["object_url"].to_pylist(), merged["origin_seq"].to_pylist(), strict=True)
    ):
        assert dead[i] == (row_status(origin, pointers.get(u)) is RowStatus.DEAD)
    assert isinstance(merged, pa.Table)


# ------------------------------------------------------------------------------ derived pointer


def override(current: str = "", floor: str = "", deleted: bool = False, rev: int = 1) -> Pointer:
    return Pointer(URL, current=current, floor=floor, deleted=deleted, rev=rev)


@pytest.mark.parametrize(
    ("over", "origins", "current", "floor", "deleted"),
    [
        (None, (), None, None, None),  # never written: no pointer
        (None, (S1,), S1, "", False),  # one committed write
        (None, (S2, S1), S2, "", False),  # two writers: the highest origin, whatever the order
        (None, (S1, S3, S2), S3, "", False),
        (override(S2, deleted=True), (S1, S2), S2, "", True),  # flagged current write
        (override(S1, deleted=True), (S1, S2), S2, "", False),  # a newer write clears the flag
        (override("", floor=S2 + "~"), (S1, S2), "", S2 + "~", False),  # removed
        (override("", floor=S2 + "~"), (S1, S2, S3), S3, S2 + "~", False),  # written again
        (override(S2, floor=S2), (S1, S2), S2, S2, False),  # pruned: floor == current
        (override(S2, floor=S2), (), S2, S2, False),  # carried forward: its segment retired
        (override(S2), (S1,), S2, "", False),  # carried forward, an older write still listed
        (override(S1, floor=S1), (S3,), S3, S1, False),  # carried, then a newer write
        (override("", floor=S3), (S2,), "", S3, False),  # a write below the floor never counts
    ],
)
def test_the_pointer_is_derived_from_the_override_and_the_describing_writes(
    over: Pointer | None,
    origins: tuple[str, ...],
    current: str | None,
    floor: str | None,
    deleted: bool | None,
) -> None:
    found = effective(URL, over, origins)
    if current is None:
        assert found is None
        return
    assert found is not None
    assert (found.current, found.floor, found.deleted) == (current, floor, deleted)
    assert found.rev == (over.rev if over else 0)  # the override as read: a write's condition


def test_the_derived_pointer_is_what_the_conditional_pointer_updates_made() -> None:
    """The old design's write (`current` := seq when current < seq and floor <= seq, `deleted`
    cleared), applied in every commit order, gives the derived pointer's current and flag."""
    import itertools  # noqa: PLC0415

    for floor, flagged in itertools.product(["", S1, S2 + "~"], [S1, S2, ""]):
        start = override(flagged, floor=floor, deleted=bool(flagged))
        for order in itertools.permutations([S1, S2, S3]):
            for n in range(4):
                old = start
                for seq in order[:n]:
                    if (not old.current or old.current < seq) and old.floor <= seq:
                        old = Pointer(URL, current=seq, floor=old.floor, rev=old.rev)
                new = effective(URL, start, order[:n])
                assert new is not None
                assert (new.current, new.floor, new.deleted) == (
                    old.current,
                    old.floor,
                    old.deleted,
                )
