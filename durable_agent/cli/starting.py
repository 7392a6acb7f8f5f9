"""What `run`, `fork` and `retry` say once they have started a run.

A run can fail at its very start (an unknown agent, a model the agent does not allow, a
fork from a boundary that does not exist): its worker fails it in its first workflow tasks,
within a second. Printing "started" and exiting 0 then misleads whoever scripted it, so
the commands wait briefly for the run to get under way and report such a failure (exit 1,
the reason). A run no worker has picked up in that time is reported as started: it will
report for itself (`--wait`, `status`)."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowExecutionStatus

from durable_agent import RunStatus
from durable_agent.temporal.client import AgentRunHandle, RunFailed
from durable_agent.temporal.search_attributes import AGENT_STATUS

from .output import RunReport

__all__ = ["START_CHECK_SECONDS", "failed_at_start", "started_report"]

START_CHECK_SECONDS = 2.0
"""How long a command waits for the run it started to get under way or fail."""
POLL_SECONDS = 0.1
FAILED = frozenset(
    {
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.CANCELED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    }
)


def started_report(handle: AgentRunHandle) -> RunReport:
    """The run just started, by its workflow id and its (first) run id: a started handle
    follows the workflow's latest run, so its own `run_id` is None."""
    temporal = handle.handle
    run_id = handle.run_id or temporal.first_execution_run_id or temporal.result_run_id
    return RunReport(workflow_id=handle.id, run_id=run_id)


async def failed_at_start(handle: AgentRunHandle) -> str | None:
    """How the run failed if it did within `START_CHECK_SECONDS` (`unknown_agent: ...`),
    else None. Under way means its `AgentStatus` left `starting` (the workflow sets it
    once the run's opening, a fork's loading included, succeeded); only the server is
    asked, so no worker is needed to answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_CHECK_SECONDS
    while True:
        description = await handle.describe()
        status = description.status
        if status in FAILED:
            try:
                await handle.result()
            except RunFailed as error:
                return error.failure
            return None
        if status is not None and status is not WorkflowExecutionStatus.RUNNING:
            return None  # completed, or continued as new: well under way
        agent_status = description.typed_search_attributes.get(AGENT_STATUS)
        if agent_status not in (None, RunStatus.STARTING.value, RunStatus.FAILED.value):
            return None
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(POLL_SECONDS)
