"""Node sequences and outcomes of the in-process loop, one scenario per test."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agent import (
    AgentBuilder,
    AgentExecutionNode,
    AgentStreamRecord,
    ApprovalRequired,
    CallDeferred,
    DeferredToolResult,
    FunctionModel,
    HitlDecisionError,
    MaxStepsExceeded,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    OutputRetryLimitExceeded,
    RetryPromptPart,
    RunStatus,
    TestModel,
    TextPart,
    ToolApprovalDecision,
    ToolContext,
    ToolRetryLimitExceeded,
    ToolReturnPart,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UsageLimits,
    UserError,
)
from durable_agent.models import AgentInfo

from .helpers import CallLog, RecordingExecutor, call, text_response, tool_response

TEXT_RUN = [
    "run_start",
    "prepare_model_request",
    "before_model_request",
    "model_response",
    "validate_output",
    "run_complete",
]
MODEL_TURN = ["prepare_model_request", "before_model_request", "model_response"]


async def test_text_run() -> None:
    executor = RecordingExecutor()
    result = (
        await AgentBuilder(TestModel.with_text("ok")).build().with_executor(executor).run("hello")
    )
    assert result.output == "ok"
    assert result.status is RunStatus.COMPLETED
    assert executor.nodes == TEXT_RUN
    assert [m.kind for m in result.messages] == ["request", "response"]
    assert result.usage.requests == 1
    assert executor.checkpoints[0].run_id.startswith("run_")
    assert executor.checkpoints[0].conversation_id.startswith("conv_")
    assert all(c.checkpoint_id.startswith("ckpt_") for c in executor.checkpoints)


async def test_instructions_open_the_first_request() -> None:
    agent = AgentBuilder(TestModel.with_text("ok")).instructions("Be brief.").build()
    result = await agent.run("hello")
    first = result.messages[0]
    assert isinstance(first, ModelRequest)
    assert [p.kind for p in first.parts] == ["instruction", "user_prompt"]


async def test_one_tool_call() -> None:
    log = CallLog()

    def get_weather(city: str) -> str:
        log.record("get_weather", city=city)
        return f"sunny in {city}"

    executor = RecordingExecutor()
    model = TestModel.with_responses(
        [tool_response(call("get_weather", "c1", city="Paris")), text_response("It is sunny.")]
    )
    result = await AgentBuilder(model).tool(get_weather).build().with_executor(executor).run("hi")
    assert result.output == "It is sunny."
    assert executor.nodes == [
        "run_start",
        *MODEL_TURN,
        "tool_call",
        "tool_return",
        *MODEL_TURN,
        "validate_output",
        "run_complete",
    ]
    assert log.calls == [("get_weather", {"city": "Paris"})]
    returned = result.messages[2]
    assert isinstance(returned, ModelRequest)
    part = returned.parts[0]
    assert isinstance(part, ToolReturnPart)
    assert (part.tool_call_id, part.content, part.is_error) == ("c1", "sunny in Paris", False)
    assert result.usage.tool_calls == 1


async def test_parallel_async_tools_run_concurrently_and_return_in_call_order() -> None:
    started: list[str] = []
    both_started = asyncio.Event()

    async def slow(name: str, delay: float) -> str:
        started.append(name)
        if len(started) == 2:
            both_started.set()
        # Each waits for the other to start: this only finishes if they run concurrently.
        await asyncio.wait_for(both_started.wait(), timeout=2)
        await asyncio.sleep(delay)
        return name

    model = TestModel.with_responses(
        [
            tool_response(
                call("slow", "a", name="first", delay=0.05),
                call("slow", "b", name="second", delay=0),
            ),
            text_response("done"),
        ]
    )
    executor = RecordingExecutor()
    result = await AgentBuilder(model).tool(slow).build().with_executor(executor).run("go")
    assert result.output == "done"
    assert executor.nodes[4:8] == ["tool_call", "tool_call", "tool_return", "tool_return"]
    returns = result.messages[2]
    assert isinstance(returns, ModelRequest)
    assert [p.tool_call_id for p in returns.parts if isinstance(p, ToolReturnPart)] == ["a", "b"]


async def test_sequential_tools_on_request() -> None:
    order: list[str] = []

    async def step(name: str) -> str:
        order.append(f"start {name}")
        await asyncio.sleep(0)
        order.append(f"end {name}")
        return name

    model = TestModel.with_responses(
        [
            tool_response(call("step", "a", name="a"), call("step", "b", name="b")),
            text_response("ok"),
        ]
    )
    executor = RecordingExecutor()
    agent = AgentBuilder(model).tool(step).sequential_tool_calls().build().with_executor(executor)
    await agent.run("go")
    assert order == ["start a", "end a", "start b", "end b"]
    assert executor.nodes[4:8] == ["tool_call", "tool_return", "tool_call", "tool_return"]


async def test_bounded_fan_out() -> None:
    in_flight = 0
    peak = 0

    async def work(n: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return n

    calls = [call("work", f"c{i}", n=i) for i in range(20)]
    model = TestModel.with_responses([tool_response(*calls), text_response("ok")])
    agent = AgentBuilder(model).tool(work).max_concurrent_tools(3).build()
    result = await agent.run("go")
    assert result.usage.tool_calls == 20
    assert peak == 3


async def test_invalid_arguments_go_back_to_the_model_as_retry_prompt() -> None:
    log = CallLog()

    def add(a: int, b: int) -> int:
        log.record("add", a=a, b=b)
        return a + b

    model = TestModel.with_responses(
        [
            tool_response(call("add", "c1", a="not a number", b=2)),
            tool_response(call("add", "c2", a=1, b=2)),
            text_response("3"),
        ]
    )
    executor = RecordingExecutor()
    result = await AgentBuilder(model).tool(add).build().with_executor(executor).run("add")
    assert result.output == "3"
    retry = result.messages[2]
    assert isinstance(retry, ModelRequest)
    part = retry.parts[0]
    assert isinstance(part, RetryPromptPart)
    assert part.tool_call_id == "c1"
    assert part.tool_name == "add"
    assert "int_parsing" in part.content
    assert log.calls == [("add", {"a": 1, "b": 2})]


async def test_tool_retry_limit() -> None:
    def flaky(x: int) -> int:
        raise ModelRetry("try a different x")

    model = TestModel.with_responses([tool_response(call("flaky", f"c{i}", x=i)) for i in range(5)])
    executor = RecordingExecutor()
    agent = AgentBuilder(model).tool(flaky, max_retries=2).build().with_executor(executor)
    with pytest.raises(ToolRetryLimitExceeded, match="'flaky' exceeded its retry limit of 2"):
        await agent.run("go")
    failed = executor.checkpoints[-1]
    assert failed.node is AgentExecutionNode.RUN_FAILED
    assert failed.state.status is RunStatus.FAILED
    assert failed.state.error is not None
    assert failed.state.error.kind == "tool_retry_limit_exceeded"


async def test_unknown_tool_is_reported_to_the_model() -> None:
    def real() -> str:
        return "x"

    model = TestModel.with_responses(
        [tool_response(call("imaginary", "c1")), text_response("sorry")]
    )
    result = await AgentBuilder(model).tool(real).build().run("go")
    retry = result.messages[2]
    assert isinstance(retry, ModelRequest)
    part = retry.parts[0]
    assert isinstance(part, RetryPromptPart)
    assert "Unknown tool name: 'imaginary'" in part.content
    assert "real" in part.content
    assert result.output == "sorry"


async def test_tool_context_and_docstring_schema() -> None:
    seen: list[ToolContext] = []

    def lookup(ctx: ToolContext, key: str, limit: int = 3) -> str:
        """Look a key up.

        Args:
            key: what to look up
            limit: how many results
        """
        seen.append(ctx)
        return key

    model = TestModel.with_responses(
        [tool_response(call("lookup", "c1", key="k")), text_response("ok")]
    )
    agent = AgentBuilder(model).tool(lookup).build()
    definition = agent.tools["lookup"].definition()
    assert definition.description == "Look a key up."
    assert definition.parameters_json_schema["required"] == ["key"]
    assert (
        definition.parameters_json_schema["properties"]["limit"]["description"]
        == "how many results"
    )
    result = await agent.run("go")
    assert seen[0].tool_call_id == "c1"
    assert seen[0].run_id == result.state.run_id
    assert seen[0].idempotency_key == f"{result.state.run_id}:c1"


class City(BaseModel):
    name: str
    population: int


async def test_structured_output_with_retry() -> None:
    model = TestModel.with_responses(
        [
            text_response('{"name": "Paris"}'),
            text_response('{"name": "Paris", "population": 2100000}'),
        ]
    )
    executor = RecordingExecutor()
    result = (
        await AgentBuilder(model).output_type(City).build().with_executor(executor).run("city?")
    )
    assert result.output == City(name="Paris", population=2100000)
    assert result.structured_output == {"name": "Paris", "population": 2100000}
    assert executor.nodes == [
        "run_start",
        *MODEL_TURN,
        "validate_output",
        *MODEL_TURN,
        "validate_output",
        "run_complete",
    ]
    validate_checkpoints = [
        c for c in executor.checkpoints if c.node.value == "prepare_model_request"
    ]
    assert validate_checkpoints[1].resume.cursor.output_validation_attempt == 1


async def test_output_validator_retry_limit() -> None:
    def must_shout(value: str) -> str:
        if not value.isupper():
            raise ModelRetry("answer in capitals")
        return value

    agent = (
        AgentBuilder(TestModel.with_text("quiet"))
        .output_validator(must_shout)
        .output_retries(2)
        .build()
    )
    with pytest.raises(OutputRetryLimitExceeded, match="answer in capitals"):
        await agent.run("go")


async def test_output_validator_can_pass_after_retry() -> None:
    def must_shout(value: str) -> str:
        if not value.isupper():
            raise ModelRetry("answer in capitals")
        return value + "!"

    model = TestModel.with_responses([text_response("quiet"), text_response("LOUD")])
    result = await AgentBuilder(model).output_validator(must_shout).build().run("go")
    assert result.output == "LOUD!"


def approval_agent(log: CallLog, executor: RecordingExecutor | None = None) -> Any:
    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    def status() -> str:
        log.record("status")
        return "green"

    model = TestModel.with_responses(
        [
            tool_response(call("status", "s1"), call("deploy", "d1", env="prod")),
            text_response("done"),
        ]
    )
    agent = AgentBuilder(model).tools([deploy, status]).approval_required_tools(["deploy"]).build()
    return agent.with_executor(executor or RecordingExecutor())


async def test_approval_waits_then_runs_when_approved() -> None:
    log = CallLog()
    executor = RecordingExecutor()
    agent = approval_agent(log, executor)
    waiting = await agent.run("ship it")
    assert waiting.status is RunStatus.WAITING
    assert waiting.output is None
    assert [(p.tool_call_id, p.tool_name, p.arguments) for p in waiting.pending_approvals] == [
        ("d1", "deploy", {"env": "prod"})
    ]
    assert log.calls == [("status", {})]
    assert executor.checkpoints[-1].resume.pending_approval_count == 1
    done = await agent.resume_after_hitl(
        waiting.state,
        approvals={"d1": ToolApprovalDecision.approved(override_arguments={"env": "staging"})},
    )
    assert done.output == "done"
    assert log.calls == [("status", {}), ("deploy", {"env": "staging"})]
    returns = done.messages[2]
    assert isinstance(returns, ModelRequest)
    assert [p.tool_call_id for p in returns.parts if isinstance(p, ToolReturnPart)] == ["s1", "d1"]


async def test_denied_tool_never_runs_and_model_sees_denial() -> None:
    log = CallLog()
    agent = approval_agent(log)
    waiting = await agent.run("ship it")
    done = await agent.resume_after_hitl(
        waiting.state,
        approvals={"d1": ToolApprovalDecision.denied("not on a Friday", decided_by="ops")},
    )
    assert done.output == "done"
    assert ("deploy", {"env": "prod"}) not in log.calls
    returns = done.messages[2]
    assert isinstance(returns, ModelRequest)
    denial = next(
        p for p in returns.parts if isinstance(p, ToolReturnPart) and p.tool_call_id == "d1"
    )
    assert denial.is_error
    assert denial.error_kind == "approval_denied"
    assert "not on a Friday" in str(denial.content)


async def test_bad_hitl_decisions_are_rejected() -> None:
    agent = approval_agent(CallLog())
    waiting = await agent.run("ship it")
    with pytest.raises(HitlDecisionError, match="no pending approval for tool call id"):
        await agent.resume_after_hitl(
            waiting.state, approvals={"nope": ToolApprovalDecision.approved(), "d1": True}
        )
    with pytest.raises(HitlDecisionError, match="missing for tool call id"):
        await agent.resume_after_hitl(waiting.state, approvals={})
    done = await agent.resume_after_hitl(waiting.state, approvals={"d1": True})
    with pytest.raises(HitlDecisionError, match="is completed, not waiting"):
        await agent.resume_after_hitl(done.state, approvals={"d1": True})


async def test_tool_raising_approval_required_and_call_deferred() -> None:
    log = CallLog()

    def pay(ctx: ToolContext, amount: int) -> str:
        if not ctx.approved:
            raise ApprovalRequired("amount over limit", metadata={"limit": 10})
        log.record("pay", amount=amount)
        return "paid"

    def background(job: str) -> str:
        raise CallDeferred("runs elsewhere")

    model = TestModel.with_responses(
        [
            tool_response(call("pay", "p1", amount=50), call("background", "b1", job="x")),
            text_response("ok"),
        ]
    )
    executor = RecordingExecutor()
    agent = AgentBuilder(model).tools([pay, background]).build().with_executor(executor)
    waiting = await agent.run("go")
    assert waiting.status is RunStatus.WAITING
    assert waiting.pending_approvals[0].reason == "amount over limit"
    assert [d.tool_call_id for d in waiting.deferred_calls] == ["b1"]
    assert executor.checkpoints[-1].resume.deferred_tool_count == 1
    with pytest.raises(HitlDecisionError, match="more than one deferred result"):
        await agent.resume_after_hitl(
            waiting.state,
            approvals={"p1": True},
            deferred_results=[
                DeferredToolResult("b1", "success", 1),
                DeferredToolResult("b1", "success", 2),
            ],
        )
    done = await agent.resume_after_hitl(
        waiting.state,
        approvals={"p1": True},
        deferred_results=[DeferredToolResult("b1", "success", {"rows": 3})],
    )
    assert done.output == "ok"
    assert log.calls == [("pay", {"amount": 50})]
    returns = done.messages[2]
    assert isinstance(returns, ModelRequest)
    contents = {p.tool_call_id: p.content for p in returns.parts if isinstance(p, ToolReturnPart)}
    assert contents == {"p1": "paid", "b1": {"rows": 3}}


async def test_request_limit() -> None:
    def again() -> str:
        return "again"

    model = TestModel.with_responses([tool_response(call("again", f"c{i}")) for i in range(10)])
    executor = RecordingExecutor()
    agent = (
        AgentBuilder(model).tool(again).usage_limits(UsageLimits(request_limit=3)).build()
    ).with_executor(executor)
    with pytest.raises(UsageLimitExceeded, match="request_limit=3") as info:
        await agent.run("loop")
    assert info.value.limit == "request_limit"
    assert executor.checkpoints[-1].state.usage.requests == 3
    assert executor.checkpoints[-1].state.error is not None
    assert executor.checkpoints[-1].state.error.kind == "usage_limit_exceeded"


async def test_tool_call_and_token_limits() -> None:
    def again() -> str:
        return "again"

    model = TestModel.with_responses([tool_response(call("again", "a"), call("again", "b"))])
    agent = AgentBuilder(model).tool(again).usage_limits(UsageLimits(tool_calls_limit=1)).build()
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit=1"):
        await agent.run("loop")
    wordy = AgentBuilder(TestModel.with_text("many words " * 20)).usage_limits(
        UsageLimits(output_tokens_limit=5)
    )
    with pytest.raises(UsageLimitExceeded, match="output_tokens"):
        await wordy.build().run("talk")


async def test_max_steps() -> None:
    def again() -> str:
        return "again"

    model = TestModel.with_responses([tool_response(call("again", f"c{i}")) for i in range(10)])
    executor = RecordingExecutor()
    agent = AgentBuilder(model).tool(again).max_steps(2).build().with_executor(executor)
    with pytest.raises(MaxStepsExceeded, match="max_steps=2"):
        await agent.run("loop")
    assert executor.nodes[-1] == "run_failed"
    assert executor.checkpoints[-1].state.error is not None
    assert executor.checkpoints[-1].state.error.kind == "max_steps_exceeded"


async def test_script_exhaustion_is_a_clear_error() -> None:
    model = TestModel.with_responses([tool_response(call("t", "c1"))])

    def t() -> str:
        return "x"

    with pytest.raises(UnexpectedModelBehavior, match="script exhausted: request 2"):
        await AgentBuilder(model).tool(t).build().run("go")


async def test_function_model_sees_tools_and_history() -> None:
    seen: list[AgentInfo] = []

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        if len(messages) == 1:
            return tool_response(call("echo", "e1", text="hi"))
        return ModelResponse(parts=[TextPart(text=f"saw {len(messages)} messages")])

    def echo(text: str) -> str:
        return text

    result = await AgentBuilder(FunctionModel(respond)).tool(echo).build().run("go")
    assert result.output == "saw 3 messages"
    assert [t.name for t in seen[0].function_tools] == ["echo"]


async def test_builder_rejects_bad_configuration() -> None:
    def t() -> str:
        return "x"

    with pytest.raises(UserError, match="unknown tool"):
        AgentBuilder(TestModel.with_text("x")).tool(t).approval_required_tools(["nope"]).build()
    with pytest.raises(UserError, match="two tools are named 't'"):
        AgentBuilder(TestModel.with_text("x")).tools([t, t]).build()
    with pytest.raises(UserError, match="needs a Model"):
        AgentBuilder("gpt-4")  # type: ignore[arg-type]


async def test_message_history_continues_a_conversation() -> None:
    agent = AgentBuilder(TestModel.with_text("ok")).build()
    first = await agent.run("one")
    second = await agent.run(
        "two", message_history=first.messages, conversation_id=first.state.conversation_id
    )
    assert len(second.messages) == 4
    assert second.state.conversation_id == first.state.conversation_id


async def test_stream_records_are_contiguous_and_cursors_point_at_node_start() -> None:
    records: list[AgentStreamRecord] = []
    executor = RecordingExecutor()
    model = TestModel.with_responses([tool_response(call("t", "c1")), text_response("ok")])

    def t() -> str:
        return "x"

    await AgentBuilder(model).tool(t).build().with_executor(executor).run("go", sink=records.append)
    assert [r.seq for r in records] == list(range(len(records)))
    kinds = {r.kind for r in records}
    assert {
        "run_start",
        "node_start",
        "node_complete",
        "checkpoint",
        "model_request",
        "model_response",
        "tool_call",
        "tool_return",
        "run_complete",
    } <= kinds
    by_seq = {r.seq: r for r in records}
    for checkpoint in executor.checkpoints:
        start = by_seq[checkpoint.resume.cursor.stream_cursor]
        assert start.kind == "node_start"
        assert start.node == checkpoint.node.value
        assert by_seq[start.seq + 1].data["checkpoint_id"] == checkpoint.checkpoint_id


async def test_run_stream_yields_records() -> None:
    agent = AgentBuilder(TestModel.with_text("ok")).build()
    kinds = [r.kind async for r in agent.run_stream("go")]
    assert kinds[0] == "run_start"
    assert kinds[-1] == "node_complete"
    assert "run_complete" in kinds


async def test_failed_run_stream_ends_with_run_failed() -> None:
    records: list[AgentStreamRecord] = []

    def boom() -> str:
        raise RuntimeError("disk on fire")

    model = TestModel.with_responses([tool_response(call("boom", "c1"))])
    with pytest.raises(RuntimeError, match="disk on fire"):
        await AgentBuilder(model).tool(boom).build().run("go", sink=records.append)
    assert records[-1].kind == "run_failed"
    assert records[-1].data == {"kind": "RuntimeError", "message": "disk on fire"}


def test_decision_json() -> None:
    from durable_agent import AgentExecutionDecisionAdapter, Continue, Suspend

    assert json.loads(AgentExecutionDecisionAdapter.dump_json(Continue())) == {"kind": "continue"}
    assert json.loads(AgentExecutionDecisionAdapter.dump_json(Suspend(reason="wait"))) == {
        "kind": "suspend",
        "reason": "wait",
    }
    assert AgentExecutionDecisionAdapter.validate_json(
        '{"kind":"suspend","reason":"x"}'
    ) == Suspend(reason="x")


def test_docstring_sections_and_continuation_lines() -> None:
    def lookup(key: str, limit: int = 3) -> str:
        """Look a key up.

        Args:
            key: what to look up
            limit (int): how many results,
                at most

        Returns:
            the value
        """
        return key

    agent = AgentBuilder(TestModel.with_text("x")).tool(lookup).build()
    schema = agent.tools["lookup"].definition().parameters_json_schema
    assert agent.tools["lookup"].description == "Look a key up."
    assert schema["properties"]["key"]["description"] == "what to look up"
    assert schema["properties"]["limit"]["description"] == "how many results, at most"
    assert set(schema["properties"]) == {"key", "limit"}
