"""Runs of the sample application in the state a docs example needs, for the pages' hidden
setup blocks (`<!-- example: setup ... -->`, run by tests/test_docs_examples.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent.temporal import AgentClient

__all__ = ["a_failed_run", "a_run", "closed"]


async def closed(agents: AgentClient, *workflow_ids: str) -> None:
    """No run open under `workflow_ids` (a run left by an earlier page or test is ended)."""
    for workflow_id in workflow_ids:
        handle = agents.client.get_workflow_handle(workflow_id)
        try:
            description = await handle.describe()
        except RPCError:
            continue
        if description.status == WorkflowExecutionStatus.RUNNING:
            with contextlib.suppress(RPCError):  # it may have ended since
                await handle.terminate("the docs examples move on")


async def until(agents: AgentClient, workflow_id: str, *statuses: str) -> None:
    for _ in range(400):
        with contextlib.suppress(Exception):  # not started yet, no worker yet
            if (await agents.get(workflow_id).status()).status in statuses:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never became {statuses}")


async def a_run(
    agents: AgentClient,
    workflow_id: str,
    agent: str,
    prompt: str,
    until_status: str | tuple[str, ...] = "completed",
    **options: Any,
) -> None:
    """A fresh run of `agent` under `workflow_id`, once it is `until_status`."""
    await closed(agents, workflow_id)
    await agents.start(agent, prompt, workflow_id=workflow_id, **options)
    statuses = (until_status,) if isinstance(until_status, str) else until_status
    await until(agents, workflow_id, *statuses)


async def a_failed_run(agents: AgentClient, workflow_id: str) -> None:
    """A `deployer` run cancelled while it waits for approval: a run `retry` takes."""
    await a_run(agents, workflow_id, "deployer", "Deploy v2.1 to prod", "waiting")
    await agents.get(workflow_id).cancel()
    await until(agents, workflow_id, "cancelled", "failed")
