"""A synthetic lake for benchmarks: N objects of R rows, subjects drawn with a Zipf-like skew.

    python bench/generate_lake.py --out DIR --objects 200 --rows-per-object 2000 \
        --subjects 100000 --skew 1.0 --seed 1 [--format parquet|csv|jsonl] [--composite]

Writes, under DIR:
    <dataset_id>.dataset.json                          the dataset document (lethe datasets put)
    <dataset_id>/YYYY/MM/DD/batch-NNNNN.<ext>          the objects, as a producer uploads them
    lake.json                                          the parameters and the file list

Subjects. Subject number n (0 <= n < S) is the id `u000000042` (`--composite`: the pair
(`t007`, `u000000002`) with tenant n % T and user n // T, so a user id repeats across tenants
and only the pair is a subject). The k-th heaviest subject (k = 1..S) is drawn with probability
proportional to 1 / k**Z: Z = 0 is uniform, Z = 1 a classic Zipf where the heaviest subject
holds about 1/ln(S) of all rows. Which subject number is the k-th heaviest is a seeded
permutation, so heavy subjects are spread over the id space. Every object holds rows of one
date (the partition column `event_date`), in the file, as raw objects do.

Activity windows (`--window W`, default 0: none). Without them every subject may appear in every
object (rows drawn independently), the worst case for an index: a subject with many rows is in
every object. With W > 0 objects are batches in time order and each subject is active in W
consecutive ones (its first a seeded uniform choice): an object's rows are drawn with the same
skew from the subjects active in it, so a subject's rows lie in at most W objects however large
the lake grows. `write_lake_zone` writes the lake zone of the same rows: one Hive-partitioned
Parquet file per raw object, as the ingest job lays it out (`lethe_jobs.layout`).

Lake zone in the same pass (`--lake-zone`, `generate(..., lake_zone=True)`, Parquet only): each
raw object's lake file is written from the rows in memory right after the raw object, the same
bytes `write_lake_zone` writes later by reading the raw objects back; with a constant number of
subjects per object (`bench/locality_bench.py` scales them with the lake) a lake of 10,000 raw
objects and their 10,000 lake files is generated in a few minutes on one core.

Deterministic: the same arguments and seed give the same bytes (Parquet, CSV, JSON Lines).
Importable: `generate(...)` returns a `Lake` (file paths, dataset document, subject model).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

FORMATS = ("parquet", "csv", "jsonl")
DATASET_ID = "bench_events"
FIRST_DATE = dt.date(2026, 1, 1)
DAYS = 30  # objects are spread over this many dates (partitions)
COMMENT_POOL = 1000
_WORDS = [
    *("great", "fast", "slow", "broken", "lovely", "late", "refund", "again", "never", "always"),
    *("price", "delivery", "support", "quality", "size", "colour", "battery", "screen", "box"),
    *("driver", "app", "order", "return", "thanks"),
]

# The dataset's columns: (name, Spark DDL type, Arrow type). Subject columns come first.
_SUBJECT = [("user_id", "string", pa.string())]
_COMPOSITE = [("tenant", "string", pa.string()), ("user_id", "string", pa.string())]
_PAYLOAD = [
    ("event_date", "date", pa.date32()),
    ("event_id", "long", pa.int64()),
    ("event_ts", "timestamp", pa.timestamp("us")),
    ("amount", "double", pa.float64()),
    ("stars", "int", pa.int32()),
    ("active", "boolean", pa.bool_()),
    ("comment", "string", pa.string()),
]


@dataclass(frozen=True)
class SubjectModel:
    """Which subject a row belongs to: the skewed distribution and the id of each subject."""

    subjects: int
    skew: float
    seed: int
    composite: bool = False
    tenants: int = 16
    _cdf: Any = field(init=False, repr=False, compare=False)
    _by_rank: Any = field(init=False, repr=False, compare=False)  # rank -> subject number

    def __post_init__(self) -> None:
        if self.subjects < 1:
            raise ValueError("at least one subject")
        if self.skew < 0:
            raise ValueError("the skew is >= 0")
        ranks = np.arange(1, self.subjects + 1, dtype=np.float64)
        weights = ranks ** (-self.skew)
        cdf = np.cumsum(weights)
        object.__setattr__(self, "_cdf", cdf / cdf[-1])
        permutation = np.random.default_rng([self.seed, 7]).permutation(self.subjects)
        object.__setattr__(self, "_by_rank", permutation)

    @property
    def columns(self) -> list[str]:
        return [name for name, _, _ in (_COMPOSITE if self.composite else _SUBJECT)]

    def draw(self, rng: np.random.Generator, size: int) -> Any:
        """`size` subject numbers drawn with the skew (a numpy int64 array)."""
        ranks = np.searchsorted(self._cdf, rng.random(size), side="right")
        return self._by_rank[np.minimum(ranks, self.subjects - 1)]

    def share(self, number: int) -> float:
        """The probability that a row belongs to subject `number`."""
        rank = int(np.flatnonzero(self._by_rank == number)[0])
        low = self._cdf[rank - 1] if rank else 0.0
        return float(self._cdf[rank] - low)

    def key_values(self, number: int) -> list[str]:
        """The subject column values of subject `number`, in `columns` order."""
        if self.composite:
            return [f"t{number % self.tenants:03d}", f"u{number // self.tenants:09d}"]
        return [f"u{number:09d}"]

    def columns_of(self, numbers: Any) -> dict[str, pa.Array]:
        """Subject column arrays for an array of subject numbers."""

        def ids(prefix: str, values: Any, width: int) -> pa.Array:
            digits = pc.utf8_lpad(pa.array(values, pa.int64()).cast(pa.string()), width, "0")
            return pc.binary_join_element_wise(prefix, digits, "")

        if self.composite:
            return {
                "tenant": ids("t", numbers % self.tenants, 3),
                "user_id": ids("u", numbers // self.tenants, 9),
            }
        return {"user_id": ids("u", numbers, 9)}


class ActivityWindows:
    """Subjects active in W consecutive objects (of `objects`): `draw(rng, size, index)` draws
    the rows of object `index` with the model's skew among the subjects active in it."""

    def __init__(self, model: SubjectModel, objects: int, window: int) -> None:
        if window < 1:
            raise ValueError("a window of at least one object")
        self.model, self.objects, self.window = model, objects, min(window, objects)
        rng = np.random.default_rng([model.seed, 11])
        starts = rng.integers(0, objects - self.window + 1, model.subjects)
        self._order = np.argsort(starts, kind="stable")  # subject numbers by first object
        self._starts = starts[self._order]
        rank = np.empty(model.subjects, dtype=np.int64)
        rank[model._by_rank] = np.arange(model.subjects)
        self._weight = (rank + 1.0) ** (-model.skew)  # by subject number

    def active(self, index: int) -> Any:
        """The subject numbers active in object `index` (a numpy array)."""
        low = np.searchsorted(self._starts, index - self.window + 1, side="left")
        high = np.searchsorted(self._starts, index, side="right")
        return self._order[low:high]

    def objects_of(self, number: int) -> range:
        """The objects subject `number` may appear in."""
        start = int(self._starts[int(np.flatnonzero(self._order == number)[0])])
        return range(start, start + self.window)

    def draw(self, rng: np.random.Generator, size: int, index: int) -> Any:
        members = self.active(index)
        if len(members) == 0:  # no subject active here: the whole population instead
            return self.model.draw(rng, size)
        cdf = np.cumsum(self._weight[members])
        picks = np.searchsorted(cdf / cdf[-1], rng.random(size), side="right")
        return members[np.minimum(picks, len(members) - 1)]


