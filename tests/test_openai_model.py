"""`OpenAIChatModel` against the fake OpenAI server: the SDK, real HTTP, real validation.

The fake refuses any request the real API would refuse (a tool call left unanswered, a
tool message without its call, a bad schema), so every test that reaches a scripted reply
also proves the mapped conversation is one the API accepts.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from durable_agent import (
    AgentBuilder,
    InstructionPart,
    ModelHTTPError,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    ModelSettings,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolReturnPart,
    UnexpectedModelBehavior,
    UserError,
    UserPromptPart,
)
from durable_agent.contract.tools import OUTPUT_TOOL_NAME
from durable_agent.models.openai import FIX_ERRORS, OpenAIChatModel, parse_retry_after
from tests.support.openai_server import (
    DisconnectReply,
    ErrorReply,
    FakeOpenAIServer,
    RawReply,
    RefusalReply,
    TextReply,
    ToolCallsReply,
    Usage,
)

API_KEY = "sk-test-model-4f1c9a2e7b"
MODEL = "gpt-4o-mini"
NO_PARAMS = ModelRequestParameters()
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up a developer's real key or endpoint."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def model_for(server: FakeOpenAIServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel(MODEL, base_url=server.base_url, api_key=API_KEY, **options)


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


async def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


# --------------------------------------------------------------------------- request mapping


async def test_every_part_kind_maps_to_the_chat_completions_shape(
    server: FakeOpenAIServer,
) -> None:
    history: list[ModelMessage] = [
        ModelRequest(
            parts=[
                InstructionPart(content="Be brief."),
                SystemPromptPart(content="You are a weather bot."),
                UserPromptPart(content=[TextContent(text="Weather in "), TextContent(text="Oslo")]),
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart(text="two cities, call twice", signature="sig"),
                TextPart(text="Checking."),
                ToolCallPart(id="c1", name="get_weather", arguments={"city": "Oslo"}),
                ToolCallPart(id="c2", name="get_weather", arguments='{"city": Bergen'),
                ToolCallPart(id="c3", name="deploy", arguments={"env": "prod"}),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(tool_call_id="c1", name="get_weather", content={"sky": "clear"}),
                RetryPromptPart(content="bad JSON", tool_name="get_weather", tool_call_id="c2"),
                ToolReturnPart(
                    tool_call_id="c3",
                    name="deploy",
                    content="The call was not approved: freeze",
                    is_error=True,
                    error_kind="approval_denied",
                ),
            ]
        ),
        ModelResponse(parts=[ThinkingPart(text="only thoughts, nothing to send back")]),
        ModelResponse(parts=[TextPart(text="Oslo is clear.")]),
        user("thanks"),
    ]
    server.enqueue(TextReply("you're welcome"))

    response = await model_for(server).request(history, NO_PARAMS)

    assert response.text == "you're welcome"
    [sent] = server.chat_requests
    assert sent["model"] == MODEL
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "You are a weather bot."},
        # Plain text goes as a string, as the official SDKs send it.
        {"role": "user", "content": "Weather in Oslo"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": Bergen'},
                },
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "deploy", "arguments": '{"env":"prod"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky":"clear"}'},
        {"role": "tool", "tool_call_id": "c2", "content": f"bad JSON\n\n{FIX_ERRORS}"},
        {
            "role": "tool",
            "tool_call_id": "c3",
            "content": "approval_denied: The call was not approved: freeze",
        },
        {"role": "assistant", "content": "Oslo is clear."},
        {"role": "user", "content": "thanks"},
    ]
    # No tools, no structured output, no settings: nothing else goes on the wire.
    assert set(sent) == {"model", "messages"}


async def test_tool_returns_then_idless_retry_then_prompt_stay_valid(
    server: FakeOpenAIServer,
) -> None:
    """Tool answers come first; a retry prompt without a call id is a user message."""
    history: list[ModelMessage] = [
        user("go"),
        ModelResponse(
            parts=[
                ToolCallPart(id="a", name="get_weather", arguments={"city": "Rome"}),
                ToolCallPart(id="b", name="get_weather", arguments={"city": "Bern"}),
            ]
        ),
        ModelRequest(
            parts=[
                InstructionPart(content="New instructions."),
                ToolReturnPart(tool_call_id="b", name="get_weather", content="rain"),
                ToolReturnPart(tool_call_id="a", name="get_weather", content="sun"),
                RetryPromptPart(content="Reply in French."),
                UserPromptPart(content="and tomorrow?"),
            ]
        ),
    ]
    server.enqueue(TextReply("ok"))

    await model_for(server).request(history, NO_PARAMS)

    [sent] = server.chat_requests
    assert sent["messages"][2:] == [
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "system", "content": "New instructions."},
        {"role": "user", "content": f"Reply in French.\n\n{FIX_ERRORS}"},
        {"role": "user", "content": "and tomorrow?"},
    ]


async def test_unanswered_calls_get_answers_so_the_api_accepts_the_history(
    server: FakeOpenAIServer,
) -> None:
    """An output-tool retry answers its call; a finished run's output call is closed off."""
    history: list[ModelMessage] = [
        user("report"),
        ModelResponse(parts=[ToolCallPart(id="o1", name=OUTPUT_TOOL_NAME, arguments={})]),
        ModelRequest(parts=[RetryPromptPart(content="Validation failed: city missing")]),
        ModelResponse(
            parts=[
                ToolCallPart(id="o2", name=OUTPUT_TOOL_NAME, arguments={"city": "Oslo"}),
                ToolCallPart(id="x1", name="get_weather", arguments={"city": "Oslo"}),
            ]
        ),
        # The next run of the same conversation starts with instructions and a prompt.
        ModelRequest(parts=[InstructionPart(content="Be brief."), UserPromptPart(content="again")]),
    ]
    server.enqueue(TextReply("ok"))

    await model_for(server).request(history, NO_PARAMS)

    messages = server.chat_requests[0]["messages"]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "o1",
        "content": f"Validation failed: city missing\n\n{FIX_ERRORS}",
    }
    assert messages[4:] == [
        {"role": "tool", "tool_call_id": "o2", "content": "Final result processed."},
        {"role": "tool", "tool_call_id": "x1", "content": "This tool call was not run."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "again"},
    ]


