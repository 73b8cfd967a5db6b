"""The ingest job's step 3, on the driver: a dataset's objects cut into pieces (`pieces`: a large
object is split, by row groups for Parquet and at line starts for uncompressed text; the split
scan of a large text object runs in a task), in groups that share one frame schema. See
`ingest_core`'s docstring for the whole job."""

from __future__ import annotations

import gzip
import logging
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from botocore.config import Config
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lethe_jobs import ingest_tasks as tasks
from lethe_jobs import pieces
from lethe_jobs.arrow_bridge import spark_type, to_spark_compatible
from lethe_jobs.ingest_tasks import BatchObject, TaskSettings
from lethe_jobs.readers import GZIP_MAGIC, parquet_data_columns
from lethe_shared.aws.s3 import S3ObjectStore, get_version
from lethe_shared.datasets.document import Compression, DataFormat

LOG = logging.getLogger("lethe.ingest")


HEAD_THREADS = 16  # the driver's concurrent HEAD / footer requests while planning
# the driver's clients (spark_jobs/ingest.py): HEAD_THREADS calls at once share one client, whose
# connection pool must hold them all: botocore's default of 10 discarded a connection per call
# above it ("Connection pool is full"), a new TLS connection each time on AWS
DRIVER_CLIENT_CONFIG = Config(max_pool_connections=HEAD_THREADS)


def plan_pipelines(
    spark: SparkSession, s3: S3ObjectStore, settings: TaskSettings
) -> list[tuple[T.StructType, list[pieces.Piece]]]:
    """The dataset's objects cut into pieces, in groups that share one frame schema: text
    datasets have one; Parquet objects are grouped by the schema of their footer (an object
    whose footer cannot be read runs on its own and is found unreadable by its read task; a
    gzip-wrapped one is one piece, which its reader decompresses)."""
    dataset = settings.dataset
    objects = list(settings.objects.values())
    if dataset.format is not DataFormat.PARQUET:
        large = [o for o in objects if o.size > settings.piece_bytes]
        split = _scan_large_text(spark, s3.client, settings, large) if large else {}
        found = [
            p for o in objects for p in split.get(o.index, [pieces.Piece(o.index, size=o.size)])
        ]
        return [(tasks.frame_schema(dataset), found)]
    footers = _footers(s3.client, settings, objects)
    by_schema: dict[str, tuple[T.StructType, list[pieces.Piece]]] = {}
    for obj in objects:
        metadata, gzipped = footers[obj.index]
        if metadata is None:
            by_schema[f"unreadable-{obj.index}"] = (
                tasks.frame_schema(dataset),
                [pieces.Piece(obj.index, size=obj.size)],
            )
            continue
        data = _parquet_fields(metadata)
        schema = tasks.frame_schema(dataset, data)
        group = by_schema.setdefault(schema.json(), (schema, []))
        group[1].extend(
            [pieces.Piece(obj.index, size=obj.size)]
            if gzipped
            else pieces.parquet_pieces(obj.index, metadata, obj.size, settings.piece_bytes)
        )
    return list(by_schema.values())


def _parquet_fields(metadata: Any) -> list[T.StructField]:
    """The Spark fields of a Parquet footer's schema, as the readers give its columns (types
    Spark cannot hold are converted by `to_spark_compatible`, columns named like the job's own
    are left out; a file with a type that cannot be converted, or a repeated column name, gets
    none, and its read task finds it unreadable)."""
    arrow = metadata.schema.to_arrow_schema()
    try:
        arrow = arrow.empty_table().select(parquet_data_columns(list(arrow.names)))
        arrow = to_spark_compatible(arrow).schema
        return [T.StructField(f.name, spark_type(f.type)) for f in arrow]
    except Exception:
        return []


def _footers(
    client: Any, settings: TaskSettings, objects: list[BatchObject]
) -> dict[int, tuple[Any, bool]]:
    """Per object, its Parquet footer (None when it cannot be read) and whether the object is
    gzip-wrapped Parquet."""

    def footer(obj: BatchObject) -> tuple[Any, bool]:
        try:
            return pieces.parquet_metadata(
                client, settings.raw_bucket, obj.key, obj.version_id, obj.size
            ), False
        except Exception:
            return _gzipped_footer(client, settings, obj), True

    with ThreadPoolExecutor(max_workers=HEAD_THREADS) as pool:
        return dict(zip([o.index for o in objects], pool.map(footer, objects), strict=True))


def _gzipped_footer(client: Any, settings: TaskSettings, obj: BatchObject) -> Any:
    """The footer of gzip-wrapped Parquet (None when the object is not gzip, or not Parquet
    inside). Its footer cannot be reached by ranges: the object is streamed once through gzip
    to a temporary file on the driver's disk (memory stays one buffer), and only the footer is
    read from there. Without it, the object would run with no data columns and every row
    would be quarantined with an empty record."""
    if settings.dataset.compression is Compression.NONE:
        return None
    fetch = partial(get_version, client, settings.raw_bucket, obj.key, obj.version_id)
    try:
        if fetch(byte_range=(0, 1))["Body"].read() != GZIP_MAGIC:
            return None
        with tempfile.TemporaryDirectory(prefix="lethe-footer-") as tmp:
            path = Path(tmp) / "object.parquet"
            with gzip.GzipFile(fileobj=fetch()["Body"]) as stream, path.open("wb") as out:
                shutil.copyfileobj(stream, out, length=1024 * 1024)
            return pq.ParquetFile(path).metadata
    except Exception:
        return None


def _scan_large_text(
    spark: SparkSession, client: Any, settings: TaskSettings, large: list[BatchObject]
) -> dict[int, list[pieces.Piece]]:
    """Where each large text object may be cut (`ingest_tasks.scan`): the driver reads its
    head (and CSV header), scan tasks on the executors count its byte ranges, all objects'
    ranges in one Spark job, and the driver reads a few kilobytes after each target for its
    cut. An object that may not be cut is one piece."""
    with ThreadPoolExecutor(max_workers=HEAD_THREADS) as pool:
        heads = list(pool.map(partial(tasks.splittable_object, client, settings), large))
    splittable = [text for text in heads if text is not None]
    found = {obj.index: [pieces.Piece(obj.index, size=obj.size)] for obj in large}
    if splittable:
        context = spark.sparkContext
        cores = max(1, context.defaultParallelism)
        specs = [s for text in splittable for s in tasks.range_specs(text, settings, cores)]
        LOG.info(
            "scanning %d large object(s) for split points: %d range(s)",
            len(splittable), len(specs),
        )  # fmt: skip
        scanned = (
            context.parallelize(specs, len(specs))
            .map(partial(tasks.scan_range, settings=settings))
            .collect()
        )
        counts: dict[int, list[pieces.RangeCount]] = {t.index: [] for t in splittable}
        for index, counted in map(tasks.range_count, scanned):
            counts[index].append(counted)
        for text in splittable:
            found[text.index] = tasks.text_pieces(client, settings, text, counts[text.index])
    for obj in large:
        LOG.info("object %s: %d piece(s)", obj.url, len(found[obj.index]))
    return found
