"""`ReleaseWorkflow`: a workflow of this application's own that uses an agent.

It runs the `deployer` agent as a child `AgentWorkflow` (so the agent's approvals, stream
and checkpoints work as for any run, under the child's id), then this application's own
activity with the agent's answer. Workflow code only: no I/O, deterministic.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.release import Announcement, announce_release
    from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, AgentWorkflowResult

__all__ = ["ReleaseRequest", "ReleaseWorkflow"]


class ReleaseRequest(BaseModel):
    """The one input of `ReleaseWorkflow`."""

    version: str
    env: str = "staging"
    channel: str = "releases"


@workflow.defn
class ReleaseWorkflow:
    @workflow.run
    async def run(self, request: ReleaseRequest) -> str:
        agent_run: AgentWorkflowResult = await workflow.execute_child_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(
                agent="deployer", prompt=f"Deploy {request.version} to {request.env}"
            ),
            id=f"{workflow.info().workflow_id}-deployer",
        )
        return await workflow.execute_activity(
            announce_release,
            Announcement(channel=request.channel, text=str(agent_run.output)),
            start_to_close_timeout=timedelta(seconds=30),
        )
