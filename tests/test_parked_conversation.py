"""A run waiting for a person keeps its conversation as JSON, not as objects (issue 41,
item 4): the conversation is what grows with a run, and a worker holds every cached
waiting run. While it is parked, queries and forks still read it whole; when the run goes
on, the model sees exactly the conversation it would have seen."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.worker._workflow_instance import _WorkflowInstanceImpl

from benchmarks.memory_components import reachable
from durable_agent import (
    AgentBuilder,
    AgentRunState,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from durable_agent.engine.loop import AgentLoop
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentClient, AgentWorkflow
from durable_agent.temporal.wire import CheckpointQuery, HistoryPageQuery

from .temporal_support import new_worker, unique, until_pending_approval

pytestmark = pytest.mark.server

READS = 3


def _agent(seen: list[list[ModelMessage]]) -> Any:
    """Reads three files, then asks to deploy (which needs approval), then answers."""

    def read(path: str) -> str:
        return f"contents of {path}: " + "x" * 100

    def deploy(env: str) -> str:
        return f"deployed to {env}"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        if done < READS:
            call = ToolCallPart(id=f"r{done}", name="read", arguments={"path": f"f{done}.py"})
            return ModelResponse(parts=[TextPart(text=f"reading {done}"), call])
        if done == READS:
            return ModelResponse(
                parts=[ToolCallPart(id="d1", name="deploy", arguments={"env": "prod"})]
            )
        return ModelResponse(parts=[TextPart(text="deployed")])

    return (
        AgentBuilder(FunctionModel(respond))
        .name(unique("parked"))
        .tool(read)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )


def _instance(workflow_id: str) -> _WorkflowInstanceImpl:
    found = [
        o
        for o in gc.get_objects()
        if type(o) is _WorkflowInstanceImpl and o._info.workflow_id == workflow_id
    ]
    assert len(found) == 1, f"{len(found)} cached instances of {workflow_id}"
    return found[0]


async def test_a_waiting_run_keeps_no_message_object_and_goes_on_with_its_conversation(
    client: Client,
) -> None:
    seen: list[list[ModelMessage]] = []
    spec = _agent(seen)
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run_prompt = "read the files, then deploy"
        run = await agents.start(spec.name, run_prompt)
        call_id = await until_pending_approval(run)
        handle = client.get_workflow_handle(run.id)

        # Nothing the cached run reaches is a message: its conversation waits as JSON.
        gc.collect()
        held = reachable(_instance(run.id), set()).values()
        messages = [o for o in held if isinstance(o, (ModelRequest, ModelResponse))]
        assert messages == [], f"a waiting run holds {len(messages)} message objects"
        # Nor a loop, nor its state as objects: the run goes on in a new loop, made from the
        # state read back (`LiveRun.park`).
        assert not [o for o in held if isinstance(o, AgentLoop)], "a waiting run keeps its loop"
        assert not [o for o in held if isinstance(o, AgentRunState)], "it keeps its state"
        # Nor the JSON it was started with (the SDK keeps the decoded arguments): it was read.
        fields = {id(vars(o)) for o in held if isinstance(o, BaseModel)}
        started = [
            o
            for o in held
            if isinstance(o, dict) and o.get("prompt") == run_prompt and id(o) not in fields
        ]
        assert started == [], "a waiting run keeps its input's JSON beside its input"

        # Queries read it whole meanwhile, as the model last saw it plus its answer.
        asked = seen[-1]
        page = await handle.query(AgentWorkflow.message_history_page, HistoryPageQuery())
        assert len(page) == len(asked) + 1 == 2 * READS + 2
        assert [m.model_dump() for m in page[:-1]] == [m.model_dump() for m in asked]
        assert page[-1].tool_calls[0].name == "deploy"
        segments = await handle.query(AgentWorkflow.history_segments)
        assert segments[-1].end == len(page)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        assert latest is not None
        assert latest.state.message_history == page
        assert latest.state.latest_response == page[-1]
        first = await handle.query(AgentWorkflow.checkpoint_at, CheckpointQuery(index=0))
        assert first.checkpoint is not None
        assert len(first.checkpoint.state.message_history) <= 1
        view = await run.status()
        assert view.model is not None
        assert view.model.endswith("function:respond")
        tools = await handle.query(AgentWorkflow.toolset_tools)
        assert tools == []  # function tools are not a toolset's; the query still answers

        # Still parked after those reads; approved, the run goes on with its conversation.
        gc.collect()
        held = reachable(_instance(run.id), set()).values()
        assert not [o for o in held if isinstance(o, (ModelRequest, ModelResponse))]
        assert not [o for o in held if isinstance(o, AgentLoop)], "a query made the loop again"
        assert not [o for o in held if isinstance(o, AgentRunState)], "a query kept a state"
        await run.approve(call_id, by="ops")
        result = await asyncio.wait_for(run.result(), 60)

    assert result.output == "deployed"
    resumed = seen[-1]
    assert [m.model_dump() for m in resumed[: len(page)]] == [m.model_dump() for m in page]
    assert len(resumed) == len(page) + 1
    assert "deployed to prod" in str(resumed[-1].model_dump())
