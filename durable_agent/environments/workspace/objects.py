"""The workspace's object format: a small content-addressed Merkle tree of the run's files.

- A **blob** is a file's bytes; its id is the SHA-256 of them, in lowercase hex.
- A **directory** object is canonical JSON, `{"entries":[...]}` with sorted keys, no
  spaces, UTF-8, its entries sorted by name; each entry is `{"id", "kind", "name", "size"}`
  (`kind` `"file"` or `"dir"`; a file's `size` its length, a directory's the sum of the
  files below it) plus `"x": true` for an executable file. Its id is the SHA-256 of those
  bytes. Empty directories are not kept: a tree is its files.
- A workspace's `environment_ref` is `"workspace:" + the root directory's id` (the prefix
  names the provider that restores it, `durable_agent.environments`).

So equal trees give equal refs in any process, the root's size is the workspace's size
(checking a limit reads one object), a change to one file writes that blob and the
directory objects on its path (O(depth), not O(files)), and every object is immutable: a
worker may cache any of them forever, a fork costs nothing, and a reader checks each
object against its id (a corrupt one is refused, never used).

Why not git's object model: it hashes with SHA-1 and a type header, needs a library or the
`git` binary on every worker, and keeps no sizes in its trees; this format is a page of
code, hashes with SHA-256 (which `hashlib` streams), and stores in any key-value store.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal

from ...contract.errors import EnvironmentRestoreFailed, WorkspaceError

__all__ = [
    "EMPTY_TREE",
    "EMPTY_TREE_ID",
    "KIND",
    "Entry",
    "blob_id",
    "check_path",
    "decode_tree",
    "encode_tree",
    "is_object_id",
    "tree_id_of",
    "workspace_ref",
]

KIND = "workspace"
"""The provider kind of workspace refs: `workspace:<root id>`."""

_ID = re.compile(r"[0-9a-f]{64}")


def is_object_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a directory object."""

    name: str
    kind: Literal["file", "dir"]
    id: str
    size: int
    executable: bool = False

    def named(self, name: str) -> Entry:
        return Entry(name, self.kind, self.id, self.size, self.executable)

    def same(self, other: Entry) -> bool:
        """Same content (and mode): what a diff compares."""
        return (self.kind, self.id, self.executable) == (other.kind, other.id, other.executable)


def blob_id(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_tree(entries: list[Entry]) -> bytes:
    """The canonical bytes of a directory object (entries in any order)."""
    listed = []
    for entry in sorted(entries, key=lambda e: e.name):
        item: dict[str, object] = {
            "id": entry.id,
            "kind": entry.kind,
            "name": entry.name,
            "size": entry.size,
        }
        if entry.executable:
            item["x"] = True
        listed.append(item)
    return json.dumps(
        {"entries": listed}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def decode_tree(data: bytes, tree_id: str) -> list[Entry]:
    """A directory object's entries; `EnvironmentRestoreFailed` for anything that is not
    one (a forged or corrupt object never names a path out of its directory)."""
    try:
        raw = json.loads(data)
        entries = [
            Entry(
                name=item["name"],
                kind=item["kind"],
                id=item["id"],
                size=item["size"],
                executable=item.get("x", False) is True,
            )
            for item in raw["entries"]
        ]
    except (ValueError, KeyError, TypeError) as error:
        raise EnvironmentRestoreFailed(
            f"workspace object {tree_id} is not a directory object ({error})"
        ) from error
    for entry in entries:
        bad = (
            not isinstance(entry.name, str)
            or not _valid_name(entry.name)
            or entry.kind not in ("file", "dir")
            or not isinstance(entry.id, str)
            or not is_object_id(entry.id)
            or not isinstance(entry.size, int)
            or entry.size < 0
        )
        if bad:
            raise EnvironmentRestoreFailed(
                f"workspace object {tree_id} has an invalid entry {entry.name!r}"
            )
    return entries


EMPTY_TREE = encode_tree([])
EMPTY_TREE_ID = blob_id(EMPTY_TREE)


def workspace_ref(tree_id: str) -> str:
    return f"{KIND}:{tree_id}"


def tree_id_of(ref: str) -> str:
    """The root directory id a workspace ref names; `EnvironmentRestoreFailed` for a ref
    that is not one."""
    kind, _, tree_id = ref.partition(":")
    if kind != KIND or not is_object_id(tree_id):
        raise EnvironmentRestoreFailed(f"{ref!r} is not a workspace ref (workspace:<sha256>)")
    return tree_id


def _valid_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def check_path(path: object) -> tuple[str, ...]:
    """A workspace path's parts; `WorkspaceError` for one that is not a relative POSIX path
    inside the workspace (absolute, `..`, empty parts, NUL)."""
    if not isinstance(path, str):
        raise WorkspaceError(f"a workspace path is a string, got {type(path).__name__}")
    if path.startswith("/"):
        raise WorkspaceError(f"{path!r} is absolute; use a path relative to the workspace")
    parts = tuple(path.split("/"))
    if path.endswith("/"):
        parts = parts[:-1]
    if not parts or not all(_valid_name(part) for part in parts):
        raise WorkspaceError(
            f"{path!r} is not a path inside the workspace: use relative POSIX paths without "
            "'..', '.' or empty parts"
        )
    return parts
