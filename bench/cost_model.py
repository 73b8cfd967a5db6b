"""Lethe's cost model: what the index, the catalog, the Spark runs and the approvals cost.

    python bench/cost_model.py                # the tables on stdout
    python bench/cost_model.py --write-docs   # docs/COST.md (bench/report.py does it too)

Pure Python, no AWS calls: measured figures from bench/results/*.json (the last benchmark
runs) times AWS list prices (us-east-1, the constants in PRICES, each with the page it is from
and the day it was read; the ones that could not be found there are marked, with the figure
used and why). For Find and Forget's four published Parquet scenarios (100 GB, 750 GB, 10 TB,
50 TB; its docs/COST_OVERVIEW.md, eu-west-1 prices) at two row widths (ROW_WIDTHS: Parquet
bytes per row), for the index as deployed (Parquet segments in S3 with a DynamoDB manifest,
docs/INDEX_SEGMENTS.md, as measured on the real store), the DynamoDB index (one item per
(subject, object) pair, `IndexStore=dynamodb`) and the design study's segment variants:

- building the index once (the lake's rows through the index writers), keeping it a month;
- ingesting a billion rows (the ingest job's Spark time, the index writes, the catalog);
- one erasure job (K subjects, the objects Find and Forget's scenario modifies) against
  Find and Forget's published cost for the same job;
- the erasure jobs per month above which Lethe is the cheaper of the two (its monthly index
  and catalog storage spread over the jobs), and the same with the build paid over a year.

Every measured input is named in `Measured` with the JSON it comes from; `measured()` reads
them and falls back to nothing: a missing JSON is an error (run the benchmark). The
arithmetic is in small functions that tests/unit/test_cost_model.py checks on hand-computed
cases.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
DOC = REPO / "docs" / "COST.md"
GIB = 1024**3
MIB = 1024**2
READ = "2026-11-27"


# ------------------------------------------------------------------------------- prices


@dataclass(frozen=True)
class Price:
    """A list price in USD per `unit`, us-east-1, from `source` as read on `read`. `found`:
    False when the search did not find it on a page, and `value` is the figure used anyway
    (`why` says why it is believed)."""

    value: float
    unit: str
    source: str
    read: str = READ
    found: bool = True
    why: str = ""


PRICES: dict[str, Price] = {
    "dynamodb_wru": Price(
        0.625e-6,
        "write request unit (on-demand, Standard table class)",
        "airbyte.com, 'Amazon DynamoDB Pricing: On-Demand & Provisioned Plans' (US East: "
        "$0.625 per million WRU); bench/index_bench.py --wru-price",
    ),
    "dynamodb_rru": Price(
        0.125e-6,
        "read request unit (on-demand, Standard table class)",
        "airbyte.com, 'Amazon DynamoDB Pricing: On-Demand & Provisioned Plans' (US East: "
        "$0.125 per million RRU)",
    ),
    "dynamodb_storage": Price(
        0.25,
        "GB-month (GB = 2^30 bytes; Standard table class)",
        "bench/index_bench.py --storage-price (the figure docs/BENCHMARKS.md uses)",
        found=False,
        why="the search found only other regions' storage price ($0.283 on a third-party "
        "page); $0.25 is the us-east-1 Standard figure the repository has used since the index "
        "benchmark was written",
    ),
    "s3_storage": Price(
        0.023,
        "GB-month, S3 Standard, first 50 TB",
        "cloudburn.io, 'Amazon S3 Pricing Explained' (US East, March 2026: $0.023/GB/month)",
    ),
    "s3_put": Price(
        0.005e-3,
        "PUT, COPY, POST or LIST request, S3 Standard",
        "AWS 'Amazon S3 pricing' page (requests table)",
        found=False,
        why="the request table's cells are not in the stored copies of the page; "
        "$0.005 per 1,000 is the long-standing S3 Standard figure",
    ),
    "s3_get": Price(
        0.0004e-3,
        "GET or SELECT request, S3 Standard",
        "AWS 'Amazon S3 pricing' page (requests table)",
        found=False,
        why="as s3_put; $0.0004 per 1,000 is the long-standing S3 Standard figure",
    ),
    "sfn_transition": Price(
        0.025e-3,
        "state transition, Standard workflows",
        "aws.amazon.com/step-functions/pricing ('US East (N. Virginia) $0.0250 per 1,000')",
    ),
    "lambda_gb_s": Price(
        0.0000166667,
        "GB-second, x86, first 6 billion GB-s a month",
        "docs.aws.amazon.com whitepaper 'How AWS Pricing Works: Lambda' ($0.00001667); "
        "cloudchipr.com 'AWS Lambda Pricing Breakdown' ($0.0000166667, US East)",
    ),
    "lambda_request": Price(
        0.20e-6,
        "request",
        "docs.aws.amazon.com whitepaper 'How AWS Pricing Works: Lambda' ($0.20 per 1 million)",
    ),
    "emr_vcpu_h": Price(
        0.052624,
        "vCPU-hour, EMR Serverless, x86",
        "AWS 'Amazon EMR Serverless pricing' page",
        found=False,
        why="no stored page quotes EMR Serverless's rates; $0.052624 per vCPU-hour is the "
        "us-east-1 x86 figure as published on that page (unverified here)",
    ),
    "emr_gb_h": Price(
        0.0057785,
        "GB-hour of memory, EMR Serverless, x86",
        "AWS 'Amazon EMR Serverless pricing' page",
        found=False,
        why="as emr_vcpu_h; $0.0057785 per GB-hour (unverified here)",
    ),
    "glue_dpu_h": Price(
        0.44,
        "DPU-hour (4 vCPU, 16 GB), Spark jobs, 1-minute minimum",
        "awsnegotiations.com 'Glue Job Cost Optimization' and the AWS Glue pricing page's "
        "example (0.44 USD per DPU-hour)",
    ),
    "ses_email": Price(
        0.10e-3,
        "outbound email",
        "acecloudinterviews.com SES tutorial ('starting at $0.10 per thousand emails')",
        found=False,
        why="the AWS SES pricing page itself was not among the stored pages; the figure is "
        "quoted by a third party and matches the long-standing outbound price",
    ),
    "kms_request": Price(
        0.03e-4,
        "KMS request (Sign)",
        "AWS 'AWS Key Management Service pricing' page",
        found=False,
        why="not searched for (one Sign per certificate); $0.03 per 10,000 requests",
    ),
}


def price(name: str) -> float:
    return PRICES[name].value


# ------------------------------------------------------------------------ the scenarios


@dataclass(frozen=True)
class Scenario:
    """One of Find and Forget's published deletion jobs (docs/COST_OVERVIEW.md of
    awslabs/amazon-s3-find-and-forget, Europe (Ireland) prices, VPC excluded)."""

    name: str
    data_bytes: float
    objects_modified: int
    usd_per_job: float
    fargate_task_hours: float  # tasks x hours, each task 4 vCPU and 30 GB


FIND_AND_FORGET = (
    Scenario("100 GB", 100e9, 15, 0.98, 3 * 1.0),
    Scenario("750 GB", 750e9, 1_000, 11.14, 50 * 0.75),
    Scenario("10 TB", 10e12, 11_000, 75.69, 100 * 2.5),
    Scenario("50 TB", 50e12, 45_300, 316.80, 100 * 10.5),
)
ROW_WIDTHS = (100, 1_000)  # bytes of Parquet per row
K_SUBJECTS = 10

# Assumptions that no benchmark measures (each one shown in docs/COST.md).
ASSUMED = {
    "lake_object_bytes": 128 * MIB,  # Parquet objects of the lake zone; raw objects as many
    "ingest_objects_per_run": 100,  # IngestionBatchSize: one index segment per run
    "catalog_wru_per_object": 4,  # 1 conditional UpdateItem + its GSI writes (CATALOG.md)
    "catalog_item_bytes": 1_000,  # the item and its GSI copies
    "memory_gb_per_vcpu": 4,  # EMR Serverless default workers: 4 vCPU, 16 GB
    "partition_bytes": 64 * MIB,  # a compacted hash-range partition's segment
    "uncompacted_segments": 24,  # small segments a lookup also reads (a day of hourly runs)
    "manifest_item_bytes": 400,
    "approvers": 2,  # emails per request
    "lambda_invocations": 9,  # file, approval page, decision + 6 Lambda states of erasure.asl
    "lambda_gb_s_each": 1.0,  # 1 GB for 1 s per invocation (cold starts included)
    "sfn_transitions": 18,  # erasure.asl.json's happy path, state by state
    "job_fixed_vcpu_s": 75.3,  # a Spark run's fixed CPU (ingest_memory.json's smallest run)
}


# ------------------------------------------------------------------------ measured inputs


@dataclass(frozen=True)
class Measured:
    """The benchmark figures the model multiplies (source JSON in brackets)."""

    entries_per_row: float  # index entries per lake row [latest.json]
    ddb_wru_per_row: float  # write request units per row, table and GSIs [latest.json]
    ddb_bytes_per_row: float  # DynamoDB stored bytes per row, table and GSIs [latest.json]
    ddb_item_bytes: float  # mean item size [latest.json]
    bench_data_bytes_per_row: float  # the benchmark lake's Parquet bytes per row [latest.json]
    deployed_bytes_per_entry: float  # the store as deployed, compacted [segment_store_defaults]
    deployed_level0_bytes_per_entry: float  # the same before compaction [segment_store_defaults]
    manifest_writes_per_object: float  # ingestion's and its first compaction's, per indexed
    # object [index_writes_latest]
    segment_bytes_per_entry: float  # compacted segment, full hash [segment_latest.json]
    segment_prefix_bytes_per_entry: float  # 8-byte hash prefix [segment_latest.json]
    segment_prefix4_bytes_per_entry: float  # 4-byte hash prefix [segment_latest.json]
    segment_uncompacted_bytes_per_entry: float  # one segment per object [segment_latest.json]
    segment_lookup_bytes: float  # footer + row groups for K hashes [segment_latest.json]
    segment_write_cpu_s_per_entry: float  # sort + write one segment [segment_latest.json]
    index_build_cpu_s_per_row: float  # read + entries, the index job's path [latest.json]
    ingest_vcpu_s_per_row: float  # slope of the ingest job's CPU [ingest_memory.json]
    erase_vcpu_s_per_gb: float  # erase_rows CPU per GB rewritten [erasure_latest.json]
    erase_wall_to_cpu: float  # its wall time / CPU time [erasure_latest.json]


def _load(results: Path, name: str) -> dict[str, Any]:
    path = results / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: run the benchmark that writes it (bench/README.md)")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(slope, intercept) of the line through the two largest-x points."""
    (x0, y0), (x1, y1) = sorted(points)[-2:]
    s = (y1 - y0) / (x1 - x0)
    return s, y0 - s * x0


