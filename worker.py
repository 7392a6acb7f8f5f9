"""Runs this application's worker: the example agents on `AgentWorkflow`.

    python worker.py [--agents my.module ...] [--no-examples] [--log-format json|console] [--dev]

The worker itself is the library's (`durable_agent.temporal.worker`, also installed as
`durable-agent worker`); this application adds its agents, `workflows.agents`, whose tools
are in `activities.tools`. Environment: TEMPORAL_ADDRESS (default localhost:7233),
TEMPORAL_NAMESPACE (default `default`), TEMPORAL_TASK_QUEUE (default `durable-agent`).
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_agent.temporal.worker import exit_process
from durable_agent.temporal.worker import main as run

APP_AGENTS = ("workflows.agents",)


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, default_agents=APP_AGENTS)


if __name__ == "__main__":
    exit_process(main())
