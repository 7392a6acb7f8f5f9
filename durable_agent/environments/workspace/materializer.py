"""Trees as real directories on a worker (or in-process runner), kept between calls.

A host keeps, per run, a few *checkouts*: directories it materialized, each knowing the
tree it holds and each file's stat (size, mtime, mode) as it left it. When a run's next
call comes, it takes an idle checkout of that run and applies only the difference between
the tree it holds and the tree the call starts from (a diff of the two trees, skipping
equal subtrees by id); a run new to this host gets the whole tree. Calls of one run that
run at once take different checkouts, so each starts from its own snapshot.

After a call, `snapshot` stores what changed: the paths the tool wrote through the file
methods, or, when it used `local_dir()`, what a scan finds (stat first; only files whose
size, mtime or mode differ are hashed, and files written too recently for the clock to tell
are hashed too, as git does for "racy" entries). A call that fails releases its checkout
as *dirty*: the next call repairs it (by the same scan) before anything else, so a retry
starts from the tree as it was.

Files are written to a temporary file beside the checkouts, checked against their hash
while they are copied from the store, and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ...contract.errors import WorkspaceError
from .objects import EMPTY_TREE_ID, Entry
from .trees import TreeReader

__all__ = ["Checkout", "FileState", "Materializer", "Scan"]

RACY_NS = 100_000_000
"""A file whose mtime is within this of when its stat was taken may change again without
its mtime moving (coarse file system clocks): it is hashed instead of trusted."""

SETTLED_NS = 2_000_000_000
"""How far in the past a materialized or stored file's mtime is set."""

PARALLEL_FROM = 32
"""More files than this to write, from a store that answers many requests at once
(`ObjectStore.parallel`, S3's), are written by that many threads."""

WHOLE_BYTES = 1 << 20
"""Files up to this size are read whole from the store (one read, hashed, one write);
larger ones are copied in pieces, hashed on the way."""