def measured(results: Path = RESULTS) -> Measured:
    index = _load(results, "latest.json")
    lethe = index["dynamodb"]["per_million_rows"]["lethe"]
    segments = _load(results, "segment_latest.json")
    full = best_variant(segments, "binary32")
    prefix = best_variant(segments, "prefix8")
    memory = _load(results, "ingest_memory.json")["memory"]["points"]
    ingest = [(p["rows"], p["processes"]["cpu_s_total"]) for p in memory if p.get("processes")]
    anchor = _load(results, "erasure_latest.json")["anchor"]
    deployed = deployed_configuration(_load(results, "segment_store_defaults.json"))
    writes = _load(results, "index_writes_latest.json")["shapes"][0]
    wall = anchor["wall_s"]["erase_rows_raw"]["median"]
    cpu = anchor["cpu_s"]["erase_rows_raw"]["median"]
    return Measured(
        entries_per_row=lethe["items"] / 1e6,
        ddb_wru_per_row=lethe["wru_with_gsis"] / 1e6,
        ddb_bytes_per_row=lethe["stored_bytes_with_gsis"] / 1e6,
        ddb_item_bytes=lethe["mean_item_bytes"],
        bench_data_bytes_per_row=index["lake"]["bytes_on_disk"] / index["lake"]["rows"],
        deployed_bytes_per_entry=deployed["bytes_per_entry"],
        deployed_level0_bytes_per_entry=deployed["level0_bytes_per_entry"],
        manifest_writes_per_object=manifest_writes(writes) / writes["objects_indexed"],
        segment_bytes_per_entry=full["bytes_per_entry"],
        segment_prefix_bytes_per_entry=prefix["bytes_per_entry"],
        segment_prefix4_bytes_per_entry=best_variant(segments, "prefix4")["bytes_per_entry"],
        segment_uncompacted_bytes_per_entry=segments["uncompacted"]["bytes_per_entry"],
        segment_lookup_bytes=full["lookup"]["exact_bytes"],
        segment_write_cpu_s_per_entry=segments["write_cpu_s_per_entry"],
        index_build_cpu_s_per_row=index["build"]["index"]["cpu_median_s"] / index["build"]["rows"],
        ingest_vcpu_s_per_row=slope(ingest)[0],
        erase_vcpu_s_per_gb=anchor["vcpu_s_per_gb"]["erase_rows_raw"],
        erase_wall_to_cpu=wall / cpu,
    )


