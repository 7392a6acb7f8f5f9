"""`durable_agent.testing.AgentTestEnvironment` (issue 40, point 1): a time-skipping server
(or the dev server), a worker hosting the agents, and clients, in one `async with`;
approvals, steering, sessions, sub-agents and streams work in it, a 7-day approval timeout
expires at once, and a workflow task the worker fails reaches the test."""

from __future__ import annotations

import time
from typing import Any

import pytest
from temporalio import workflow

from durable_agent import AgentBuilder, ModelMessage, TestModel
from durable_agent.temporal import AgentActivityConfig, AgentRegistration
from durable_agent.testing import AgentTestEnvironment, WorkerError, test_server_binary

from .helpers import call, text_response, tool_response
from .subagent_agents import lead
from .temporal_support import wait_for_status

pytestmark = pytest.mark.server


def deploy(env: str) -> str:
    return f"deployed to {env}"


def deployer(name: str = "deployer") -> Any:
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


def echo(name: str = "echo") -> Any:
    return AgentBuilder(TestModel.with_text("hi")).name(name).build()


def test_the_binary_comes_from_the_package() -> None:
    assert test_server_binary().endswith("temporal-test-server")


async def test_start_to_first_result_and_a_clean_teardown() -> None:
    started = time.monotonic()
    async with AgentTestEnvironment([echo()]) as env:
        handle = await env.client.start("echo", "hello")
        result = await handle.result()
        first = time.monotonic() - started
        assert result.output == "hi"
        assert env.client.task_queue == env.task_queue == env.worker.task_queue
        assert env.temporal is env.client.client
        assert env.client.updates  # the installed test server takes updates
    print(f"start to first result: {first:.2f}s")
    assert first < 15
    with pytest.raises(RuntimeError, match="inside `async with`"):
        _ = env.client


async def test_an_approval_by_update_and_a_seven_day_timeout_at_once() -> None:
    async with AgentTestEnvironment([deployer()]) as env:
        approved = await env.client.start("deployer", "ship it")
        await wait_for_status(approved.handle, "waiting")
        assert (await approved.approve("d1", by="alice")).accepted
        assert (await approved.result()).output == "finished"

        week = 7 * 24 * 3600
        expiring = await env.client.start("deployer", "ship it", approval_timeout_seconds=week)
        await wait_for_status(expiring.handle, "waiting")
        started = time.monotonic()
        result = await expiring.result()
        assert time.monotonic() - started < 10
        assert result.status == "completed"
        returns = [
            part
            for message in await expiring.conversation()
            for part in message.parts
            if part.kind == "tool_return"
        ]
        assert returns
        assert returns[0].is_error  # the timeout denied the call


async def test_decisions_go_as_signals_where_the_server_has_no_updates() -> None:
    """Forced here (the installed server has updates): approve and steer as signals."""
    async with AgentTestEnvironment([deployer()], updates=False) as env:
        assert not env.client.updates
        handle = await env.client.start("deployer", "ship it")
        await wait_for_status(handle.handle, "waiting")
        sent = await handle.steer("be careful")
        assert "signal" in sent.message
        await handle.approve("d1", by="alice")
        assert (await handle.result()).output == "finished"
        with pytest.raises(Exception, match="needs a workflow update"):
            await (await env.client.start("deployer", "x", session=True)).send_prompt("hi")


async def test_sessions_subagents_and_streams() -> None:
    from .subagent_agents import researcher, writer

    async with AgentTestEnvironment([echo(), lead, researcher, writer]) as env:
        session = await env.client.start("echo", "", session=True)
        assert (await session.send_prompt("one")).output == "hi"
        assert (await session.send_prompt("two")).output == "hi"
        await session.end_session()
        assert (await session.result()).output == "hi"

        parent = await env.client.start("lead", "research tides")
        status = await wait_for_status(parent.handle, "waiting")
        pending = status.pending_approvals[0]
        await parent.approve(pending.tool_call_id, by="alice")
        assert (await parent.result()).output == "Researched and published."
        kinds = [record.kind async for record in parent.stream()]
        assert kinds[0] == "run_start"
        assert "run_complete" in kinds


async def test_the_dev_server_on_request() -> None:
    async with AgentTestEnvironment([echo()], time_skipping=False) as env:
        assert (await (await env.client.start("echo", "hello")).result()).output == "hi"
        listed = [run async for run in env.client.list(agent="echo")]
        assert listed is not None


def _fails_in_workflows(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A history processor that raises in workflow code (at continue-as-new) only."""
    if workflow.in_workflow():
        raise RuntimeError("a bug in workflow code")
    return messages


async def test_a_workflow_task_the_worker_failed_fails_the_test() -> None:
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    agent = (
        AgentBuilder(model).name("broken").tool(deploy).history_processor(_fails_in_workflows)
    ).build()
    hosted = AgentRegistration(agent, AgentActivityConfig(continue_as_new_after_steps=1))

    async def run_it() -> None:
        async with AgentTestEnvironment([hosted]) as env:
            handle = await env.client.start("broken", "go")
            with pytest.raises(WorkerError, match="a bug in workflow code") as raised:
                await handle.result()
            assert raised.value.workflow_id == handle.id
            assert "RuntimeError" in str(raised.value)

    # The block passed (the test caught the error), but leaving it still reports it.
    with pytest.raises(WorkerError, match="a bug in workflow code"):
        await run_it()
