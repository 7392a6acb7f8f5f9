"""Reading, comparing and editing trees in a store: what snapshots, merges and front ends
(`durable-agent workspace`, the inbox's diff, a garbage collector) build on.

Every object read is checked against its id; a missing or corrupt one raises
`EnvironmentRestoreFailed` naming it. Directory objects are cached by id (they are
immutable), so diffing two trees reads only the directories whose ids differ, and editing
a tree reads and writes only the directories on the edited paths.
"""

from __future__ import annotations

import hashlib
import tarfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO

from ...contract.errors import EnvironmentRestoreFailed
from .objects import EMPTY_TREE, EMPTY_TREE_ID, Entry, blob_id, decode_tree, encode_tree
from .stores import ObjectStore

__all__ = ["Diff", "Edits", "TreeReader"]

Edits = Mapping[tuple[str, ...], Entry | None]
"""Path parts → the file to put there, or None to delete the file there."""

_CACHED_TREES = 4096


@dataclass
class Diff:
    """What changed from one tree to another, by path: the new entries of added and
    modified files, the old entries of deleted ones."""

    added: dict[str, Entry] = field(default_factory=dict)
    modified: dict[str, Entry] = field(default_factory=dict)
    deleted: dict[str, Entry] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.deleted)

    def edits(self) -> dict[tuple[str, ...], Entry | None]:
        out: dict[tuple[str, ...], Entry | None] = {}
        for path in self.deleted:
            out[tuple(path.split("/"))] = None
        for path, entry in (*self.added.items(), *self.modified.items()):
            out[tuple(path.split("/"))] = entry
        return out


