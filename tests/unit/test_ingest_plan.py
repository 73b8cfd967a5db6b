"""The ingest job's driver-side pieces that need no Spark: the batch document, the arguments,
piece specs, and how entries are added up across batches."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lethe_jobs.errors import InvalidObjectListError
from lethe_jobs.ingest_core import MAX_OBJECTS, parse_args, parse_batch
from lethe_jobs.ingest_outcomes import BatchRequest
from lethe_jobs.ingest_tasks import (
    HINTS_KEPT,
    MAX_KEY_BYTES,
    PART,
    EntryAccumulator,
    key_problem,
    partition_paths,
    piece_from_spec,
    piece_spec,
)
from lethe_jobs.pieces import Piece
from lethe_jobs.readers import Slice
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.index.subject_index import MAX_ROW_HINTS
from lethe_shared.subject_hashing.keys import key_fingerprint

COMMON = [
    "--raw-bucket", "raw", "--lake-bucket", "lake", "--datasets-table", "d",
    "--catalog-table", "c", "--index-table", "i", "--index-store", "dynamodb",
    "--hash-key-secret", "s",
    "--correlation-id", "run-1",
]  # fmt: skip


def test_a_batch_is_a_list_of_object_versions_each_once_in_order() -> None:
    document = [
        {"dataset_id": "reviews", "key": "reviews/b.csv", "version_id": "2"},
        {"dataset_id": "reviews", "key": "reviews/a.csv", "version_id": "1"},
        {"dataset_id": "reviews", "key": "reviews/b.csv", "version_id": "2"},
    ]

    assert parse_batch(document) == [
        BatchRequest("reviews", "reviews/b.csv", "2"),
        BatchRequest("reviews", "reviews/a.csv", "1"),
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"dataset_id": "x"}, "non-empty JSON list"),
        ([], "non-empty JSON list"),
        ([{"dataset_id": "x", "key": "x/a"}], "object 0 must be an object with non-empty"),
        ([{"dataset_id": "x", "key": "x/a", "version_id": ""}], "object 0"),
        ([{"dataset_id": "x", "key": "x/a", "version_id": 3}], "object 0"),
        (["x/a"], "object 0"),
    ],
)
def test_a_batch_that_is_not_a_list_of_versions_is_refused(document: object, message: str) -> None:
    with pytest.raises(InvalidObjectListError, match=message):
        parse_batch(document)


def test_a_batch_larger_than_a_run_takes_is_refused() -> None:
    entry = {"dataset_id": "x", "key": "x/a", "version_id": "1"}
    with pytest.raises(InvalidObjectListError, match=f"at most {MAX_OBJECTS}"):
        parse_batch([entry] * (MAX_OBJECTS + 1))


def test_arguments_take_the_batch_one_way_and_tuning_with_defaults() -> None:
    args, ignored = parse_args(["--objects-manifest", "s3://r/m.json", *COMMON, "--JOB_ID", "j"])

    assert (args.objects_manifest, args.objects_json) == ("s3://r/m.json", None)
    assert args.piece_bytes == 128 * 1024 * 1024
    assert args.batch_rows == 65_536
    assert ignored == ["--JOB_ID", "j"]
    tuned, _ = parse_args(["--objects-json", "[]", *COMMON, "--piece-bytes", "4096"])
    assert tuned.piece_bytes == 4096
    with pytest.raises(SystemExit):
        parse_args(["--objects-json", "[]", "--objects-manifest", "s3://r/m", *COMMON])
    with pytest.raises(SystemExit):
        parse_args([*COMMON])
    with pytest.raises(SystemExit):
        parse_args(["--objects-json", "[]", *COMMON, "--batch-rows", "0"])


@pytest.mark.parametrize(
    "piece",
    [
        Piece(3, size=10),
        Piece(1, Slice(first_line=40, header=("a", "b")), (1000, 2000), 1000),
        Piece(0, Slice(row_groups=(2, 5), first_row=1500), None, 777),
    ],
)
def test_a_piece_travels_to_its_task_unchanged(piece: Piece) -> None:
    assert piece_from_spec(json.loads(json.dumps(piece_spec(piece)))) == piece


def test_entries_add_up_across_batches_keeping_the_first_hints() -> None:
    s1, s2 = "1" * 64, "2" * 64
    accumulator = EntryAccumulator()
    accumulator.add(s1, 40, range(100, 140))
    accumulator.add(s2, 1, [7])
    accumulator.add(s1, 40, range(1, 41))  # an earlier piece's rows, read later
    ref = ObjectRef("s3://raw/x/a.csv", Zone.RAW, "csv", "v1", "e1")
    dataset = parse_dataset(
        {"dataset_id": "x", "format": "csv", "subject_columns": ["id"],
         "schema": [{"name": "id", "type": "string"}]}
    )  # fmt: skip
    key = b"k" * 32

    first, second = accumulator.entries(ref, dataset, key)

    assert (first.subject_hash, first.rows) == (s1, 80)
    assert len(first.row_hints) == HINTS_KEPT == MAX_ROW_HINTS + 1
    assert first.row_hints[:3] == (1, 2, 3)  # the smallest hints of what was kept
    assert first.to_item()["hints_complete"] is False
    assert (second.subject_hash, second.rows, second.row_hints) == (s2, 1, (7,))
    assert second.to_item()["hints_complete"] is True
    # pinned to what they were computed with: the definition's and the key's fingerprints
    assert {(e.matching_fingerprint, e.key_fingerprint) for e in (first, second)} == {
        (matching_fingerprint(dataset), key_fingerprint(key))
    }
    assert first.to_item()["pin"] == f"{matching_fingerprint(dataset)}/{key_fingerprint(key)}"


def test_partition_paths_render_as_the_layout_does() -> None:
    batch = pa.RecordBatch.from_pydict({"day": ["2026-11-22", None, ""], "n": [1, 2, 3]})

    (with_part,) = list(partition_paths([batch], ["day"]))
    (plain,) = list(partition_paths([batch], []))

    assert with_part.column(PART).to_pylist() == [
        "day=2026-11-22",
        "day=__HIVE_DEFAULT_PARTITION__",
        "day=__HIVE_DEFAULT_PARTITION__",
    ]
    assert plain.column(PART).to_pylist() == ["", "", ""]


@pytest.mark.parametrize(
    ("bucket", "key", "problem"),
    [
        ("b", "k" * (MAX_KEY_BYTES - 7), None),  # s3://b/ + key: the URL at 1,024 bytes
        ("b", "k" * (MAX_KEY_BYTES - 6), "a lake object URL of 1025 bytes"),
        ("b", "\u00e9" * 508 + "k", None),  # 1,017 bytes of key: 1,024 of URL
        ("b", "\u00e9" * 509, "a lake object URL of 1025 bytes"),  # 509 characters
        ("b", "k" * (MAX_KEY_BYTES + 1), "a lake key of 1025 bytes; S3 allows at most 1024"),
        ("b", "k\udc80", "not UTF-8 text"),  # a lone surrogate cannot be a key
    ],
)
def test_key_problem_counts_utf8_bytes_of_the_key_and_its_url(
    bucket: str, key: str, problem: str | None
) -> None:
    found = key_problem(bucket, key)
    assert (found is None) == (problem is None)
    assert problem is None or (found is not None and problem in found)