@dataclass(frozen=True)
class Lake:
    root: Path
    format: str
    dataset: dict[str, Any]  # the dataset document
    dataset_path: Path
    files: list[Path]
    rows_per_object: int
    model: SubjectModel
    parameters: dict[str, Any]

    @property
    def rows(self) -> int:
        return self.rows_per_object * len(self.files)

    @property
    def windows(self) -> ActivityWindows | None:
        window = int(self.parameters.get("window", 0))
        return ActivityWindows(self.model, len(self.files), window) if window else None


def dataset_document(fmt: str, composite: bool, dataset_id: str = DATASET_ID) -> dict[str, Any]:
    subject = _COMPOSITE if composite else _SUBJECT
    return {
        "dataset_id": dataset_id,
        "format": fmt,
        "compression": "none",
        "subject_columns": [name for name, _, _ in subject],
        "partition_by": ["event_date"],
        "schema": [{"name": n, "type": t} for n, t, _ in [*subject, *_PAYLOAD]],
        "description": "Synthetic events for the benchmarks (bench/generate_lake.py).",
    }


def arrow_schema(composite: bool) -> pa.Schema:
    return pa.schema([(n, t) for n, _, t in [*(_COMPOSITE if composite else _SUBJECT), *_PAYLOAD]])


def _comment_pool(rng: np.random.Generator) -> pa.Array:
    lengths = rng.integers(0, 16, COMMENT_POOL)
    words = np.array(_WORDS)
    return pa.array([" ".join(words[rng.integers(0, len(words), n)]) for n in lengths])


