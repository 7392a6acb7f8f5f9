"""`AgentClient`: start, inspect and decide agent runs from Python, without Temporal's API.

    agents = await AgentClient.connect()            # TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE
    handle = await agents.start("deployer", "Deploy v2.1 to prod")
    view = await handle.status()                    # AgentStatusView
    await handle.approve(view.pending_approvals[0].tool_call_id, by="alice")
    result = await handle.result()                  # AgentWorkflowResult

It wraps a `temporalio.client.Client` connected with `DurableAgentPlugin` (the pydantic
data converter and the codec the workers use). What it adds over Temporal's own handle:

- every failure is one of a few `AgentRunError`s (`RunNotFound`, `NotAnAgentRun`,
  `RunClosed`, `Rejected`, `NoWorker`, `CannotConnect`, ...), each with a message that
  names the run and the way out, so a script or the CLI can tell them apart;
- decisions go through the workflow's updates, so a validator's refusal (a wrong call id, a
  second decision) is raised here as `Rejected` instead of being logged by the worker;
- a workflow that is not an `AgentWorkflow` is refused before anything is sent to it;
- a query or update no worker answers within `timeout` seconds raises `NoWorker` instead
  of hanging, and the server's "too many in-flight updates" refusal is retried.
"""

from __future__ import annotations

from ..queues import DEFAULT_TASK_QUEUE
from ..run_errors import (
    AgentRunError,
    AlreadyStarted,
    CannotConnect,
    NotAnAgentRun,
    NoWorker,
    Rejected,
    RunClosed,
    RunFailed,
    RunNotFound,
)
from .agent_client import AgentClient
from .connection import DEFAULT_TIMEOUT
from .handle import AgentRunHandle
from .listing import WORKFLOW_TYPE, ListedRun, list_query

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "DEFAULT_TIMEOUT",
    "WORKFLOW_TYPE",
    "AgentClient",
    "AgentRunError",
    "AgentRunHandle",
    "AlreadyStarted",
    "CannotConnect",
    "ListedRun",
    "NoWorker",
    "NotAnAgentRun",
    "Rejected",
    "RunClosed",
    "RunFailed",
    "RunNotFound",
    "list_query",
]