def _umask() -> int:
    """This process's umask, read without changing it (Linux); 0o777 where unknown, so
    every file gets its mode set."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o777


_UMASK = _umask()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

MAX_RUNS = 32
MAX_IDLE_PER_RUN = 4


@dataclass(frozen=True, slots=True)
class FileState:
    blob: str
    size: int
    mtime_ns: int
    executable: bool
    seen_ns: int

    def matches(self, info: os.stat_result) -> bool:
        return (
            info.st_size == self.size
            and info.st_mtime_ns == self.mtime_ns
            and bool(info.st_mode & stat.S_IXUSR) == self.executable
            and self.mtime_ns < self.seen_ns - RACY_NS
        )


@dataclass
class Checkout:
    run: str
    path: Path
    tree: str = EMPTY_TREE_ID
    files: dict[str, FileState] = field(default_factory=dict)
    dirty: bool = False
    busy: bool = False
    used: float = 0.0


@dataclass
class Scan:
    """What a scan found against a checkout's manifest: files new or changed (with their
    entry, hashed), and paths gone."""

    changed: dict[str, Entry] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    size: int = 0


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class Materializer:
    """One host's checkouts, under a private directory removed when the host goes."""

    def __init__(self, trees: TreeReader, root: Path | None = None) -> None:
        self.trees = trees
        self.root = root or Path(tempfile.mkdtemp(prefix="durable-agent-workspaces-"))
        self.tmp = self.root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._runs: dict[str, list[Checkout]] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.root, True)

    def close(self) -> None:
        self._finalizer()

    # -- taking and giving back ----------------------------------------------------------

    def acquire(self, run: str, tree: str) -> Checkout:
        """An idle checkout of `run` holding `tree` (the closest one brought to it, or a
        new one), marked busy."""
        with self._lock:
            pool = self._runs.setdefault(run, [])
            idle = [c for c in pool if not c.busy]
            exact = [c for c in idle if c.tree == tree and not c.dirty]
            ranked = exact or sorted(idle, key=lambda c: -c.used)
            checkout = ranked[0] if ranked else None
            if checkout is None:
                path = self.root / "runs" / hashlib.sha256(run.encode()).hexdigest()[:16]
                checkout = Checkout(run, path / uuid.uuid4().hex[:8])
                pool.append(checkout)
            checkout.busy = True
            checkout.used = time.monotonic()
        try:
            checkout.path.mkdir(parents=True, exist_ok=True)
            if checkout.dirty:
                self._repair(checkout)
            self._bring(checkout, tree)
        except BaseException:
            self.release(checkout, dirty=True)
            raise
        return checkout

    def release(self, checkout: Checkout, *, dirty: bool = False) -> None:
        evicted: list[Checkout] = []
        with self._lock:
            checkout.busy = False
            checkout.dirty = checkout.dirty or dirty
            checkout.used = time.monotonic()
            pool = self._runs.get(checkout.run, [])
            idle = sorted((c for c in pool if not c.busy), key=lambda c: -c.used)
            evicted.extend(idle[MAX_IDLE_PER_RUN:])
            runs = sorted(
                self._runs.items(), key=lambda item: -max((c.used for c in item[1]), default=0)
            )
            for run, checkouts in runs[MAX_RUNS:]:
                if not any(c.busy for c in checkouts):
                    evicted.extend(checkouts)
                    del self._runs[run]
            for gone in evicted:
                if gone in self._runs.get(gone.run, []):
                    self._runs[gone.run].remove(gone)
        for gone in evicted:
            shutil.rmtree(gone.path, ignore_errors=True)

    # -- bringing a checkout to a tree ---------------------------------------------------

    def _bring(self, checkout: Checkout, tree: str) -> None:
        diff = self.trees.diff(checkout.tree, tree)
        for path in diff.deleted:
            self._remove(checkout, path)
        root = str(checkout.path)
        writes = [*diff.added.items(), *diff.modified.items()]
        if checkout.tree == EMPTY_TREE_ID and not checkout.files and not checkout.dirty:
            # a new checkout: its folders are made once each, nothing is in the way (a file
            # that is, all the same, is cleared by `_create`)
            targets = self._folders(root, writes)
        else:
            ready: set[str] = set()
            targets = [
                (self._clear_way(root, checkout, path, ready), path, entry)
                for path, entry in writes
            ]
        writers = self.trees.store.parallel
        if len(targets) > PARALLEL_FROM and writers > 1:
            with ThreadPoolExecutor(writers, thread_name_prefix="materialize") as pool:
                for _ in pool.map(lambda t: self._create(checkout, *t), targets):
                    pass
        else:
            for target in targets:
                self._create(checkout, *target)
        checkout.tree = tree

    @staticmethod
    def _folders(root: str, writes: list[tuple[str, Entry]]) -> list[tuple[str, str, Entry]]:
        """Makes the folders of a new checkout's files, parents first; the files' targets."""
        folders: set[str] = set()
        for path, _ in writes:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folders.add("/".join(parts[:depth]))
        for folder in sorted(folders):
            with contextlib.suppress(FileExistsError):
                os.mkdir(f"{root}/{folder}")
        return [(f"{root}/{path}", path, entry) for path, entry in writes]

    def _remove(self, checkout: Checkout, path: str) -> None:
        target = checkout.path / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        checkout.files.pop(path, None)
        parent = target.parent
        while parent != checkout.path:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def _write_blob(
        self, checkout: Checkout, path: str, entry: Entry, ready: set[str] | None = None
    ) -> None:
        """Writes the file anew (never through what is there: a link, or an inode a
        process linked elsewhere, is replaced, not written to), checked against its hash
        as it is copied; a file that does not match is removed and the error raised."""
        root = str(checkout.path)
        target = self._clear_way(root, checkout, path, set() if ready is None else ready)
        self._create(checkout, target, path, entry)

    def _create(self, checkout: Checkout, target: str, path: str, entry: Entry) -> None:
        try:
            fd = os.open(target, _CREATE, 0o644)
        except (FileExistsError, NotADirectoryError, FileNotFoundError):
            target = self._clear_way(str(checkout.path), checkout, path, set())
            fd = os.open(target, _CREATE, 0o644)
        try:
            if entry.size <= WHOLE_BYTES:
                data = memoryview(self.trees.read_blob(entry.id))
                while data:
                    data = data[os.write(fd, data) :]
            else:
                with open(fd, "wb", buffering=0, closefd=False) as out:
                    self.trees.copy_blob(entry.id, out)
            mode = 0o755 if entry.executable else 0o644
            if entry.executable or _UMASK & 0o644:
                os.fchmod(fd, mode)
            past = time.time_ns() - SETTLED_NS
            os.utime(fd, ns=(past, past))
            info = os.fstat(fd)
        except BaseException:
            os.unlink(target)
            checkout.files.pop(path, None)
            raise
        finally:
            os.close(fd)
        checkout.files[path] = FileState(
            entry.id, entry.size, info.st_mtime_ns, entry.executable, time.time_ns()
        )

    def _clear_way(self, root: str, checkout: Checkout, path: str, ready: set[str]) -> str:
        """Makes the directories above `path` real directories (a file or a link in the
        way is removed) and removes whatever is at `path`; the path to create. `ready`:
        directories already made real in this pass."""
        parts = path.split("/")
        current = root
        for depth, part in enumerate(parts[:-1]):
            current = f"{current}/{part}"
            if current in ready:
                continue
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                os.mkdir(current)
            else:
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(current)
                    checkout.files.pop("/".join(parts[: depth + 1]), None)
                    os.mkdir(current)
            ready.add(current)
        target = f"{root}/{path}"
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return target
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(target)
        else:
            os.unlink(target)
        return target

    def _repair(self, checkout: Checkout) -> None:
        """A checkout a failed call left: every path that differs from its manifest is
        removed (links and device files included) and written again from its tree."""
        scan = self.scan(checkout, strict=False)
        for path in [*scan.changed, *scan.gone]:
            self._remove(checkout, path)
        for extra in sorted(self._stray_dirs(checkout), reverse=True):
            shutil.rmtree(extra, ignore_errors=True)
        wanted = self.trees.files(checkout.tree)
        for path, entry in wanted.items():
            if path not in checkout.files:
                self._write_blob(checkout, path, entry)
        checkout.dirty = False

    def _stray_dirs(self, checkout: Checkout) -> list[Path]:
        kept = {checkout.path}
        for path in checkout.files:
            parent = (checkout.path / path).parent
            while parent not in kept:
                kept.add(parent)
                parent = parent.parent
        stray = []
        for folder, dirs, _ in os.walk(checkout.path):
            for name in dirs:
                candidate = Path(folder) / name
                if candidate not in kept:
                    stray.append(candidate)
        return stray

    # -- what a call changed -------------------------------------------------------------

    def scan(
        self,
        checkout: Checkout,
        *,
        strict: bool = True,
        only: set[str] | None = None,
        limit: int | None = None,
    ) -> Scan:
        """The checkout's files against its manifest (`only`: just those paths). `strict`
        (a snapshot) refuses links out of the workspace and device files, and (with
        `limit`, when every file is scanned) more bytes than `limit` before hashing any;
        otherwise (a repair) they are reported changed, to be removed."""
        found = Scan()
        to_hash: list[tuple[str, Path, os.stat_result, FileState | None]] = []
        root = checkout.path
        base = str(root)
        seen: set[str] = set()
        known_files = checkout.files
        candidates = self._walk(root) if only is None else self._stat(base, only)
        for relative, info in candidates:
            target: Path | None = None
            mode = info.st_mode
            seen.add(relative)
            if stat.S_ISREG(mode):
                # the common case, kept short: a file as the manifest left it
                found.size += info.st_size
                known = known_files.get(relative)
                if known is not None and known.matches(info):
                    continue
            if stat.S_ISLNK(mode):
                if not strict:
                    found.changed[relative] = Entry(relative, "file", EMPTY_TREE_ID, 0)
                    continue
                info = self._link_target(root, relative)
                target = (root / relative).resolve()
                found.size += info.st_size
                known = known_files.get(relative)
                if known is not None and known.matches(info):
                    continue
            elif not stat.S_ISREG(mode):
                if not strict:
                    found.changed[relative] = Entry(relative, "file", EMPTY_TREE_ID, 0)
                    continue
                raise WorkspaceError(
                    f"{relative!r} is not a regular file (a device, socket or pipe); a "
                    "workspace holds files only"
                )
            executable = bool(info.st_mode & stat.S_IXUSR)
            if not strict:
                found.changed[relative] = Entry(relative, "file", EMPTY_TREE_ID, info.st_size)
                continue
            to_hash.append((relative, target or root / relative, info, known))
        if limit is not None and only is None and found.size > limit:
            raise WorkspaceError(
                f"the workspace would hold {found.size} bytes, over its limit of {limit}; "
                "the call's changes were not kept"
            )
        for relative, target, info, known in to_hash:
            executable = bool(info.st_mode & stat.S_IXUSR)
            blob, size = _hash_file(target)
            if known is not None and known.blob == blob and known.executable == executable:
                continue
            found.changed[relative] = Entry(relative, "file", blob, size, executable)
        if only is None:
            found.gone = sorted(p for p in checkout.files if p not in seen)
        else:
            found.gone = sorted(p for p in only if p not in seen and p in checkout.files)
        return found

    @staticmethod
    def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
        """Every path under `root` that is not a real directory (files, links, devices),
        with its `lstat`, in no particular order."""
        out: list[tuple[str, os.stat_result]] = []
        pending = [("", str(root))]
        while pending:
            prefix, folder = pending.pop()
            with os.scandir(folder) as entries:
                for item in entries:
                    if item.is_dir(follow_symlinks=False):
                        pending.append((f"{prefix}{item.name}/", item.path))
                        continue
                    try:
                        out.append((prefix + item.name, item.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        continue
        return out

    @staticmethod
    def _stat(base: str, paths: set[str]) -> list[tuple[str, os.stat_result]]:
        """The `lstat` of each of `paths` that is there and is not a directory."""
        out = []
        for relative in sorted(paths):
            try:
                info = os.lstat(f"{base}/{relative}")
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISDIR(info.st_mode):
                out.append((relative, info))
        return out

    def _link_target(self, root: Path, relative: str) -> os.stat_result:
        resolved = (root / relative).resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise WorkspaceError(f"{relative!r} is a link out of the workspace")
        info = resolved.stat()
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{relative!r} is a link to something other than a file")
        return info

    def record(self, checkout: Checkout, path: str, entry: Entry) -> None:
        """The manifest entry for a file a snapshot stored as `entry`."""
        self._settle(checkout, path, entry)

    def _settle(self, checkout: Checkout, path: str, entry: Entry) -> None:
        """Records the file as holding `entry`, its mtime set a little in the past: any
        later write moves it (a file system's coarse clock cannot hide a change made
        within the same tick), so scans trust its stat instead of hashing it."""
        target = checkout.path / path
        past = time.time_ns() - SETTLED_NS
        os.utime(target, ns=(past, past))
        info = target.stat()
        checkout.files[path] = FileState(
            entry.id, entry.size, info.st_mtime_ns, entry.executable, time.time_ns()
        )