def object_day(index: int, objects: int) -> dt.date:
    """The date of object `index`: objects are spread evenly over DAYS dates."""
    return FIRST_DATE + dt.timedelta(days=index * DAYS // objects)


def object_table(
    model: SubjectModel,
    *,
    index: int,
    rows: int,
    day: dt.date,
    rng: np.random.Generator,
    comments: pa.Array,
    windows: ActivityWindows | None = None,
) -> pa.Table:
    """The rows of object `index`, all of date `day` (drawn among the subjects active in it
    when `windows` are given)."""
    numbers = model.draw(rng, rows) if windows is None else windows.draw(rng, rows, index)
    columns: dict[str, pa.Array] = dict(model.columns_of(numbers))
    midnight = np.datetime64(day.isoformat(), "us")
    seconds = np.sort(rng.integers(0, 86_400 * 1_000_000, rows))
    columns |= {
        "event_date": pa.array([day] * rows, pa.date32()),
        "event_id": pa.array(np.arange(index * rows, (index + 1) * rows), pa.int64()),
        "event_ts": pa.array(midnight + seconds.astype("timedelta64[us]"), pa.timestamp("us")),
        "amount": pa.array(np.round(rng.gamma(2.0, 20.0, rows), 2), pa.float64()),
        "stars": pa.array(rng.integers(1, 6, rows), pa.int32()),
        "active": pa.array(rng.random(rows) < 0.8, pa.bool_()),
        "comment": comments.take(pa.array(rng.integers(0, len(comments), rows))),
    }
    return pa.table(columns, schema=arrow_schema(model.composite))


def _write_jsonl(table: pa.Table, path: Path) -> None:
    def plain(value: Any) -> Any:
        return value.isoformat() if isinstance(value, dt.date | dt.datetime) else value

    with path.open("w", encoding="utf-8", newline="\n") as out:
        for row in table.to_pylist():
            out.write(json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False))
            out.write("\n")


def write_object(table: pa.Table, path: Path, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table, path, compression="snappy")
    elif fmt == "csv":
        pacsv.write_csv(table, path)
    elif fmt == "jsonl":
        _write_jsonl(table, path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


def read_object(path: Path | str, fmt: str, composite: bool) -> pa.Table:
    """An object's rows as an Arrow table, typed by the dataset schema (what an indexer reads)."""
    schema = arrow_schema(composite)
    if fmt == "parquet":
        return pq.read_table(path)
    if fmt == "csv":
        types = {f.name: f.type for f in schema}
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types))
    if fmt == "jsonl":
        # Arrow's JSON reader does not parse dates from strings: read the text, then cast.
        as_text = pa.schema([(f.name, pa.string()) if f.type == pa.date32() else f for f in schema])
        options = pajson.ParseOptions(explicit_schema=as_text)
        table = pajson.read_json(path, parse_options=options)
        return table.set_column(
            table.schema.get_field_index("event_date"),
            "event_date",
            table.column("event_date").cast(pa.date32()),
        )
    raise ValueError(f"unknown format {fmt!r}")


