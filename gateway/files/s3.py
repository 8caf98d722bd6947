"""`SLUICEGATE_FILES_URL=s3://bucket/prefix`: files in any S3-compatible store (AWS S3, MinIO,
Ceph RGW, GCS interop), through aiobotocore (botocore's signer, credential chain and retries on
aiohttp) rather than a signer of our own.

    s3://bucket[/prefix][?endpoint=URL&region=NAME&addressing=path|virtual|auto]

The endpoint is the query's, else botocore's own (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the
config file), else AWS; the credentials always come from the standard AWS chain (environment,
shared files, IRSA / workload identity web-identity tokens, instance metadata), never from the URL.

Writes stream: up to one part (5 MiB, more for very large `max_bytes`: S3 allows 10,000 parts) is
held at a time; an object that fits in one part is one PutObject, a larger one a multipart upload
that is aborted on any failure, so a store never keeps half an object (a bucket lifecycle rule
that aborts incomplete uploads is still wise: a killed process cannot abort). Reads stream a
ranged GetObject. Every store error is a StorageError naming the operation and the store's error
code, never the endpoint, bucket or credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from gateway.errors import ConfigError
from gateway.files.storage import CHUNK_BYTES, StorageError, StoredObject, TooLarge

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef

# S3's smallest part but the last; its most parts in one upload.
PART_BYTES = 5 << 20
_MAX_PARTS = 10_000
# DeleteObject calls in flight at once: one call per name works on every S3-compatible store (GCS
# interop has no DeleteObjects), and a bounded batch keeps a large sweep from flooding the store.
_DELETES_IN_FLIGHT = 16
_ADDRESSING = ("auto", "path", "virtual")
_QUERY_KEYS = frozenset({"endpoint", "region", "addressing"})
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (dots allowed).
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})


class S3Storage:
    """A FileStorage (gateway/files/storage.py) on one bucket, every name under `prefix`."""

    kind: ClassVar[str] = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        addressing: str = "auto",
    ) -> None:
        self._bucket = bucket
        self._prefix = prefix
        self._endpoint = endpoint
        self._region = region
        self._addressing = addressing
        self._client: S3Client | None = None
        self._stack = contextlib.AsyncExitStack()
        self._opening = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str) -> S3Storage:
        """ConfigError naming what is wrong; the URL itself is not repeated (its query may name an
        internal address)."""
        parts = urlsplit(url)
        if parts.scheme != "s3":
            raise ConfigError("SLUICEGATE_FILES_URL: an s3:// URL was expected")
        if parts.username is not None or parts.password is not None:
            raise ConfigError(
                "SLUICEGATE_FILES_URL: credentials never go in the URL; use the AWS credential chain "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a web identity token, an instance role)"
            )
        bucket = parts.netloc
        if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                "SLUICEGATE_FILES_URL: expected s3://<bucket>/<prefix> with a valid bucket name"
            )
        prefix = parts.path.strip("/")
        if prefix:
            prefix += "/"
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        unknown = sorted(set(query) - _QUERY_KEYS)
        if unknown:
            raise ConfigError(
                f"SLUICEGATE_FILES_URL: unknown query parameter {unknown[0]!r} "
                f"(allowed: {', '.join(sorted(_QUERY_KEYS))})"
            )
        one = {key: values[-1] for key, values in query.items()}
        endpoint = one.get("endpoint") or None
        if endpoint is not None:
            ends = urlsplit(endpoint)
            if ends.scheme not in ("http", "https") or not ends.hostname:
                raise ConfigError("SLUICEGATE_FILES_URL: endpoint= must be an http:// or https:// URL")
        addressing = one.get("addressing") or "auto"
        if addressing not in _ADDRESSING:
            raise ConfigError(f"SLUICEGATE_FILES_URL: addressing= must be one of {', '.join(_ADDRESSING)}")
        return cls(bucket, prefix, endpoint=endpoint, region=one.get("region") or None, addressing=addressing)

    async def _s3(self) -> S3Client:
        """The client, made on first use: creating one is async, and `from_url` is called before
        any loop runs."""
        if self._client is None:
            async with self._opening:
                if self._client is None:
                    config = AioConfig(
                        s3={"addressing_style": self._addressing},
                        # Checksums only where the operation demands them: botocore's newer default
                        # (CRC32 trailers on every upload) is refused by several S3-compatible stores.
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required",
                        retries={"mode": "standard", "max_attempts": 3},
                        connect_timeout=5,
                        read_timeout=60,
                    )
                    creator = get_session().create_client(
                        "s3", endpoint_url=self._endpoint, region_name=self._region, config=config
                    )
                    try:
                        self._client = await self._stack.enter_async_context(creator)
                    except BotoCoreError as exc:  # a region botocore refuses, a broken config file
                        raise _storage_error("open", exc) from None
        return self._client

    def _key(self, name: str) -> str:
        return self._prefix + name

    async def write(self, name: str, chunks: AsyncIterator[bytes], *, max_bytes: int) -> int:
        part_bytes = max(PART_BYTES, -(-max_bytes // _MAX_PARTS))
        buffer = bytearray()
        size = 0
        upload: _Upload | None = None
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"more than {max_bytes} bytes")
                buffer += chunk
                if len(buffer) >= part_bytes:
                    if upload is None:
                        upload = await _Upload.begin(await self._s3(), self._bucket, self._key(name))
                    await upload.part(bytes(buffer))
                    buffer.clear()
            if upload is None:
                await _call(
                    "write",
                    (await self._s3()).put_object(
                        Bucket=self._bucket, Key=self._key(name), Body=bytes(buffer)
                    ),
                )
            else:
                if buffer or not upload.parts:
                    await upload.part(bytes(buffer))
                await upload.complete()
        except BaseException:
            if upload is not None:
                await upload.abort()
            raise
        return size

    async def read(self, name: str, *, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        if start < 0:
            raise ValueError("read: start must not be negative")
        if end is not None and end <= start:  # an empty range, as a directory's read gives
            return
        ranged = start > 0 or end is not None
        wanted = f"bytes={start}-{'' if end is None else end - 1}"
        s3 = await self._s3()
        try:
            if ranged:
                answer = await s3.get_object(Bucket=self._bucket, Key=self._key(name), Range=wanted)
            else:
                answer = await s3.get_object(Bucket=self._bucket, Key=self._key(name))
        except ClientError as exc:
            code = _code(exc)
            if code in _NOT_FOUND:
                raise FileNotFoundError(name) from None
            if code == "InvalidRange":  # start at or past the end: nothing to read
                return
            raise _storage_error("read", exc) from None
        except BotoCoreError as exc:
            raise _storage_error("read", exc) from None
        async with answer["Body"] as body:
            try:
                async for chunk in body.iter_chunks(CHUNK_BYTES):
                    yield chunk
            except (BotoCoreError, ClientError) as exc:
                raise _storage_error("read", exc) from None

    async def stat(self, name: str) -> StoredObject | None:
        try:
            head = await (await self._s3()).head_object(Bucket=self._bucket, Key=self._key(name))
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise _storage_error("stat", exc) from None
        except BotoCoreError as exc:
            raise _storage_error("stat", exc) from None
        return StoredObject(name, head["ContentLength"], head["LastModified"].timestamp())

    async def delete(self, names: Sequence[str]) -> None:
        s3 = await self._s3()
        for at in range(0, len(names), _DELETES_IN_FLIGHT):
            batch = names[at : at + _DELETES_IN_FLIGHT]
            await asyncio.gather(
                *(_call("delete", s3.delete_object(Bucket=self._bucket, Key=self._key(n))) for n in batch)
            )

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        pages = (
            (await self._s3())
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self._bucket, Prefix=self._key(prefix))
        )
        try:
            async for page in pages:
                for entry in page.get("Contents", []):
                    key = entry.get("Key", "")
                    if key.startswith(self._prefix):
                        modified = entry.get("LastModified")
                        yield StoredObject(
                            key[len(self._prefix) :],
                            entry.get("Size", 0),
                            modified.timestamp() if modified is not None else 0.0,
                        )
        except (BotoCoreError, ClientError) as exc:
            raise _storage_error("list", exc) from None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await self._stack.aclose()


class _Upload:
    """One multipart upload in progress."""

    def __init__(self, s3: S3Client, bucket: str, key: str, upload_id: str) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._key = key
        self._id = upload_id
        self.parts: list[CompletedPartTypeDef] = []

    @classmethod
    async def begin(cls, s3: S3Client, bucket: str, key: str) -> _Upload:
        made = await _call("write", s3.create_multipart_upload(Bucket=bucket, Key=key))
        return cls(s3, bucket, key, made["UploadId"])

    async def part(self, data: bytes) -> None:
        number = len(self.parts) + 1
        sent = await _call(
            "write",
            self._s3.upload_part(
                Bucket=self._bucket, Key=self._key, UploadId=self._id, PartNumber=number, Body=data
            ),
        )
        self.parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    async def complete(self) -> None:
        await _call(
            "write",
            self._s3.complete_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=self._id, MultipartUpload={"Parts": self.parts}
            ),
        )

    async def abort(self) -> None:
        """Best effort, and never in place of the error that led here: a store that cannot abort
        (s3rver answers 405) keeps the parts until its lifecycle rule removes them."""
        with contextlib.suppress(BotoCoreError, ClientError, OSError, asyncio.TimeoutError):
            await self._s3.abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._id)


async def _call(operation: str, pending: Any) -> Any:
    """Awaits one client call, its errors as StorageError."""
    try:
        return await pending
    except (BotoCoreError, ClientError) as exc:
        raise _storage_error(operation, exc) from None


def _code(exc: ClientError) -> str:
    error: Mapping[str, Any] = exc.response.get("Error", {})
    return str(error.get("Code", ""))


def _storage_error(operation: str, exc: BaseException) -> StorageError:
    """The operation and the store's error code or botocore's error class: botocore's messages
    name the endpoint URL (EndpointConnectionError) and the server's may name the bucket."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return StorageError(f"s3 {operation}: {_code(exc) or 'error'} (HTTP {status})")
    return StorageError(f"s3 {operation}: {type(exc).__name__}")
