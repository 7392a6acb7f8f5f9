"""A waiting run's changed files, for the card beside its approval: what the run did to its
workspace since it started, as a person reviews a change before approving what comes next.

The base is the tree of the run's first checkpoint (a fork's: the tree it was forked with),
the head its tree now (`status`'s `environment_ref`); both are read from the workspace
store the workers share. Text files get a unified diff; a binary file (one holding NUL
bytes, or not UTF-8) is named as binary; a file over `MAX_FILE_BYTES` is named with its
sizes; a long diff is cut at `MAX_LINES` lines per file and `MAX_TOTAL_LINES` in all, and
the card says so. The template escapes every line (Jinja autoescape): file content is the
agent's, never markup.

Diffs are cached by (base, head): trees are immutable, so a poll that finds the run where it
was costs nothing but its queries.
"""

from __future__ import annotations

import difflib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from durable_agent.contract.errors import EnvironmentRestoreFailed
from durable_agent.environments.workspace import Entry, TreeReader, open_store, tree_id_of

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_LINES",
    "MAX_TOTAL_LINES",
    "DiffLine",
    "FileChange",
    "WorkspaceChanges",
    "workspace_changes",
]

MAX_FILE_BYTES = 256 * 1024
"""A side larger than this is not diffed (named with its sizes)."""
MAX_LINES = 300
"""Diff lines shown for one file."""
MAX_TOTAL_LINES = 1500
"""Diff lines shown for the whole run; files after that are named only."""
MAX_FILES = 100
"""Files listed; the card says how many more changed."""
_CACHED = 128

Change = Literal["added", "modified", "deleted"]


@dataclass(frozen=True)
class DiffLine:
    kind: Literal["head", "hunk", "add", "del", "ctx"]
    text: str


@dataclass
class FileChange:
    path: str
    change: Change
    content: Literal["text", "binary", "large"]
    old_size: int = 0
    new_size: int = 0
    lines: list[DiffLine] = field(default_factory=list)
    cut: int = 0
    """Diff lines left out of this file's."""


@dataclass
class WorkspaceChanges:
    """What the card shows; `problem` when it could not be read (the card says why)."""

    base: str | None
    head: str
    files: list[FileChange] = field(default_factory=list)
    more_files: int = 0
    problem: str | None = None

    @property
    def note(self) -> str | None:
        cut = sum(1 for f in self.files if f.cut)
        parts = []
        if cut:
            parts.append(f"{cut} long diff{'s' if cut > 1 else ''} cut")
        if self.more_files:
            parts.append(f"{self.more_files} more changed files not shown")
        if not parts:
            return None
        return "; ".join(parts) + " (durable-agent workspace ID --diff 0 lists them all)"


_cache: OrderedDict[tuple[str, str, str], WorkspaceChanges] = OrderedDict()
_lock = threading.Lock()


def workspace_changes(store_url: str, base: str | None, head: str) -> WorkspaceChanges:
    """The changes from tree `base` (None: empty) to tree `head` (refs), read from the store
    `store_url` names. Blocking: call it in a thread."""
    key = (store_url, base or "", head)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    try:
        trees = TreeReader(open_store(store_url))
        diff = trees.diff(tree_id_of(base) if base else None, tree_id_of(head))
        changed: list[tuple[str, Change, Entry | None, Entry | None]] = sorted(
            [
                *((p, "added", None, e) for p, e in diff.added.items()),
                *((p, "modified", _old(trees, base, p), e) for p, e in diff.modified.items()),
                *((p, "deleted", e, None) for p, e in diff.deleted.items()),
            ]
        )
        result = WorkspaceChanges(base, head, more_files=max(0, len(changed) - MAX_FILES))
        budget = MAX_TOTAL_LINES
        for path, change, old, new in changed[:MAX_FILES]:
            item = _file(trees, path, change, old, new, budget)
            budget -= len(item.lines)
            result.files.append(item)
    except EnvironmentRestoreFailed as error:
        return WorkspaceChanges(base, head, problem=f"the workspace cannot be read: {error}")
    with _lock:
        _cache[key] = result
        while len(_cache) > _CACHED:
            _cache.popitem(last=False)
    return result


def _old(trees: TreeReader, base: str | None, path: str) -> Entry | None:
    return trees.entry(tree_id_of(base), path) if base else None


def _text(trees: TreeReader, entry: Entry | None) -> str | None:
    """The file's text; None when it is binary."""
    if entry is None:
        return ""
    data = trees.read_blob(entry.id)
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _file(
    trees: TreeReader,
    path: str,
    change: Change,
    old: Entry | None,
    new: Entry | None,
    budget: int,
) -> FileChange:
    old_size, new_size = (old.size if old else 0), (new.size if new else 0)
    if max(old_size, new_size) > MAX_FILE_BYTES:
        return FileChange(path, change, "large", old_size, new_size)
    before, after = _text(trees, old), _text(trees, new)
    if before is None or after is None:
        return FileChange(path, change, "binary", old_size, new_size)
    raw = difflib.unified_diff(
        before.splitlines(),
        after.splitlines(),
        fromfile="/dev/null" if old is None else f"a/{path}",
        tofile="/dev/null" if new is None else f"b/{path}",
        lineterm="",
    )
    lines = [_line(text) for text in raw]
    keep = max(0, min(MAX_LINES, budget))
    return FileChange(path, change, "text", old_size, new_size, lines[:keep], len(lines[keep:]))


def _line(text: str) -> DiffLine:
    if text.startswith(("--- ", "+++ ")):
        return DiffLine("head", text)
    if text.startswith("@@"):
        return DiffLine("hunk", text)
    if text.startswith("+"):
        return DiffLine("add", text)
    if text.startswith("-"):
        return DiffLine("del", text)
    return DiffLine("ctx", text)
