"""The workspace: a versioned file tree a run's tools work in (`AgentBuilder.workspace`).

`objects` (the format, written down there), `stores` (where objects live), `trees`
(reading, diffing, editing, merging and exporting trees), `materializer` (trees as
directories on a worker), `session` (one call's `ctx.workspace`), `spec` (an agent's
initial tree and limit), `provider` (the `workspace` environment provider).

For front ends: `open_store(url)`, then `TreeReader(store)`: `files(tree_id)` lists a tree,
`entry`/`read_blob`/`copy_blob` read a file, `diff(a, b)` compares two trees,
`export_tar(tree_id, out)` writes one, `reachable(tree_ids)` is what a gc keeps;
`tree_id_of(ref)` reads a ref.
"""

from __future__ import annotations

from .objects import EMPTY_TREE_ID, KIND, Entry, blob_id, tree_id_of, workspace_ref
from .provider import WorkspaceProvider
from .session import CallWorkspace
from .spec import DEFAULT_MAX_BYTES, WorkspaceSpec
from .stores import (
    STORE_ENV,
    FileStore,
    FsspecStore,
    MemoryStore,
    ObjectStore,
    default_store_url,
    open_store,
)
from .trees import Diff, TreeReader

__all__ = [
    "DEFAULT_MAX_BYTES",
    "EMPTY_TREE_ID",
    "KIND",
    "STORE_ENV",
    "CallWorkspace",
    "Diff",
    "Entry",
    "FileStore",
    "FsspecStore",
    "MemoryStore",
    "ObjectStore",
    "TreeReader",
    "WorkspaceProvider",
    "WorkspaceSpec",
    "blob_id",
    "default_store_url",
    "open_store",
    "tree_id_of",
    "workspace_ref",
]
