"""The artifact store, addressed by URI: `file://DIR` (default `file://.day0`) or `s3://bucket/prefix`
through boto3 against any S3-compatible endpoint (`DAY0_STORE_ENDPOINT_URL`).

Contract: writes are all-or-nothing (file: temp file + rename; S3: single PUT), so a crash never
leaves a half-written result. Keys are '/'-separated paths relative to the store root.
"""

from __future__ import annotations

import json
import os
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from day0.errors import StoreError
from day0.settings import StoreSettings

__all__ = ["ArtifactStore", "FileStore", "S3Store", "open_store"]


class ArtifactStore(ABC):
    uri: str

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store `data` atomically under `key`; return the object's URL."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]: ...

    @abstractmethod
    def url(self, key: str) -> str: ...

    @abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under `prefix/`; return how many were deleted."""

    def put_text(self, key: str, text: str, content_type: str = "text/plain; charset=utf-8") -> str:
        return self.put_bytes(key, text.encode(), content_type)

    def put_json(self, key: str, obj: Any) -> str:
        return self.put_text(key, json.dumps(obj, indent=2) + "\n", "application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))


class FileStore(ArtifactStore):
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents and path != self.root:
            raise StoreError(f"key {key!r} escapes the store root {self.root}")
        return path

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.url(key)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{self.url(key)} does not exist") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        base = self.root / prefix
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*")
                      if p.is_file() and not p.name.endswith(".tmp"))

    def url(self, key: str) -> str:
        return f"file://{self.root / key}"

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix.rstrip("/") + "/")
        for key in keys:
            self._path(key).unlink(missing_ok=True)
        return len(keys)

    def local_path(self, key: str) -> Path:
        return self._path(key)


class S3Store(ArtifactStore):
    def __init__(self, bucket: str, prefix: str = "", settings: StoreSettings | None = None):
        import boto3

        self.settings = settings or StoreSettings()
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.client = boto3.client(
            "s3", endpoint_url=self.settings.endpoint_url, region_name=self.settings.region,
            aws_access_key_id=self.settings.access_key_id, aws_secret_access_key=self.settings.secret_access_key)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot write {self.url(key)}: {exc}") from None
        return self.url(key)

    def get_bytes(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            raise StoreError(f"cannot read {self.url(key)}: {exc}") from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError:
            return False

    def list(self, prefix: str = "") -> list[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        full = self._key(prefix)
        keys = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            keys += [obj["Key"] for obj in page.get("Contents", [])]
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(k[strip:] for k in keys)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix.rstrip("/") + "/")
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": self._key(k)} for k in keys[start:start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(keys)


def open_store(uri: str, settings: StoreSettings | None = None) -> ArtifactStore:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return FileStore(parsed.netloc + parsed.path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreError(f"storage {uri!r}: expected s3://bucket[/prefix]")
        return S3Store(parsed.netloc, parsed.path, settings)
    raise StoreError(f"storage {uri!r}: expected a file:// or s3:// URI")
