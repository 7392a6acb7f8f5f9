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
exists writes nothing; `aged` and `delete` are for the garbage collector (`gc`).

An object's modification time is when it was last written *or reused*: a `put` that finds
the object older than `REFRESH_SECONDS` refreshes it (a file's mtime is touched, an S3
object written again). So an object a snapshot reuses is never older than that, and a gc
whose grace period is at least as long never removes an object a running tool just
reused, even one no run's checkpoint reached until then.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from ...contract.errors import UserError

__all__ = [
    "DEFAULT_STORE_DIR",
    "REFRESH_SECONDS",
    "STORE_ENV",
    "Aged",
    "FileStore",
    "FsspecStore",
    "MemoryStore",
    "ObjectStore",
    "default_store_url",
    "open_store",
]

STORE_ENV = "DURABLE_AGENT_WORKSPACE_STORE"
DEFAULT_STORE_DIR = ".durable-agent/workspaces"
REFRESH_SECONDS = 600.0
"""A `put` that finds its object older than this makes it new again (see above): the
shortest grace period a gc may use while workers run."""

Aged = tuple[str, float, int]
"""An object id, when it was last written or reused (seconds since the epoch), its size."""


class ObjectStore(ABC):
    """Immutable objects by id. `writes` counts the objects `put` actually wrote (what a
    snapshot cost), for tests and benchmarks. `parallel`: how many requests at once pay
    (a store over the network answers each in a round trip; on a local disk, threads only
    contend for the GIL: measured slower than one)."""

    url: str
    parallel = 1

    def __init__(self) -> None:
        self.writes = 0
        self._count = threading.Lock()

    def _wrote(self) -> None:
        with self._count:
            self.writes += 1

    @abstractmethod
    def exists(self, oid: str) -> bool: ...

    @abstractmethod
    def modified(self, oid: str) -> float | None:
        """When the object was last written or reused (epoch seconds); None when missing."""

    @abstractmethod
    def _refresh(self, oid: str, data: bytes | Path) -> None:
        """Makes an existing object's modification time now."""

    def aged(self) -> Iterator[Aged]:
        """Every object with its modification time and size (for a gc)."""
        for oid in self.list():
            when = self.modified(oid)
            if when is not None:
                yield oid, when, 0

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

    def _present(self, oid: str, data: bytes | Path) -> bool:
        """Whether the object is there, refreshing it when it is old (see the module)."""
        when = self.modified(oid)
        if when is None:
            return False
        if time.time() - when > REFRESH_SECONDS:
            self._refresh(oid, data)
        return True

    def put(self, oid: str, data: bytes) -> bool:
        """Stores `data` as `oid` unless it is there; whether it wrote."""
        if self._present(oid, data):
            return False
        self._write(oid, data)
        self._wrote()
        return True

    def put_file(self, oid: str, path: Path) -> bool:
        """`put` of a local file's content, copied in pieces (never whole in memory)."""
        if self._present(oid, path):
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
        self._made: set[str] = set()
        """Folders this process made (a gc never removes them)."""

    def _path(self, oid: str) -> Path:
        return self._objects / oid[:2] / oid[2:]

    def exists(self, oid: str) -> bool:
        return os.path.isfile(f"{self._objects}/{oid[:2]}/{oid[2:]}")

    def modified(self, oid: str) -> float | None:
        try:
            return os.stat(f"{self._objects}/{oid[:2]}/{oid[2:]}").st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _refresh(self, oid: str, data: bytes | Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.utime(f"{self._objects}/{oid[:2]}/{oid[2:]}")

    def aged(self) -> Iterator[Aged]:
        if not self._objects.is_dir():
            return
        with os.scandir(self._objects) as fans:
            for fan in sorted(fans, key=lambda f: f.name):
                if not fan.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(fan.path) as items:
                    for item in sorted(items, key=lambda i: i.name):
                        with contextlib.suppress(FileNotFoundError):
                            info = item.stat(follow_symlinks=False)
                            yield fan.name + item.name, info.st_mtime, info.st_size

    def stale_temporaries(self, older_than: float) -> list[Path]:
        """Temporary files of uploads that never finished (a killed worker), older than
        `older_than` seconds: a gc removes them too."""
        if not self._tmp.is_dir():
            return []
        cutoff = time.time() - older_than
        return [p for p in self._tmp.iterdir() if p.stat().st_mtime < cutoff]

    def get(self, oid: str) -> bytes:
        try:
            fd = os.open(f"{self._objects}/{oid[:2]}/{oid[2:]}", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(oid) from None
        try:
            with open(fd, "rb", buffering=0, closefd=False) as source:
                return source.readall()
        finally:
            os.close(fd)

    def open(self, oid: str) -> IO[bytes]:
        try:
            return open(f"{self._objects}/{oid[:2]}/{oid[2:]}", "rb", buffering=0)
        except FileNotFoundError:
            raise KeyError(oid) from None

    def _place(self, oid: str, fill: Any) -> None:
        fan = f"{self._objects}/{oid[:2]}"
        if fan not in self._made:
            os.makedirs(fan, exist_ok=True)
            os.makedirs(self._tmp, exist_ok=True)
            self._made.add(fan)
        temp = f"{self._tmp}/{oid}.{uuid.uuid4().hex}"
        try:
            with open(temp, "wb") as out:
                fill(out)
            os.replace(temp, f"{fan}/{oid[2:]}")
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise

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
        self._times: dict[str, float] = {}

    def exists(self, oid: str) -> bool:
        return oid in self._objects

    def modified(self, oid: str) -> float | None:
        return self._times.get(oid) if oid in self._objects else None

    def _refresh(self, oid: str, data: bytes | Path) -> None:
        self._times[oid] = time.time()

    def aged(self) -> Iterator[Aged]:
        for oid in sorted(self._objects):
            yield oid, self._times.get(oid, 0.0), len(self._objects[oid])

    def age(self, oid: str, seconds: float) -> None:
        """Makes an object look `seconds` older (tests of a gc's grace period)."""
        self._times[oid] = self._times.get(oid, time.time()) - seconds

    def get(self, oid: str) -> bytes:
        return self._objects[oid]

    def open(self, oid: str) -> IO[bytes]:
        import io

        return io.BytesIO(self._objects[oid])

    def _write(self, oid: str, data: bytes) -> None:
        self._objects[oid] = bytes(data)
        self._times[oid] = time.time()

    def _write_file(self, oid: str, path: Path) -> None:
        self._objects[oid] = path.read_bytes()
        self._times[oid] = time.time()

    def list(self) -> Iterator[str]:
        yield from sorted(self._objects)

    def delete(self, oid: str) -> None:
        self._objects.pop(oid, None)
        self._times.pop(oid, None)

    def corrupt(self, oid: str, data: bytes) -> None:
        """Replaces an object's bytes without checking them (tests of corrupt stores)."""
        self._objects[oid] = data


class FsspecStore(ObjectStore):
    """A store on an fsspec filesystem (`s3://bucket/prefix` through s3fs)."""

    parallel = 16

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

    def modified(self, oid: str) -> float | None:
        try:
            info = self.fs.info(self._path(oid))
        except FileNotFoundError:
            return None
        return _epoch(info)

    def _refresh(self, oid: str, data: bytes | Path) -> None:
        # S3 cannot touch an object: writing it again (same bytes) makes it new
        if isinstance(data, Path):
            self._write_file(oid, data)
        else:
            self._write(oid, data)

    def aged(self) -> Iterator[Aged]:
        root = f"{self._base}/objects"
        try:
            found = self.fs.find(root, detail=True)
        except FileNotFoundError:
            return
        for item, info in sorted(found.items()):
            fan, name = str(item).rsplit("/", 2)[-2:]
            yield fan + name, _epoch(info), int(info.get("size") or 0)

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


def _epoch(info: dict[str, Any]) -> float:
    """An fsspec listing's modification time (S3's `LastModified`, a local `mtime`); now
    when the listing has none (a gc then keeps the object rather than guess)."""
    when = info.get("LastModified") or info.get("mtime") or info.get("created")
    if isinstance(when, datetime):
        return when.timestamp()
    if isinstance(when, int | float):
        return float(when)
    if isinstance(when, str):
        return datetime.fromisoformat(when).timestamp()
    return time.time()


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
