"""A workspace store's garbage collector: given the trees that must stay, remove the rest.

Objects are immutable and shared (equal files, equal ids, across runs and forks), so an
object may go only when no tree anyone may still restore reaches it. Which trees those are
is the caller's to say (`durable-agent workspace gc` reads them from every run the Temporal
server still has, `durable_agent.cli.workspace_gc`); here they are marked (every directory
and file object below each, `mark`) and the store swept (`collect`).

Two things keep an object the marks do not reach:

- **The grace period** (`older_than`): an object written or reused less than that long
  before the gc began stays. A running tool uploads its files before its ref reaches any
  history or checkpoint; a `put` that reuses an old object refreshes it
  (`stores.REFRESH_SECONDS`), so a grace period at least that long covers both.
- **A second look before each removal**: an object reused since the listing was read is
  now young again, and stays.

A marked tree the store lacks (a run using another store, one whose objects are already
gone) is reported, not fatal: nothing below it can be found, so nothing below it is kept
on its account.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...contract.errors import EnvironmentRestoreFailed
from .objects import EMPTY_TREE_ID
from .stores import FileStore, ObjectStore
from .trees import TreeReader

__all__ = ["GcReport", "collect", "mark"]


@dataclass
class GcReport:
    """What a collection found and did (`dry_run`: what it would have done)."""

    store: str
    dry_run: bool
    older_than: float
    objects: int = 0
    reachable: int = 0
    """Objects kept because a marked tree reaches them."""
    young: int = 0
    """Objects kept because they were written or reused within the grace period."""
    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    temporaries: int = 0
    """Unfinished uploads' temporary files removed (a file store's)."""
    unreadable: list[str] = field(default_factory=list)
    """Marked trees the store lacks or cannot read (their objects could not be marked)."""


def mark(trees: TreeReader, tree_ids: Iterable[str]) -> tuple[set[str], list[str]]:
    """Every object the trees reach (themselves included), and the trees among them (or
    below them) that could not be read."""
    seen: set[str] = {EMPTY_TREE_ID}
    unreadable: list[str] = []
    pending = list(tree_ids)
    while pending:
        tree_id = pending.pop()
        if tree_id in seen:
            continue
        seen.add(tree_id)
        try:
            entries = trees.tree(tree_id)
        except EnvironmentRestoreFailed:
            unreadable.append(tree_id)
            continue
        for entry in entries:
            if entry.kind == "dir":
                pending.append(entry.id)
            else:
                seen.add(entry.id)
    return seen, sorted(unreadable)


def collect(
    store: ObjectStore,
    tree_ids: Iterable[str],
    *,
    older_than: float,
    started: float | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Removes every object of `store` that no tree of `tree_ids` reaches and that was
    last written or reused more than `older_than` seconds before `started` (default: now;
    pass when the marking began, so the marking's own duration is covered)."""
    if older_than < 0:
        raise ValueError(f"older_than must be 0 or more seconds, got {older_than}")
    began = time.time() if started is None else started
    cutoff = began - older_than
    report = GcReport(store=store.url, dry_run=dry_run, older_than=older_than)
    keep, report.unreadable = mark(TreeReader(store), tree_ids)
    for oid, when, size in store.aged():
        report.objects += 1
        if oid in keep:
            report.reachable += 1
            continue
        if when >= cutoff:
            report.young += 1
            continue
        if not dry_run:
            again = store.modified(oid)
            if again is None:
                continue  # another gc took it
            if again >= cutoff:
                report.young += 1  # reused since the listing was read
                continue
            store.delete(oid)
        report.removed.append(oid)
        report.removed_bytes += size
    if isinstance(store, FileStore):
        stale = store.stale_temporaries(max(older_than, 3600.0))
        report.temporaries = len(stale)
        if not dry_run:
            for path in stale:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
    return report
