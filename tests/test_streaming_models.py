"""Streaming models in-process: the deltas a streaming `TestModel`, `FunctionModel` and
`OpenAIChatModel` (against the fake server's real SSE stream) hand over become `model_delta`
records through `run_stream` and the sink, the whole response still comes back, and the
records a UI needs (approvals, decisions, usage) are there too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from durable_agent import (
    AgentBuilder,
    AgentStreamRecord,
    FunctionModel,
    ModelDelta,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    TestModel,
    TextPart,
    ThinkingPart,
    ToolApprovalDecision,
    ToolCallPart,
    UserPromptPart,
)
from durable_agent.models import AgentInfo
from durable_agent.models.openai import OpenAIChatModel
from tests.support.openai_server import FakeOpenAIServer, TextReply, ToolCall, ToolCallsReply

API_KEY = "sk-test-stream"


def prompt(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def deltas(records: list[AgentStreamRecord], part: str = "text") -> list[str]:
    return [r.data["text"] for r in records if r.kind == "model_delta" and r.data["part"] == part]


async def records_of(agent: Any, prompt: str = "go") -> list[AgentStreamRecord]:
    return [r async for r in agent.run_stream(prompt)]


async def test_a_streamed_test_model_emits_deltas_in_order_with_the_rest() -> None:
    agent = AgentBuilder(TestModel.with_text("hello streaming world").streamed(chunk=5)).build()
    records = await records_of(agent)
    assert deltas(records) == ["hello", " stre", "aming", " worl", "d"]
    assert [r.seq for r in records] == list(range(len(records)))
    kinds = [r.kind for r in records]
    assert kinds.index("model_request") < kinds.index("model_delta") < kinds.index("model_response")
    response = records[kinds.index("model_response")]
    assert response.data["text"] == "hello streaming world"
    assert all(r.data["attempt"] == 1 for r in records if r.kind == "model_delta")
    usage = records[kinds.index("usage")]
    assert usage.data["total"]["requests"] == 1


async def test_models_that_do_not_stream_and_runs_without_a_sink_emit_no_deltas() -> None:
    plain = await records_of(AgentBuilder(TestModel.with_text("hi")).build())
    assert "model_delta" not in [r.kind for r in plain]

    asked: list[str] = []

    class Watched(TestModel):
        async def request_stream(self, *args: Any, **kwargs: Any) -> ModelResponse:
            asked.append("stream")
            return await super().request_stream(*args, **kwargs)

    model = Watched(text="hi").streamed()
    result = await AgentBuilder(model).build().run("go")  # nobody listens: no streaming
    assert result.output == "hi"
    assert asked == []


async def thinking_then_text(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | ModelDelta | ModelResponse]:
    yield ModelDelta(kind="thinking", text="Let me think. ")
    yield ModelDelta(kind="thinking", text="Paris.")
    yield "It is "
    yield "sunny."


async def test_a_streaming_function_model_assembles_its_response_from_what_it_yielded() -> None:
    model = FunctionModel(stream_function=thinking_then_text)
    assert model.streams
    records = await records_of(AgentBuilder(model).build())
    assert deltas(records, "thinking") == ["Let me think. ", "Paris."]
    assert deltas(records) == ["It is ", "sunny."]
    response = next(r for r in records if r.kind == "model_response")
    assert response.data["text"] == "It is sunny."
    assert response.data["thinking"] == "Let me think. Paris."
    plain = await model.request([], ModelRequestParameters())
    assert plain.parts == [ThinkingPart(text="Let me think. Paris."), TextPart(text="It is sunny.")]


async def test_a_stream_function_may_end_with_the_whole_response() -> None:
    async def with_final(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | ModelDelta | ModelResponse]:
        yield "draft"
        yield ModelResponse(parts=[TextPart(text="final answer")])

    records = await records_of(AgentBuilder(FunctionModel(stream_function=with_final)).build())
    assert deltas(records) == ["draft"]
    assert [r.data["output"] for r in records if r.kind == "run_complete"] == ["final answer"]


def test_function_model_needs_a_function() -> None:
    with pytest.raises(ValueError, match="needs a function, a stream_function, or both"):
        FunctionModel()


def lookup(city: str) -> str:
    """Weather for a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


async def test_openai_streaming_hands_over_content_and_reasoning_and_assembles_calls(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(
        ToolCallsReply([ToolCall("call_a", "lookup", {"city": "Paris"})], text="Checking."),
        TextReply("Sunny in Paris.", reasoning="The tool said so.", chunk_chars=3),
    )
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, stream=True)
    agent = AgentBuilder(model).tool(lookup).build()
    records = await records_of(agent, "weather in Paris?")
    assert "".join(deltas(records)) == "Checking.Sunny in Paris."
    assert "".join(deltas(records, "thinking")) == "The tool said so."
    responses = [r.data for r in records if r.kind == "model_response"]
    assert responses[0]["calls"] == [
        {"tool_call_id": "call_a", "tool_name": "lookup", "arguments": {"city": "Paris"}}
    ]
    assert responses[1]["text"] == "Sunny in Paris."
    assert [r.data["content"] for r in records if r.kind == "tool_return"] == ["sunny in Paris"]
    bodies = server.chat_requests
    assert all(
        b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies
    )
    usage = [r.data["request"] for r in records if r.kind == "usage"]
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage)


async def test_openai_stream_model_without_a_listener_asks_for_the_whole_response(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TextReply("whole"))
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, stream=True)
    result = await AgentBuilder(model).build().run("go")
    assert result.output == "whole"
    assert "stream" not in server.chat_requests[0]


async def test_an_openai_stream_cut_off_midway_is_a_retryable_error(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TextReply("This answer never ends well", cut_after=2))
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, stream=True)
    got: list[ModelDelta] = []
    with pytest.raises(ModelHTTPError) as caught:
        await model.request_stream([prompt("go")], ModelRequestParameters(), got.append)
    assert caught.value.retryable
    assert caught.value.status_code is None
    assert [d.text for d in got] == ["This", " ans"]


async def test_in_process_approval_records_name_the_call_and_who_decided() -> None:
    def deploy(env: str) -> str:
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [
            ModelResponse(parts=[ToolCallPart(id="d1", name="deploy", arguments={"env": "prod"})]),
            ModelResponse(parts=[TextPart(text="done")]),
        ]
    )
    agent = AgentBuilder(model).tool(deploy).approval_required_tools(["deploy"]).build()
    records: list[AgentStreamRecord] = []
    waiting = await agent.run("deploy", sink=records.append)
    decision = ToolApprovalDecision.approved(decided_by="alice")
    await agent.resume_after_hitl(waiting.state, approvals={"d1": decision}, sink=records.append)
    kinds = [r.kind for r in records]
    assert [r.seq for r in records] == list(range(len(records)))
    assert records[kinds.index("approval_requested")].data == {
        "tool_call_id": "d1",
        "tool_name": "deploy",
        "arguments": {"env": "prod"},
        "reason": None,
    }
    assert records[kinds.index("approval_decided")].data == {
        "tool_call_id": "d1",
        "tool_name": "deploy",
        "approved": True,
        "decided_by": "alice",
        "reason": None,
        "overridden": False,
    }
    assert kinds.index("waiting") < kinds.index("approval_decided") < kinds.index("tool_call")
