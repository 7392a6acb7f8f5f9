"""The `workspace` environment provider: a host's store, its trees and its checkouts.

It restores content by hash into directories of its own: a ref names a tree, never a
host path, so what a checkpoint or a fork's input says cannot make a worker read or write
anything but its own checkouts (`host_resources` is False).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from ...contract.environment import EnvironmentChange
from ...contract.errors import EnvironmentRestoreFailed
from .materializer import Materializer
from .objects import EMPTY_TREE_ID, KIND, tree_id_of, workspace_ref
from .session import CallWorkspace
from .spec import WorkspaceSpec
from .stores import ObjectStore
from .trees import TreeReader

__all__ = ["WorkspaceProvider"]


class WorkspaceProvider:
    """Workspaces in `store`, materialized under `cache_dir` (default: a new temporary
    directory, removed with the provider)."""

    kind = KIND
    host_resources = False

    def __init__(self, store: ObjectStore, cache_dir: Path | None = None) -> None:
        self.store = store
        self.trees = TreeReader(store)
        self.materializer = Materializer(self.trees, cache_dir)
        self._present: set[str] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        self.materializer.close()

    def ensure(self, tree_id: str, spec: WorkspaceSpec | None) -> None:
        """The tree is in the store (the agent's initial tree is uploaded the first time
        it is needed); `EnvironmentRestoreFailed` naming it otherwise."""
        with self._lock:
            if tree_id in self._present:
                return
        if tree_id == EMPTY_TREE_ID:
            self.trees.ensure_empty()
        elif not self.store.exists(tree_id):
            if spec is None or spec.initial_ref != workspace_ref(tree_id):
                raise EnvironmentRestoreFailed(
                    f"workspace tree {workspace_ref(tree_id)} is missing from the store "
                    f"{self.store.url} (is every worker configured with the same "
                    "DURABLE_AGENT_WORKSPACE_STORE?)"
                )
            spec.upload(self.store)
        with self._lock:
            self._present.add(tree_id)

    def open(self, ref: str, run: str, spec: WorkspaceSpec | None) -> CallWorkspace:
        """One call's workspace (materialized when the tool first uses it)."""
        tree_id_of(ref)
        return CallWorkspace(
            self.materializer,
            ref,
            run,
            spec,
            lambda t: self.ensure(t, spec),
            lambda t: self.reupload(t, spec),
        )

    def reupload(self, tree_id: str, spec: WorkspaceSpec | None) -> bool:
        """Uploads the agent's initial tree again (whatever of it the store lacks); False
        when `tree_id` is not that tree."""
        if spec is None or spec.initial_ref != workspace_ref(tree_id):
            return False
        with self._lock:
            self._present.discard(tree_id)
        spec.upload(self.store)
        with self._lock:
            self._present.add(tree_id)
        return True

    def merge(
        self, base: str, current: str, changes: Sequence[str], spec: WorkspaceSpec | None = None
    ) -> EnvironmentChange:
        """`base` with each change (a tree made from `base`) applied in call order, and
        what that is from `current` (the run's tree now)."""
        base_id = tree_id_of(base)
        self.ensure(base_id, spec)
        merged = self.trees.merge(base_id, [tree_id_of(c) for c in changes])
        diff = self.trees.diff(tree_id_of(current), merged)
        return EnvironmentChange(
            base=current,
            environment_ref=workspace_ref(merged),
            added=sorted(diff.added),
            modified=sorted(diff.modified),
            deleted=sorted(diff.deleted),
        )
