"""`FallbackModel` in-process, over real HTTP against the local Messages and Responses API
servers: the next model answers after a retryable failure, not after a permanent one; the
response says who answered; a conversation moves from one provider to the other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelDelta,
    ModelHTTPError,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    TestModel,
    TextPart,
    ThinkingPart,
    UserError,
    UserPromptPart,
)
from durable_agent.models import FallbackModel
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.support.anthropic_server import (
    AnthropicErrorReply,
    DisconnectReply,
    FakeAnthropicServer,
    MessageReply,
    Text,
    Thinking,
    ToolUse,
)
from tests.support.responses_server import (
    FakeResponsesServer,
    OutputText,
    Reasoning,
    ResponseReply,
    ResponsesErrorReply,
)

ANTHROPIC_KEY = "sk-ant-fallback"
OPENAI_KEY = "sk-fallback"


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    with FakeAnthropicServer(api_key=ANTHROPIC_KEY) as fake:
        yield fake
        assert fake.errors == []


@pytest.fixture
def gpt(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    with FakeResponsesServer(api_key=OPENAI_KEY) as fake:
        yield fake
        assert fake.errors == []


def chain(claude: FakeAnthropicServer, gpt: FakeResponsesServer, **options: bool) -> FallbackModel:
    return FallbackModel(
        AnthropicModel("claude-sonnet-4-5", base_url=claude.base_url, **options),
        OpenAIResponsesModel("gpt-5", base_url=gpt.base_url, **options),
    )


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize(
    "failure",
    [AnthropicErrorReply.overloaded(), AnthropicErrorReply.rate_limit(), DisconnectReply()],
    ids=["529", "429", "disconnect"],
)
async def test_the_next_model_answers_after_a_retryable_failure(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer, failure: object
) -> None:
    claude.enqueue(failure)
    gpt.enqueue(ResponseReply([OutputText("GPT answered.")]))

    result = await AgentBuilder(chain(claude, gpt)).build().run("hi")

    assert result.output == "GPT answered."
    [response] = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert response.model_name == "gpt-5"
    assert response.provider_name == "openai"
    assert response.metadata["fallback_index"] == 1
    assert len(claude.requests) == 1
    assert len(gpt.requests) == 1


async def test_the_first_model_answering_is_recorded_too(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    claude.enqueue(MessageReply([Text("Claude answered.")]))

    response = await chain(claude, gpt).request([user("hi")], ModelRequestParameters())

    assert response.text == "Claude answered."
    assert response.provider_name == "anthropic"
    assert response.metadata["fallback_index"] == 0
    assert gpt.requests == []


async def test_a_permanent_error_is_raised_without_asking_the_next(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    claude.enqueue(AnthropicErrorReply.invalid("max_tokens: too large"))

    with pytest.raises(ModelHTTPError) as caught:
        await chain(claude, gpt).request([user("hi")], ModelRequestParameters())

    assert caught.value.status_code == 400
    assert gpt.requests == []


async def test_when_every_model_fails_the_last_error_is_raised(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    claude.enqueue(AnthropicErrorReply.overloaded())
    gpt.enqueue(ResponsesErrorReply.rate_limit(retry_after=2))

    with pytest.raises(ModelHTTPError) as caught:
        await chain(claude, gpt).request([user("hi")], ModelRequestParameters())

    assert caught.value.status_code == 429
    assert caught.value.retry_after == 2
    assert caught.value.retryable


async def test_a_conversation_moves_between_providers(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    """Claude thinks and calls a tool; overloaded on the next step, GPT-5 continues the
    conversation (without Claude's thinking, which is not its own); back on Claude for the
    next run, GPT-5's encrypted reasoning is not sent to Claude, Claude's thinking is."""
    claude.enqueue(
        MessageReply([Thinking("Use the tool."), ToolUse("get_weather", {"city": "Oslo"})]),
        AnthropicErrorReply.overloaded(),
    )
    gpt.enqueue(ResponseReply([Reasoning(["The tool said sunny."]), OutputText("Sunny.")]))
    agent = AgentBuilder(chain(claude, gpt)).tool(get_weather).build()

    first = await agent.run("Oslo?")

    assert first.output == "Sunny."
    sent = gpt.bodies[0]["input"]
    assert [item.get("type", "message") for item in sent] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    claude.enqueue(MessageReply([Text("Still sunny.")]))

    second = await agent.run("And now?", message_history=first.messages)

    assert second.output == "Still sunny."
    messages = claude.bodies[-1]["messages"]
    assistant_blocks = [
        b["type"] for m in messages if m["role"] == "assistant" for b in m["content"]
    ]
    # Claude's own thinking goes back (signed); GPT-5's reasoning and text are plain text.
    assert assistant_blocks == ["thinking", "tool_use", "text"]
    assert messages[1]["content"][0]["signature"] == claude.sign("Use the tool.")
    gpt_turn = next(
        m for m in first.messages if isinstance(m, ModelResponse) and m.provider_name == "openai"
    )
    assert any(isinstance(p, ThinkingPart) and p.signature for p in gpt_turn.parts)


async def test_streaming_goes_to_the_member_that_answers(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    claude.enqueue(AnthropicErrorReply.overloaded())
    gpt.enqueue(ResponseReply([OutputText("streamed by gpt")], chunk_chars=5))
    seen: list[ModelDelta] = []

    response = await chain(claude, gpt, stream=True).request_stream(
        [user("hi")], ModelRequestParameters(), seen.append
    )

    assert response.text == "streamed by gpt"
    assert "".join(d.text for d in seen) == "streamed by gpt"
    assert gpt.bodies[0]["stream"] is True


async def test_pinned_asks_only_that_member(
    claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    claude.enqueue(AnthropicErrorReply.overloaded())
    gpt.enqueue(ResponseReply([OutputText("unused")]))

    with FallbackModel.pinned(0), pytest.raises(ModelHTTPError):
        await chain(claude, gpt).request([user("hi")], ModelRequestParameters())
    with FallbackModel.pinned(1):
        response = await chain(claude, gpt).request([user("hi")], ModelRequestParameters())

    assert response.text == "unused"
    assert response.metadata["fallback_index"] == 1
    assert len(claude.requests) == 1


def test_the_chain_describes_itself() -> None:
    first = OpenAIChatModel("gpt-4o", api_key="k", structured_output="tool", stream=True)
    second = AnthropicModel("claude-haiku-4-5", api_key="k")
    model = FallbackModel(first, second)
    assert model.model_name == "fallback:gpt-4o,claude-haiku-4-5"
    assert model.provider == "openai"
    assert model.structured_output_mode == "tool"
    assert model.streams
    assert not FallbackModel(TestModel.with_text("a"), TestModel.with_text("b")).streams
    with pytest.raises(UserError):
        FallbackModel(model, second)
    with pytest.raises(UserError):
        FallbackModel("gpt-4o")  # type: ignore[arg-type]


async def test_non_provider_models_fall_back_on_retryable_errors() -> None:
    def overloaded(messages: object, info: object) -> ModelResponse:
        raise ModelHTTPError("overloaded", status_code=529, model_name="a")

    model = FallbackModel(
        FunctionModel(overloaded),
        FunctionModel(lambda m, i: ModelResponse(parts=[TextPart(text="b")])),
    )
    result = await AgentBuilder(model).build().run("hi")
    assert result.output == "b"
