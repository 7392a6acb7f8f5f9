"""Long runs: continue-as-new, history that grows linearly, bounded fan-out, payload limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UsageLimits,
)
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentWorkflow, ApprovalSignal, runtime_of
from durable_agent.temporal.compaction.caches import PayloadCaches
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration

from .head_start import HeadStart
from .helpers import call, text_response, tool_response
from .support.marathon import FAST
from .temporal_support import (
    connect,
    file_storage_client,
    free_port,
    new_worker,
    start_agent,
    unique,
    wait_for_status,
)


def stepping_model(steps: int, *, then_deploy: bool = False) -> FunctionModel:
    """`steps` tool steps, optionally a deploy needing approval, then a final answer.

    It checks that it is shown the whole conversation every time: a history rebuilt wrongly
    after continue-as-new or a cache miss fails the run.
    """

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        assert len(messages) == 2 * done + 1, f"model saw {len(messages)} messages at step {done}"
        if done > 0:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            assert returned, "the previous step's tool result is missing"
        if done < steps:
            return ModelResponse(
                parts=[ToolCallPart(id=f"s{done}", name="step", arguments={"n": done})]
            )
        if then_deploy and done == steps:
            return ModelResponse(
                parts=[ToolCallPart(id="deploy_1", name="deploy", arguments={"env": "prod"})]
            )
        return ModelResponse(parts=[TextPart(text=f"done after {done} steps")])

    return FunctionModel(respond)


def long_agent(
    name: str,
    steps: int,
    *,
    then_deploy: bool = False,
    clear_cache_at: int = -1,
    caches: list[PayloadCaches] | None = None,
) -> Any:
    """`caches` gets the worker's caches once it runs; step `clear_cache_at` clears them."""

    async def step(n: int) -> str:
        if n == clear_cache_at and caches:
            caches[0].histories.clear()  # forces the next model request to read history back
        return f"step {n} ok"

    async def deploy(env: str) -> str:
        return f"deployed to {env}"

    builder = (
        AgentBuilder(stepping_model(steps, then_deploy=then_deploy))
        .name(name)
        .tools([step, deploy])
        .approval_required_tools(["deploy"])
        .usage_limits(UsageLimits(request_limit=None))
    )
    return builder.build()


@pytest.fixture(scope="module")
async def small_history_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[DevServer]:
    """A dev server that suggests continue-as-new after 60 history events."""
    directory: Path = tmp_path_factory.mktemp("can")
    server = DevServer(
        directory / "can.db",
        port=free_port(),
        ui_port=None,
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "60"},
    )
    await server.start()
    yield server
    server.stop()


@pytest.mark.server
async def test_continue_as_new_keeps_queries_approvals_and_history(
    small_history_server: DevServer,
) -> None:
    name = unique("can")
    caches: list[PayloadCaches] = []
    agent = AgentRegistration(
        long_agent(name, 12, then_deploy=True, clear_cache_at=9, caches=caches),
        AgentActivityConfig(model_request=FAST, tool_call=FAST),
    )
    client = await connect(small_history_server.address)
    async with new_worker(client, agents=[agent]) as worker:
        runtime = runtime_of(worker)
        caches.append(runtime.caches)
        handle = await start_agent(client, worker, name, "work")
        first_run = (await handle.describe()).run_id
        view = await wait_for_status(handle, "waiting", timeout=60)
        assert view.continued_as_new >= 2
        assert [p.tool_call_id for p in view.pending_approvals] == ["deploy_1"]
        assert view.run_step == 13
        checkpoints = await handle.query(AgentWorkflow.checkpoints)
        evidence = checkpoints.checkpoints
        assert view.checkpoint_count > len(evidence)
        assert checkpoints.first_index == view.checkpoint_count - len(evidence)
        assert len(checkpoints.earlier_runs) == view.continued_as_new
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        assert latest is not None
        assert latest.resume.cursor.message_cursor == 26
        assert latest.state.history_offset == 0, "the run carries its conversation"
        assert len(latest.state.message_history) == 26
        # The update goes to the latest run of the same workflow id.
        await handle.execute_update(
            AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="deploy_1", approved=True)
        )
        result = await asyncio.wait_for(handle.result(), 60)
        current_run = (await handle.describe()).run_id
    assert result.output == "done after 13 steps"
    assert result.run_step == 14
    assert result.usage.tool_calls == 13
    assert current_run != first_run
    # Clearing the cache at step 9 made one request read the history back across runs;
    # the request after the approval reads it back once more (a run waiting for a person
    # leaves its conversation in its workflow only).
    assert caches[0].histories.misses == 2


