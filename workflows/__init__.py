"""This application's workflow code: its agents (`workflows.agents`, the research team in
`workflows.research`, the `coder` and its workspace in `workflows.coder`, run by the
library's `AgentWorkflow`) and a workflow of its own that uses one (`workflows.release`).

`WORKFLOWS` are the application's own workflow classes (`worker.py` registers them; the
plugin adds `AgentWorkflow`).
"""

from __future__ import annotations

from .release import ReleaseWorkflow

__all__ = ["WORKFLOWS"]

WORKFLOWS = [ReleaseWorkflow]
