"""lethe_shared.aws.s3 against moto: heads, exact-key versions, key states, deletes, versioning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from lethe_shared.aws.errors import is_s3_not_found
from lethe_shared.aws.s3 import (
    KeyState,
    S3ObjectStore,
    get_version,
    key_state,
    s3_url,
    split_s3_url,
)
from lethe_shared.errors import BucketVersioningError
from tests.integration.conftest import LAKE, RAW

pytestmark = pytest.mark.lambda_runtime

KEY = "reviews/a.csv"


@pytest.fixture
def store(lethe_buckets: Callable[..., None]) -> S3ObjectStore:
    lethe_buckets()
    return S3ObjectStore(boto3.client("s3"))


def _put(store: S3ObjectStore, key: str, body: bytes, **extra: str) -> str:
    return str(store.client.put_object(Bucket=RAW, Key=key, Body=body, **extra)["VersionId"])


def test_head_of_a_present_object_and_of_its_exact_version(store: S3ObjectStore) -> None:
    first = _put(store, KEY, b"one", Metadata={"lethe-producer": "ingest"})
    second = _put(store, KEY, b"second")

    current = store.head(RAW, KEY)
    older = store.head(RAW, KEY, first)

    assert current is not None
    assert (current.version_id, current.size, current.producer) == (second, 6, None)
    assert older is not None
    assert (older.version_id, older.size, older.producer) == (first, 3, "ingest")
    assert older.etag == "f97c5d29941bfb1b2fdab0874906ab82"  # md5("one"), without quotes


def test_head_answers_none_for_every_kind_of_absence(store: S3ObjectStore) -> None:
    version = _put(store, KEY, b"x")
    store.client.delete_object(Bucket=RAW, Key=KEY)  # a delete marker is now current
    marker = store.versions_of(RAW, KEY)[0]

    assert store.head(RAW, "reviews/never.csv") is None
    assert store.head(RAW, KEY) is None  # hidden by the marker
    assert store.head(RAW, KEY, marker.version_id) is None  # the marker itself (405)
    assert store.head(RAW, KEY, version) is not None  # the data is still there
    assert store.read_bytes(RAW, KEY) is None
    assert store.read_bytes(RAW, KEY, version) == b"x"


def test_get_version_reads_one_version_whole_or_a_range_of_it(store: S3ObjectStore) -> None:
    first = _put(store, KEY, b"0123456789")
    _put(store, KEY, b"abcdefghij")

    assert get_version(store.client, RAW, KEY, first)["Body"].read() == b"0123456789"
    assert get_version(store.client, RAW, KEY, first, byte_range=(2, 4))["Body"].read() == b"234"
    assert get_version(store.client, RAW, KEY, None, byte_range=(0, 1))["Body"].read() == b"ab"
    assert get_version(store.client, RAW, KEY, "null")["Body"].read() == b"abcdefghij"
    with pytest.raises(ClientError) as raised:
        get_version(store.client, RAW, "reviews/never.csv", None)
    assert is_s3_not_found(raised.value)


def test_get_version_sends_the_request_it_always_sent() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[dict[str, object]] = []

        def get_object(self, **kwargs: object) -> dict[str, object]:
            self.calls.append(kwargs)
            return {}

    client = Recorder()
    get_version(client, RAW, KEY, "v1", byte_range=(0, 3))
    get_version(client, RAW, KEY, "null")
    get_version(client, RAW, KEY, None, byte_range=(5, 9))

    assert client.calls == [
        {"Bucket": RAW, "Key": KEY, "Range": "bytes=0-3", "VersionId": "v1"},
        {"Bucket": RAW, "Key": KEY},
        {"Bucket": RAW, "Key": KEY, "Range": "bytes=5-9"},
    ]


def test_versions_of_an_exact_key_never_include_keys_sharing_its_prefix(
    store: S3ObjectStore,
) -> None:
    old = _put(store, KEY, b"1")
    new = _put(store, KEY, b"2")
    _put(store, KEY + ".bak", b"sibling")
    _put(store, KEY + "/nested", b"child")

    versions = store.versions_of(RAW, KEY)

    assert [(v.key, v.version_id, v.is_latest) for v in versions] == [
        (KEY, new, True),
        (KEY, old, False),
    ]
    assert {v.key for v in store.list_versions(RAW, KEY)} == {KEY, KEY + ".bak", KEY + "/nested"}


def test_key_state_current_hidden_and_gone(store: S3ObjectStore) -> None:
    version = _put(store, KEY, b"x")
    assert key_state(store.versions_of(RAW, KEY)) is KeyState.CURRENT

    store.client.delete_object(Bucket=RAW, Key=KEY)
    assert key_state(store.versions_of(RAW, KEY)) is KeyState.HIDDEN

    store.client.delete_object(Bucket=RAW, Key=KEY, VersionId=version)
    assert key_state(store.versions_of(RAW, KEY)) is KeyState.GONE  # a marker only
    assert key_state(store.versions_of(RAW, "reviews/never.csv")) is KeyState.GONE


def test_delete_older_versions_keeps_one_version_and_touches_no_other_key(
    store: S3ObjectStore,
) -> None:
    _put(store, KEY, b"1")
    store.client.delete_object(Bucket=RAW, Key=KEY)
    keep = _put(store, KEY, b"3")
    sibling = _put(store, KEY + ".bak", b"sibling")

    deleted = store.delete_older_versions(RAW, KEY, keep)

    assert deleted == 2  # the old version and the delete marker
    assert [v.version_id for v in store.versions_of(RAW, KEY)] == [keep]
    assert [v.version_id for v in store.versions_of(RAW, KEY + ".bak")] == [sibling]


def test_download_upload_and_delete_current(store: S3ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"a": 1}\n' * 1000)

    written = store.upload(
        LAKE, KEY, source, content_type="application/x-ndjson", metadata={"lethe-producer": "x"}
    )
    got = store.download(LAKE, KEY, written.version_id, tmp_path / "out")

    assert got is not None
    assert (got.version_id, got.etag, got.producer) == (written.version_id, written.etag, "x")
    assert (tmp_path / "out").read_bytes() == source.read_bytes()
    assert store.download(LAKE, "reviews/none", "null", tmp_path / "none") is None
    assert store.delete_current(LAKE, KEY) is True
    assert store.delete_current(LAKE, KEY) is False  # no second marker over a hidden key
    assert [v.delete_marker for v in store.versions_of(LAKE, KEY)] == [True, False]


def test_require_versioning_names_every_unversioned_bucket(
    lethe_buckets: Callable[..., None],
) -> None:
    lethe_buckets(versioned=False)
    store = S3ObjectStore(boto3.client("s3"))

    with pytest.raises(BucketVersioningError, match=f"{RAW}, {LAKE}; enable versioning"):
        store.require_versioning([RAW, LAKE])

    store.client.put_bucket_versioning(Bucket=RAW, VersioningConfiguration={"Status": "Enabled"})
    store.client.put_bucket_versioning(Bucket=LAKE, VersioningConfiguration={"Status": "Enabled"})
    store.require_versioning([RAW, LAKE])  # no error


def test_urls_round_trip_and_bad_urls_are_refused() -> None:
    assert split_s3_url(s3_url("b", "k/x.csv")) == ("b", "k/x.csv")
    for bad in ("http://b/k", "s3://b", "s3:///k", "b/k"):
        with pytest.raises(ValueError, match="not an"):
            split_s3_url(bad)
