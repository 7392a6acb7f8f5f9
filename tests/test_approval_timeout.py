"""An approval nobody answers for 7 days is denied with "approval expired", tested in seconds."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent import AgentBuilder, TestModel
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin
from durable_agent.temporal.search_attributes import ensure_search_attributes

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import new_worker

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
