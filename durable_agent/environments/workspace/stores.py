"""Where workspace objects live: a store the workers of a task queue share, chosen by URL.

- `file:///path` (the default: `.durable-agent/workspaces` under the current directory):
  one file per object under `objects/ab/cdef...`, written to a temporary file and renamed
  into place, so a reader never sees half an object and two writers of one id both win.
- `memory://[name]`: a dict in this process (tests, one-process runs); one store per name.
- `s3://bucket/prefix`: S3 (or any S3 API) through fsspec/s3fs (`pip install
  durable-agent[s3]`), configured by the usual `AWS_*` variables, `AWS_ENDPOINT_URL`
  included.

`DURABLE_AGENT_WORKSPACE_STORE` names the store (`DurableAgentPlugin(workspace_store=...)`
does for a worker). Stores hold bytes by id and check nothing: readers check each object
against its id (`trees`, `materializer`). Objects are immutable, so `put` of an id that
exists writes nothing; `list` and `delete` are for a garbage collector.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from ...contract.errors import UserError

__all__ = [
    "DEFAULT_STORE_DIR",
    "STORE_ENV",
    "FileStore",
    "FsspecStore",
    "MemoryStore",
    "ObjectStore",
    "default_store_url",
    "open_store",
]

STORE_ENV = "DURABLE_AGENT_WORKSPACE_STORE"
DEFAULT_STORE_DIR = ".durable-agent/workspaces"


class ObjectStore(ABC):
    """Immutable objects by id. `writes` counts the objects `put` actually wrote (what a
    snapshot cost), for tests and benchmarks."""

    url: str

    def __init__(self) -> None:
        self.writes = 0
        self._count = threading.Lock()

    def _wrote(self) -> None:
        with self._count:
            self.writes += 1

    @abstractmethod
    def exists(self, oid: str) -> bool: ...

    @abstractmethod
    def get(self, oid: str) -> bytes:
        """The object's bytes; `KeyError` when the store does not have it."""

    @abstractmethod
    def open(self, oid: str) -> IO[bytes]:
        """The object for reading in pieces (large blobs); `KeyError` when missing."""

    @abstractmethod
    def _write(self, oid: str, data: bytes) -> None: ...

    @abstractmethod
    def _write_file(self, oid: str, path: Path) -> None: ...

    @abstractmethod
    def list(self) -> Iterator[str]:
        """Every object id in the store."""

    @abstractmethod
    def delete(self, oid: str) -> None: ...

    def put(self, oid: str, data: bytes) -> bool:
        """Stores `data` as `oid` unless it is there; whether it wrote."""
        if self.exists(oid):
            return False
        self._write(oid, data)
        self._wrote()
        return True

    def put_file(self, oid: str, path: Path) -> bool:
        """`put` of a local file's content, copied in pieces (never whole in memory)."""
        if self.exists(oid):
            return False
        self._write_file(oid, path)
        self._wrote()
        return True


class FileStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.url = root.as_uri()
        self._objects = root / "objects"
        self._tmp = root / "tmp"

    def _path(self, oid: str) -> Path:
        return self._objects / oid[:2] / oid[2:]

    def exists(self, oid: str) -> bool:
        return os.path.isfile(f"{self._objects}/{oid[:2]}/{oid[2:]}")

    def get(self, oid: str) -> bytes:
        try:
            return self._path(oid).read_bytes()
        except FileNotFoundError:
            raise KeyError(oid) from None

    def open(self, oid: str) -> IO[bytes]:
        try:
            return open(f"{self._objects}/{oid[:2]}/{oid[2:]}", "rb", buffering=0)
        except FileNotFoundError:
            raise KeyError(oid) from None

    def _place(self, oid: str, fill: Any) -> None:
        target = self._path(oid)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)
        temp = self._tmp / f"{oid}.{uuid.uuid4().hex}"
        try:
            with temp.open("wb") as out:
                fill(out)
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def _write(self, oid: str, data: bytes) -> None:
        self._place(oid, lambda out: out.write(data))

    def _write_file(self, oid: str, path: Path) -> None:
        def copy(out: IO[bytes]) -> None:
            with path.open("rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)

        self._place(oid, copy)

    def list(self) -> Iterator[str]:
        if not self._objects.is_dir():
            return
        for fan in sorted(self._objects.iterdir()):
            for item in sorted(fan.iterdir()):
                yield fan.name + item.name

    def delete(self, oid: str) -> None:
        self._path(oid).unlink(missing_ok=True)


class MemoryStore(ObjectStore):
    def __init__(self, name: str = "") -> None:
        super().__init__()
        self.url = f"memory://{name}"
        self._objects: dict[str, bytes] = {}

    def exists(self, oid: str) -> bool:
        return oid in self._objects

    def get(self, oid: str) -> bytes:
        return self._objects[oid]

    def open(self, oid: str) -> IO[bytes]:
        import io

        return io.BytesIO(self._objects[oid])

    def _write(self, oid: str, data: bytes) -> None:
        self._objects[oid] = bytes(data)

    def _write_file(self, oid: str, path: Path) -> None:
        self._objects[oid] = path.read_bytes()

    def list(self) -> Iterator[str]:
        yield from sorted(self._objects)

    def delete(self, oid: str) -> None:
        self._objects.pop(oid, None)

    def corrupt(self, oid: str, data: bytes) -> None:
        """Replaces an object's bytes without checking them (tests of corrupt stores)."""
        self._objects[oid] = data


class FsspecStore(ObjectStore):
    """A store on an fsspec filesystem (`s3://bucket/prefix` through s3fs)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError as error:  # pragma: no cover - the s3 extra installs it
            raise UserError(
                f"the workspace store {url!r} needs fsspec and s3fs: pip install "
                "'durable-agent[s3]'"
            ) from error
        parsed = urlparse(url)
        # other workers write the same store: never answer from a cached listing
        options: dict[str, Any] = {"use_listings_cache": False}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if parsed.scheme == "s3" and endpoint:
            options["endpoint_url"] = endpoint
        self.url = url
        self.fs = fsspec.filesystem(parsed.scheme, **options)
        self._base = f"{parsed.netloc}{parsed.path}".rstrip("/")

    def _path(self, oid: str) -> str:
        return f"{self._base}/objects/{oid[:2]}/{oid[2:]}"

    def exists(self, oid: str) -> bool:
        return bool(self.fs.exists(self._path(oid)))

    def get(self, oid: str) -> bytes:
        try:
            data: bytes = self.fs.cat_file(self._path(oid))
        except FileNotFoundError:
            raise KeyError(oid) from None
        return data

    def open(self, oid: str) -> IO[bytes]:
        try:
            handle: IO[bytes] = self.fs.open(self._path(oid), "rb")
        except FileNotFoundError:
            raise KeyError(oid) from None
        return handle

    def _write(self, oid: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(oid), data)

    def _write_file(self, oid: str, path: Path) -> None:
        self.fs.put_file(str(path), self._path(oid))

    def list(self) -> Iterator[str]:
        root = f"{self._base}/objects"
        try:
            found = self.fs.find(root)
        except FileNotFoundError:
            return
        for item in sorted(found):
            fan, name = str(item).rsplit("/", 2)[-2:]
            yield fan + name

    def delete(self, oid: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(oid))


_MEMORY: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


def default_store_url() -> str:
    """`DURABLE_AGENT_WORKSPACE_STORE`, else `.durable-agent/workspaces` here."""
    configured = os.environ.get(STORE_ENV, "").strip()
    if configured:
        return configured
    return (Path.cwd() / DEFAULT_STORE_DIR).as_uri()


def open_store(url: str | None = None) -> ObjectStore:
    """The store a URL names (default: `default_store_url()`). `memory://name` is one store
    per name in this process, so runs that resume later find what earlier ones wrote."""
    url = url or default_store_url()
    parsed = urlparse(url)
    if parsed.scheme == "memory":
        name = f"{parsed.netloc}{parsed.path}"
        with _MEMORY_LOCK:
            store = _MEMORY.get(name)
            if store is None:
                store = _MEMORY[name] = MemoryStore(name)
            return store
    if parsed.scheme == "file":
        return FileStore(Path(f"{parsed.netloc}{parsed.path}").resolve())
    if parsed.scheme == "":
        return FileStore(Path(url).resolve())
    if parsed.scheme in ("s3", "gs", "gcs", "az", "abfs"):
        return FsspecStore(url)
    raise UserError(
        f"unknown workspace store {url!r}: use file:///path, s3://bucket/prefix or memory://"
    )
