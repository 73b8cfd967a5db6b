"""bench/cost_model.py: the arithmetic of the cost model on hand-computed small cases, the
measured inputs read from benchmark JSON, and docs/COST.md rendered from them."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "spark_jobs"))

import cost_model as cm  # noqa: E402
import report  # noqa: E402

MIB = 1024**2
GIB = 1024**3


def measured(**changes: Any) -> cm.Measured:
    base = cm.Measured(
        entries_per_row=0.5,
        ddb_wru_per_row=2.0,
        ddb_bytes_per_row=GIB / 1e7,
        ddb_item_bytes=4096.0,
        bench_data_bytes_per_row=40.0,
        deployed_bytes_per_entry=3.0,
        deployed_level0_bytes_per_entry=4.5,
        manifest_writes_per_object=1.0,
        segment_bytes_per_entry=8.0,
        segment_prefix_bytes_per_entry=2.0,
        segment_prefix4_bytes_per_entry=1.5,
        segment_uncompacted_bytes_per_entry=32.0,
        segment_lookup_bytes=1000.0,
        segment_write_cpu_s_per_entry=0.0,
        index_build_cpu_s_per_row=0.0,
        ingest_vcpu_s_per_row=1e-4,
        erase_vcpu_s_per_gb=10.0,
        erase_wall_to_cpu=2.0,
    )
    return dataclasses.replace(base, **changes)


# ------------------------------------------------------------------------------ prices


def test_spark_hour_is_a_vcpu_hour_and_four_gb_hours() -> None:
    assert cm.spark_usd(3600) == pytest.approx(0.052624 + 4 * 0.0057785)


def test_glue_dpu_hour_is_four_vcpu_hours() -> None:
    assert cm.glue_usd(4 * 3600) == pytest.approx(0.44)


def test_storage_per_gib_month() -> None:
    assert cm.ddb_storage_usd(GIB) == pytest.approx(0.25)
    assert cm.s3_storage_usd(10 * GIB) == pytest.approx(0.23)


def test_every_price_names_its_source_and_unfound_ones_say_why() -> None:
    for name, price in cm.PRICES.items():
        assert price.value > 0, name
        assert price.source, name
        assert price.unit, name
        assert price.read, name
        assert price.found or price.why, f"{name}: not found, and no reason given"


def test_approvals_hand_computed() -> None:
    expected = 18 * 0.025e-3 + 9 * (0.20e-6 + 1.0 * 0.0000166667) + 2 * 0.10e-3 + 0.03e-4
    assert cm.approvals_usd() == pytest.approx(expected)
    assert cm.approvals_usd() == pytest.approx(0.00080480, rel=1e-4)


# ------------------------------------------------------------------------------ arithmetic


def test_break_even() -> None:
    assert cm.break_even(10.0, 1.0, 6.0) == pytest.approx(2.0)  # 10 + 2 x 1 = 2 x 6
    assert cm.break_even(0.0, 1.0, 6.0) == 0.0
    assert cm.break_even(10.0, 6.0, 6.0) is None  # never cheaper
    assert cm.break_even(10.0, 7.0, 6.0) is None


def test_slope_through_the_two_largest_points() -> None:
    assert cm.slope([(20, 41), (0, 100), (10, 21)]) == pytest.approx((2.0, 1.0))


def test_lake_rows_and_objects() -> None:
    lake = cm.Lake(data_bytes=300 * MIB, row_bytes=100)
    assert lake.rows == pytest.approx(300 * MIB / 100)
    assert lake.objects == 3  # ceil(300 MiB / 128 MiB)


def test_dynamodb_index_hand_computed() -> None:
    m = measured()
    lake = cm.Lake(data_bytes=1e9, row_bytes=100)  # 10 million rows
    cost = cm.dynamodb_index(m, lake, entries_erased=20)
    assert cost.build == pytest.approx(1e7 * 2 * 0.625e-6)  # 12.5 USD
    assert cost.stored_bytes == pytest.approx(GIB)
    assert cost.keep_per_month == pytest.approx(0.25)
    assert cost.per_billion_rows == pytest.approx(1250.0)
    # 10 Queries of 2 entries of 4 KB: 2 x 4 KB each, eventually consistent: 10 x 2 x 0.5 RRU
    assert cost.erase_lookup == pytest.approx(10 * 0.125e-6)
    # each entry: its item and GSI copies, 2 WRU per row / 0.5 entries per row = 4 WRU
    assert cost.erase_update == pytest.approx(20 * 4 * 0.625e-6)


def test_segment_index_hand_computed() -> None:
    m = measured(entries_per_row=1.0, segment_write_cpu_s_per_entry=0.0)
    rows = 2**20
    lake = cm.Lake(data_bytes=100 * 128 * MIB, row_bytes=100 * 128 * MIB / rows)  # 100 objects
    cost = cm.segment_index(m, lake, bytes_per_entry=128.0)
    assert cost.stored_bytes == pytest.approx(128 * MIB)  # 2 partitions of 64 MiB
    # 1 ingestion run: 1 PUT + 1 GET; 2 partitions: 2 PUTs; manifest: put + delete per run,
    # a put per partition
    assert cost.build == pytest.approx(3 * 5e-6 + 1 * 4e-7 + 4 * 0.625e-6)
    assert cost.keep_per_month == pytest.approx(0.125 * 0.023 + 800 / GIB * 0.25)
    assert cost.per_billion_rows == pytest.approx(cost.build / rows * 1e9)
    # 10 subjects x (1 partition + 24 small segments) x (footer + row group); 25 manifest reads
    assert cost.erase_lookup == pytest.approx(10 * 25 * 2 * 4e-7 + 25 * 0.5 * 0.125e-6)
    # 10 partitions and 24 small segments rewritten: GET + PUT + manifest write each
    assert cost.erase_update == pytest.approx(34 * (5e-6 + 4e-7) + 34 * 0.625e-6)


def test_segment_rewrite_cost_is_bounded_by_partitions_not_by_the_index() -> None:
    m = measured(segment_write_cpu_s_per_entry=1e-6)
    small = cm.segment_index(m, cm.Lake(1e9, 100), 8.0)
    large = cm.segment_index(m, cm.Lake(1e13, 100), 8.0)
    assert large.stored_bytes == pytest.approx(small.stored_bytes * 1e4)
    assert large.erase_update == pytest.approx(small.erase_update)


def test_erase_vcpu_s_is_wall_time_plus_start_up() -> None:
    m = measured(erase_vcpu_s_per_gb=10.0, erase_wall_to_cpu=2.0)
    assert cm.erase_vcpu_s(m, 5e9) == pytest.approx(5 * 10 * 2 + 75.3)
    assert cm.erase_spark_usd(m, 5e9) == pytest.approx(cm.spark_usd(175.3))


def test_catalog_two_items_per_object() -> None:
    write, keep = cm.catalog(cm.Lake(data_bytes=256 * MIB, row_bytes=100))
    assert write == pytest.approx(4 * 4 * 0.625e-6)  # 2 objects x 2 items x 4 WRU
    assert keep == pytest.approx(4 * 1000 / GIB * 0.25)


def test_ingest_per_billion_rows() -> None:
    assert cm.ingest_usd_per_billion_rows(measured(ingest_vcpu_s_per_row=3.6e-6)) == (
        pytest.approx(cm.spark_usd(3600))
    )


def test_model_rows_add_up() -> None:
    m = measured(segment_write_cpu_s_per_entry=1e-7, index_build_cpu_s_per_row=1e-6)
    rows = cm.model(m)
    assert len(rows) == len(cm.FIND_AND_FORGET) * len(cm.ROW_WIDTHS) * len(cm.DESIGNS)
    for r in rows:
        assert r.erase_job == pytest.approx(r.erase_spark + r.erase_index + r.approvals)
        if r.break_even is not None:
            assert r.keep_per_month + r.break_even * r.erase_job == pytest.approx(
                r.break_even * r.find_and_forget_job
            )
        assert r.index_to_data == pytest.approx(r.index_bytes / (r.rows * r.row_bytes))
    today = {(r.scenario, r.row_bytes): r for r in rows if r.design == cm.DYNAMODB_DESIGN}
    assert today[("10 TB", 100)].rows == pytest.approx(1e11)
    assert today[("10 TB", 100)].index_bytes == pytest.approx(1e11 * GIB / 1e7)


def test_deployed_design_pays_a_manifest_write_and_item_per_object() -> None:
    # Given the store as deployed: 3 bytes per entry, 1.5 manifest writes per indexed object
    m = measured(deployed_bytes_per_entry=3.0, manifest_writes_per_object=1.5)
    lake = cm.Lake(10 * 128 * MIB, 100)  # 10 lake files (and 10 raw objects)
    # When its cost is taken, and that of the design study's segments of the same size
    deployed = cm.index_cost(m, cm.DEPLOYED_DESIGN, lake, 1.0)
    study = cm.segment_index(m, lake, 3.0)
    # Then the same bytes are stored, and the deployed design pays 2 x 10 x 1.5 manifest writes
    # of ingestion and 2 x 10 pointer overrides compaction carries forward, where the study
    # counted two per ingestion run (one run of 100 objects here) ...
    assert deployed.stored_bytes == pytest.approx(study.stored_bytes)
    wru = cm.price("dynamodb_wru")
    assert deployed.build - study.build == pytest.approx((30 + 20 - 2) * wru)
    # ... and keeps one manifest item (its override) per raw object and per lake file
    item = cm.ddb_storage_usd(cm.ASSUMED["manifest_item_bytes"])
    assert deployed.keep_per_month - study.keep_per_month == pytest.approx(20 * item)


def test_weekly_verdict() -> None:
    rows = cm.model(measured())
    for r in rows:
        weekly = r.break_even_with_build is not None and r.break_even_with_build <= 52 / 12
        assert r.weekly_cheaper == weekly


# ------------------------------------------------------------------------------ inputs


def _write(root: Path, name: str, value: dict[str, Any]) -> None:
    (root / name).write_text(json.dumps(value), encoding="utf-8")


def _variant(encoding: str, size: int, lookup: int, per_entry: float) -> dict[str, Any]:
    return {
        "encoding": encoding,
        "row_hints": False,
        "index_bytes": size,
        "bytes_per_entry": per_entry,
        "lookup": {"exact_bytes": lookup},
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        "latest.json",
        {
            "lake": {"bytes_on_disk": 4_000, "rows": 100},
            "build": {"rows": 100, "index": {"cpu_median_s": 0.5}},
            "dynamodb": {
                "per_million_rows": {
                    "lethe": {
                        "items": 500_000,
                        "wru_with_gsis": 1_500_000,
                        "stored_bytes_with_gsis": 600e6,
                        "mean_item_bytes": 370.0,
                    }
                }
            },
        },
    )
    _write(
        tmp_path,
        "segment_latest.json",
        {
            "write_cpu_s_per_entry": 2e-7,
            "uncompacted": {"bytes_per_entry": 33.0},
            "variants": [
                _variant("binary32", 1000, 500, 9.0),
                _variant("binary32", 1005, 200, 9.05),  # within 1 %: the smaller lookup
                _variant("binary32", 1200, 50, 10.8),
                _variant("prefix8", 300, 100, 3.0),
                _variant("prefix4", 200, 100, 2.0),
            ],
        },
    )
    _write(
        tmp_path,
        "segment_store_defaults.json",
        {
            "configurations": [
                {
                    "partition_bits": 4,
                    "hash_bytes": 6,
                    "by_object_files": False,
                    "bytes_per_entry": 9.0,
                    "level0_bytes_per_entry": 9.0,
                },
                {
                    "partition_bits": 0,
                    "hash_bytes": 6,
                    "by_object_files": False,
                    "bytes_per_entry": 2.5,
                    "level0_bytes_per_entry": 4.0,
                },
            ]
        },
    )
    _write(
        tmp_path,
        "index_writes_latest.json",
        {
            "shapes": [
                {
                    "objects_indexed": 400,
                    "ingest": {"manifest": {"writes": 420}},
                    "compaction": {"writes": {"manifest": {"writes": 22}}},
                }
            ]
        },
    )
    _write(
        tmp_path,
        "ingest_memory.json",
        {
            "memory": {
                "points": [
                    {"rows": 1_000, "processes": {"cpu_s_total": 70.0}},
                    {"rows": 10_000, "processes": {"cpu_s_total": 80.0}},
                    {"rows": 110_000, "processes": {"cpu_s_total": 180.0}},
                    {"rows": 5, "error": "failed"},
                ]
            }
        },
    )
    _write(
        tmp_path,
        "erasure_latest.json",
        {
            "anchor": {
                "vcpu_s_per_gb": {"erase_rows_raw": 30.0},
                "wall_s": {"erase_rows_raw": {"median": 1.5}},
                "cpu_s": {"erase_rows_raw": {"median": 1.0}},
            }
        },
    )
    return tmp_path


def test_measured_reads_the_benchmark_json(results: Path) -> None:
    m = cm.measured(results)
    assert m.entries_per_row == pytest.approx(0.5)
    assert m.ddb_wru_per_row == pytest.approx(1.5)
    assert m.ddb_bytes_per_row == pytest.approx(600.0)
    assert m.ddb_item_bytes == pytest.approx(370.0)
    assert m.bench_data_bytes_per_row == pytest.approx(40.0)
    assert m.deployed_bytes_per_entry == pytest.approx(2.5)  # 0 partition bits, 6 bytes
    assert m.deployed_level0_bytes_per_entry == pytest.approx(4.0)
    assert m.manifest_writes_per_object == pytest.approx((420 + 22) / 400)  # and compaction's
    assert m.segment_bytes_per_entry == pytest.approx(9.05)
    assert m.segment_lookup_bytes == pytest.approx(200)
    assert m.segment_prefix_bytes_per_entry == pytest.approx(3.0)
    assert m.segment_prefix4_bytes_per_entry == pytest.approx(2.0)
    assert m.segment_uncompacted_bytes_per_entry == pytest.approx(33.0)
    assert m.segment_write_cpu_s_per_entry == pytest.approx(2e-7)
    assert m.index_build_cpu_s_per_row == pytest.approx(0.005)
    assert m.ingest_vcpu_s_per_row == pytest.approx(100.0 / 100_000)
    assert m.erase_vcpu_s_per_gb == pytest.approx(30.0)
    assert m.erase_wall_to_cpu == pytest.approx(1.5)


def test_missing_json_is_an_error(results: Path) -> None:
    (results / "segment_latest.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"segment_latest\.json"):
        cm.measured(results)


def test_no_deployed_configuration_is_an_error(results: Path) -> None:
    _write(results, "segment_store_defaults.json", {"configurations": []})
    with pytest.raises(ValueError, match="no configuration"):
        cm.measured(results)


def test_document_from_the_json(results: Path, tmp_path: Path) -> None:
    doc = tmp_path / "COST.md"
    assert cm.write_docs(results, doc) is True
    text = doc.read_text(encoding="utf-8")
    assert cm.write_docs(results, doc) is False  # the same JSON: the same document
    assert text.startswith("# What Lethe costs")
    for scenario in cm.FIND_AND_FORGET:
        for width in cm.ROW_WIDTHS:
            for design in cm.DESIGNS:
                assert f"| {scenario.name} | {width:,} | {design} |" in text
    unfound = [p for p in cm.PRICES.values() if not p.found]
    assert text.count("**Not found by the search") == len(unfound)
    assert "{" not in text.replace("{}", "")  # no unformatted placeholder left
    assert not math.isnan(cm.model(cm.measured(results))[0].erase_job)


# ------------------------------------------------------------------------------ report.py


def test_report_regenerates_cost_and_segment_documents(results: Path, tmp_path: Path) -> None:
    (results / "segment_latest.json").unlink()
    real = REPO / "bench" / "results" / "segment_latest.json"
    (results / "segment_latest.json").write_text(real.read_text(encoding="utf-8"))
    segments_doc = tmp_path / "INDEX_SEGMENTS.md"
    begin = report.begin_marker("segments", "segment_latest.json")
    segments_doc.write_text(f"# Prose\n\n{begin}\nstale\n<!-- segments:end -->\n\nAfter.\n")
    cost_doc = tmp_path / "COST.md"
    done = report.other_documents(results, segments_doc, cost_doc)
    assert done == [f"{segments_doc}: regenerated", f"{cost_doc}: regenerated"]
    text = segments_doc.read_text(encoding="utf-8")
    assert "stale" not in text
    assert text.startswith("# Prose\n")
    assert text.endswith("<!-- segments:end -->\n\nAfter.\n")
    assert "| full hash, 32-byte fixed binary | no |" in text
    assert cost_doc.read_text(encoding="utf-8").startswith("# What Lethe costs")
    assert report.other_documents(results, segments_doc, cost_doc) == [
        f"{segments_doc}: unchanged",
        f"{cost_doc}: unchanged",
    ]


def test_report_leaves_cost_document_without_its_json(results: Path, tmp_path: Path) -> None:
    (results / "erasure_latest.json").unlink()
    cost_doc = tmp_path / "COST.md"
    done = report.other_documents(results, tmp_path / "absent.md", cost_doc)
    assert done[1].startswith("COST.md left as it is:")
    assert not cost_doc.exists()
