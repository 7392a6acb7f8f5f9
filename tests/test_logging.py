"""Logs: JSON records carry the run's identity; workflow logs do not repeat on replay."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel
from durable_agent.cli.logs import configure_logging
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, ApprovalSignal

from .helpers import call, text_response, tool_response
from .temporal_support import new_worker, wait_for_status


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("json")
    buffer = io.StringIO()
    root.handlers[0].stream = buffer  # type: ignore[attr-defined]
    yield buffer
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_json_records_and_replay_safe_workflow_logs(
    client: Client, json_logs: io.StringIO
) -> None:
    name = f"logs-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        return "ok"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("done")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    # No workflow cache: every workflow task replays the whole history from the start.
    async with new_worker(client, max_cached_workflows=0, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt="ship"),
            id=f"logs-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
        await wait_for_status(handle, "waiting")
        await handle.signal(
            AgentWorkflow.approval,
            ApprovalSignal(tool_call_id="d1", approved=True, decided_by="ops"),
        )
        assert (await handle.result()).output == "done"

    records = [
        json.loads(line) for line in json_logs.getvalue().splitlines() if line.startswith("{")
    ]
    mine = [r for r in records if r.get("workflow_id") == handle.id]
    activity_records = [r for r in mine if r.get("logger") == "durable_agent.activities"]
    assert activity_records, "no activity log records"
    for record in activity_records:
        assert {"workflow_id", "run_id", "agent", "node", "step"} <= record.keys(), record
        assert record["agent"] == name
    nodes = {r["node"] for r in activity_records}
    # The quick nodes of this agent (string instructions, no output validator) run in the
    # workflow itself, so only the model request and the tool log as activities.
    assert nodes == {"model_request", "tool_call:deploy"}, nodes
    approvals = [r for r in mine if r.get("event", "").startswith("approval recorded")]
    assert len(approvals) == 1, approvals
    assert approvals[0]["decided_by"] == "ops"