async def test_a_return_for_an_unknown_call_is_kept_as_user_text(server: FakeOpenAIServer) -> None:
    history: list[ModelMessage] = [
        user("go"),
        ModelResponse(parts=[TextPart(text="done")]),
        ModelRequest(parts=[ToolReturnPart(tool_call_id="ghost", name="lookup", content=[1, 2])]),
    ]
    server.enqueue(TextReply("ok"))

    await model_for(server).request(history, NO_PARAMS)

    assert server.chat_requests[0]["messages"][-1] == {
        "role": "user",
        "content": "Tool lookup (call ghost) returned: [1,2]",
    }


# --------------------------------------------------------------------------- agent runs


async def test_tool_round_trip_through_an_agent(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ToolCallsReply(
            [
                ("call_1", "get_weather", {"city": "Paris"}),
                ("call_2", "get_weather", {"city": "Oslo"}),
            ],
            usage=Usage(prompt_tokens=50, completion_tokens=10),
        ),
        TextReply("Both sunny.", usage=Usage(prompt_tokens=80, completion_tokens=4)),
    )
    agent = (
        AgentBuilder(model_for(server))
        .instructions("Answer weather questions.")
        .tool(get_weather)
        .build()
    )

    result = await agent.run("Weather in Paris and Oslo?")

    assert result.output == "Both sunny."
    first, second = server.chat_requests
    assert first["messages"] == [
        {"role": "system", "content": "Answer weather questions."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
    ]
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "the city name"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    assert "tool_choice" not in first
    assert "response_format" not in first
    assert second["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny in Oslo"},
    ]
    response = result.messages[1]
    assert isinstance(response, ModelResponse)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", {"city": "Oslo"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert result.usage.requests == 2
    assert result.usage.tool_calls == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (130, 14)
    assert result.usage.total_tokens == 144
    server.assert_script_consumed()