async def test_continue_as_new_after_configured_steps(client: Client) -> None:
    name = unique("steps")
    agent = AgentRegistration(
        long_agent(name, 30),
        AgentActivityConfig(model_request=FAST, tool_call=FAST, continue_as_new_after_steps=10),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "work")
        result = await asyncio.wait_for(handle.result(), 120)
        view = await handle.query(AgentWorkflow.status)
    assert result.output == "done after 30 steps"
    assert view.continued_as_new == 3
    # 5 boundaries per tool step, plus run_start, the final model turn and completion.
    assert view.checkpoint_count == 1 + 5 * 30 + 3 + 2


async def test_five_hundred_tool_calls_in_one_response_with_bounded_fan_out(client: Client) -> None:
    name = unique("fanout")
    in_flight = 0
    peak = 0

    async def work(n: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return n

    calls = [call("work", f"w{i}", n=i) for i in range(500)]
    model = TestModel.with_responses([tool_response(*calls), text_response("all 500 done")])
    agent = AgentRegistration(
        AgentBuilder(model).name(name).tool(work).build(),
        AgentActivityConfig(tool_call=FAST, max_concurrent_tool_activities=8),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "fan out")
        result = await asyncio.wait_for(handle.result(), 240)
    assert result.output == "all 500 done"
    assert result.usage.tool_calls == 500
    assert 1 < peak <= 8


@pytest.mark.parametrize("mode", ["truncate", "fail"])
async def test_oversized_tool_result(client: Client, mode: str) -> None:
    name = unique("big")

    def dump() -> str:
        return "x" * 50_000

    model = TestModel.with_responses([tool_response(call("dump", "big_1")), text_response("ok")])
    agent = AgentRegistration(
        AgentBuilder(model)
        .name(name)
        .tool(dump)
        .max_tool_result_bytes(10_000, oversized=mode)  # type: ignore[arg-type]
        .build(),
        AgentActivityConfig(tool_call=FAST),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "dump")
        if mode == "truncate":
            result = await asyncio.wait_for(handle.result(), 30)
            latest = await handle.query(AgentWorkflow.latest_checkpoint)
            assert result.output == "ok"
            assert latest is not None
            part = latest.state.message_history[2].parts[0]
            assert len(part.content) < 10_000
            assert "[truncated by durable-agent: the tool returned 50000 bytes" in part.content
            return
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "tool_result_too_large"
    assert "tool 'dump' (call big_1) returned 50000 bytes, over max_tool_result_bytes=10000" in (
        cause.message
    )


async def chain_bytes(client: Client, handle: Any) -> tuple[int, int]:
    """(runs, protobuf bytes of every event) over a continue-as-new chain."""
    runs, size = 0, 0
    run_id = handle.first_execution_run_id or handle.run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        runs += 1
        size += History(events=history.events).ByteSize()
        last = history.events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return runs, size


async def test_history_bytes_stay_linear_across_continue_as_new(
    client: Client, tmp_path: Path
) -> None:
    """The benchmark's bar (bytes(500)/bytes(100) <= 5.5) with the conversation carried
    across continue-as-new: each step adds about the same bytes, however long the run."""
    stored = await file_storage_client(client.service_client.config.target_host, tmp_path)
    measured = {}
    for steps in (100, 500):
        name = unique(f"linear{steps}")
        agent = AgentRegistration(
            AgentBuilder(stepping_model(steps))
            .name(name)
            .tool(quarter_kb_step, name="step")
            .usage_limits(UsageLimits(request_limit=None))
            .build(),
            AgentActivityConfig(
                model_request=FAST, tool_call=FAST, continue_as_new_after_steps=150
            ),
        )
        async with new_worker(stored, agents=[agent]) as worker:
            handle = await start_agent(stored, worker, name, "work")
            await asyncio.wait_for(handle.result(), 600)
        measured[steps] = await chain_bytes(stored, handle)
    (runs_100, bytes_100), (runs_500, bytes_500) = measured[100], measured[500]
    print(f"history bytes: k=100 {bytes_100} ({runs_100} runs), k=500 {bytes_500} ({runs_500})")
    assert runs_500 >= 3
    assert bytes_500 / bytes_100 <= 5.5


async def quarter_kb_step(n: int) -> str:
    return f"step {n} ok " + "r" * 240


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.head_start("tests.support.marathon")
@pytest.mark.timeout(1800)
async def test_five_thousand_step_run(head_start: HeadStart) -> None:
    """The issue's bar: a 5,000-step agent run completes through continue-as-new. The run
    (`tests/support/marathon.py`: its own server and worker, its conversation in external
    storage) started with the session; this reads what it wrote."""
    steps = 5000
    outcome = await head_start.outcome(timeout=1700)
    assert outcome["steps"] == steps
    assert outcome["output"] == f"done after {steps} steps"
    assert outcome["run_step"] == steps + 1
    assert outcome["tool_calls"] == steps
    assert outcome["continued_as_new"] >= 1
    assert outcome["checkpoint_count"] == 1 + 5 * steps + 3 + 2
