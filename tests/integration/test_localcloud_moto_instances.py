"""lethe.localcloud.moto_instances: moto's models are tracked weakly in the local cloud, so the
temporaries moto makes (S3's list_object_versions deep-copies every version of the bucket) are
freed, while the models the backends hold stay tracked for moto's own readers."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.common_models import BaseModel

from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.moto_instances import WeakInstances, patch_weak_instances

KEYS = 50
LISTINGS = 20


@pytest.fixture
def s3() -> Iterator[Any]:
    undo = configure_moto()
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
        undo()


def _keys_alive() -> int:
    from moto.s3.models import FakeKey  # noqa: PLC0415 - loaded with the backend

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, FakeKey))


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


def test_the_patch_is_reverted() -> None:
    original = BaseModel.__dict__["__new__"]

    patch_weak_instances()()

    assert BaseModel.__dict__["__new__"] is original