async def test_malformed_tool_arguments_go_back_as_a_retry_and_the_run_recovers(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(
        ToolCallsReply([("bad", "get_weather", '{"city": Paris}')]),
        ToolCallsReply([("list", "get_weather", "[1, 2]")]),
        ToolCallsReply([("good", "get_weather", {"city": "Paris"})]),
        TextReply("Sunny in Paris."),
    )
    calls: list[str] = []

    async def get_weather(city: str) -> str:
        calls.append(city)
        return f"sunny in {city}"

    agent = AgentBuilder(model_for(server)).tool(get_weather, max_retries=2).build()

    result = await agent.run("Weather in Paris?")

    assert result.output == "Sunny in Paris."
    assert calls == ["Paris"]
    # The raw text is kept, so the history shows exactly what the model sent.
    bad = result.messages[1]
    assert isinstance(bad, ModelResponse)
    assert bad.tool_calls[0].arguments == '{"city": Paris}'
    listed = result.messages[3]
    assert isinstance(listed, ModelResponse)
    assert listed.tool_calls[0].arguments == "[1, 2]"

    second, third = server.chat_requests[1:3]
    assert second["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"city": Paris}'
    retry = second["messages"][-1]
    assert retry["role"] == "tool"
    assert retry["tool_call_id"] == "bad"
    assert retry["content"].startswith("The arguments are not a valid JSON object: Expecting")
    assert retry["content"].endswith(FIX_ERRORS)
    assert third["messages"][-1]["tool_call_id"] == "list"
    assert "must be a JSON object, got list" in third["messages"][-1]["content"]
    server.assert_script_consumed()


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_structured_output_with_json_schema(server: FakeOpenAIServer) -> None:
    server.enqueue(
        TextReply('{"city": "Oslo", "celsius": "warm"}'),
        TextReply('{"city": "Oslo", "celsius": 7}'),
    )
    model = model_for(server)
    assert model.structured_output_mode == "json_schema"
    agent = AgentBuilder(model).output_type(Forecast).output_retries(1).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", celsius=7)
    first, second = server.chat_requests
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Forecast",
            "schema": Forecast.model_json_schema(),
            "strict": False,
        },
    }
    assert "tools" not in first
    assert "tool_choice" not in first
    # The failed validation reaches the model as a user message after its answer.
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": '{"city": "Oslo", "celsius": "warm"}',
    }
    assert second["messages"][-1]["role"] == "user"
    assert "Validation failed" in second["messages"][-1]["content"]


async def test_json_schema_name_is_made_acceptable(server: FakeOpenAIServer) -> None:
    server.enqueue(TextReply("{}"))
    params = ModelRequestParameters(
        output_mode="json_schema", output_schema={"type": "object"}, output_schema_name="Box[int]"
    )

    await model_for(server).request([user("box")], params)

    assert server.chat_requests[0]["response_format"]["json_schema"]["name"] == "Box_int_"


async def test_structured_output_with_an_output_tool(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ToolCallsReply([("o1", OUTPUT_TOOL_NAME, {"city": "Oslo"})]),
        ToolCallsReply([("w1", "get_weather", {"city": "Oslo"})]),
        ToolCallsReply([("o2", OUTPUT_TOOL_NAME, {"city": "Oslo", "celsius": 7})]),
    )
    model = model_for(server, structured_output="tool")
    assert model.structured_output_mode == "tool"
    agent = AgentBuilder(model).output_type(Forecast).tool(get_weather).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", celsius=7)
    first, second, third = server.chat_requests
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather", OUTPUT_TOOL_NAME]
    assert first["tools"][1]["function"]["parameters"] == Forecast.model_json_schema()
    assert first["tool_choice"] == "required"
    assert "response_format" not in first
    # The validation error answers the output call itself, as the API requires.
    retry = second["messages"][-1]
    assert retry["role"] == "tool"
    assert retry["tool_call_id"] == "o1"
    assert "celsius" in retry["content"]
    assert retry["content"].endswith(FIX_ERRORS)
    assert third["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "w1",
        "content": "sunny in Oslo",
    }


def test_structured_output_flag_is_checked() -> None:
    with pytest.raises(UserError, match="structured_output"):
        OpenAIChatModel(MODEL, structured_output="xml")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- settings