DEPLOYED = {"partition_bits": 0, "hash_bytes": 6, "by_object_files": False}  # new datasets


def deployed_configuration(store: Mapping[str, Any]) -> dict[str, Any]:
    """The segment store benchmark's configuration that new datasets get (INDEX_SEGMENTS.md,
    "Defaults as deployed": 48-bit keys, one partition, no by-object files)."""
    for config in store["configurations"]:
        if all(config.get(k) == v for k, v in DEPLOYED.items()):
            return dict(config)
    raise ValueError(f"segment_store_defaults.json: no configuration {DEPLOYED}")


def manifest_writes(shape: Mapping[str, Any]) -> int:
    """The manifest writes of a shape's ingestion (index_writes_bench: segment items, pointer
    items (none since pointers are derived), datasets; every run of the shape) and of the one
    compaction that follows it (level-1 items, the carried-pointers item, level-0
    retirements, the lease), when the run measured it: every row is compacted once."""
    compaction = shape.get("compaction") or {}
    later = int(compaction.get("writes", {}).get("manifest", {}).get("writes", 0))
    return int(shape["ingest"]["manifest"]["writes"]) + later


def best_variant(segments: Mapping[str, Any], encoding: str) -> dict[str, Any]:
    """The segment variant (no row hints) of `encoding` with the smallest lookup among those
    within 1 % of the smallest file: the row group size the model assumes."""
    mine = [v for v in segments["variants"] if v["encoding"] == encoding and not v["row_hints"]]
    smallest = min(v["index_bytes"] for v in mine)
    near = [v for v in mine if v["index_bytes"] <= smallest * 1.01]
    return min(near, key=lambda v: v["lookup"]["exact_bytes"])


# ------------------------------------------------------------------------------ arithmetic


def spark_usd(vcpu_s: float) -> float:
    """EMR Serverless: vCPU-hours and the memory that comes with them."""
    hours = vcpu_s / 3600
    gb_hours = hours * ASSUMED["memory_gb_per_vcpu"]
    return hours * price("emr_vcpu_h") + gb_hours * price("emr_gb_h")


def glue_usd(vcpu_s: float) -> float:
    """The same vCPU time on Glue (a DPU is 4 vCPU and 16 GB, billed per second)."""
    return vcpu_s / 3600 / 4 * price("glue_dpu_h")


def ddb_storage_usd(stored_bytes: float) -> float:
    return stored_bytes / GIB * price("dynamodb_storage")


def s3_storage_usd(stored_bytes: float) -> float:
    return stored_bytes / GIB * price("s3_storage")


@dataclass(frozen=True)
class Lake:
    data_bytes: float
    row_bytes: float

    @property
    def rows(self) -> float:
        return self.data_bytes / self.row_bytes

    @property
    def objects(self) -> float:
        return math.ceil(self.data_bytes / ASSUMED["lake_object_bytes"])