def coordinates(fmt: str, rows: int) -> list[int] | None:
    """Row coordinates the indexer passes: lines for text (CSV line 1 is the header)."""
    if fmt == "csv":
        return list(range(2, rows + 2))
    if fmt == "jsonl":
        return list(range(1, rows + 1))
    return None  # Parquet: the row index


def object_key(dataset_id: str, index: int, objects: int, fmt: str) -> str:
    day = object_day(index, objects)
    return f"{dataset_id}/{day:%Y/%m/%d}/batch-{index:05d}.{fmt}"


def generate(
    out: Path | str,
    *,
    objects: int = 200,
    rows_per_object: int = 2000,
    subjects: int = 100_000,
    skew: float = 1.0,
    seed: int = 1,
    fmt: str = "parquet",
    composite: bool = False,
    tenants: int = 16,
    dataset_id: str = DATASET_ID,
    window: int = 0,
    lake_zone: bool = False,
) -> Lake:
    """Write the lake under `out` and return what was written (`window`: see the module
    docstring; 0 = every subject may appear in every object). `lake_zone` (Parquet only): each
    object's lake file too, from the same rows in the same pass (the bytes `write_lake_zone`
    writes afterwards, without reading the raw objects back): the cheap way to a large lake."""
    if fmt not in FORMATS:
        raise ValueError(f"format is one of {', '.join(FORMATS)}")
    if lake_zone and fmt != "parquet":
        raise ValueError("the lake zone is written from a Parquet lake")
    if objects < 1 or rows_per_object < 1:
        raise ValueError("at least one object of one row")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    model = SubjectModel(subjects, skew, seed, composite, tenants)
    windows = ActivityWindows(model, objects, window) if window else None
    rng = np.random.default_rng(seed)
    comments = _comment_pool(rng)
    files = []
    for index in range(objects):
        key = object_key(dataset_id, index, objects, fmt)
        path = root / key
        day = object_day(index, objects)
        table = object_table(
            model,
            index=index,
            rows=rows_per_object,
            day=day,
            rng=rng,
            comments=comments,
            windows=windows,
        )
        write_object(table, path, fmt)
        if lake_zone:
            lake_key = _lake_zone_key(dataset_id, key, index, objects)
            write_lake_file(table, root / LAKE_ZONE_DIR / lake_key)
        files.append(path)
    document = dataset_document(fmt, composite, dataset_id)
    dataset_path = root / f"{dataset_id}.dataset.json"
    dataset_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    parameters = {
        "objects": objects,
        "rows_per_object": rows_per_object,
        "subjects": subjects,
        "skew": skew,
        "seed": seed,
        "format": fmt,
        "composite": composite,
        "tenants": tenants,
        "dataset_id": dataset_id,
    }
    if window:  # absent when 0, so that older lakes' lake.json stay as they were
        parameters["window"] = window
    if lake_zone:  # absent when not written, likewise
        parameters["lake_zone"] = True
    manifest = {
        "parameters": parameters,
        "dataset": document,
        "files": [str(p.relative_to(root)) for p in files],
    }
    (root / "lake.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Lake(root, fmt, document, dataset_path, files, rows_per_object, model, parameters)


def load(root: Path | str) -> Lake:
    """A lake written earlier by `generate` (from its lake.json)."""
    root = Path(root)
    manifest = json.loads((root / "lake.json").read_text(encoding="utf-8"))
    p = manifest["parameters"]
    model = SubjectModel(p["subjects"], p["skew"], p["seed"], p["composite"], p["tenants"])
    return Lake(
        root,
        p["format"],
        manifest["dataset"],
        root / f"{p['dataset_id']}.dataset.json",
        [root / f for f in manifest["files"]],
        p["rows_per_object"],
        model,
        p,
    )


LAKE_ZONE_DIR = "lake-zone"  # under the lake's root: the lake bucket's keys
RAW_BUCKET = "lethe-prod-raw-123456789012-us-east-1"  # the template's naming


def lake_zone_key(lake: Lake, raw: Path) -> str:
    """The lake file the ingest job writes for a raw object of one date: the Hive partition of
    its date and `part-<h>.parquet`, h = `lethe_jobs.layout.object_hash` of the raw object."""
    raw_key = raw.relative_to(lake.root).as_posix()
    index = lake.files.index(raw)
    return _lake_zone_key(lake.parameters["dataset_id"], raw_key, index, len(lake.files))


def _lake_zone_key(dataset_id: str, raw_key: str, index: int, objects: int) -> str:
    """`lake_zone_key` of raw object number `index` (key `raw_key`) of a lake of `objects`."""
    digest = hashlib.sha256(f"{RAW_BUCKET}/{raw_key}".encode()).hexdigest()[:16]
    day = object_day(index, objects)
    return f"{dataset_id}/event_date={day.isoformat()}/part-{digest}.parquet"


def lake_zone_paths(lake: Lake) -> list[Path]:
    """Where each raw object's lake file lies (`write_lake_zone`, `generate(lake_zone=True)`),
    in raw object order."""
    dataset_id, objects = lake.parameters["dataset_id"], len(lake.files)
    keys = (p.relative_to(lake.root).as_posix() for p in lake.files)
    return [
        lake.root / LAKE_ZONE_DIR / _lake_zone_key(dataset_id, key, index, objects)
        for index, key in enumerate(keys)
    ]


def write_lake_file(table: pa.Table, path: Path) -> None:
    """A raw object's rows as its lake file: the partition column `event_date` in the path and
    not in the file, the other columns as they are, Snappy (what Spark writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.drop_columns(["event_date"]), path, compression="snappy")


def write_lake_zone(lake: Lake) -> list[Path]:
    """The lake zone of a Parquet lake's rows (written once, then reused): per raw object one
    lake file under `<root>/lake-zone/<key>` (`write_lake_file`)."""
    if lake.format != "parquet":
        raise ValueError("the lake zone is written from a Parquet lake")
    paths = lake_zone_paths(lake)
    for raw, path in zip(lake.files, paths, strict=True):
        if not path.exists():
            write_lake_file(pq.read_table(raw), path)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The lake's shape, shared with the benchmark's command line."""
    parser.add_argument("--objects", type=int, default=200, help="number of objects (files)")
    parser.add_argument("--rows-per-object", type=int, default=2000, help="rows in each object")
    parser.add_argument("--subjects", type=int, default=100_000, help="distinct subjects")
    parser.add_argument(
        "--skew", type=float, default=1.0, help="Zipf exponent: 0 uniform, larger = heavier head"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--format", choices=FORMATS, default="parquet")
    parser.add_argument(
        "--composite", action="store_true", help="subject key (tenant, user_id) instead of user_id"
    )
    parser.add_argument("--tenants", type=int, default=16, help="tenants with --composite")
    parser.add_argument(
        "--window",
        type=int,
        default=0,
        help="each subject active in this many consecutive objects (0: in any object)",
    )


def generate_from_args(out: Path | str, args: argparse.Namespace) -> Lake:
    return generate(
        out,
        objects=args.objects,
        rows_per_object=args.rows_per_object,
        subjects=args.subjects,
        skew=args.skew,
        seed=args.seed,
        fmt=args.format,
        composite=args.composite,
        tenants=args.tenants,
        window=getattr(args, "window", 0),
        lake_zone=getattr(args, "lake_zone", False),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to write the lake in")
    add_arguments(parser)
    parser.add_argument(
        "--lake-zone",
        action="store_true",
        help=f"Parquet: each object's lake file too, in the same pass (under {LAKE_ZONE_DIR}/)",
    )
    args = parser.parse_args(argv)
    lake = generate_from_args(args.out, args)
    zone = f" and their {len(lake.files)} lake files" if args.lake_zone else ""
    print(
        f"wrote {len(lake.files)} {lake.format} objects{zone}, {lake.rows} rows, under {lake.root}"
    )
    print(f"dataset document: {lake.dataset_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