async def test_settings_are_merged_and_sent(server: FakeOpenAIServer) -> None:
    server.enqueue(TextReply("ok"))
    model = model_for(
        server,
        settings=ModelSettings(
            temperature=0.1, max_tokens=50, seed=1, extra={"presence_penalty": 0.5, "user": "u1"}
        ),
    )
    agent_settings = ModelSettings(
        temperature=0.7, top_p=0.9, stop=["END"], extra={"user": "u2", "store": False}
    )

    await model.request([user("hi")], ModelRequestParameters(settings=agent_settings))

    [sent] = server.chat_requests
    assert {k: v for k, v in sent.items() if k not in ("model", "messages")} == {
        "temperature": 0.7,
        "max_tokens": 50,
        "top_p": 0.9,
        "seed": 1,
        "stop": ["END"],
        "presence_penalty": 0.5,
        "user": "u2",
        "store": False,
    }


async def test_timeout_setting_bounds_the_request(server: FakeOpenAIServer) -> None:
    server.enqueue(TextReply("too late", delay=5))
    model = model_for(server, settings=ModelSettings(timeout_seconds=0.3))

    with pytest.raises(ModelHTTPError) as caught:
        await model.request([user("hi")], NO_PARAMS)

    assert caught.value.status_code is None
    assert caught.value.retryable
    assert "timed out" in caught.value.message


async def test_invalid_setting_is_the_servers_400(server: FakeOpenAIServer) -> None:
    server.enqueue(TextReply("never"))
    model = model_for(server, settings=ModelSettings(temperature=3))

    with pytest.raises(ModelHTTPError) as caught:
        await model.request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 400
    assert not caught.value.retryable
    assert caught.value.message == (
        "Invalid 'temperature': decimal above maximum value. "
        "Expected a value <= 2, but got 3 instead. (HTTP 400: the provider refused the "
        "request as invalid: fix what it names (model settings, tool schemas or the "
        "conversation) and run again)"
    )
    assert server.pending == 1


# --------------------------------------------------------------------------- responses


async def test_usage_finish_reason_and_model_name(server: FakeOpenAIServer) -> None:
    server.enqueue(
        TextReply(
            "cut",
            usage=Usage(prompt_tokens=1200, completion_tokens=30, cached_tokens=1024),
            finish_reason="length",
        )
    )

    response = await model_for(server).request([user("hi")], NO_PARAMS)

    assert response.parts == [TextPart(text="cut")]
    assert response.usage.model_dump() == {
        "cache_read_tokens": 1024,
        "cache_write_tokens": 0,
        "input_tokens": 1200,
        "output_tokens": 30,
        "requests": 1,
        "tool_calls": 0,
        "total_tokens": 1230,
    }
    assert response.finish_reason == "length"
    assert response.model_name == MODEL


async def test_text_with_tool_calls_and_empty_arguments(server: FakeOpenAIServer) -> None:
    server.enqueue(ToolCallsReply([("n1", "now", "")], text="Let me check."))

    response = await model_for(server).request([user("time?")], NO_PARAMS)

    assert response.parts == [
        TextPart(text="Let me check."),
        ToolCallPart(id="n1", name="now", arguments={}),
    ]


async def test_refusal_becomes_visible_text(server: FakeOpenAIServer) -> None:
    server.enqueue(RefusalReply("I can't help with that."))

    response = await model_for(server).request([user("something bad")], NO_PARAMS)

    assert response.text == "I can't help with that."
    assert response.metadata == {"refusal": True}


async def test_reasoning_content_of_compatible_servers_is_kept_as_thinking(
    server: FakeOpenAIServer,
) -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "deepseek-reasoner",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "4", "reasoning_content": "2+2"},
            }
        ],
    }
    server.enqueue(RawReply(200, json.dumps(body)))

    response = await model_for(server).request([user("2+2?")], NO_PARAMS)

    assert response.parts == [ThinkingPart(text="2+2"), TextPart(text="4")]
    assert response.model_name == "deepseek-reasoner"
    assert response.usage.requests == 1
    assert response.usage.total_tokens == 0