@dataclass(frozen=True)
class IndexCost:
    """One index design on one lake: USD."""

    build: float  # writing the whole lake's index once
    keep_per_month: float  # storing it
    stored_bytes: float
    per_billion_rows: float  # the index's share of ingesting a billion rows
    erase_lookup: float  # finding K subjects' objects
    erase_update: float  # removing their entries physically


def dynamodb_index(m: Measured, lake: Lake, entries_erased: float) -> IndexCost:
    """Today's index: one item per entry, written with its GSIs."""
    stored = lake.rows * m.ddb_bytes_per_row
    wru = price("dynamodb_wru")
    # a Query per subject reads its items (eventually consistent: 0.5 RRU per 4 KB read)
    per_subject = max(1, math.ceil(entries_erased / K_SUBJECTS * m.ddb_item_bytes / 4096))
    writes_per_entry = m.ddb_wru_per_row / m.entries_per_row  # the item and its GSI copies
    return IndexCost(
        build=lake.rows * m.ddb_wru_per_row * wru,
        keep_per_month=ddb_storage_usd(stored),
        stored_bytes=stored,
        per_billion_rows=1e9 * m.ddb_wru_per_row * wru,
        erase_lookup=K_SUBJECTS * per_subject * 0.5 * price("dynamodb_rru"),
        erase_update=entries_erased * writes_per_entry * wru,
    )


def segment_index(
    m: Measured, lake: Lake, bytes_per_entry: float, writes_per_object: float | None = None
) -> IndexCost:
    """Parquet segments (one per ingestion run, compacted into hash-range partitions of
    ASSUMED['partition_bytes']) and a manifest. `writes_per_object`: the manifest writes of
    ingestion per indexed object as measured (the store as deployed: segment items; pointers are
    derived, so ingestion writes none), plus, per raw object and per lake file, the one pointer
    override compaction carries forward when it retires the object's level-0 segment (kept);
    None for the proposal's designs, which count one manifest item per segment only."""
    entries = lake.rows * m.entries_per_row
    stored = entries * bytes_per_entry
    partitions = max(1, math.ceil(stored / ASSUMED["partition_bytes"]))
    runs = max(1, math.ceil(lake.objects / ASSUMED["ingest_objects_per_run"]))
    # each entry sorted and written once by ingestion, then read, merged and written again by
    # compaction: three times the measured write
    cpu = entries * m.segment_write_cpu_s_per_entry * 3
    requests = (runs + partitions) * price("s3_put") + runs * price("s3_get")
    manifest_items: float = partitions
    if writes_per_object is None:
        writes: float = 2 * runs + partitions  # put, delete; put
    else:  # raw objects as many as lake files: ingestion's writes, then one override each
        writes = 2 * lake.objects * (writes_per_object + 1) + partitions
        manifest_items += 2 * lake.objects
    build = spark_usd(cpu) + requests + writes * price("dynamodb_wru")
    consulted = 1 + ASSUMED["uncompacted_segments"]  # its partition and the small segments
    # per subject and segment: the footer (cacheable: segments are immutable) and a row group
    gets = K_SUBJECTS * consulted * 2
    lookup = gets * price("s3_get") + consulted * 0.5 * price("dynamodb_rru")
    # erasure rewrites each segment that holds one of the K hashes (at most K partitions and
    # the small segments), deletes the old object (an unversioned bucket: no version stays)
    # and updates its manifest item: cost bounded by K x a partition, not by the index
    partition_entries = ASSUMED["partition_bytes"] / bytes_per_entry
    rewrite_cpu = K_SUBJECTS * partition_entries * m.segment_write_cpu_s_per_entry * 2
    rewritten = K_SUBJECTS + ASSUMED["uncompacted_segments"]
    update = (
        spark_usd(rewrite_cpu)
        + rewritten * (price("s3_put") + price("s3_get"))
        + rewritten * price("dynamodb_wru")
    )
    return IndexCost(
        build=build,
        keep_per_month=s3_storage_usd(stored)
        + ddb_storage_usd(manifest_items * ASSUMED["manifest_item_bytes"]),
        stored_bytes=stored,
        per_billion_rows=build / lake.rows * 1e9,
        erase_lookup=lookup,
        erase_update=update,
    )


def catalog(lake: Lake) -> tuple[float, float]:
    """(writing the catalog of the lake once, keeping it a month): an item per raw and per
    lake object."""
    items = 2 * lake.objects
    write = items * ASSUMED["catalog_wru_per_object"] * price("dynamodb_wru")
    return write, ddb_storage_usd(items * ASSUMED["catalog_item_bytes"])


def approvals_usd() -> float:
    """One erasure request's workflow: transitions, Lambda, the emails and the signature."""
    a = ASSUMED
    lam = a["lambda_invocations"] * (
        price("lambda_request") + a["lambda_gb_s_each"] * price("lambda_gb_s")
    )
    return (
        a["sfn_transitions"] * price("sfn_transition")
        + lam
        + a["approvers"] * price("ses_email")
        + price("kms_request")
    )