class TreeReader:
    """Trees of one store, with a bounded cache of directory objects by id."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._cache: OrderedDict[str, list[Entry]] = OrderedDict()
        self._lock = threading.Lock()

    # -- objects -------------------------------------------------------------------------

    def tree(self, tree_id: str) -> list[Entry]:
        """A directory object's entries, checked against its id."""
        with self._lock:
            cached = self._cache.get(tree_id)
            if cached is not None:
                self._cache.move_to_end(tree_id)
                return cached
        if tree_id == EMPTY_TREE_ID:
            entries: list[Entry] = []
        else:
            try:
                data = self.store.get(tree_id)
            except KeyError:
                raise EnvironmentRestoreFailed(
                    f"workspace object {tree_id} is missing from the store {self.store.url}"
                ) from None
            if blob_id(data) != tree_id:
                raise EnvironmentRestoreFailed(
                    f"workspace object {tree_id} in {self.store.url} does not match its hash "
                    "(corrupt or tampered with)"
                )
            entries = decode_tree(data, tree_id)
        with self._lock:
            self._cache[tree_id] = entries
            if len(self._cache) > _CACHED_TREES:
                self._cache.popitem(last=False)
        return entries

    def has_tree(self, tree_id: str) -> bool:
        with self._lock:
            if tree_id in self._cache:
                return True
        return tree_id == EMPTY_TREE_ID or self.store.exists(tree_id)

    def write_tree(self, entries: list[Entry]) -> tuple[str, int]:
        data = encode_tree(entries)
        tree_id = blob_id(data)
        if tree_id != EMPTY_TREE_ID:
            self.store.put(tree_id, data)
        with self._lock:
            self._cache[tree_id] = sorted(entries, key=lambda e: e.name)
        return tree_id, sum(e.size for e in entries)

    def ensure_empty(self) -> None:
        self.store.put(EMPTY_TREE_ID, EMPTY_TREE)

    def size(self, tree_id: str) -> int:
        return sum(e.size for e in self.tree(tree_id))

    def read_blob(self, blob: str) -> bytes:
        """A file's bytes (small files: front ends), checked against their id."""
        try:
            data = self.store.get(blob)
        except KeyError:
            raise EnvironmentRestoreFailed(
                f"workspace object {blob} is missing from the store {self.store.url}"
            ) from None
        if blob_id(data) != blob:
            raise EnvironmentRestoreFailed(
                f"workspace object {blob} in {self.store.url} does not match its hash"
            )
        return data

    def copy_blob(self, blob: str, out: IO[bytes]) -> None:
        """Writes a file's bytes to `out` in pieces, hashing them on the way; raises after
        the copy when they do not match `blob` (the caller drops what it wrote)."""
        digest = hashlib.sha256()
        try:
            source = self.store.open(blob)
        except KeyError:
            raise EnvironmentRestoreFailed(
                f"workspace object {blob} is missing from the store {self.store.url}"
            ) from None
        with source:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != blob:
            raise EnvironmentRestoreFailed(
                f"workspace object {blob} in {self.store.url} does not match its hash "
                "(corrupt or tampered with)"
            )

    # -- whole trees ---------------------------------------------------------------------

    def files(self, tree_id: str, prefix: str = "") -> dict[str, Entry]:
        """Every file of the tree by path (sorted)."""
        out: dict[str, Entry] = {}
        for entry in self.tree(tree_id):
            path = prefix + entry.name
            if entry.kind == "dir":
                out.update(self.files(entry.id, path + "/"))
            else:
                out[path] = entry
        return out

    def entry(self, tree_id: str, path: str) -> Entry | None:
        """The entry at `path` (a file or a directory), or None."""
        current: Entry | None = None
        directory: str | None = tree_id
        for part in path.strip("/").split("/"):
            if directory is None:
                return None
            current = next((e for e in self.tree(directory) if e.name == part), None)
            if current is None:
                return None
            directory = current.id if current.kind == "dir" else None
        return current

    def diff(self, old: str | None, new: str | None, prefix: str = "") -> Diff:
        """What changed from tree `old` to tree `new` (None: empty), reading only the
        directories whose ids differ."""
        out = Diff()
        self._diff(old, new, prefix, out)
        return out

    def _diff(self, old: str | None, new: str | None, prefix: str, out: Diff) -> None:
        if old == new:
            return
        before = {e.name: e for e in self.tree(old)} if old else {}
        after = {e.name: e for e in self.tree(new)} if new else {}
        for name in sorted(before.keys() | after.keys()):
            a, b = before.get(name), after.get(name)
            if a is not None and b is not None and a.same(b):
                continue
            path = prefix + name
            a_dir = a.id if a is not None and a.kind == "dir" else None
            b_dir = b.id if b is not None and b.kind == "dir" else None
            if a_dir or b_dir:
                self._diff(a_dir, b_dir, path + "/", out)
            a_file = a if a is not None and a.kind == "file" else None
            b_file = b if b is not None and b.kind == "file" else None
            if a_file and b_file:
                out.modified[path] = b_file
            elif a_file:
                out.deleted[path] = a_file
            elif b_file:
                out.added[path] = b_file

    def edit(self, tree_id: str | None, edits: Edits) -> tuple[str, int]:
        """The tree `tree_id` with `edits` applied, and its size: writes the directory
        objects on the edited paths, reuses every other subtree by id. A file put where a
        directory was replaces it, and the other way round."""
        entries = {e.name: e for e in self.tree(tree_id)} if tree_id else {}
        below: dict[str, dict[tuple[str, ...], Entry | None]] = {}
        for parts, entry in edits.items():
            head = parts[0]
            if len(parts) > 1:
                below.setdefault(head, {})[parts[1:]] = entry
            elif entry is None:
                if head in entries and entries[head].kind == "file":
                    del entries[head]
            else:
                entries[head] = entry.named(head)
        for head, inner in below.items():
            current = entries.get(head)
            sub = current.id if current is not None and current.kind == "dir" else None
            if sub is None and all(v is None for v in inner.values()):
                continue
            sub_id, size = self.edit(sub, inner)
            if sub_id == EMPTY_TREE_ID:
                entries.pop(head, None)
            else:
                entries[head] = Entry(head, "dir", sub_id, size)
        return self.write_tree(list(entries.values()))

    def build(self, files: Iterable[tuple[str, Entry]]) -> tuple[str, int]:
        """A tree holding `files` (path → file entry)."""
        return self.edit(None, {tuple(path.split("/")): entry for path, entry in files})

    def merge(self, base: str, changes: Iterable[str]) -> str:
        """`base` with each tree's changes from `base` applied in order: a path several
        changed keeps the last one's version (a file replacing a directory, or the other
        way round, drops what an earlier change put there)."""
        edits: dict[tuple[str, ...], Entry | None] = {}
        for changed in changes:
            for parts, entry in self.diff(base, changed).edits().items():
                if entry is not None:
                    # a later file here replaces what earlier changes put above or below it
                    for other in [p for p in edits if _nested(p, parts)]:
                        del edits[other]
                edits[parts] = entry
        if not edits:
            return base
        return self.edit(base, edits)[0]

    def reachable(self, tree_ids: Iterable[str]) -> set[str]:
        """Every object id the trees reach (themselves included): what a garbage collector
        must keep."""
        seen: set[str] = set()
        pending = [t for t in tree_ids]
        while pending:
            tree_id = pending.pop()
            if tree_id in seen:
                continue
            seen.add(tree_id)
            for entry in self.tree(tree_id):
                if entry.kind == "dir":
                    pending.append(entry.id)
                else:
                    seen.add(entry.id)
        return seen

    def walk_blobs(self, tree_id: str) -> Iterator[tuple[str, Entry]]:
        yield from self.files(tree_id).items()

    def export_tar(self, tree_id: str, out: IO[bytes]) -> None:
        """Writes the tree as an uncompressed tar (files streamed from the store)."""
        import tempfile

        with tarfile.open(fileobj=out, mode="w") as tar:
            for path, entry in self.files(tree_id).items():
                info = tarfile.TarInfo(path)
                info.size = entry.size
                info.mode = 0o755 if entry.executable else 0o644
                with tempfile.TemporaryFile() as spool:
                    self.copy_blob(entry.id, spool)
                    spool.seek(0)
                    tar.addfile(info, spool)


def _nested(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One path is a directory above the other (or they are the same)."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter] and a != b
