"""The worker interceptor that shows `AgentWorkflow` each Workflow Streams read.

`WorkflowStream` registers its own poll update and query handlers; this inbound interceptor
sees each on its way there. An accepted poll tells the run's `Subscribers` the offset it
asked for, and every read (the poll update, the poll and offset queries) first has the run's
`EventStream` put the records that wait as bytes into the log (`EventStream.flush`).
`DurableAgentPlugin` adds it to the user's interceptors (it replaces none).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import PollInput
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from .agent_workflow import AgentWorkflow

with workflow.unsafe.imports_passed_through():
    from .._sdk import STREAM_OFFSET_QUERY, STREAM_POLL

__all__ = ["StreamPollInterceptor"]


class StreamPollInterceptor(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _SeesPolls


class _SeesPolls(WorkflowInboundInterceptor):
    def execute_workflow(self, input: ExecuteWorkflowInput) -> Coroutine[Any, Any, Any]:
        # The next interceptor's coroutine itself, not one of ours around it (the base
        # class's): a run waiting for days holds every coroutine of its waiting chain.
        return self.next.execute_workflow(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        instance = workflow.instance() if input.update == STREAM_POLL else None
        if not isinstance(instance, AgentWorkflow):
            return await super().handle_update_handler(input)
        if input.args and isinstance(input.args[0], PollInput):
            instance.events.subscribers.polled(input.args[0].from_offset)
        with instance.events.reading():
            return await super().handle_update_handler(input)

    async def handle_query(self, input: HandleQueryInput) -> Any:
        if input.query in (STREAM_POLL, STREAM_OFFSET_QUERY):
            instance = workflow.instance()
            if isinstance(instance, AgentWorkflow):
                instance.events.flush()
        return await super().handle_query(input)
