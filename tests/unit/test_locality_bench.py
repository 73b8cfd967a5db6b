"""bench/locality_bench.py and the generator mode it grows its lakes with, at a tiny size: the
lake zone written in the same pass is the bytes `write_lake_zone` writes, the compact index is
the erasure benchmark's dict index, and a run of two lake sizes gives checked ratios that the
report renders into the Targets table with the lake size stated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "spark_jobs"))

import erasure_bench  # noqa: E402
import generate_lake  # noqa: E402
import locality_bench  # noqa: E402
import report  # noqa: E402

TINY = {"rows_per_object": 120, "subjects": 60, "skew": 1.0, "seed": 3, "window": 2}
FIXTURES = Path(__file__).parent / "fixtures" / "bench_results"


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def test_lake_zone_in_the_same_pass_is_what_write_lake_zone_writes(tmp_path: Path) -> None:
    grown = generate_lake.generate(tmp_path / "grown", objects=7, lake_zone=True, **TINY)
    before = generate_lake.generate(tmp_path / "before", objects=7, **TINY)
    assert not (tmp_path / "before" / generate_lake.LAKE_ZONE_DIR).exists()
    written = generate_lake.write_lake_zone(before)
    assert [p.relative_to(before.root) for p in written] == [
        p.relative_to(grown.root) for p in generate_lake.lake_zone_paths(grown)
    ]
    assert [generate_lake.lake_zone_key(before, raw) for raw in before.files] == [
        p.relative_to(before.root / generate_lake.LAKE_ZONE_DIR).as_posix() for p in written
    ]
    same = files_of(tmp_path / "grown")
    assert len(same) == 14
    assert same == files_of(tmp_path / "before")
    assert grown.parameters == before.parameters | {"lake_zone": True}
    with pytest.raises(ValueError, match="Parquet"):
        generate_lake.generate(tmp_path / "csv", objects=2, fmt="csv", lake_zone=True, **TINY)


def test_lake_index_is_the_dict_index(tmp_path: Path) -> None:
    args = locality_bench.parse_args(["--rows-per-object", "120", "--subjects-per-raw-object", "9"])
    setup = locality_bench.make_setup(tmp_path / "lake", locality_bench.lake_shape(16, args))
    assert [o.zone.value for o in setup.objects] == ["raw"] * 8 + ["lake"] * 8
    index = setup.index
    assert isinstance(index, locality_bench.LakeIndex)
    expected = erasure_bench.build_index(setup.dataset, setup.objects)
    assert dict(index) == expected
    assert len(index) == len(expected)
    assert index.entries == sum(len(v) for v in expected.values())
    assert list(index) == sorted(expected)
    some = next(iter(expected))
    assert index[some] == expected[some]
    absent = ("0" if some[0] != "0" else "1") + some[1:]
    for missing in (absent, "not hex", some[:-2]):
        assert missing not in index
        with pytest.raises(KeyError):
            index[missing]


def test_two_lakes_measured_checked_and_reported(tmp_path: Path) -> None:
    argv = ["--objects", "24", "--compare-objects", "12", "--rows-per-object", "150"]
    argv += ["--subjects-per-raw-object", "12", "--k", "3", "--repeats", "1"]
    argv += ["--load-every", "0.05", "--lake", str(tmp_path / "lakes")]
    args = locality_bench.parse_args(argv)
    result = locality_bench.run(args, tmp_path / "scratch")
    small, big = result["by_size"]
    assert (small["lake"]["objects"], big["lake"]["objects"]) == (12, 24)
    assert big["lake"]["zones"] == {"raw": 12, "lake": 12}
    assert big["lake"]["subjects"] == 12 * 12
    assert "generate" in big["lake"]["seconds"]
    for row in (small, big):
        assert all(row["checks"][c] for c in ("same_objects", "same_outputs"))
        touched = row["lethe"]["objects_touched"]
        assert 0 < touched <= row["lake"]["objects"]
        assert row["objects_opened"] == {
            "lethe": touched,
            "scan": row["lake"]["objects"] + touched,
        }
        assert row["ratio_objects_opened"] == pytest.approx(
            (row["lake"]["objects"] + touched) / touched
        )
        assert row["scan"]["objects_scanned"] == row["lake"]["objects"]
        assert row["ratio_bytes"] > 1  # the scan reads every footer and subject column besides
        assert row["load_average"]["measure"]["samples"] >= 1
    assert result["load_average"]["samples"] >= 2
    # the lakes are kept under --lake and reused as they are
    again = locality_bench.make_setup(
        tmp_path / "lakes" / "lake-24", locality_bench.lake_shape(24, args)
    )
    assert "load" in again.seconds
    assert "generate" not in again.seconds

    result["machine"]["load_average_1m_at_end"] = 1.0
    results = tmp_path / "results"
    results.mkdir()
    (results / locality_bench.OUT_NAME).write_text(json.dumps(result), encoding="utf-8")
    rows = report.render_targets(results)
    assert rows is not None
    assert (
        "| 7 locality, K = 3, lake of 24 objects (generated): bytes read | >= 20x fewer |" in rows
    )
    assert "(at 12 objects, same run: " in rows
    section = report.render_locality(results)
    assert section is not None
    assert f"| 24 | {big['lake']['bytes'] / erasure_bench.MIB:,.0f} |" in section
    assert "load average (1 min)" in section


def test_the_sizes_are_even_and_the_comparison_is_included() -> None:
    args = locality_bench.parse_args(["--objects", "20_000,4000"])
    assert locality_bench.sizes_of(args) == [500, 4000, 20000]
    assert locality_bench.lake_shape(20_000, args)["objects"] == 10_000
    assert locality_bench.lake_shape(20_000, args)["subjects"] == 2_000_000
    assert locality_bench.lake_shape(500, args)["subjects"] == 50_000  # the erasure benchmark's
    with pytest.raises(ValueError, match="even"):
        locality_bench.lake_shape(501, args)
    none = locality_bench.parse_args(["--compare-objects", "0"])
    assert locality_bench.sizes_of(none) == [20_000]


def test_a_real_run_renders_its_targets() -> None:
    """The fixture is a copy of a real run (lakes of 500 and 20,000 objects)."""
    result = json.loads((FIXTURES / locality_bench.OUT_NAME).read_text(encoding="utf-8"))
    item, target, measured, verdict = locality_bench.targets(result)[0]
    assert item == "7 locality, K = 10, lake of 20,000 objects (generated): bytes read"
    assert target == ">= 20x fewer"
    small, big = result["by_size"]
    assert measured == f"{big['ratio_bytes']:.1f}x (at 500 objects, same run: " + (
        f"{small['ratio_bytes']:.2f}x)"
    )
    assert verdict == ("met" if big["ratio_bytes"] >= 20 else "missed")
    text = locality_bench.markdown(result)
    assert "| 20,000 | 2,113 | 10,882,482 | 78 / 20,078 |" in text
