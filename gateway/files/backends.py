"""`open_storage(url)`: the file storage SLUICEGATE_FILES_URL names.

file:///path    a directory (gateway.files.directory), local or a ReadWriteMany volume
s3://bucket/... object storage (gateway.files.s3, when installed)
"""

from __future__ import annotations

import importlib

from gateway.errors import ConfigError
from gateway.files.directory import DirectoryStorage
from gateway.files.storage import FileStorage


def open_storage(url: str) -> FileStorage:
    if url.startswith("file://"):
        try:
            return DirectoryStorage.from_url(url)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"SLUICEGATE_FILES_URL: {exc}") from None
    if url.startswith("s3://"):
        try:
            s3 = importlib.import_module("gateway.files.s3")
        except ImportError:
            raise ConfigError(
                "SLUICEGATE_FILES_URL: s3:// needs gateway.files.s3 (object storage), which this "
                "build does not have; use file:///path"
            ) from None
        storage: FileStorage = s3.S3Storage.from_url(url)
        return storage
    raise ConfigError("SLUICEGATE_FILES_URL: must be file:///path or s3://bucket/prefix")
