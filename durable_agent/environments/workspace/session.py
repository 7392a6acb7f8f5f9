"""One tool call's workspace: the `ctx.workspace` a tool sees, and what its call changed.

The workspace is materialized lazily, at the tool's first use of it: a tool that never
touches its workspace costs no I/O. The file methods work on the checkout's real files
(so `local_dir()` and processes see them) and note which paths they changed; `commit`
then stores only those, or scans the directory when the tool had `local_dir()`. Every
path is checked part by part against the checkout (`lstat`), so a link, even one a
process made, never leads a read or write out of the workspace.

A restore failure (a missing or corrupt object) is kept as well as raised: a tool that
catches every exception cannot hide it, the call fails the run with it.
"""

from __future__ import annotations

import os
import stat
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from ...contract.environment import EnvironmentChange
from ...contract.errors import EnvironmentRestoreFailed, WorkspaceError
from .materializer import Checkout, Materializer
from .objects import Entry, check_path, tree_id_of, workspace_ref
from .spec import DEFAULT_MAX_BYTES, WorkspaceSpec

__all__ = ["CallWorkspace"]


class CallWorkspace:
    """`ctx.workspace` for one call of run `run`, starting from the tree `ref` names."""

    def __init__(
        self,
        materializer: Materializer,
        ref: str,
        run: str,
        spec: WorkspaceSpec | None,
        ensure: Callable[[str], None],
        reupload: Callable[[str], bool] | None = None,
    ) -> None:
        self._materializer = materializer
        self._ref = ref
        self._tree = tree_id_of(ref)
        self._run = run
        self._limit = spec.max_bytes if spec is not None else DEFAULT_MAX_BYTES
        self._ensure = ensure
        self._reupload = reupload
        self._lock = threading.RLock()
        self._checkout: Checkout | None = None
        self._changed: set[str] = set()
        self._scan = False
        self._size = 0
        self.failure: EnvironmentRestoreFailed | None = None

    # -- the checkout --------------------------------------------------------------------

    def _root(self) -> Path:
        with self._lock:
            if self._checkout is None:
                try:
                    self._checkout = self._restore()
                    self._size = self._materializer.trees.size(self._tree)
                except EnvironmentRestoreFailed as failure:
                    self.failure = failure
                    raise
            return self._checkout.path

    def _restore(self) -> Checkout:
        """The call's checkout. The agent's initial tree is uploaded again when objects of
        it are missing (a gc removed them while no run reached them): it can always be
        made again from the agent's definition; any other missing object fails."""
        try:
            self._ensure(self._tree)
            return self._materializer.acquire(self._run, self._tree)
        except EnvironmentRestoreFailed:
            if self._reupload is None or not self._reupload(self._tree):
                raise
        return self._materializer.acquire(self._run, self._tree)

    def prepare(self) -> None:
        """Materializes the tree now rather than at the tool's first use."""
        self._root()

    def _file(self, path: str, *, existing: bool) -> tuple[str, Path]:
        """The checked path and its file in the checkout; every part above it must be a
        real directory, and the file (if `existing`) a regular file."""
        parts = check_path(path)
        root = self._root()
        current = root
        for part in parts[:-1]:
            current = current / part
            try:
                info = current.lstat()
            except FileNotFoundError:
                if existing:
                    raise WorkspaceError(f"no such file in the workspace: {path!r}") from None
                break
            if stat.S_ISLNK(info.st_mode):
                raise WorkspaceError(f"{path!r} goes through a link; links are not followed")
            if not stat.S_ISDIR(info.st_mode):
                raise WorkspaceError(f"{path!r}: {current.relative_to(root)} is a file")
        target = root.joinpath(*parts)
        try:
            info = target.lstat()
        except FileNotFoundError:
            if existing:
                raise WorkspaceError(f"no such file in the workspace: {path!r}") from None
            return "/".join(parts), target
        if stat.S_ISLNK(info.st_mode):
            raise WorkspaceError(f"{path!r} is a link; links are not followed")
        if stat.S_ISDIR(info.st_mode):
            raise WorkspaceError(f"{path!r} is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{path!r} is not a regular file (a device, socket or pipe)")
        return "/".join(parts), target

    # -- what a tool calls ---------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        _, target = self._file(path, existing=True)
        return target.read_bytes()

    def read_text(self, path: str) -> str:
        data = self.read_bytes(path)
        try:
            return data.decode()
        except UnicodeDecodeError as error:
            raise WorkspaceError(f"{path!r} is not UTF-8 text ({error})") from error

    def write_bytes(self, path: str, data: bytes) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise WorkspaceError(f"write_bytes takes bytes, got {type(data).__name__}")
        data = bytes(data)
        with self._lock:
            name, target = self._file(path, existing=False)
            old = target.stat().st_size if target.exists() else 0
            total = None if self._scan else self._size - old + len(data)
            if total is not None and total > self._limit:
                raise WorkspaceError(
                    f"writing {len(data)} bytes to {name!r} would make the workspace "
                    f"{total} bytes, over its limit of {self._limit}; nothing was written"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            temp = self._materializer.tmp / uuid.uuid4().hex
            try:
                temp.write_bytes(data)
                os.replace(temp, target)
            finally:
                temp.unlink(missing_ok=True)
            self._changed.add(name)
            if total is not None:
                self._size = total

    def write_text(self, path: str, text: str) -> None:
        if not isinstance(text, str):
            raise WorkspaceError(f"write_text takes a str, got {type(text).__name__}")
        self.write_bytes(path, text.encode())

    def delete(self, path: str) -> None:
        with self._lock:
            name, target = self._file(path, existing=True)
            size = target.stat().st_size
            target.unlink()
            root = self._root()
            parent = target.parent
            while parent != root:
                try:
                    parent.rmdir()
                except OSError:
                    break
                parent = parent.parent
            self._changed.add(name)
            self._size -= size

    def exists(self, path: str) -> bool:
        parts = check_path(path)
        root = self._root()
        current = root
        for part in parts:
            current = current / part
            try:
                info = current.lstat()
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(info.st_mode):
                return False
        return stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)

    def list(self, prefix: str = "") -> list[str]:
        if not isinstance(prefix, str):
            raise WorkspaceError(f"list takes a str prefix, got {type(prefix).__name__}")
        found: list[str] = []
        pending = [("", str(self._root()))]
        while pending:
            base, folder = pending.pop()
            with os.scandir(folder) as entries:
                for item in entries:
                    relative = base + item.name
                    if item.is_dir(follow_symlinks=False):
                        if prefix.startswith(relative + "/") or relative.startswith(prefix):
                            pending.append((relative + "/", item.path))
                    elif item.is_file(follow_symlinks=False) and relative.startswith(prefix):
                        found.append(relative)
        return sorted(found)

    def local_dir(self) -> Path:
        with self._lock:
            root = self._root()
            self._scan = True
            return root

    # -- after the call ------------------------------------------------------------------

    def commit(self) -> EnvironmentChange | None:
        """Stores what the call changed; the change, or None when the tree is the same.
        `WorkspaceError` (over the size limit, a link out) stores nothing."""
        with self._lock:
            checkout = self._checkout
            if checkout is None:
                return None
            if self.failure is not None:
                raise self.failure
            self._checkout = None
            if not self._scan and not self._changed:
                self._materializer.release(checkout)
                return None
            try:
                change = self._store(checkout)
            except BaseException:
                self._materializer.release(checkout, dirty=True)
                raise
            self._materializer.release(checkout)
            return change

    def discard(self) -> None:
        """The call failed: nothing it wrote counts (its checkout is repaired before its
        next use)."""
        with self._lock:
            checkout, self._checkout = self._checkout, None
            if checkout is not None:
                self._materializer.release(checkout, dirty=self._scan or bool(self._changed))

    def _store(self, checkout: Checkout) -> EnvironmentChange | None:
        materializer = self._materializer
        trees = materializer.trees
        only = None if self._scan else set(self._changed)
        scan = materializer.scan(checkout, only=only, limit=self._limit)
        before = trees.size(checkout.tree)
        if only is None:
            total = scan.size
        else:
            old = sum(
                checkout.files[p].size for p in [*scan.changed, *scan.gone] if p in checkout.files
            )
            total = before - old + sum(e.size for e in scan.changed.values())
        if total > self._limit:
            raise WorkspaceError(
                f"the workspace would hold {total} bytes, over its limit of {self._limit}; "
                "the call's changes were not kept"
            )
        if not scan.changed and not scan.gone:
            return None
        for path, entry in scan.changed.items():
            trees.store.put_file(entry.id, (checkout.path / path).resolve())
        edits: dict[tuple[str, ...], Entry | None] = {tuple(p.split("/")): None for p in scan.gone}
        edits.update({tuple(p.split("/")): e for p, e in scan.changed.items()})
        tree, _ = trees.edit(checkout.tree, edits)
        added = sorted(p for p in scan.changed if p not in checkout.files)
        modified = sorted(p for p in scan.changed if p in checkout.files)
        for path in scan.gone:
            checkout.files.pop(path, None)
        for path, entry in scan.changed.items():
            materializer.record(checkout, path, entry)
        checkout.tree = tree
        if tree == self._tree:
            return None
        return EnvironmentChange(
            base=self._ref,
            environment_ref=workspace_ref(tree),
            added=added,
            modified=modified,
            deleted=sorted(scan.gone),
        )
