"""Runs this application's worker: its agents, its workflow and its activity.

    python worker.py [--agents my.module ...] [--no-examples] [--log-format json|console] [--dev]

The worker is the library's `durable-agent worker` command (`durable_agent.cli.worker`);
this file adds what the application brings: the example agents (`workflows.agents`, the
research team in `workflows.research`, the `coder` in `workflows.coder` with its workspace
tools in `activities.coding`, tools in `activities.tools`), `ReleaseWorkflow`
(`workflows.release`) and its activity (`activities.release`). Environment:
TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE (default `default`),
TEMPORAL_TASK_QUEUE (default `durable-agent`), DURABLE_AGENT_WORKSPACE_STORE (the coder's
files; default `.durable-agent/workspaces`, with --dev `.temporal/workspaces`).
"""

from __future__ import annotations

from collections.abc import Sequence

from activities import ACTIVITIES
from durable_agent.cli.worker import Application
from durable_agent.cli.worker import main as run
from durable_agent.temporal.worker import exit_process
from workflows import WORKFLOWS

APPLICATION = Application(
    agent_modules=("workflows.agents", "workflows.research", "workflows.coder"),
    workflows=WORKFLOWS,
    activities=ACTIVITIES,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, application=APPLICATION)


if __name__ == "__main__":
    exit_process(main())
