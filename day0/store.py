"""The artifact store, addressed by URI: `file://DIR` (default `file://.day0`) or `s3://bucket/prefix`
through boto3 against any S3-compatible endpoint (`DAY0_STORE_ENDPOINT_URL`).

Contract: writes are all-or-nothing (file: temp file + rename; S3: single PUT), so a crash never
leaves a half-written result. Keys are '/'-separated paths relative to the store root. A file store
follows no symbolic link below its root, inside the root or out of it (a planted link made `--fresh`
of one run delete another's results): a key through one is refused naming the link. A record that
does not parse (`get_json`, `get_model`) is a `CorruptRecord` naming its URL, never a bare
JSONDecodeError.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from day0.core.typing import Document
from day0.errors import CorruptRecord, StoreError, StoreUnavailable, shorten
from day0.settings import StoreSettings

M = TypeVar("M", bound=BaseModel)

__all__ = ["FILE_MODE", "ArtifactStore", "FileStore", "S3Store", "open_store", "parse_store_uri", "write_atomically"]


# The one file mode policy for what day0 writes: readable by all, writable by the owner (umask aside).
FILE_MODE = 0o644


def write_atomically(path: Path, data: bytes, replace: bool = True) -> None:
    """Write `path` all-or-nothing (temp file + rename) with `FILE_MODE`, creating parent dirs.
    With `replace=False`, an existing file is left alone and `FileExistsError` raised (no race:
    the rename is a hard link that fails when the name exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    """The process umask, read without changing it (Linux: /proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


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

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object at `key` (none there is no error)."""

    def move_aside(self, key: str, to: str) -> str:
        """Move the object at `key` to `to` (a corrupt record kept for a person to read); return its URL."""
        url = self.put_bytes(to, self.get_bytes(key))
        self.delete(key)
        return url

    def check(self) -> None:  # noqa: B027 - optional: a store that is always reachable keeps this no-op
        """Raise `StoreUnavailable` when the store cannot be reached (cheap: no listing)."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` only if nothing is there, atomically; False when something was."""

    @abstractmethod
    def swap(self, key: str, expected: bytes, data: bytes | None) -> bool:
        """Replace the object at `key` by `data` (delete it when None) only if it holds `expected`,
        atomically (a compare-and-swap: the run lock's lease renewal, takeover and release); False when
        it holds anything else or nothing."""

    def put_text(self, key: str, text: str, content_type: str = "text/plain; charset=utf-8") -> str:
        return self.put_bytes(key, text.encode(), content_type)

    def put_json(self, key: str, obj: object) -> str:
        return self.put_text(key, json.dumps(obj, indent=2) + "\n", "application/json")

    def get_json(self, key: str) -> Document:
        try:
            return json.loads(self.get_bytes(key))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise CorruptRecord(self.url(key), f"not JSON: {shorten(str(exc), 80)}") from None

    def get_model(self, key: str, model: type[M]) -> M:
        """The JSON record at `key` as a `model`; a `CorruptRecord` when it is not one."""
        try:
            return model.model_validate(self.get_json(key))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "<root>"
            raise CorruptRecord(self.url(key), f"not a valid {model.__name__}: {where}: {first['msg']}") from None


class FileStore(ArtifactStore):
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        """`key` under the root, refusing `..`, an absolute key, and any symbolic link on the way."""
        parts = [p for p in key.split("/") if p not in ("", ".")]
        if ".." in parts or key.startswith("/"):
            raise StoreError(f"key {key!r} escapes the store root {self.root}")
        path = self.root
        for part in parts:
            path = path / part
            if path.is_symlink():
                raise StoreError(
                    f"storage {self.uri}: {path} is a symbolic link; the store follows none (a link could make "
                    "one run overwrite or delete another's files): replace it with a real folder or file"
                )
        return path

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        self._write(key, data, replace=True)
        return self.url(key)

    def create(self, key: str, data: bytes) -> bool:
        try:
            self._write(key, data, replace=False)
        except FileExistsError:
            return False
        return True

    def swap(self, key: str, expected: bytes, data: bytes | None) -> bool:
        # Compare and write under an exclusive flock of the key's folder (swaps exclude each other); the
        # write itself is a rename, so `create` never finds the key absent while a swap replaces it.
        path = self._path(key)
        try:
            folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            try:
                if path.read_bytes() != expected:
                    return False
            except FileNotFoundError:
                return False
            if data is None:
                path.unlink()
            else:
                self._write(key, data, replace=True)
            return True
        finally:
            os.close(folder)  # releases the flock

    def _write(self, key: str, data: bytes, replace: bool) -> None:
        """`write_atomically`, a full disk or a read-only folder reported as the store's state (exit 1)."""
        path = self._path(key)
        try:
            write_atomically(path, data, replace=replace)
        except OSError as exc:
            if exc.errno not in _STORE_FULL_OR_READ_ONLY:
                raise
            raise StoreUnavailable(
                f"storage {self.uri}: cannot write {path}: {_STORE_FULL_OR_READ_ONLY[exc.errno]} ({exc.strerror})"
            ) from None

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{self.url(key)} does not exist") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        if not base.exists():
            return []
        keys = []
        for p in base.rglob("*"):  # rglob enters no linked folder; a linked file is listed, and refused when used
            if (p.is_symlink() or p.is_file()) and not p.name.endswith(".tmp"):
                keys.append(str(p.relative_to(self.root)))
        return sorted(keys)

    def url(self, key: str) -> str:
        return f"file://{self.root / key}"

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix.rstrip("/") + "/")
        for key in keys:  # each checked before any is deleted: a link below stops the whole deletion
            self._path(key)
        for key in keys:
            self._path(key).unlink(missing_ok=True)
        return len(keys)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def check(self) -> None:
        """The root is a directory this process can write, or the nearest folder that exists above it
        is one (so it can be created)."""
        existing = self.root
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            what = (
                "is not a directory" if existing == self.root else f"cannot be created: {existing} is not a directory"
            )
            raise StoreUnavailable(f"storage {self.uri}: {self.root} {what}")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"storage {self.uri}: {existing} is not writable by this process")

    def local_path(self, key: str) -> Path:
        return self._path(key)


