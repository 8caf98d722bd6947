"""S3Storage on a real moto_server through real HTTP: the multipart upload a large object becomes,
the aborts that leave nothing behind, the prefix, the endpoint's sources, and errors that never name
the store's address."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.errors import ConfigError
from gateway.files.s3 import PART_BYTES, S3Storage
from gateway.files.storage import StorageError, TooLarge
from tests.files.conftest import REGION, S3Place, admin_client, chunks_of, read_all
from tests.servers import free_port

MIB = 1 << 20


def pieces(total: int, size: int = MIB) -> list[bytes]:
    return [bytes([n % 251]) * min(size, total - at) for n, at in enumerate(range(0, total, size))]


async def leftovers(place: S3Place) -> tuple[list[str], list[str]]:
    """Every key in the bucket, and every multipart upload still open there."""
    async with admin_client(place.endpoint) as s3:
        listed = await s3.list_objects_v2(Bucket=place.bucket)
        uploads = await s3.list_multipart_uploads(Bucket=place.bucket)
    return (
        [o.get("Key", "") for o in listed.get("Contents", [])],
        [u.get("Key", "") for u in uploads.get("Uploads", [])],
    )


def test_a_large_object_is_a_multipart_upload_under_the_prefix(s3_place: S3Place) -> None:
    body = pieces(12 * MIB + 7)

    async def case() -> None:
        storage = S3Storage.from_url(s3_place.url)
        try:
            size = await storage.write("team/t1/big", chunks_of(*body), max_bytes=64 * MIB)
            assert size == 12 * MIB + 7
            assert await read_all(storage, "team/t1/big") == b"".join(body)
        finally:
            await storage.close()
        async with admin_client(s3_place.endpoint) as s3:
            head = await s3.head_object(Bucket=s3_place.bucket, Key="sluicegate/files/team/t1/big")
        # An S3 multipart object's ETag is "<md5 of the parts' md5s>-<parts>": 12 MiB in 5 MiB parts.
        assert head["ETag"].strip('"').endswith("-3")
        assert head["ContentLength"] == size

    asyncio.run(case())
    assert asyncio.run(leftovers(s3_place)) == (["sluicegate/files/team/t1/big"], [])


def test_a_small_object_is_one_put(s3_place: S3Place) -> None:
    async def case() -> str:
        storage = S3Storage.from_url(s3_place.url)
        try:
            await storage.write("team/t1/small", chunks_of(b"x" * (PART_BYTES - 1)), max_bytes=PART_BYTES)
        finally:
            await storage.close()
        async with admin_client(s3_place.endpoint) as s3:
            head = await s3.head_object(Bucket=s3_place.bucket, Key="sluicegate/files/team/t1/small")
        return head["ETag"]

    assert "-" not in asyncio.run(case())


def test_too_large_past_the_first_part_aborts_the_upload(s3_place: S3Place) -> None:
    async def case() -> None:
        storage = S3Storage.from_url(s3_place.url)
        try:
            with pytest.raises(TooLarge):
                await storage.write("team/t1/huge", chunks_of(*pieces(20 * MIB)), max_bytes=11 * MIB)
        finally:
            await storage.close()

    asyncio.run(case())
    assert asyncio.run(leftovers(s3_place)) == ([], [])


def test_a_failing_source_after_two_parts_aborts_the_upload(s3_place: S3Place) -> None:
    sent = 0

    async def failing() -> AsyncIterator[bytes]:
        nonlocal sent
        for piece in pieces(11 * MIB):
            sent += len(piece)
            yield piece
        raise RuntimeError("the batch writer failed")

    async def case() -> None:
        storage = S3Storage.from_url(s3_place.url)
        try:
            with pytest.raises(RuntimeError, match="batch writer"):
                await storage.write("team/t1/cut", failing(), max_bytes=64 * MIB)
        finally:
            await storage.close()

    asyncio.run(case())
    assert sent == 11 * MIB  # two parts went up before the failure
    assert asyncio.run(leftovers(s3_place)) == ([], [])


def test_the_endpoint_may_come_from_aws_endpoint_url(
    s3_place: S3Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_place.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)

    async def case() -> bytes:
        storage = S3Storage.from_url(f"s3://{s3_place.bucket}/other?addressing=path")
        try:
            await storage.write("a", chunks_of(b"via the environment"), max_bytes=100)
            return await read_all(storage, "a")
        finally:
            await storage.close()

    assert asyncio.run(case()) == b"via the environment"
    assert asyncio.run(leftovers(s3_place))[0] == ["other/a"]


def test_an_unreachable_store_is_a_storage_error_without_its_address() -> None:
    port = free_port()  # nothing listens there

    async def case() -> None:
        storage = S3Storage.from_url(f"s3://files-bucket/p?endpoint=http://127.0.0.1:{port}&addressing=path")
        try:
            with pytest.raises(StorageError) as raised:
                await storage.write("team/t1/x", chunks_of(b"x"), max_bytes=10)
            assert "127.0.0.1" not in str(raised.value)
            assert str(port) not in str(raised.value)
            with pytest.raises(StorageError):
                await storage.stat("team/t1/x")
        finally:
            await storage.close()
        # A client botocore will not make (a region it refuses) is a StorageError too, on first use.
        refused = S3Storage.from_url(
            f"s3://files-bucket/p?endpoint=http://127.0.0.1:{port}&region=bad_region!"
        )
        with pytest.raises(StorageError, match="s3 open: InvalidRegionError"):
            await refused.stat("team/t1/x")
        await refused.close()

    asyncio.run(case())


def test_a_missing_bucket_is_a_storage_error_naming_the_code_not_the_bucket(s3_place: S3Place) -> None:
    async def case() -> str:
        url = s3_place.url.replace(s3_place.bucket, "no-such-bucket-here")
        storage = S3Storage.from_url(url)
        try:
            with pytest.raises(StorageError) as raised:
                await storage.write("team/t1/x", chunks_of(b"x"), max_bytes=10)
            with pytest.raises(StorageError):
                _ = [o async for o in storage.list("")]
            return str(raised.value)
        finally:
            await storage.close()

    message = asyncio.run(case())
    assert "NoSuchBucket" in message
    assert "no-such-bucket-here" not in message


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://key:secret@bucket-a/p", "credentials never go in the URL"),
        ("s3://Bad_Bucket/p", "valid bucket name"),
        ("s3:///p", "valid bucket name"),
        ("s3://bucket-a/p?endpoint=ftp://10.0.0.1", "endpoint="),
        ("s3://bucket-a/p?addressing=sideways", "addressing="),
        ("s3://bucket-a/p?secret_key=x", "unknown query parameter 'secret_key'"),
    ],
)
def test_a_bad_url_is_a_config_error_that_does_not_repeat_it(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        S3Storage.from_url(url)
    message = str(raised.value)
    assert url not in message
    assert "key:secret" not in message
    assert "10.0.0.1" not in message