def erase_vcpu_s(m: Measured, data_bytes: float) -> float:
    """The erase job's billed vCPU-seconds rewriting at most `data_bytes` (the objects Find and
    Forget's scenario modifies, each at most the scenario's bytes per modified object: at most
    the whole lake): wall time (CPU x the measured wall/CPU ratio) and a run's fixed start-up."""
    gb = data_bytes / 1e9
    return gb * m.erase_vcpu_s_per_gb * m.erase_wall_to_cpu + ASSUMED["job_fixed_vcpu_s"]


def erase_spark_usd(m: Measured, data_bytes: float) -> float:
    return spark_usd(erase_vcpu_s(m, data_bytes))


def ingest_usd_per_billion_rows(m: Measured) -> float:
    """The ingest job's Spark time for a billion rows (its fixed start-up aside)."""
    return spark_usd(1e9 * m.ingest_vcpu_s_per_row)


def backfill_usd(m: Measured, rows: float) -> float:
    """Reading and hashing an existing lake's subject columns to build its index (either
    design): the index benchmark's CPU per row of the index job's path."""
    return spark_usd(rows * m.index_build_cpu_s_per_row)


def break_even(monthly: float, lethe_job: float, other_job: float) -> float | None:
    """Jobs per month above which Lethe (monthly + n x lethe_job) costs less than the other
    side (n x other_job); None when Lethe's job is not cheaper (never)."""
    if other_job <= lethe_job:
        return None
    return monthly / (other_job - lethe_job)


DESIGNS = (
    "S3 segments as deployed (48-bit keys)",
    "DynamoDB items (IndexStore=dynamodb)",
    "S3 segments, full hash",
    "S3 segments, full hash, no repeats",
    "S3 segments, 8-byte prefix",
)
DEPLOYED_DESIGN, DYNAMODB_DESIGN = DESIGNS[0], DESIGNS[1]


def index_cost(m: Measured, design: str, lake: Lake, entries_erased: float) -> IndexCost:
    if design == DYNAMODB_DESIGN:
        return dynamodb_index(m, lake, entries_erased)
    if design == DEPLOYED_DESIGN:
        return segment_index(
            m, lake, m.deployed_bytes_per_entry, writes_per_object=m.manifest_writes_per_object
        )
    per_entry = {
        DESIGNS[2]: m.segment_bytes_per_entry,
        DESIGNS[3]: m.segment_uncompacted_bytes_per_entry,
        DESIGNS[4]: m.segment_prefix_bytes_per_entry,
    }[design]
    return segment_index(m, lake, per_entry)


@dataclass(frozen=True)
class Row:
    scenario: str
    row_bytes: int
    design: str
    rows: float
    index_bytes: float
    index_to_data: float
    build: float  # the index and the catalog of the existing lake, once
    keep_per_month: float  # the index and the catalog, stored
    per_billion_rows: float  # ingest Spark + index + catalog
    index_per_billion_rows: float
    erase_spark: float
    erase_index: float  # lookup and update
    approvals: float
    erase_job: float
    find_and_forget_job: float
    break_even: float | None
    break_even_with_build: float | None

    @property
    def weekly_cheaper(self) -> bool:
        """Is Lethe the cheaper at one job a week, its build paid over a year?"""
        return self.break_even_with_build is not None and self.break_even_with_build <= WEEKLY


WEEKLY = 52 / 12  # one job a week, in jobs per month


def model(m: Measured) -> list[Row]:
    rows = []
    approvals = approvals_usd()
    for scenario in FIND_AND_FORGET:
        spark = erase_spark_usd(m, scenario.data_bytes)
        for width in ROW_WIDTHS:
            lake = Lake(scenario.data_bytes, width)
            cat_write, cat_keep = catalog(lake)
            # each modified object holds at least one entry of the K subjects
            entries_erased = scenario.objects_modified
            for design in DESIGNS:
                cost = index_cost(m, design, lake, entries_erased)
                erase_index = cost.erase_lookup + cost.erase_update
                job = spark + approvals + erase_index
                monthly = cost.keep_per_month + cat_keep
                build = cost.build + cat_write + backfill_usd(m, lake.rows)
                rows.append(
                    Row(
                        scenario=scenario.name,
                        row_bytes=width,
                        design=design,
                        rows=lake.rows,
                        index_bytes=cost.stored_bytes,
                        index_to_data=cost.stored_bytes / scenario.data_bytes,
                        build=build,
                        keep_per_month=monthly,
                        per_billion_rows=cost.per_billion_rows
                        + ingest_usd_per_billion_rows(m)
                        + cat_write / lake.rows * 1e9,
                        index_per_billion_rows=cost.per_billion_rows,
                        erase_spark=spark,
                        erase_index=erase_index,
                        approvals=approvals,
                        erase_job=job,
                        find_and_forget_job=scenario.usd_per_job,
                        break_even=break_even(monthly, job, scenario.usd_per_job),
                        break_even_with_build=break_even(
                            monthly + build / 12, job, scenario.usd_per_job
                        ),
                    )
                )
    return rows


# ------------------------------------------------------------------------------ the document


def _usd(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:.4f}" if value >= 0.0001 else f"{value:.1e}"