async def test_reasoning_of_a_non_streamed_gpt_oss_answer_is_kept_as_thinking(
    server: FakeOpenAIServer,
) -> None:
    # Cerebras serves gpt-oss with the reasoning in `message.reasoning`, as recorded.
    body = {
        "id": "chatcmpl-0f6a4f2c-7b0e-4d55-9b62-5a3e1c2f8d11",
        "choices": [
            {
                "finish_reason": "stop",
                "index": 0,
                "message": {
                    "content": "The capital of France is Paris.",
                    "reasoning": "The user asks for the capital of France. Answer: Paris.",
                    "role": "assistant",
                },
            }
        ],
        "created": 1764720000,
        "model": "gpt-oss-120b",
        "system_fingerprint": "fp_1a2b3c4d5e",
        "object": "chat.completion",
        "usage": {
            "prompt_tokens": 79,
            "completion_tokens": 36,
            "total_tokens": 115,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        "time_info": {"queue_time": 0.0002, "prompt_time": 0.002, "completion_time": 0.02},
    }
    server.enqueue(RawReply(200, json.dumps(body)))

    response = await model_for(server).request([user("Capital of France?")], NO_PARAMS)

    assert response.parts == [
        ThinkingPart(text="The user asks for the capital of France. Answer: Paris."),
        TextPart(text="The capital of France is Paris."),
    ]
    assert response.usage.input_tokens == 79
    # The prompt went as a plain string, as every recorded request of the official SDKs.
    assert server.chat_requests[0]["messages"] == [
        {"role": "user", "content": "Capital of France?"}
    ]


# --------------------------------------------------------------------------- errors


async def test_400_is_not_retryable_and_carries_the_servers_message(
    server: FakeOpenAIServer,
) -> None:
    reply = ErrorReply.context_length_exceeded()
    server.enqueue(reply)

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("long")], NO_PARAMS)

    error = caught.value
    assert isinstance(error.__cause__, openai.BadRequestError)
    assert error.message.startswith(f"{reply.message} (HTTP 400: ")  # the server's, the fix
    assert error.status_code == 400
    assert not error.retryable
    assert error.model_name == MODEL
    assert error.retry_after is None
    assert isinstance(error.body, dict)
    assert error.body["code"] == "context_length_exceeded"
    assert error.kind == "model_http_error"


async def test_429_with_retry_after_is_retryable(server: FakeOpenAIServer) -> None:
    server.enqueue(ErrorReply.rate_limit(retry_after=1))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 429
    assert caught.value.retryable
    assert caught.value.retry_after == 1.0
    assert caught.value.message.startswith("Rate limit reached for gpt-4o-mini")


async def test_retry_after_ms_wins_over_seconds(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ErrorReply(429, "slow down", headers={"retry-after-ms": "250", "retry-after": "9"})
    )

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.retry_after == 0.25


def test_retry_after_parsing() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    in_three = format_datetime(now + timedelta(seconds=3), usegmt=True)
    assert parse_retry_after({"retry-after": in_three}, now=now.timestamp()) == 3.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after-ms": "bad", "retry-after": "2"}) == 2.0
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    "reply", [ErrorReply.server_error(), ErrorReply.overloaded()], ids=["500", "503"]
)
async def test_5xx_is_retryable(server: FakeOpenAIServer, reply: ErrorReply) -> None:
    server.enqueue(reply)

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == reply.status
    assert caught.value.retryable
    assert caught.value.retry_after is None
    assert caught.value.message == reply.message


async def test_x_should_retry_false_overrides_the_status(server: FakeOpenAIServer) -> None:
    # An empty script answers 500 with `x-should-retry: false`.
    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code == 500
    assert not caught.value.retryable


async def test_dropped_connection_is_retryable(server: FakeOpenAIServer) -> None:
    server.enqueue(DisconnectReply())

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert caught.value.status_code is None
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


@pytest.mark.parametrize(
    "reply",
    [
        RawReply(200, b'{"choices": ['),
        RawReply(200, b"<html>bad gateway</html>", {"Content-Type": "text/html"}),
        RawReply(200, b"{}"),
        RawReply(200, b'{"choices": [], "model": "gpt-4o-mini"}'),
    ],
    ids=["truncated-json", "html", "empty-object", "no-choices"],
)
async def test_a_200_that_is_not_a_completion_is_unexpected(
    server: FakeOpenAIServer, reply: RawReply
) -> None:
    server.enqueue(reply)

    with pytest.raises(UnexpectedModelBehavior) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert not caught.value.retryable
    assert MODEL in caught.value.message


# --------------------------------------------------------------------------- configuration


