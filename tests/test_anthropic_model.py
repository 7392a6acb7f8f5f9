"""`AnthropicModel` against a local server speaking the Messages API (JSON and SSE), through
the official `anthropic` SDK over real HTTP: what it sends (asserted on the bodies the
server received), what it reads back, thinking kept across turns, prompt caching, errors,
and agent runs end to end."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from pydantic import BaseModel

from durable_agent import (
    AgentBuilder,
    AgentStreamRecord,
    ModelDelta,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    ModelSettings,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserError,
    UserPromptPart,
)
from durable_agent.contract.tools import ToolDefinition
from durable_agent.models.anthropic import AnthropicModel
from tests.support.anthropic_server import (
    AnthropicErrorReply,
    AnthropicUsage,
    DisconnectReply,
    FakeAnthropicServer,
    MessageReply,
    Redacted,
    Text,
    Thinking,
    ToolUse,
)

API_KEY = "sk-ant-test-0123456789"
MODEL = "claude-sonnet-4-5"
NO_PARAMS = ModelRequestParameters()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with FakeAnthropicServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def model_for(server: FakeAnthropicServer, **options: Any) -> AnthropicModel:
    return AnthropicModel(MODEL, base_url=server.base_url, **options)


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


def weather_agent(model: AnthropicModel, calls: list[str] | None = None) -> Any:
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        if calls is not None:
            calls.append(city)
        return f"sunny in {city}"

    return AgentBuilder(model).instructions("Answer weather questions.").tool(get_weather).build()


# --------------------------------------------------------------------------- requests


async def test_a_text_reply_and_what_was_sent(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([Text("Hello from Claude.")], usage=AnthropicUsage(12, 6)))

    response = await model_for(server).request([user("hi")], NO_PARAMS)

    assert response.text == "Hello from Claude."
    assert response.model_name == MODEL
    assert response.provider_name == "anthropic"
    assert response.finish_reason == "stop"
    assert response.metadata["message_id"].startswith("msg_")
    assert response.usage.input_tokens == 12
    assert response.usage.output_tokens == 6
    assert response.usage.total_tokens == 18
    assert response.usage.requests == 1
    [request] = server.requests
    # The key from ANTHROPIC_API_KEY in this process (this SDK sends it as a bearer token).
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["x-api-key"] == API_KEY  # as the API reference documents it
    assert request.headers["anthropic-version"]
    assert request.body == {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": False,
    }


async def test_tool_round_trip_in_an_agent_run(server: FakeAnthropicServer) -> None:
    server.enqueue(
        MessageReply(
            [Text("Let me look."), ToolUse("get_weather", {"city": "Paris"}, "toolu_01A")]
        ),
        MessageReply([Text("It is sunny in Paris.")]),
    )
    calls: list[str] = []
    agent = weather_agent(model_for(server), calls)

    result = await agent.run("Weather in Paris?")

    assert result.output == "It is sunny in Paris."
    assert calls == ["Paris"]
    assert result.usage.requests == 2
    first, second = server.bodies
    assert first["system"] == [{"type": "text", "text": "Answer weather questions."}]
    assert first["tools"] == [
        {
            "name": "get_weather",
            "input_schema": first["tools"][0]["input_schema"],
            "description": "Current weather for a city.",
        }
    ]
    assert first["tools"][0]["input_schema"]["properties"]["city"]["type"] == "string"
    assert "tool_choice" not in first  # text is a valid answer: the model decides
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny in Paris"}
            ],
        },
    ]
    calls_made = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.tool_calls]
    assert [c.id for c in calls_made] == ["toolu_01A"]


class Forecast(BaseModel):
    city: str
    degrees: int


async def test_structured_output_forces_the_output_tool(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([ToolUse("final_result", {"city": "Oslo", "degrees": 4})]))
    agent = AgentBuilder(model_for(server)).output_type(Forecast).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", degrees=4)
    [body] = server.bodies
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["final_result"]
    assert body["tools"][0]["input_schema"]["required"] == ["city", "degrees"]


async def test_a_json_schema_request_is_answered_through_the_output_tool_as_text(
    server: FakeAnthropicServer,
) -> None:
    # What a fallback chain whose first model asks for a JSON schema sends this model.
    server.enqueue(MessageReply([ToolUse("final_result", {"city": "Oslo", "degrees": 4})]))
    params = ModelRequestParameters(
        output_mode="json_schema", output_schema=Forecast.model_json_schema()
    )

    response = await model_for(server).request([user("Forecast")], params)

    assert Forecast.model_validate_json(response.text) == Forecast(city="Oslo", degrees=4)
    assert response.tool_calls == []
    assert server.bodies[0]["tool_choice"] == {"type": "any"}


async def test_settings_map_to_the_messages_api(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([Text("ok")]))
    model = model_for(
        server,
        max_tokens=300,
        settings=ModelSettings(temperature=0.2, stop=["END"], extra={"top_k": 5}),
    )

    await model.request([user("hi")], NO_PARAMS)

    [body] = server.bodies
    assert body["max_tokens"] == 300
    assert body["temperature"] == 0.2
    assert body["stop_sequences"] == ["END"]
    assert body["top_k"] == 5


# --------------------------------------------------------------------------- streaming


async def test_streaming_hands_over_thinking_and_text_and_assembles_the_message(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(
        MessageReply(
            [
                Thinking("The user wants Paris weather; call the tool."),
                Text("Checking now."),
                ToolUse("get_weather", {"city": "Paris", "unit": "celsius"}),
            ],
            usage=AnthropicUsage(input_tokens=30, output_tokens=42),
            chunk_chars=5,
        )
    )
    seen: list[ModelDelta] = []

    response = await model_for(server, stream=True, thinking=2048).request_stream(
        [user("Paris?")], NO_PARAMS, seen.append
    )

    thinking, text, call = response.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == "The user wants Paris weather; call the tool."
    assert thinking.signature == server.sign(thinking.text)
    assert thinking.provider_name == "anthropic"
    assert text == TextPart(text="Checking now.")
    assert isinstance(call, ToolCallPart)
    assert call.name == "get_weather"
    assert call.arguments == {"city": "Paris", "unit": "celsius"}
    assert call.id.startswith("toolu_")
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens == 30
    assert response.usage.output_tokens == 42  # from message_delta, not message_start's 1
    assert "".join(d.text for d in seen if d.kind == "thinking") == thinking.text
    assert "".join(d.text for d in seen if d.kind == "text") == "Checking now."
    assert [d.kind for d in seen][:2] == ["thinking", "thinking"]
    body = server.bodies[0]
    assert body["stream"] is True
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.events_written[0] == "message_start"
    assert server.events_written[-1] == "message_stop"


async def test_an_agent_run_streams_model_deltas(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([Text("Streaming from Claude, piece by piece.")], chunk_chars=6))
    agent = AgentBuilder(model_for(server, stream=True)).build()

    records: list[AgentStreamRecord] = [r async for r in agent.run_stream("go")]

    pieces = [r.data["text"] for r in records if r.kind == "model_delta"]
    assert pieces == ["Stream", "ing fr", "om Cla", "ude, p", "iece b", "y piec", "e."]
    [response] = [r for r in records if r.kind == "model_response"]
    assert response.data["text"] == "Streaming from Claude, piece by piece."


async def test_a_stream_cut_off_midway_is_a_retryable_error(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([Text("This answer never finishes.")], chunk_chars=4, cut_after=5))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server, stream=True).request_stream([user("hi")], NO_PARAMS, print)

    assert caught.value.retryable
    assert caught.value.status_code is None
    assert "message_stop" in caught.value.message


async def test_an_error_event_mid_stream_is_a_retryable_overload(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(MessageReply([Text("Partial answer")], error_after=4))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server, stream=True).request_stream([user("hi")], NO_PARAMS, print)

    assert caught.value.status_code == 529
    assert caught.value.retryable
    assert caught.value.message.startswith("Overloaded")


# --------------------------------------------------------------------------- thinking


async def test_thinking_blocks_go_back_unchanged_with_their_signatures(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(
        MessageReply(
            [
                Thinking("I should call get_weather for Paris."),
                Redacted(),
                ToolUse("get_weather", {"city": "Paris"}),
            ]
        ),
        MessageReply([Thinking("The tool said sunny."), Text("Sunny in Paris.")]),
    )
    agent = weather_agent(model_for(server, thinking=1024, max_tokens=2000))

    result = await agent.run("Paris?")

    assert result.output == "Sunny in Paris."
    first, second = server.bodies
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert first["max_tokens"] == 2000
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    thinking, redacted, call = assistant["content"]
    # The server accepts only the signature it issued for exactly this text.
    assert thinking == {
        "type": "thinking",
        "thinking": "I should call get_weather for Paris.",
        "signature": server.sign("I should call get_weather for Paris."),
    }
    assert redacted["type"] == "redacted_thinking"
    assert redacted["data"].startswith("EmwKAhgBEgy")
    assert call["type"] == "tool_use"
    # In the history: the blocks, signed, and the redacted one's data as its signature.
    first_response = next(m for m in result.messages if isinstance(m, ModelResponse))
    kept = [p for p in first_response.parts if isinstance(p, ThinkingPart)]
    assert [(p.id, bool(p.signature), p.provider_name) for p in kept] == [
        (None, True, "anthropic"),
        ("redacted_thinking", True, "anthropic"),
    ]
    restored = ModelResponse.model_validate_json(first_response.model_dump_json())
    assert restored == first_response


async def test_thinking_with_structured_output_does_not_force_a_tool(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(
        MessageReply(
            [Thinking("Oslo is cold."), ToolUse("final_result", {"city": "Oslo", "degrees": -3})]
        )
    )
    agent = AgentBuilder(model_for(server, thinking=2048)).output_type(Forecast).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", degrees=-3)
    body = server.bodies[0]
    assert "tool_choice" not in body  # the API refuses forced tool use with thinking
    assert body["max_tokens"] == 4096


async def test_a_thinking_budget_above_max_tokens_raises_max_tokens(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(MessageReply([Text("ok")]))
    await model_for(server, thinking=8000).request([user("hi")], NO_PARAMS)
    assert server.bodies[0]["max_tokens"] == 8000 + 4096


# --------------------------------------------------------------------------- caching


async def test_prompt_caching_marks_system_tools_and_the_conversation(
    server: FakeAnthropicServer,
) -> None:
    server.enqueue(
        MessageReply(
            [ToolUse("get_weather", {"city": "Rome"})],
            usage=AnthropicUsage(
                input_tokens=20, cache_creation_input_tokens=1500, output_tokens=10
            ),
        ),
        MessageReply(
            [Text("Sunny in Rome.")],
            usage=AnthropicUsage(input_tokens=30, cache_read_input_tokens=1500, output_tokens=5),
        ),
    )
    agent = weather_agent(model_for(server, prompt_caching=True))

    result = await agent.run("Rome?")

    first, second = server.bodies
    ephemeral = {"type": "ephemeral"}
    for body in (first, second):
        assert body["system"][-1]["cache_control"] == ephemeral
        assert body["tools"][-1]["cache_control"] == ephemeral
        assert body["messages"][-1]["content"][-1]["cache_control"] == ephemeral
    assert second["messages"][-1]["content"][-1]["type"] == "tool_result"
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    written, read = (r.usage for r in responses)
    assert (written.input_tokens, written.cache_write_tokens, written.cache_read_tokens) == (
        1520,
        1500,
        0,
    )
    assert (read.input_tokens, read.cache_read_tokens, read.cache_write_tokens) == (1530, 1500, 0)
    assert result.usage.input_tokens == 3050
    assert result.usage.cache_read_tokens == 1500
    assert result.usage.cache_write_tokens == 1500
    assert result.usage.output_tokens == 15


async def test_without_prompt_caching_nothing_is_marked(server: FakeAnthropicServer) -> None:
    server.enqueue(MessageReply([Text("ok")]))
    await model_for(server).request([user("hi")], NO_PARAMS)
    assert "cache_control" not in str(server.bodies[0])


# --------------------------------------------------------------------------- errors


async def test_429_is_retryable_with_retry_after(server: FakeAnthropicServer) -> None:
    server.enqueue(AnthropicErrorReply.rate_limit(retry_after=7))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    error = caught.value
    assert isinstance(error.__cause__, anthropic.RateLimitError)
    assert error.status_code == 429
    assert error.retryable
    assert error.retry_after == 7
    assert error.message.startswith("This request would exceed the rate limit")
    assert len(server.requests) == 1  # the SDK's own retries are off


@pytest.mark.parametrize(
    "reply",
    [AnthropicErrorReply.overloaded(), AnthropicErrorReply.unavailable()],
    ids=["529", "503"],
)
async def test_overloaded_and_5xx_are_retryable(
    server: FakeAnthropicServer, reply: AnthropicErrorReply
) -> None:
    server.enqueue(reply)

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == reply.status
    assert caught.value.retryable
    assert caught.value.retry_after is None
    assert len(server.requests) == 1


async def test_400_is_permanent_and_says_what_to_fix(server: FakeAnthropicServer) -> None:
    server.enqueue(
        AnthropicErrorReply.invalid("prompt is too long: 210000 tokens > 200000 maximum")
    )

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 400
    assert not caught.value.retryable
    assert caught.value.message.startswith("prompt is too long: 210000 tokens > 200000 maximum")
    assert "fix what it names" in caught.value.message


async def test_a_request_the_api_refuses_is_its_400(server: FakeAnthropicServer) -> None:
    # A tool name the API refuses: the server's own validation answers, not the script.
    tool = ToolDefinition(name="bad name!", parameters_json_schema={"type": "object"})
    params = ModelRequestParameters(function_tools=[tool])
    server.enqueue(MessageReply([Text("never sent")]))
    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], params)
    assert caught.value.status_code == 400
    assert "tools.0.custom.name" in caught.value.message
    assert server.pending == 1


async def test_401_names_the_key_variable(server: FakeAnthropicServer) -> None:
    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server, api_key="sk-ant-wrong").request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 401
    assert not caught.value.retryable
    assert "invalid x-api-key" in caught.value.message
    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert "sk-ant-wrong" not in caught.value.message


async def test_404_names_the_model(server: FakeAnthropicServer) -> None:
    server.enqueue(AnthropicErrorReply.not_found("claude-nonexistent"))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 404
    assert not caught.value.retryable
    assert f"check the model name {MODEL!r}" in caught.value.message


async def test_a_dropped_connection_is_retryable(server: FakeAnthropicServer) -> None:
    server.enqueue(DisconnectReply())

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code is None
    assert caught.value.retryable


# --------------------------------------------------------------------------- keys and clients


async def test_the_key_is_in_no_repr_pickle_or_response(server: FakeAnthropicServer) -> None:
    secret = "sk-ant-only-in-this-object"
    fake = FakeAnthropicServer(api_key=secret).start()
    try:
        fake.enqueue(MessageReply([Text("hi")]))
        model = AnthropicModel(MODEL, api_key=secret, base_url=fake.base_url)
        agent = AgentBuilder(model).build()
        result = await agent.run("hello")
        assert result.output == "hi"
        assert secret not in repr(model)
        assert secret not in repr(agent)
        assert secret.encode() not in pickle.dumps(model)
        assert secret not in result.state.model_dump_json()
        copy = pickle.loads(pickle.dumps(model))
        fake.enqueue(MessageReply([Text("unreached")]))
        with pytest.raises(ModelHTTPError) as caught:  # it uses this process's key
            await copy.request([user("hi")], NO_PARAMS)
        assert caught.value.status_code == 401
    finally:
        fake.close()


async def test_a_given_client_is_used_but_never_retries(server: FakeAnthropicServer) -> None:
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=server.base_url, max_retries=5)
    model = AnthropicModel(MODEL, client=client)
    server.enqueue(AnthropicErrorReply.overloaded(), MessageReply([Text("never asked")]))

    with pytest.raises(ModelHTTPError):
        await model.request([user("hi")], NO_PARAMS)

    assert len(server.requests) == 1
    assert server.pending == 1
    assert "client" not in repr(model)
    assert pickle.loads(pickle.dumps(model)).client is not None


def test_no_key_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    import asyncio

    async def ask() -> None:
        await AnthropicModel(MODEL).request([user("hi")], NO_PARAMS)

    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        asyncio.run(ask())


def test_bad_options_are_refused() -> None:
    with pytest.raises(UserError, match="model name"):
        AnthropicModel("")
    with pytest.raises(UserError, match="1024"):
        AnthropicModel(MODEL, thinking=100)
    with pytest.raises(UserError, match="max_tokens"):
        AnthropicModel(MODEL, max_tokens=0)


# --------------------------------------------------------------------------- other providers


async def test_a_conversation_from_another_provider_continues_here(
    server: FakeAnthropicServer,
) -> None:
    history: list[ModelMessage] = [
        user("Weather in Paris?"),
        ModelResponse(
            parts=[
                ThinkingPart(
                    text="Summary of my reasoning",
                    signature="gAAAAB-openai-encrypted",
                    id="rs_123",
                    provider_name="openai",
                ),
                ThinkingPart(text="plain reasoning from a chat server"),
                ToolCallPart(
                    id="functions.get_weather:0", name="get_weather", arguments={"city": "Paris"}
                ),
            ],
            provider_name="openai",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_call_id="functions.get_weather:0", name="get_weather", content="sunny"
                )
            ]
        ),
    ]
    server.enqueue(MessageReply([Text("It is sunny.")]))

    response = await model_for(server).request(history, NO_PARAMS)

    assert response.text == "It is sunny."
    messages = server.bodies[0]["messages"]
    assistant = messages[1]["content"]
    # Another provider's thinking is not passed off as Claude's; the id is made acceptable
    # to the API and matches its result.
    assert [block["type"] for block in assistant] == ["tool_use"]
    assert assistant[0]["id"] != "functions.get_weather:0"
    assert messages[2]["content"][0]["tool_use_id"] == assistant[0]["id"]
