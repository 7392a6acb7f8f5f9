"""Suspend at every boundary, store the checkpoint as JSON, resume: same run, no work twice."""

from __future__ import annotations

import asyncio

import pytest

from durable_agent import (
    Agent,
    AgentBuilder,
    AgentCheckpoint,
    AgentExecutionNode,
    AgentRunState,
    ExecutionSuspended,
    RunStatus,
    TestModel,
    ToolApprovalDecision,
    UserError,
)

from .helpers import (
    CallLog,
    RecordingExecutor,
    SuspendOnce,
    call,
    normalized,
    text_response,
    tool_response,
)


def build(log: CallLog, model: TestModel, *, sequential: bool) -> Agent:
    async def get_weather(city: str) -> str:
        log.record("get_weather", city=city)
        await asyncio.sleep(0)
        return f"sunny in {city}"

    builder = AgentBuilder(model).tool(get_weather)
    if sequential:
        builder = builder.sequential_tool_calls()
    return builder.build()


def script() -> list:
    return [
        tool_response(
            call("get_weather", "c1", city="Paris"), call("get_weather", "c2", city="Oslo")
        ),
        tool_response(call("get_weather", "c3", city="Rome")),
        text_response("All sunny."),
    ]


async def reference(sequential: bool) -> tuple[list[str], object]:
    log = CallLog()
    executor = RecordingExecutor()
    model = TestModel.with_responses(script())
    result = await build(log, model, sequential=sequential).with_executor(executor).run("weather?")
    return executor.nodes, result


@pytest.mark.parametrize("sequential", [False, True], ids=["parallel", "sequential"])
async def test_suspend_at_every_node_and_resume_from_json(sequential: bool) -> None:
    nodes, expected = await reference(sequential)
    assert nodes[0] == "run_start"
    assert nodes[-1] == "run_complete"
    assert {"tool_call", "tool_return", "validate_output"} <= set(nodes)
    for index, node in enumerate(nodes):
        log = CallLog()
        model = TestModel.with_responses(script())
        agent = build(log, model, sequential=sequential)
        suspending = SuspendOnce(index)
        with pytest.raises(ExecutionSuspended) as info:
            await agent.with_executor(suspending).run("weather?")
        suspended = info.value
        assert suspended.node.value == node
        assert suspended.checkpoint.node.value == node
        assert suspended.reason == f"test suspend at {node}"

        stored = suspended.checkpoint.model_dump_json()
        restored = AgentCheckpoint.model_validate_json(stored)
        after = RecordingExecutor()
        result = await agent.with_executor(after).resume(restored)

        assert result.output == expected.output, node  # type: ignore[attr-defined]
        assert normalized(result.messages) == normalized(expected.messages), node  # type: ignore[attr-defined]
        assert result.state.run_id == suspended.checkpoint.run_id
        assert model.request_count == 3, f"model called {model.request_count} times ({node})"
        assert log.counts == {"get_weather": 3}, f"tools ran {log.calls} ({node})"
        # The checkpoints before and after the suspension make up the uninterrupted sequence.
        assert suspending.nodes + after.nodes == nodes
        assert result.usage == expected.usage  # type: ignore[attr-defined]


async def test_resume_continues_stream_numbering() -> None:
    log = CallLog()
    agent = build(log, TestModel.with_responses(script()), sequential=True)
    with pytest.raises(ExecutionSuspended) as info:
        await agent.with_executor(SuspendOnce(4)).run("weather?")
    checkpoint = info.value.checkpoint
    records: list = []
    await agent.resume(checkpoint, sink=records.append)
    assert records[0].seq == checkpoint.resume.cursor.stream_cursor + 2
    assert [r.seq for r in records] == list(range(records[0].seq, records[0].seq + len(records)))


async def test_resume_from_failed_checkpoint_is_refused() -> None:
    def boom() -> str:
        raise RuntimeError("no")

    executor = RecordingExecutor()
    agent = AgentBuilder(TestModel.with_responses([tool_response(call("boom", "b"))])).tool(boom)
    built = agent.build().with_executor(executor)
    with pytest.raises(RuntimeError):
        await built.run("go")
    with pytest.raises(UserError, match="records a failed run"):
        await built.resume(executor.checkpoints[-1])


async def test_waiting_state_survives_json_and_resumes() -> None:
    log = CallLog()

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return "ok"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("shipped")]
    )
    agent = AgentBuilder(model).tool(deploy).approval_required_tools(["deploy"]).build()
    waiting = await agent.run("ship")
    stored = AgentRunState.model_validate_json(waiting.state.model_dump_json())
    assert stored.status is RunStatus.WAITING
    executor = RecordingExecutor()
    done = await agent.with_executor(executor).resume_after_hitl(
        stored, approvals={"d1": ToolApprovalDecision.approved(decided_by="alice")}
    )
    assert done.output == "shipped"
    assert log.counts == {"deploy": 1}
    assert executor.nodes[:3] == ["tool_call", "tool_return", "prepare_model_request"]
    assert executor.checkpoints[0].node is AgentExecutionNode.TOOL_CALL
