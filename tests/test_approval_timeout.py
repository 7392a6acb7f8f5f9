"""An approval nobody answers for 7 days is denied with "approval expired", tested in seconds;
a timeout Temporal's timers cannot hold (0, negative, past 366 days) fails the run with
`invalid_input` before anything runs, and clients refuse it before starting one."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from durable_agent import AgentBuilder, InvalidInput, TestModel
from durable_agent.cli.app import amain
from durable_agent.temporal import (
    AgentClient,
    AgentWorkflow,
    AgentWorkflowInput,
    DurableAgentPlugin,
)
from durable_agent.temporal.search_attributes import ensure_search_attributes
from durable_agent.temporal.wire import MAX_APPROVAL_TIMEOUT_SECONDS

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import event_types, new_worker, start_agent, unique

pytestmark = pytest.mark.server


async def test_approval_expires_after_seven_days() -> None:
    log = CallLog()
    name = f"expiry-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return "deployed"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("gave up waiting")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=shutil.which("temporal-test-server"),
        plugins=[DurableAgentPlugin()],
    ) as env:
        await ensure_search_attributes(env.client)
        async with new_worker(env.client, agents=[agent]) as worker:
            handle = await env.client.start_workflow(
                AgentWorkflow.run,
                AgentWorkflowInput(
                    agent=name,
                    prompt="ship",
                    approval_timeout_seconds=timedelta(days=7).total_seconds(),
                ),
                id=f"expiry-{uuid.uuid4().hex[:8]}",
                task_queue=worker.task_queue,
            )
            before = await env.get_current_time()
            result = await asyncio.wait_for(handle.result(), 60)
            elapsed = await env.get_current_time() - before
            latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert result.output == "gave up waiting"
    assert elapsed >= timedelta(days=7)
    assert log.calls == []
    assert latest is not None
    denial = latest.state.message_history[2].parts[0]
    assert denial.error_kind == "approval_denied"
    assert "approval expired" in denial.content


@pytest.mark.parametrize("timeout", [1e15, 0, -5])
async def test_out_of_range_approval_timeout_fails_the_run_with_invalid_input(
    client: Client, timeout: float
) -> None:
    name = unique("timeout")
    agent = AgentBuilder(TestModel.with_text("ok")).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go", approval_timeout_seconds=timeout)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
        history = await handle.fetch_history()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "invalid_input"
    assert f"approval_timeout_seconds={timeout:g} is out of range" in cause.message
    assert str(MAX_APPROVAL_TIMEOUT_SECONDS) in cause.message
    types = event_types(history)
    assert "WORKFLOW_TASK_FAILED" not in types
    assert "ACTIVITY_TASK_SCHEDULED" not in types


async def test_clients_refuse_an_out_of_range_approval_timeout_before_starting(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = AgentClient(client, task_queue=unique("tq"))
    with pytest.raises(InvalidInput, match="approval_timeout_seconds=1e\\+15 is out of range"):
        await agents.start("anything", "go", approval_timeout_seconds=1e15)
    address = client.service_client.config.target_host
    code = await amain(
        ["run", "anything", "go", "--approval-timeout", "1e15", "--address", address]
    )
    assert code == 2
    assert "must be at most 3.16224e+07 seconds, got 1e15" in capsys.readouterr().err
