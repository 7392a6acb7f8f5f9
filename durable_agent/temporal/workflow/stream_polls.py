"""The worker interceptor that shows `AgentWorkflow` each Workflow Streams poll it accepts.

`WorkflowStream` registers its own poll update handler; this inbound interceptor sees every
accepted poll on its way there and tells the run's `Subscribers` the offset it asked for.
`DurableAgentPlugin` adds it to the user's interceptors (it replaces none).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import PollInput
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from .agent_workflow import AgentWorkflow
from .subscribers import POLL_UPDATE

__all__ = ["StreamPollInterceptor"]


class StreamPollInterceptor(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _SeesPolls


class _SeesPolls(WorkflowInboundInterceptor):
    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        if input.update == POLL_UPDATE and input.args and isinstance(input.args[0], PollInput):
            instance = workflow.instance()
            if isinstance(instance, AgentWorkflow):
                instance.events.subscribers.polled(input.args[0].from_offset)
        return await super().handle_update_handler(input)
