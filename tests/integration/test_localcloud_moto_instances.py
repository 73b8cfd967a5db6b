"""lethe.localcloud.moto_instances: moto's models are tracked weakly in the local cloud, so the
temporaries moto makes (S3's list_object_versions deep-copies every version of the bucket) are
freed, while the models the backends hold stay tracked for moto's own readers."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.common_models import BaseModel

from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.moto_instances import (
    WeakInstances,
    patch_moto_memory,
)

KEYS = 50
LISTINGS = 20


@pytest.fixture
def s3() -> Iterator[Any]:
    undo = configure_moto()
    unpatch = patch_moto_memory()  # what the local cloud's own process applies
    try:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="weak-instances")
            client.put_bucket_versioning(
                Bucket="weak-instances", VersioningConfiguration={"Status": "Enabled"}
            )
            for i in range(KEYS):
                client.put_object(Bucket="weak-instances", Key=f"k/{i}", Body=b"x" * 2000)
            yield client
    finally:
        unpatch()
        undo()


def _keys_alive() -> int:
    from moto.s3.models import FakeKey  # noqa: PLC0415 - loaded with the backend

    gc.collect()  # keys of this test's bucket only: other modules' keys may live in the process
    return sum(
        1 for o in gc.get_objects() if isinstance(o, FakeKey) and o.bucket_name == "weak-instances"
    )


def test_listing_versions_leaves_no_copy_alive(s3: Any) -> None:
    before = _keys_alive()

    for _ in range(LISTINGS):
        listed = s3.list_object_versions(Bucket="weak-instances")["Versions"]
        assert len(listed) == KEYS

    # without the patch each listing keeps a copy of every version: 50 + 20 x 50 keys
    assert _keys_alive() == before == KEYS
    body = s3.get_object(Bucket="weak-instances", Key="k/7")["Body"].read()
    assert body == b"x" * 2000


def test_the_models_the_backend_holds_stay_tracked(s3: Any) -> None:
    from moto.s3.models import FakeKey  # noqa: PLC0415 - loaded with the backend

    s3.list_object_versions(Bucket="weak-instances")
    gc.collect()

    tracked = list(FakeKey.instances_tracked)  # type: ignore[attr-defined]
    assert len(tracked) == KEYS
    assert sorted(k.name for k in tracked) == sorted(f"k/{i}" for i in range(KEYS))


def test_weak_instances_drop_what_is_freed() -> None:
    class Model:
        pass

    kept, dropped = Model(), Model()
    instances = WeakInstances([kept])
    instances.append(dropped)
    assert len(instances) == 2

    del dropped
    gc.collect()

    assert list(instances) == [kept]


def test_the_patch_is_reverted_and_moto_s_lists_come_back() -> None:
    from moto.s3.models import FakeKey, S3Backend  # noqa: PLC0415

    original, listing = BaseModel.__dict__["__new__"], S3Backend.list_object_versions

    undo = patch_moto_memory()
    kept = FakeKey("k", b"v", "123456789012", "us-east-1")
    assert isinstance(FakeKey.instances_tracked, WeakInstances)  # type: ignore[attr-defined]
    undo()

    assert BaseModel.__dict__["__new__"] is original
    assert S3Backend.list_object_versions is listing
    tracked = FakeKey.instances_tracked  # type: ignore[attr-defined]
    assert type(tracked) is list  # strong again: nothing freed behind other tests' backs
    assert kept in tracked
    kept.dispose()


def test_configure_moto_leaves_moto_s_tracking_alone() -> None:
    original = BaseModel.__dict__["__new__"]
    undo = configure_moto()
    try:
        assert BaseModel.__dict__["__new__"] is original
    finally:
        undo()


def _listing(result: Any) -> Any:
    versions, prefixes, markers, next_key, next_version = result
    return (
        [(v.name, v.version_id, v.is_latest, v.value) for v in versions],
        prefixes,
        [(m.name, m.version_id, m.is_latest) for m in markers],
        next_key,
        next_version,
    )


def test_a_prefixed_listing_is_moto_s_own_and_copies_only_its_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeded random buckets: versions, delete markers, nested names; every prefix, delimiter
    and page size the product uses gives exactly what moto's own code gives."""
    import copy  # noqa: PLC0415

    from moto.s3 import models  # noqa: PLC0415

    original = models.S3Backend.list_object_versions
    undo = configure_moto()
    unpatch = patch_moto_memory()
    try:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="listing-check")
            client.put_bucket_versioning(
                Bucket="listing-check", VersioningConfiguration={"Status": "Enabled"}
            )
            rng = random.Random(20261128)
            names = [f"{d}/{p}/{i}.csv" for d in "ab" for p in ("x", "xy", "y") for i in range(4)]
            for step in range(160):
                name = rng.choice(names)
                if rng.random() < 0.2:
                    client.delete_object(Bucket="listing-check", Key=name)
                else:
                    client.put_object(Bucket="listing-check", Key=name, Body=f"{step}".encode())
            backend = models.s3_backends["123456789012"]["aws"]
            copies = {"n": 0}
            deepcopy = copy.deepcopy

            def counted(value: Any, *args: Any) -> Any:
                copies["n"] += 1
                return deepcopy(value, *args)

            monkeypatch.setattr(models.copy, "deepcopy", counted)
            prefixes = ["a/", "a/x", "a/x/", "b/xy/1.csv", "b/y/3.csv", "c/", "a/x/0.csv"]
            for prefix in prefixes:
                for delimiter in (None, "/"):
                    for max_keys in (1, 3, 1000):
                        copies["n"] = 0
                        patched = backend.list_object_versions(
                            "listing-check", delimiter=delimiter, max_keys=max_keys, prefix=prefix
                        )
                        # one deep copy per key name listed (moto's: one per key of the bucket)
                        assert copies["n"] == sum(1 for n in names if n.startswith(prefix))
                        assert _listing(patched) == _listing(
                            original(
                                backend,
                                "listing-check",
                                delimiter=delimiter,
                                max_keys=max_keys,
                                prefix=prefix,
                            )
                        ), (prefix, delimiter, max_keys)
    finally:
        unpatch()
        undo()
