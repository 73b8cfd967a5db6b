"""lethe.localcloud.moto_ranges: a ranged GET from the local cloud reads only its range's bytes,
and answers exactly what moto answers without the patch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from lethe.localcloud.cloud import configure_moto
from lethe.localcloud.moto_ranges import patch_range_reads

BODY = bytes(range(256)) * 40  # 10,240 bytes, every offset's byte known
RANGES = ["bytes=0-0", "bytes=0-9", "bytes=100-299", "bytes=10000-", "bytes=-7", "bytes=5-99999"]


@pytest.fixture
def s3() -> Iterator[Any]:
    undo = configure_moto()
    try:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="ranges")
            client.put_bucket_versioning(
                Bucket="ranges", VersioningConfiguration={"Status": "Enabled"}
            )
            client.put_object(Bucket="ranges", Key="old", Body=b"first version")
            client.put_object(Bucket="ranges", Key="k", Body=BODY)
            yield client
    finally:
        undo()


def _answers(s3: Any) -> list[Any]:
    found: list[Any] = []
    for spec in [*RANGES, "bytes=20000-", "bytes=1-2,4-5", "bytes=x-y"]:
        try:
            response = s3.get_object(Bucket="ranges", Key="k", Range=spec)
        except ClientError as exc:
            found.append((spec, exc.response["Error"]["Code"]))
            continue
        headers = response["ResponseMetadata"]["HTTPHeaders"]
        found.append(
            (
                spec,
                response["ResponseMetadata"]["HTTPStatusCode"],
                response["Body"].read(),
                headers.get("content-range"),
                headers.get("content-length"),
            )
        )
    return found


def test_ranged_gets_answer_what_moto_answers(s3: Any) -> None:
    unpatched = _answers(s3)
    undo = patch_range_reads()
    try:
        patched = _answers(s3)
        whole = s3.get_object(Bucket="ranges", Key="k")["Body"].read()
        versions = s3.list_object_versions(Bucket="ranges", Prefix="old")["Versions"]
        old = s3.get_object(
            Bucket="ranges", Key="old", VersionId=versions[0]["VersionId"], Range="bytes=6-"
        )["Body"].read()
    finally:
        undo()

    assert patched == unpatched
    # and the answers are the bytes S3 gives
    assert patched[2][1:3] == (206, BODY[100:300])
    assert patched[3][2] == BODY[10000:]
    assert patched[4][2] == BODY[-7:]
    assert patched[6][1] == "InvalidRange"
    assert whole == BODY
    assert old == b"version"


def test_a_ranged_get_does_not_read_the_whole_object(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.s3.models import FakeKey  # noqa: PLC0415 - loaded with the backend

    # Given moto's whole-body read counted (the getter the patch falls back on)
    whole_reads: list[str] = []
    value = FakeKey.__dict__["value"]

    def counted(key: Any) -> bytes:
        whole_reads.append(key.name)
        return value.fget(key)  # type: ignore[no-any-return]

    monkeypatch.setattr(FakeKey, "value", property(counted, value.fset))
    undo = patch_range_reads()
    try:
        # When a range is read, then the whole object
        part = s3.get_object(Bucket="ranges", Key="k", Range="bytes=100-199")["Body"].read()
        ranged = list(whole_reads)
        body = s3.get_object(Bucket="ranges", Key="k")["Body"].read()
    finally:
        undo()

    # Then the range came from the key's buffer without a whole read; the plain GET read it
    assert (part, ranged) == (BODY[100:200], [])
    assert (body, whole_reads) == (BODY, ["k"])