async def test_key_and_base_url_come_from_the_environment_at_request_time(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = OpenAIChatModel(MODEL)  # no key anywhere yet: building must still work
    agent = AgentBuilder(model).build()
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.enqueue(TextReply("from env"))

    result = await agent.run("hi")

    assert result.output == "from env"
    assert server.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"


async def test_missing_key_without_base_url_is_a_user_error() -> None:
    model = OpenAIChatModel(MODEL)

    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        await model.request([user("hi")], NO_PARAMS)


async def test_base_url_without_key_works_for_keyless_servers() -> None:
    with FakeOpenAIServer(api_key=None) as keyless:
        keyless.enqueue(TextReply("local"))
        model = OpenAIChatModel("llama3", base_url=keyless.base_url)

        response = await model.request([user("hi")], NO_PARAMS)

    assert response.text == "local"


async def test_a_given_client_is_used_but_never_retries(server: FakeOpenAIServer) -> None:
    server.enqueue(TextReply("ok"), ErrorReply.server_error(), TextReply("not reached"))
    async with openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key=API_KEY,
        max_retries=3,
        default_headers={"x-tenant": "t1"},
    ) as sdk:
        model = OpenAIChatModel(MODEL, client=sdk)
        await model.request([user("hi")], NO_PARAMS)
        with pytest.raises(ModelHTTPError):
            await model.request([user("hi")], NO_PARAMS)

    assert server.requests[0].headers["x-tenant"] == "t1"
    assert len(server.requests) == 2
    assert server.pending == 1


async def test_the_sdk_never_retries_on_its_own(server: FakeOpenAIServer) -> None:
    server.enqueue(ErrorReply.server_error(), TextReply("second"))

    with pytest.raises(ModelHTTPError):
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert len(server.requests) == 1
    assert server.pending == 1


async def test_the_key_is_in_no_repr_pickle_or_serialized_output(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ModelSettings(temperature=0.2)
    model = OpenAIChatModel(MODEL, base_url=server.base_url, api_key=API_KEY, settings=settings)
    agent = AgentBuilder(model).tool(get_weather).build()
    server.enqueue(ToolCallsReply([("c1", "get_weather", {"city": "Oslo"})]), TextReply("done"))

    result = await agent.run("weather")

    assert result.output == "done"
    assert API_KEY not in repr(model)
    assert MODEL in repr(model)
    assert API_KEY not in repr(agent)
    assert API_KEY not in ModelMessagesTypeAdapter.dump_json(result.messages).decode()
    assert API_KEY not in result.state.model_dump_json()
    assert API_KEY not in agent.request_parameters().model_dump_json()

    # A pickled model carries no credentials; the receiving process uses its own.
    data = pickle.dumps(model)
    assert API_KEY.encode() not in data
    copy = pickle.loads(data)
    assert copy.model_name == MODEL
    assert copy.settings == settings
    with pytest.raises(UserError):
        await OpenAIChatModel(MODEL).request([user("hi")], NO_PARAMS)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    server.enqueue(TextReply("unpickled"))
    assert (await copy.request([user("hi")], NO_PARAMS)).text == "unpickled"


def test_repr_hides_credentials_in_the_base_url() -> None:
    model = OpenAIChatModel(MODEL, base_url="https://bob:hunter2@proxy.example:8443/v1")
    assert "hunter2" not in repr(model)
    assert "proxy.example:8443/v1" in repr(model)


@pytest.mark.server
def test_importing_the_package_does_not_import_openai() -> None:
    code = (
        "import sys, durable_agent, durable_agent.models\n"
        "assert 'openai' not in sys.modules, 'openai imported eagerly'\n"
        "assert durable_agent.OpenAIChatModel is durable_agent.models.OpenAIChatModel\n"
        "assert 'openai' in sys.modules\n"
        "assert 'OpenAIChatModel' in durable_agent.__all__\n"
        "assert 'OpenAIChatModel' in durable_agent.models.__all__\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


async def test_tool_definitions_keep_strict_and_skip_empty_descriptions(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TextReply("ok"))
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    }
    params = ModelRequestParameters(
        function_tools=[ToolDefinition(name="search", parameters_json_schema=schema, strict=True)]
    )

    await model_for(server).request([user("find")], params)

    assert server.chat_requests[0]["tools"] == [
        {"type": "function", "function": {"name": "search", "parameters": schema, "strict": True}}
    ]
    assert json.dumps(server.chat_requests[0]).count("description") == 0
