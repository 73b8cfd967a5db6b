"""The split scan of large raw text objects (`pieces`): on the driver, whether an object may be
cut and its CSV header (`splittable_object`), its byte ranges (`range_specs`), and its pieces
from the ranges' counts (`text_pieces`); the scan tasks that count the ranges (`scan_range`);
and pieces as the specs that travel to the read tasks."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import boto3

from lethe_jobs import pieces
from lethe_jobs.ingest_tasks.frame import LOG, BatchObject, TaskSettings
from lethe_jobs.readers import Slice
from lethe_jobs.session import logging_shown_keys
from lethe_shared.aws.s3 import get_version
from lethe_shared.datasets.document import DataFormat


def piece_spec(piece: pieces.Piece) -> dict[str, Any]:
    part = piece.part
    return {
        "object_index": piece.object_index,
        "part": {
            "first_line": part.first_line,
            "header": list(part.header) if part.header is not None else None,
            "row_groups": list(part.row_groups) if part.row_groups is not None else None,
            "first_row": part.first_row,
        },
        "byte_range": list(piece.byte_range) if piece.byte_range is not None else None,
        "size": piece.size,
    }


def piece_from_spec(spec: dict[str, Any]) -> pieces.Piece:
    part = spec["part"]
    groups = part["row_groups"]
    byte_range = spec["byte_range"]
    return pieces.Piece(
        object_index=spec["object_index"],
        part=Slice(
            first_line=part["first_line"],
            header=tuple(part["header"]) if part["header"] is not None else None,
            row_groups=(groups[0], groups[1]) if groups is not None else None,
            first_row=part["first_row"],
        ),
        byte_range=(byte_range[0], byte_range[1]) if byte_range is not None else None,
        size=spec["size"],
    )


@dataclass(frozen=True)
class TextObject:
    """A large text object the split scan may cut (`splittable_object`): what the driver read
    of it before the scan tasks run (its header, for CSV with a header)."""

    index: int
    size: int
    header: tuple[str, ...] | None


def splittable_object(client: Any, settings: TaskSettings, obj: BatchObject) -> TextObject | None:
    """On the driver: the object as the split scan sees it, or None when it may not be cut (gzip,
    a CSV escape the parity scan cannot follow, a CSV header that is missing or not UTF-8: the
    reader of the whole object says what is wrong), so that it is one piece, streamed."""
    dataset = settings.dataset
    head = get_version(client, settings.raw_bucket, obj.key, obj.version_id, byte_range=(0, 3))[
        "Body"
    ].read()
    if not pieces.splittable_text(dataset, head):
        LOG.info("%s is not splittable: one piece, streamed", obj.url)
        return None
    header = None
    if dataset.format is DataFormat.CSV and dataset.csv.header:
        # read by ranges as the CSV reader asks for them: usually one small one
        with pieces.open_range_file(
            client, settings.raw_bucket, obj.key, obj.version_id, obj.size,
            buffer_bytes=pieces.CUT_WINDOW_BYTES,
        ) as stream:  # fmt: skip
            try:
                header = pieces.csv_header(stream, dataset)
            except (UnicodeDecodeError, ValueError):
                return None
        if header is None:
            return None
    return TextObject(obj.index, obj.size, header)


def range_specs(found: TextObject, settings: TaskSettings, cores: int) -> list[str]:
    """The scan tasks' specs of one object: its byte ranges (`pieces.scan_ranges`, at least two
    per core where its pieces are fewer)."""
    ranges = pieces.scan_ranges(found.size, settings.piece_bytes, 2 * cores)
    return [json.dumps([found.index, start, end]) for start, end in ranges]


def scan_range(spec: str, settings: TaskSettings) -> str:
    """A scan task: the quotes and line breaks of one byte range of a large text object
    (`pieces.count_range`), as JSON. Memory is one scan chunk."""
    logging_shown_keys(
        settings.correlation_id, settings.hash_key, {settings.dataset.dataset_id: settings.dataset}
    )
    index, start, end = json.loads(spec)
    obj = settings.objects[index]
    client: Any = boto3.client("s3")
    stream = get_version(
        client, settings.raw_bucket, obj.key, obj.version_id, byte_range=(start, end - 1)
    )["Body"]
    try:
        counted = pieces.count_range(stream, start, **_scanning(settings))
    finally:
        stream.close()
    return json.dumps([index, asdict(counted)])


def text_pieces(
    client: Any, settings: TaskSettings, found: TextObject, counted: list[pieces.RangeCount]
) -> list[pieces.Piece]:
    """On the driver: the pieces of one object from its ranges' counts (`scan_range`), each
    target's cut read after it (`pieces.find_splits`: a small range request per target)."""
    obj = settings.objects[found.index]

    def read_at(offset: int, length: int) -> bytes:
        end = min(obj.size, offset + length) - 1
        response = get_version(
            client, settings.raw_bucket, obj.key, obj.version_id, byte_range=(offset, end)
        )
        return response["Body"].read()  # type: ignore[no-any-return]

    ordered = sorted(counted, key=lambda c: c.start)
    splits = pieces.find_splits(
        ordered, obj.size, settings.piece_bytes, read_at, **_scanning(settings)
    )
    return pieces.text_pieces(found.index, obj.size, splits, found.header)


def range_count(text: str) -> tuple[int, pieces.RangeCount]:
    """A scan task's result (`scan_range`): the object's index and its range's count."""
    index, fields = json.loads(text)
    return index, pieces.RangeCount(**fields)


def _scanning(settings: TaskSettings) -> dict[str, Any]:
    dataset = settings.dataset
    csv = dataset.format is DataFormat.CSV
    return {"quote": dataset.csv.quote.encode() if csv else None, "csv_lines": csv}
