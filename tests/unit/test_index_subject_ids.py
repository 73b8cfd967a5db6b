"""lethe_shared.index.subject_ids: what a subject index's by-object answers call a subject
(full hashes, or 48-bit prefixes on a prefix dataset)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lethe_shared.index.subject_ids import ids_of, is_prefix_dataset, key_width, subject_id

pytestmark = pytest.mark.unit

H = "ab" * 32


def _segments(widths: dict[str, int]) -> SimpleNamespace:
    return SimpleNamespace(manifest=SimpleNamespace(hash_width=lambda d: widths.get(d, 32)))


def test_an_index_without_a_manifest_names_subjects_by_their_full_hash() -> None:
    dynamo = SimpleNamespace()  # DynamoSubjectIndex has no manifest
    assert key_width(dynamo, "reviews") == 32
    assert ids_of(dynamo, "reviews")(H) == H
    assert not is_prefix_dataset(dynamo, "reviews")


def test_a_prefix_dataset_names_subjects_by_twelve_hex_digits_per_dataset() -> None:
    index = _segments({"reviews": 6})
    assert ids_of(index, "reviews")(H) == "ab" * 6
    assert ids_of(index, "reviews")("ab" * 6) == "ab" * 6  # already a prefix
    assert ids_of(index, "orders")(H) == H  # a full-digest dataset keeps its hashes
    assert is_prefix_dataset(index, "reviews")
    assert subject_id(H.upper(), 6) == "ab" * 6  # lower-case hex, as the index stores keys