def _jobs(value: float | None) -> str:
    if value is None:
        return "never"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def headline_markdown(rows: list[Row]) -> str:
    lines = [
        "| lake | bytes per row | index design | index bytes | index / data "
        "| build, once (USD) | per month (USD) | one erasure job (USD) "
        "| Find and Forget's job (USD) | Lethe cheaper above (jobs per month) "
        "| the same, build paid over 12 months | one job a week: Lethe cheaper? |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.row_bytes:,} | {r.design} | {_bytes(r.index_bytes)} "
            f"| {r.index_to_data * 100:.1f} % | {_usd(r.build)} | {_usd(r.keep_per_month)} "
            f"| {_usd(r.erase_job)} | {_usd(r.find_and_forget_job)} | {_jobs(r.break_even)} "
            f"| {_jobs(r.break_even_with_build)} | {'yes' if r.weekly_cheaper else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def ingest_markdown(m: Measured, rows: list[Row]) -> str:
    """Per billion rows ingested (the 10 TB lake's catalog: objects of ASSUMED size)."""
    lines = [
        "| bytes per row | index design | Spark (ingest job) | index | catalog | total |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    spark = ingest_usd_per_billion_rows(m)
    for r in rows:
        if r.scenario != FIND_AND_FORGET[2].name:
            continue
        cat = r.per_billion_rows - r.index_per_billion_rows - spark
        lines.append(
            f"| {r.row_bytes:,} | {r.design} | {_usd(spark)} | {_usd(r.index_per_billion_rows)} "
            f"| {_usd(cat)} | {_usd(r.per_billion_rows)} |"
        )
    return "\n".join(lines) + "\n"


def erasure_markdown(m: Measured, rows: list[Row]) -> str:
    lines = [
        "| lake | objects modified | index design | Spark rewrite (EMR Serverless) "
        "| the same on Glue | index lookup and update | approvals | Lethe's job "
        "| Find and Forget's job | ratio |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    data = {s.name: s.data_bytes for s in FIND_AND_FORGET}
    modified = {s.name: s.objects_modified for s in FIND_AND_FORGET}
    for r in rows:
        if r.row_bytes != ROW_WIDTHS[0]:
            continue  # the job does not depend on the row width
        lines.append(
            f"| {r.scenario} | {modified[r.scenario]:,} | {r.design} | {_usd(r.erase_spark)} "
            f"| {_usd(glue_usd(erase_vcpu_s(m, data[r.scenario])))} "
            f"| {_usd(r.erase_index)} | {_usd(r.approvals)} | {_usd(r.erase_job)} "
            f"| {_usd(r.find_and_forget_job)} | {r.find_and_forget_job / r.erase_job:.1f}x |"
        )
    return "\n".join(lines) + "\n"


INPUT_NAMES = {
    "entries_per_row": ("index entries per lake row", "latest.json"),
    "ddb_wru_per_row": ("DynamoDB write request units per row, table and GSIs", "latest.json"),
    "ddb_bytes_per_row": ("DynamoDB stored bytes per row, table and GSIs", "latest.json"),
    "ddb_item_bytes": ("mean DynamoDB item bytes", "latest.json"),
    "bench_data_bytes_per_row": ("the benchmark lake's Parquet bytes per row", "latest.json"),
    "deployed_bytes_per_entry": (
        "the segment store as deployed (48-bit keys, one partition): bytes per entry, compacted",
        "segment_store_defaults.json",
    ),
    "deployed_level0_bytes_per_entry": (
        "the same before compaction (level-0 segments of the ingestion runs)",
        "segment_store_defaults.json",
    ),
    "manifest_writes_per_object": (
        "manifest writes per indexed object, of ingestion (segment items, datasets; no pointer) "
        "and of its first compaction",
        "index_writes_latest.json",
    ),
    "segment_bytes_per_entry": (
        "segment bytes per entry, compacted, full hash (32-byte binary)",
        "segment_latest.json",
    ),
    "segment_prefix_bytes_per_entry": (
        "segment bytes per entry, compacted, 8-byte hash prefix",
        "segment_latest.json",
    ),
    "segment_prefix4_bytes_per_entry": (
        "segment bytes per entry, compacted, 4-byte hash prefix",
        "segment_latest.json",
    ),
    "segment_uncompacted_bytes_per_entry": (
        "segment bytes per entry, one segment per object (no repeated hash to compress)",
        "segment_latest.json",
    ),
    "segment_lookup_bytes": (
        "bytes a lookup of K = 10 reads from the compacted segment (exact ranged GETs)",
        "segment_latest.json",
    ),
    "segment_write_cpu_s_per_entry": (
        "CPU seconds to sort and write a segment, per entry",
        "segment_latest.json",
    ),
    "index_build_cpu_s_per_row": (
        "CPU seconds per row to read an object and compute its entries (the index job's path)",
        "latest.json",
    ),
    "ingest_vcpu_s_per_row": (
        "ingest job CPU seconds per row (slope between the 268 MiB and 1.6 GB runs)",
        "ingest_memory.json",
    ),
    "erase_vcpu_s_per_gb": ("erase_rows CPU seconds per GB rewritten", "erasure_latest.json"),
    "erase_wall_to_cpu": ("erase_rows wall time / CPU time", "erasure_latest.json"),
}


def inputs_markdown(m: Measured) -> str:
    lines = ["| measured input | value | from |", "|---|---:|---|"]
    for key, value in asdict(m).items():
        name, source = INPUT_NAMES[key]
        shown = f"{value:.3g}" if abs(value) < 0.01 else f"{value:,.3f}"
        lines.append(f"| {name} | {shown} | `bench/results/{source}` |")
    return "\n".join(lines) + "\n"


def prices_markdown() -> str:
    lines = ["| price | USD | per | source (read " + READ + ") |", "|---|---:|---|---|"]
    for name, p in PRICES.items():
        mark = "" if p.found else f" **Not found by the search: {p.why}.**"
        lines.append(f"| `{name}` | {p.value:.6g} | {p.unit} | {p.source}.{mark} |")
    return "\n".join(lines) + "\n"


def assumptions_markdown() -> str:
    lines = ["| assumption (no benchmark measures it) | value |", "|---|---:|"]
    lines += [f"| `{k}` | {v:,} |" for k, v in ASSUMED.items()]
    return "\n".join(lines) + "\n"


def _weekly(rows: list[Row], design: str) -> str:
    mine = [r for r in rows if r.design == design]
    cheaper = sum(1 for r in mine if r.weekly_cheaper)
    return f"{cheaper} of {len(mine)}"


def document(m: Measured, rows: list[Row]) -> str:
    deployed = [r for r in rows if r.design == DEPLOYED_DESIGN]
    dynamo = [r for r in rows if r.design == DYNAMODB_DESIGN]
    worst_dynamo = max(dynamo, key=lambda r: r.keep_per_month)
    big = max(deployed, key=lambda r: r.keep_per_month)
    ratios = [r.find_and_forget_job / r.erase_job for r in deployed]
    low, high = min(ratios), max(ratios)
    glue_ratio = glue_usd(3600.0) / spark_usd(3600.0)
    deployed_ratio = m.entries_per_row * m.deployed_bytes_per_entry / m.bench_data_bytes_per_row
    level0_ratio = (
        m.entries_per_row * m.deployed_level0_bytes_per_entry / m.bench_data_bytes_per_row
    )
    bench_ratio = m.entries_per_row * m.segment_bytes_per_entry / m.bench_data_bytes_per_row
    return f"""# What Lethe costs

<!-- generated by bench/cost_model.py --write-docs (make bench: bench/report.py) from
bench/results/*.json; do not edit by hand -->

Dollars for the subject index, the catalog, the Spark runs and the approvals, on lakes of
Find and Forget's four published Parquet scenarios (100 GB, 750 GB, 10 TB, 50 TB) at two row
widths ({ROW_WIDTHS[0]} and {ROW_WIDTHS[1]:,} bytes of Parquet per row), next to Find and
Forget's own published cost of one erasure job on each (its `docs/COST_OVERVIEW.md`,
Europe (Ireland) prices, VPC excluded). The index as deployed by default comes first: sorted
Parquet segments in S3 with 48-bit subject keys, one hash partition and a DynamoDB manifest
holding one item per segment and one pointer override per indexed object (written by
compaction, not by ingestion)
([INDEX_SEGMENTS.md](INDEX_SEGMENTS.md)), with its bytes per entry and its manifest writes per
object as measured on the real store. Then the DynamoDB index (one item per (subject, object)
pair, still selectable with `IndexStore=dynamodb`), and three segment variants of the design
study for context (full hash; the full hash with no compression from repeated hashes, the
worst case; an 8-byte prefix). Prices are us-east-1 list prices (table below); some could not
be checked and are marked. Everything is a model: measured figures from the last benchmark
runs on a 2-core machine, multiplied out to lakes a thousand to a million times larger than
the ones measured.

## The answer

- **The index as deployed pays at every size.** With the measured
  {m.deployed_bytes_per_entry:.2f} bytes per entry of a compacted segment
  ({m.deployed_level0_bytes_per_entry:.2f} before compaction) and
  {m.manifest_writes_per_object:.3f} manifest writes per indexed object, the
  {big.scenario} lake of {big.row_bytes}-byte rows keeps its index and catalog for
  {_usd(big.keep_per_month)} USD a month and Lethe is the cheaper from
  {_jobs(big.break_even_with_build)} erasure jobs a month (build paid over a year). At one job
  a week Lethe is the cheaper in {_weekly(rows, DEPLOYED_DESIGN)} cases.
- **The DynamoDB index does not pay at lake scale.** It stores
  {m.ddb_bytes_per_row:,.0f} bytes of DynamoDB per row (table and GSIs) against
  {m.bench_data_bytes_per_row:.1f} bytes of Parquet per row in the benchmark lake. On the
  {worst_dynamo.scenario} lake of {worst_dynamo.row_bytes}-byte rows it would cost
  {_usd(worst_dynamo.build)} USD to build and {_usd(worst_dynamo.keep_per_month)} USD a month
  to keep, and Lethe would be cheaper than Find and Forget only above
  {_jobs(worst_dynamo.break_even)} erasure jobs a month. At one job a week it is cheaper in
  {_weekly(rows, DYNAMODB_DESIGN)} cases. The design study's segments: full hash
  {_weekly(rows, DESIGNS[2])}, full hash with no repeats {_weekly(rows, DESIGNS[3])}, 8-byte
  prefix {_weekly(rows, DESIGNS[4])}.
- **One erasure job** costs Lethe {low:.1f} to {high:.1f} times less than Find and Forget
  (table 3, EMR Serverless, the index as deployed; on Glue the Spark part costs
  {glue_ratio:.2f} times as much): both rewrite the same objects, Lethe's `erase_rows` needs about a
  tenth of the CPU per object (docs/BENCHMARKS.md), and the model bills Lethe's job as if
  every modified object were as large as the scenario allows (the whole lake rewritten).
- **Ingesting a billion rows** costs {_usd(deployed[0].per_billion_rows)} USD with the index as
  deployed ({_usd(deployed[0].index_per_billion_rows)} of it the index) and
  {_usd(dynamo[0].per_billion_rows)} USD with the DynamoDB index
  ({_usd(dynamo[0].index_per_billion_rows)} of it DynamoDB writes) (table 2).
- **On the benchmark lake** ({m.bench_data_bytes_per_row:.1f} bytes per row) the index as
  deployed is {deployed_ratio * 100:.1f} % of the data once compacted and
  {level0_ratio * 100:.1f} % before (issue 20's target: 5 %); the design study's full hash
  would be {bench_ratio * 100:.1f} %.

## 1. Per lake: build, keep, one job, break-even

"Lethe cheaper above" is monthly storage / (Find and Forget's job - Lethe's job): the number
of erasure jobs a month from which Lethe's index pays for itself; "build paid over 12 months"
adds a twelfth of the build to the month. "Never" when Lethe's job is not the cheaper.
The build is the index and the catalog of the existing lake written once (the DynamoDB
index: its writes; segments: their CPU, PUTs and manifest writes) plus reading and hashing
the lake's subject columns ({m.index_build_cpu_s_per_row * 1e6:.2f} CPU-microseconds per row,
measured on local disk).

{headline_markdown(rows)}
## 2. Per billion rows ingested

Spark is the ingest job's CPU per row on EMR Serverless (the measured slope; its start-up per
run aside), the index is what its writes cost (the DynamoDB index: {m.ddb_wru_per_row:.2f}
write request units per row; segments: their share of the build), the catalog one item per
raw and per lake object of {ASSUMED["lake_object_bytes"] // MIB} MiB. The 10 TB lake's figures
(the others differ only in the catalog's rounding).

{ingest_markdown(m, rows)}
## 3. One erasure job

K = {K_SUBJECTS} subjects whose rows are in the objects Find and Forget's scenario modifies.
Spark: `erase_rows` at {m.erase_vcpu_s_per_gb:.1f} CPU-seconds per GB rewritten x
{m.erase_wall_to_cpu:.2f} (wall time / CPU time: EMR Serverless bills workers by the
second, not by CPU) over the scenario's whole data (an upper bound), plus
{ASSUMED["job_fixed_vcpu_s"]} vCPU-seconds of start-up. Index: the lookup and the update that
removes the subjects' entries physically (segments: rewriting every segment that holds one
of the hashes, K partitions and the small segments at most). Approvals: {_usd(approvals_usd())}
USD ({ASSUMED["sfn_transitions"]} state transitions, {ASSUMED["lambda_invocations"]} Lambda
invocations, {ASSUMED["approvers"]} emails, one KMS signature).

{erasure_markdown(m, rows)}
## Measured inputs

{inputs_markdown(m)}
What they measure, and how far the model stretches them:

- **Entries per row** ({m.entries_per_row:.3f}) is the index benchmark's lake: 2,000-row objects,
  100,000 subjects with a Zipf skew. Larger objects hold more rows per subject and fewer
  entries per row; a lake of one row per subject per object holds one entry per row. The
  model keeps the measured figure for every lake.
- **Segment bytes per entry** are one lake's: the compacted segment stores each distinct
  hash about once (this lake has about 4 entries per distinct hash, and sorted repeats
  compress), so a lake where subjects recur in many objects does better and one where they do
  not does worse; the "no repeats" design uses the per-object segments' figure
  ({m.segment_uncompacted_bytes_per_entry:.1f} bytes per entry), the worst case for the full
  hash. The 8-byte prefix's figure has the same dependence.
- **Spark** figures are CPU on this machine's local disk and a local S3 emulator; on EMR
  Serverless S3 latency, shuffle and executor start-up add wall time, which is what is billed.
  The erase job's wall/CPU ratio covers part of that, not all.
- **Find and Forget's** costs are its authors' estimates (2020 prices in eu-west-1, Fargate
  90 to 99 % of each), not measurements of ours.

## Prices

{prices_markdown()}
## Assumptions

{assumptions_markdown()}
The Lambda, Step Functions and SES figures are counted from `statemachines/erasure.asl.json`
(its path for an approved request) and the API's three functions, not measured on AWS; they
are small enough that a factor of ten would not change a row of the tables above.

## Open questions

- Whether segments keep their measured size on real lakes (repeats per subject, hash-range
  partition sizes, the backlog of small segments before compaction).
- What compaction costs on EMR Serverless at 50 TB (the model: three times the measured write
  CPU per entry; the job's start-up and S3 request latency are not in it).
- EMR Serverless's and S3's request prices are not confirmed by a stored page (marked above).
"""


def write_docs(results: Path = RESULTS, doc: Path = DOC) -> bool:
    """Regenerate docs/COST.md; True when it changed."""
    m = measured(results)
    text = document(m, model(m))
    before = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if text != before:
        doc.write_text(text, encoding="utf-8")
    return text != before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--write-docs", action="store_true", help="regenerate docs/COST.md")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    if args.write_docs:
        changed = write_docs(args.results, args.doc)
        print(f"{args.doc}: {'regenerated' if changed else 'unchanged'}")
        return 0
    m = measured(args.results)
    print(inputs_markdown(m))
    print(headline_markdown(model(m)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
