"""Workers by role: workflow tasks, model calls and tool calls on separate worker pools.

`python worker.py --role workflows` runs the agent workflows (and their quick activities)
on the task queue; `--role models` polls `QUEUE-models` for `model_request` activities,
`--role tools` polls `QUEUE-tools` for tool calls and toolset listings, each with its own
concurrency, so a slow tool can no longer starve model calls. The default, `all`, does
everything on the task queue itself. Runs on a queue served by a `workflows` worker send
their model and tool activities to the role queues (`Hosting.role_split`).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ROLES", "Role", "role_queue"]

Role = Literal["all", "workflows", "models", "tools"]
ROLES: tuple[Role, ...] = ("all", "workflows", "models", "tools")


def role_queue(task_queue: str, role: Role) -> str:
    """The task queue a worker of `role` polls."""
    return task_queue if role in ("all", "workflows") else f"{task_queue}-{role}"
