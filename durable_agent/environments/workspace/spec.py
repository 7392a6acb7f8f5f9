"""An agent's workspace configuration: the tree a new run starts from, and its size limit.

The initial tree's ref is computed when the agent is built (`AgentBuilder.workspace`): it
is a pure function of the content, so every worker that builds the agent from the same
files computes the same ref without a store, and a new run's state names it at once. The
objects are uploaded when a worker first needs them (the tree is not in the store yet):
from the dict, or from the directory again, which must still hold what it held at build
time. A directory that is gone (or changed) then fails the run with
`environment_restore_failed` naming it, as does one missing at build time: a run never
starts with a silently empty workspace instead.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...contract.errors import EnvironmentRestoreFailed, UserError
from .objects import EMPTY_TREE_ID, Entry, check_path, encode_tree, workspace_ref
from .stores import ObjectStore

__all__ = ["DEFAULT_MAX_BYTES", "WorkspaceSpec", "read_directory"]

DEFAULT_MAX_BYTES = 1 << 30
"""A workspace holds at most 1 GiB unless its agent says otherwise."""
PARALLEL_FROM = 32
"""More files than this are uploaded by `store.parallel` threads (a store over the network
answers each put in a round trip; on a local disk one thread is fastest)."""
WHOLE_BYTES = 1 << 20

Source = bytes | Path
"""A file's content: bytes, or the local file holding them (hashed and copied in pieces)."""


def read_directory(root: Path) -> dict[str, tuple[Path, bool]]:
    """The regular files under `root` (links to files followed), by workspace path, with
    their executable bit."""
    found: dict[str, tuple[Path, bool]] = {}
    base = str(root)
    skip = len(base) + 1
    for folder, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            full = f"{folder}/{name}"
            try:
                info = os.stat(full)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[full[skip:]] = (Path(full), bool(info.st_mode & stat.S_IXUSR))
    return found


def _digest(source: Source) -> tuple[str, int]:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest(), len(source)
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _each_file(
    files: Mapping[str, tuple[Source, bool]],
    work: Callable[[Source], tuple[str, int]],
    threads: int = 1,
) -> dict[str, tuple[str, int]]:
    """`work` (a digest, an upload) of every file's content by path, by `threads` threads
    when there are many."""
    paths = list(files)
    if len(paths) <= PARALLEL_FROM or threads <= 1:
        return {path: work(files[path][0]) for path in paths}
    with ThreadPoolExecutor(threads, thread_name_prefix="workspace-files") as pool:
        return dict(zip(paths, pool.map(lambda p: work(files[p][0]), paths), strict=True))


def _store(store: ObjectStore, source: Source) -> tuple[str, int]:
    """Puts one file's content; its id and size. A small file is read once (hashed and
    written from the same bytes), a large one hashed, then copied in pieces."""
    if isinstance(source, Path) and os.stat(source).st_size <= WHOLE_BYTES:
        with open(source, "rb", buffering=0) as handle:
            source = handle.readall()
    if isinstance(source, bytes):
        blob = hashlib.sha256(source).hexdigest()
        store.put(blob, source)
        return blob, len(source)
    blob, size = _digest(source)
    store.put_file(blob, source)
    return blob, size


def hash_tree(
    files: Mapping[str, tuple[Source, bool]], store: ObjectStore | None = None
) -> tuple[str, int, list[tuple[str, bytes]]]:
    """The root id and size of the tree of `files`, and its directory objects (id, bytes);
    with `store`, the files' objects are written to it as they are read."""
    if store is not None:
        digests = _each_file(files, lambda source: _store(store, source), store.parallel)
    else:
        digests = _each_file(files, _digest)
    nested: dict[str, Any] = {}
    for path, (_, executable) in files.items():
        parts = check_path(path)
        folder = nested
        for part in parts[:-1]:
            child = folder.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"workspace path {path!r} is both a file and a directory")
            folder = child
        folder[parts[-1]] = (*digests[path], executable)

    def build(folder: dict[str, Any]) -> tuple[str, int]:
        entries: list[Entry] = []
        for name, item in folder.items():
            if isinstance(item, dict):
                sub, size = build(item)
                entries.append(Entry(name, "dir", sub, size))
            else:
                blob, size, executable = item
                entries.append(Entry(name, "file", blob, size, executable))
        data = encode_tree(entries)
        tree = hashlib.sha256(data).hexdigest()
        directories.append((tree, data))
        return tree, sum(e.size for e in entries)

    directories: list[tuple[str, bytes]] = []
    root, size = build(nested)
    return root, size, directories


@dataclass(frozen=True)
class WorkspaceSpec:
    """`initial_ref` is None when the initial directory was missing at build time
    (`problem` says so); `max_bytes` bounds the workspace's files."""

    initial_ref: str | None
    max_bytes: int = DEFAULT_MAX_BYTES
    initial: Mapping[str, bytes] | Path | None = None
    problem: str | None = None

    @classmethod
    def of(
        cls, initial: Mapping[str, str | bytes] | str | os.PathLike[str] | None, max_bytes: int
    ) -> WorkspaceSpec:
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise UserError(f"workspace max_bytes must be a positive int, got {max_bytes!r}")
        if initial is None:
            return cls(workspace_ref(EMPTY_TREE_ID), max_bytes)
        if isinstance(initial, Mapping):
            files: dict[str, bytes] = {}
            for path, content in initial.items():
                check_path(path)
                if isinstance(content, str):
                    content = content.encode()
                if not isinstance(content, bytes):
                    raise UserError(
                        f"workspace initial[{path!r}] must be str or bytes, got "
                        f"{type(content).__name__}"
                    )
                files[path] = content
            tree, _, _ = hash_tree({p: (c, False) for p, c in files.items()})
            return cls(workspace_ref(tree), max_bytes, files)
        root = Path(initial).resolve()
        if not root.is_dir():
            problem = f"the workspace's initial directory {str(root)!r} does not exist"
            return cls(None, max_bytes, root, problem)
        tree, _, _ = hash_tree(dict(read_directory(root).items()))
        return cls(workspace_ref(tree), max_bytes, root)

    def start_ref(self) -> str:
        """The ref a new run starts with; `EnvironmentRestoreFailed` when there is none."""
        if self.initial_ref is None:
            raise EnvironmentRestoreFailed(self.problem or "the workspace has no initial tree")
        return self.initial_ref

    def upload(self, store: ObjectStore) -> None:
        """Writes the initial tree's objects, from the same content it was built from."""
        if isinstance(self.initial, Path):
            root = self.initial
            if not root.is_dir():
                raise EnvironmentRestoreFailed(
                    f"the workspace's initial directory {str(root)!r} is missing, so its "
                    f"tree {self.initial_ref} cannot be uploaded to {store.url}"
                )
            files: dict[str, tuple[Source, bool]] = dict(read_directory(root).items())
        elif self.initial is not None:
            files = {p: (c, False) for p, c in self.initial.items()}
        else:
            files = {}
        # the files' objects are written as they are read; the directories only once the
        # tree is known to be the one the agent was built with
        tree, _, directories = hash_tree(files, store)
        if workspace_ref(tree) != self.initial_ref:
            raise EnvironmentRestoreFailed(
                f"the workspace's initial directory {str(self.initial)!r} changed since the "
                f"agent was built (its tree is no longer {self.initial_ref}); restart the "
                "worker to use the new content"
            )
        for tree_id, data in directories:
            store.put(tree_id, data)
