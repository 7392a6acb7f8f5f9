"""The dev server stops and starts again on the same SQLite file while a run waits."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from durable_agent import AgentBuilder, TestModel
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, ApprovalSignal
from durable_agent.temporal.devserver import DevServer

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import connect, free_port, new_worker, wait_for_status

pytestmark = pytest.mark.server


async def test_waiting_run_survives_server_restart(tmp_path: Path) -> None:
    log = CallLog()
    name = f"restart-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return "deployed"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("all done")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    server = DevServer(tmp_path / "restart.db", port=free_port(), ui_port=None)
    await server.start()
    workflow_id = f"restart-{uuid.uuid4().hex[:8]}"
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    try:
        client = await connect(server.address)
        async with new_worker(client, task_queue, agents=[agent]):
            handle = await client.start_workflow(
                AgentWorkflow.run,
                AgentWorkflowInput(agent=name, prompt="ship"),
                id=workflow_id,
                task_queue=task_queue,
            )
            await wait_for_status(handle, "waiting")
        server.stop()
        assert server.process is not None
        assert server.process.returncode is not None

        await server.start()
        client = await connect(server.address)
        handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        async with new_worker(client, task_queue, agents=[agent]):
            view = await wait_for_status(handle, "waiting")
            assert [p.tool_call_id for p in view.pending_approvals] == ["d1"]
            await handle.signal(
                AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
            )
            result = await asyncio.wait_for(handle.result(), 30)
    finally:
        server.stop()
    assert result.output == "all done"
    assert log.calls == [("deploy", {"env": "prod"})]
