"""AgentWorkflow against a real dev server: same run as in-process, one activity per node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from durable_agent import AgentBuilder, AgentExecutionNode, TestModel
from durable_agent.temporal import (
    AgentWorkflow,
    ApprovalSignal,
    ResumeSignal,
)

from .helpers import CallLog, RecordingExecutor, call, normalized, text_response, tool_response
from .temporal_support import activity_summaries, new_worker, start_agent, unique, wait_for_status


def weather_agent(name: str, log: CallLog) -> Any:
    async def get_weather(city: str) -> str:
        log.record("get_weather", city=city)
        return f"sunny in {city}"

    model = TestModel.with_responses(
        [
            tool_response(
                call("get_weather", "c1", city="Paris"), call("get_weather", "c2", city="Oslo")
            ),
            text_response("Both sunny."),
        ]
    )
    return AgentBuilder(model).name(name).instructions("Be brief.").tool(get_weather).build()


async def test_tool_run_matches_in_process_run(client: Client) -> None:
    name = unique("weather")
    agent = weather_agent(name, CallLog())
    executor = RecordingExecutor()
    local = await weather_agent(name, CallLog()).with_executor(executor).run("weather?")

    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "weather?")
        result = await handle.result()
        evidence = (await handle.query(AgentWorkflow.checkpoints)).checkpoints
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        summaries = await activity_summaries(handle)

    assert result.output == local.output == "Both sunny."
    assert result.status == "completed"
    assert result.run_step == 2
    assert [e.node.value for e in evidence] == executor.nodes
    assert latest is not None
    assert latest.node is AgentExecutionNode.RUN_COMPLETE
    assert normalized(latest.state.message_history) == normalized(local.messages)
    # The quick nodes are pure for this agent: they run in the workflow itself (inline).
    assert summaries == [
        ("model_request", "model_request · step 1"),
        ("tool_call", "tool get_weather · c1"),
        ("tool_call", "tool get_weather · c2"),
        ("model_request", "model_request · step 2"),
    ]


async def test_suspend_at_before_model_request_then_resume(client: Client) -> None:
    name = unique("weather")
    agent = weather_agent(name, CallLog())
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(
            client, worker, name, "weather?", suspend_at=[AgentExecutionNode.BEFORE_MODEL_REQUEST]
        )
        view = await wait_for_status(handle, "waiting")
        assert view.node == "before_model_request"
        assert view.suspend_reason == "suspend_at before_model_request"
        await handle.signal(AgentWorkflow.resume, ResumeSignal(reason="go on"))
        # It suspends again before the second model request; the update resumes it this time.
        view = await wait_for_status(handle, "waiting")
        assert view.run_step == 1
        accepted = await handle.execute_update(AgentWorkflow.resume_run, ResumeSignal())
        assert accepted.message == "run resumed"
        result = await handle.result()
    assert result.output == "Both sunny."


def deploy_agent(name: str, log: CallLog) -> Any:
    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


async def test_approval_rejects_bad_ids_and_approves(client: Client) -> None:
    name = unique("deploy")
    log = CallLog()
    agent = deploy_agent(name, log)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "ship")
        view = await wait_for_status(handle, "waiting")
        assert [(p.tool_call_id, p.tool_name, p.arguments) for p in view.pending_approvals] == [
            ("d1", "deploy", {"env": "prod"})
        ]
        events_before = len((await handle.fetch_history()).events)
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update(
                AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="nope", approved=True)
            )
        cause = info.value.cause
        assert isinstance(cause, ApplicationError)
        assert "no pending approval for tool call id 'nope'" in cause.message
        assert len((await handle.fetch_history()).events) == events_before
        accepted = await handle.execute_update(
            AgentWorkflow.submit_approval,
            ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice"),
        )
        assert accepted.message == "tool call 'd1' approved"
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await handle.execute_update(
                AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="d1", approved=False)
            )
        assert isinstance(again.value.cause, ApplicationError)
        assert again.value.cause.message == "tool call 'd1' was already approved by alice"
        result = await handle.result()
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]


async def test_denial_by_signal_never_runs_the_tool(client: Client) -> None:
    name = unique("deploy")
    log = CallLog()
    agent = deploy_agent(name, log)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "ship")
        await wait_for_status(handle, "waiting")
        await handle.signal(
            AgentWorkflow.approval,
            ApprovalSignal(tool_call_id="d1", approved=False, reason="freeze", decided_by="bob"),
        )
        result = await handle.result()
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert result.output == "finished"
    assert log.calls == []
    assert latest is not None
    denial = latest.state.message_history[2].parts[0]
    assert denial.error_kind == "approval_denied"
    assert "freeze" in denial.content


async def test_unknown_agent_fails_the_workflow_not_the_task(client: Client) -> None:
    async with new_worker(client) as worker:
        handle = await start_agent(client, worker, "no-such-agent", "hi")
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "unknown_agent"
    assert "no agent named 'no-such-agent'" in cause.message
