"""The scan task: where a large raw text object may be cut into pieces, and pieces as the specs
that travel to the read tasks."""

from __future__ import annotations

import json
from typing import Any

import boto3

from lethe_jobs import pieces
from lethe_jobs.ingest_tasks.frame import LOG, TaskSettings
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


def scan_object(index: int, settings: TaskSettings) -> str:
    """A scan task: the pieces of one large text object (JSON list of piece specs). The object
    is streamed once; memory is one scan chunk. An object that may not be cut (gzip, a CSV
    escape the parity scan cannot follow) is one piece, which its reader streams."""
    logging_shown_keys(
        settings.correlation_id, settings.hash_key, {settings.dataset.dataset_id: settings.dataset}
    )
    obj = settings.objects[index]
    dataset = settings.dataset
    client: Any = boto3.client("s3")
    whole = [piece_spec(pieces.Piece(index, size=obj.size))]

    def body() -> Any:
        return get_version(client, settings.raw_bucket, obj.key, obj.version_id)["Body"]

    head = get_version(client, settings.raw_bucket, obj.key, obj.version_id, byte_range=(0, 3))[
        "Body"
    ].read()
    if not pieces.splittable_text(dataset, head):
        LOG.info("%s is not splittable: one piece, streamed", obj.url)
        return json.dumps(whole)
    csv = dataset.format is DataFormat.CSV
    header = None
    if csv:
        stream = body()
        try:
            header = pieces.csv_header(stream, dataset)
        except (UnicodeDecodeError, ValueError):
            return json.dumps(whole)  # the reader of the whole object says what is wrong
        finally:
            stream.close()
    stream = body()
    try:
        splits = pieces.scan_splits(
            stream,
            piece_bytes=settings.piece_bytes,
            quote=dataset.csv.quote.encode() if csv else None,
            csv_lines=csv,
        )
    finally:
        stream.close()
    if csv and dataset.csv.header and header is None:
        return json.dumps(whole)
    found = pieces.text_pieces(index, obj.size, splits, header)
    return json.dumps([piece_spec(p) for p in found])
