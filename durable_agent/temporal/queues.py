"""The task queue agent runs go to unless told otherwise, named once for every side.

Workers poll it, `AgentClient` starts runs on it and the CLI's `--task-queue` defaults to
it; a single definition, low in the package, keeps them from drifting apart.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TASK_QUEUE"]

DEFAULT_TASK_QUEUE = "durable-agent"
"""Overridden by `TEMPORAL_TASK_QUEUE` (workers, `AgentClient.connect`, the CLI)."""
