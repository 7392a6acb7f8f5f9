"""Approving with other arguments (`override_arguments`): they must pass the tool's own
validation, checked before the approval is spent, so the person can send corrected ones.
On Temporal the update is refused and the signal dropped; in-process `resume_after_hitl`
raises."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from durable_agent import AgentBuilder, TestModel, ToolApprovalDecision, UserError
from durable_agent.temporal import AgentWorkflow, ApprovalSignal

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import new_worker, start_agent, unique, wait_for_status


async def test_invalid_override_arguments_are_rejected_before_the_approval_is_spent(
    client: Client,
) -> None:
    log = CallLog()

    def scale(service: str, replicas: int) -> str:
        log.record("scale", service=service, replicas=replicas)
        return f"{service} at {replicas}"

    name = unique("override")
    model = TestModel.with_responses(
        [tool_response(call("scale", "s1", service="api", replicas=2)), text_response("done")]
    )
    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "scale it")
        await wait_for_status(handle, "waiting")
        bad = ApprovalSignal(
            tool_call_id="s1", approved=True, override_arguments={"replicas": "many"}
        )
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update(AgentWorkflow.submit_approval, bad)
        cause = info.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.type == "invalid_approval"
        assert "override_arguments for tool 'scale' (call 's1') are invalid" in cause.message
        assert "replicas" in cause.message
        await handle.signal(AgentWorkflow.approval, bad)
        view = await wait_for_status(handle, "waiting")
        assert [p.decided for p in view.pending_approvals] == [False]
        good = ApprovalSignal(
            tool_call_id="s1",
            approved=True,
            override_arguments={"service": "api", "replicas": 3},
        )
        await handle.execute_update(AgentWorkflow.submit_approval, good)
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.output == "done"
    assert log.calls == [("scale", {"service": "api", "replicas": 3})]


async def test_invalid_override_arguments_in_process_raise() -> None:
    def scale(replicas: int) -> str:
        return str(replicas)

    model = TestModel.with_responses([tool_response(call("scale", "s1", replicas=1))])
    agent = AgentBuilder(model).tool(scale).approval_required_tools(["scale"]).build()
    waiting = await agent.run("go")
    with pytest.raises(UserError, match="override_arguments for tool 'scale'"):
        await agent.resume_after_hitl(
            waiting.state,
            approvals={"s1": ToolApprovalDecision.approve(override_arguments={"replicas": "x"})},
        )