# What a write can meet that is the store's state, not a bug: said in words, without a traceback.
_STORE_FULL_OR_READ_ONLY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "this process may not write there",
    errno.EPERM: "this process may not write there",
}


class S3Store(ArtifactStore):
    def __init__(self, bucket: str, prefix: str = "", settings: StoreSettings | None = None):
        import boto3

        self.settings = settings or StoreSettings()
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.client = boto3.client(
            "s3",
            endpoint_url=self.settings.endpoint_url,
            region_name=self.settings.region,
            aws_access_key_id=self.settings.access_key_id,
            aws_secret_access_key=self.settings.secret_access_key,
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot write {self.url(key)}: {exc}") from None
        return self.url(key)

    def create(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:  # a conditional write: S3 answers 412 when the key exists
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return False
            raise StoreError(f"cannot write {self.url(key)}: {exc}") from None
        except BotoCoreError as exc:
            raise StoreUnavailable(f"storage {self.uri}: cannot reach the store: {exc}") from None
        return True

    def swap(self, key: str, expected: bytes, data: bytes | None) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:  # compared by content, written on the condition that the ETag read is still the object's
            current = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            if current["Body"].read() != expected:
                return False
            if data is None:
                self.client.delete_object(Bucket=self.bucket, Key=self._key(key), IfMatch=current["ETag"])
            else:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfMatch=current["ETag"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                return False
            raise StoreError(f"cannot write {self.url(key)}: {exc}") from None
        except BotoCoreError as exc:
            raise StoreUnavailable(f"storage {self.uri}: cannot reach the store: {exc}") from None
        return True

    def get_bytes(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            raise StoreError(f"cannot read {self.url(key)}: {exc}") from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError:
            return False
        except BotoCoreError as exc:
            raise StoreUnavailable(f"storage {self.uri}: cannot reach the store: {exc}") from None

    def check(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as exc:
            where = self.settings.endpoint_url or "the default AWS endpoint"
            raise StoreUnavailable(
                f"storage {self.uri}: cannot reach bucket {self.bucket!r} at {where} (DAY0_STORE_ENDPOINT_URL): {exc}"
            ) from None

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

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot delete {self.url(key)}: {exc}") from None

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix.rstrip("/") + "/")
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(keys)


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def parse_store_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, root, prefix) of a store URI, or `StoreError` saying what was expected.

    `file://DIR`: everything after `file://` is a path, relative to the working directory
    (`file://.day0`) or absolute (`file:///srv/day0`); there is no host part, so `file://host/x`
    is the relative directory `host/x`. The filesystem root itself is refused.
    `s3://bucket[/prefix]`: a bucket name is required."""
    shown = uri if len(uri) <= 120 else uri[:117] + "..."
    scheme, sep, rest = uri.partition("://")
    if scheme == "file" and sep:
        if not rest or Path(rest).resolve() == Path(Path(rest).resolve().anchor):
            raise StoreError(
                f"storage {shown!r}: expected file://DIR with DIR a directory other than the "
                "filesystem root (relative like file://.day0, or absolute like file:///srv/day0)"
            )
        return "file", rest, ""
    if scheme == "s3" and sep:
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.match(bucket):
            raise StoreError(
                f"storage {shown!r}: expected s3://bucket[/prefix] with a bucket name "
                "(3-63 lowercase letters, digits, '.' or '-')"
            )
        return "s3", bucket, prefix.strip("/")
    raise StoreError(f"storage {shown!r}: expected a file:// or s3:// URI")


def open_store(uri: str, settings: StoreSettings | None = None) -> ArtifactStore:
    scheme, root, prefix = parse_store_uri(uri)
    if scheme == "file":
        return FileStore(root)
    return S3Store(root, prefix, settings)
