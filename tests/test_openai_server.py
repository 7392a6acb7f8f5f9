"""Tests of the fake OpenAI server, driven by the official SDK over real HTTP.

The fake is only worth having if it refuses what the real API refuses and
answers in a shape the SDK parses, so every check here goes through the SDK (or
raw HTTP for what the SDK cannot send) and pins status, error class and fields.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pydantic
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from tests.support.openai_server import (
    DEFAULT_MODELS,
    DisconnectReply,
    ErrorReply,
    FakeOpenAIServer,
    OpenAIRequestError,
    RawReply,
    RefusalReply,
    TextReply,
    ToolCall,
    ToolCallsReply,
    Usage,
    validate_chat_request,
)

API_KEY = "sk-test-0123456789"
MODEL = "gpt-4o-mini"
USER: ChatCompletionMessageParam = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


def assistant_calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": i,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
            for i in ids
        ],
    }


def tool_result(call_id: str, content: str = "sunny") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


@pytest_asyncio.fixture
async def client(server: FakeOpenAIServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=10
    ) as sdk:
        yield sdk


def raw_request(
    server: FakeOpenAIServer,
    path: str,
    data: bytes | None = None,
    *,
    method: str = "POST",
    key: str | None = API_KEY,
) -> tuple[int, dict[str, str], bytes]:
    """Plain urllib, for payloads and headers the SDK would never produce."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(server.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


async def send(client: openai.AsyncOpenAI, wire: dict[str, Any]) -> object:
    """Puts ``wire`` on the wire verbatim through the SDK, bypassing its own checks."""
    if "model" in wire and "messages" in wire:
        rest = dict(wire)
        return await client.chat.completions.create(
            model=rest.pop("model"), messages=rest.pop("messages"), extra_body=rest
        )
    # create() refuses to send without model/messages, so use the SDK's raw post.
    return await client.post("/chat/completions", body=wire, cast_to=object)


def error_of(body: bytes) -> dict[str, Any]:
    """Parses the envelope and insists on exactly the real API's four fields."""
    envelope = json.loads(body)
    assert list(envelope) == ["error"]
    error: dict[str, Any] = envelope["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


# --------------------------------------------------------------------------- success


@pytest.mark.asyncio
async def test_text_reply_is_a_real_chat_completion(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(TextReply("It is sunny."))

    completion = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."}, USER]
    )

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    assert abs(completion.created - time.time()) < 60
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "It is sunny."
    assert choice.message.tool_calls is None
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details is not None

    [recorded] = server.requests
    assert recorded.method == "POST"
    assert recorded.path == "/v1/chat/completions"
    assert recorded.status == 200
    assert recorded.headers["authorization"] == f"Bearer {API_KEY}"
    assert recorded.json["messages"][1] == USER
    assert server.chat_requests == [recorded.json]
    assert server.pending == 0
    server.assert_script_consumed()


@pytest.mark.asyncio
async def test_explicit_usage_and_finish_reason_are_reported(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    usage = Usage(prompt_tokens=1200, completion_tokens=30, cached_tokens=1024, reasoning_tokens=7)
    server.enqueue(TextReply("cut", usage=usage, finish_reason="length"))

    completion = await client.chat.completions.create(model=MODEL, messages=[USER])

    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 1200
    assert completion.usage.completion_tokens == 30
    assert completion.usage.total_tokens == 1230
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 1024
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 7


@pytest.mark.asyncio
async def test_tool_calls_reply_is_parsed_by_the_sdk(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(
        ToolCallsReply(
            [
                ("call_a", "get_weather", '{"city": "Paris"}'),
                ToolCall("call_b", "get_weather", {"city": "Oslo"}),
            ]
        )
    )

    completion = await client.chat.completions.create(
        model=MODEL, messages=[USER], tools=[WEATHER_TOOL], tool_choice="auto"
    )

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None
    assert [c.id for c in calls] == ["call_a", "call_b"]
    assert all(c.type == "function" for c in calls)
    first, second = calls
    assert isinstance(first, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert isinstance(second, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert first.function.name == "get_weather"
    assert json.loads(first.function.arguments) == {"city": "Paris"}
    assert json.loads(second.function.arguments) == {"city": "Oslo"}


@pytest.mark.asyncio
async def test_tool_round_trip_is_accepted(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(
        ToolCallsReply(
            [("call_1", "get_weather", '{"city":"Paris"}'), ("call_2", "get_weather", "{}")],
            text="Let me check.",
        ),
        TextReply("Paris is sunny."),
    )
    messages: list[Any] = [USER]

    first = await client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER_TOOL]
    )
    message = first.choices[0].message
    assert message.content == "Let me check."
    messages.append(message.model_dump(exclude_none=True))
    assert message.tool_calls is not None
    for call in message.tool_calls:
        messages.append(tool_result(call.id, f"result for {call.id}"))
    second = await client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER_TOOL]
    )

    assert second.choices[0].message.content == "Paris is sunny."
    assert [r.status for r in server.requests] == [200, 200]
    sent = server.requests[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == "call_1"
    assert sent[3] == tool_result("call_2", "result for call_2")


@pytest.mark.asyncio
async def test_structured_output_with_sdk_parse(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    class Step(pydantic.BaseModel):
        title: str
        done: bool

    class Plan(pydantic.BaseModel):
        goal: str
        steps: list[Step]
        note: str | None

    payload = {"goal": "ship", "steps": [{"title": "test", "done": True}], "note": None}
    server.enqueue(TextReply(json.dumps(payload)))

    completion = await client.chat.completions.parse(
        model=MODEL, messages=[USER], response_format=Plan
    )

    parsed = completion.choices[0].message.parsed
    assert parsed == Plan(goal="ship", steps=[Step(title="test", done=True)], note=None)
    sent = server.requests[0].json["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["strict"] is True


@pytest.mark.asyncio
async def test_refusal_reply(server: FakeOpenAIServer, client: openai.AsyncOpenAI) -> None:
    server.enqueue(RefusalReply("I can't help with that."))

    completion = await client.chat.completions.create(model=MODEL, messages=[USER])

    assert completion.choices[0].message.content is None
    assert completion.choices[0].message.refusal == "I can't help with that."


@pytest.mark.asyncio
async def test_reply_factory_sees_the_request(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(lambda body: TextReply("echo: " + body["messages"][-1]["content"]))

    completion = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "ping"}]
    )

    assert completion.choices[0].message.content == "echo: ping"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"temperature": 0}, id="temperature-0"),
        pytest.param({"temperature": 2}, id="temperature-2"),
        pytest.param({"max_tokens": 1}, id="max_tokens-1"),
        pytest.param({"max_completion_tokens": 4096}, id="max_completion_tokens"),
        pytest.param({"temperature": None, "max_tokens": None}, id="explicit-nulls"),
        pytest.param({"seed": 1, "user": "u", "metadata": {"a": "b"}}, id="known-extras"),
        pytest.param({"extra_body": {"totally_unknown": 1}}, id="unknown-param"),
        pytest.param(
            {
                "messages": [
                    {"role": "developer", "content": "rules"},
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                ]
            },
            id="developer-and-content-parts",
        ),
        pytest.param(
            {
                "messages": [
                    USER,
                    {**assistant_calls("c1"), "content": ""},
                    tool_result("c1"),
                    {"role": "assistant", "content": "done"},
                    {"role": "user", "content": "thanks"},
                ]
            },
            id="history-with-answered-calls",
        ),
        pytest.param(
            {"tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False},
            id="tool-choice-required",
        ),
        pytest.param(
            {
                "tools": [WEATHER_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            id="tool-choice-named",
        ),
        pytest.param(
            {
                "messages": [{"role": "user", "content": "Answer in JSON."}],
                "response_format": {"type": "json_object"},
            },
            id="json-object",
        ),
    ],
)
async def test_valid_requests_are_accepted(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI, extra: dict[str, Any]
) -> None:
    server.enqueue(TextReply("ok"))
    kwargs: dict[str, Any] = {"model": MODEL, "messages": [USER], **extra}

    completion = await client.chat.completions.create(**kwargs)

    assert completion.choices[0].message.content == "ok"
    assert server.requests[-1].status == 200


# --------------------------------------------------------------------------- validation

A_CALL = assistant_calls("call_1")
LAX_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}

INVALID: list[Any] = [
    # (id, request overrides, expected param, expected code, message fragment)
    ("model-missing", {"model": None}, None, None, "you must provide a model parameter"),
    ("model-not-string", {"model": 4}, "model", "invalid_type", "expected a string"),
    ("messages-missing", {"messages": None}, "messages", "missing_required_parameter", ""),
    ("messages-empty", {"messages": []}, "messages", "empty_array", "empty array"),
    ("messages-not-list", {"messages": "hi"}, "messages", "invalid_type", "an array"),
    ("message-not-object", {"messages": ["hi"]}, "messages[0]", "invalid_type", ""),
    (
        "role-missing",
        {"messages": [{"content": "hi"}]},
        "messages[0].role",
        "missing_required_parameter",
        "",
    ),
    (
        "role-unknown",
        {"messages": [{"role": "robot", "content": "hi"}]},
        "messages[0].role",
        "invalid_value",
        "Invalid value: 'robot'",
    ),
    (
        "user-content-missing",
        {"messages": [{"role": "user"}]},
        "messages[0].content",
        "missing_required_parameter",
        "",
    ),
    (
        "user-content-null",
        {"messages": [{"role": "user", "content": None}]},
        "messages[0].content",
        "invalid_type",
        "",
    ),
    (
        "user-content-number",
        {"messages": [{"role": "user", "content": 5}]},
        "messages[0].content",
        "invalid_type",
        "",
    ),
    (
        "content-parts-empty",
        {"messages": [{"role": "user", "content": []}]},
        "messages[0].content",
        "empty_array",
        "",
    ),
    (
        "system-image-part",
        {
            "messages": [
                {
                    "role": "system",
                    "content": [{"type": "image_url", "image_url": {"url": "x"}}],
                }
            ]
        },
        "messages[0].content[0].type",
        "invalid_value",
        "",
    ),
    (
        "assistant-content-null-without-calls",
        {"messages": [USER, {"role": "assistant", "content": None}]},
        "messages.[1].content",
        None,
        "expected a string, got null",
    ),
    (
        "tool-calls-empty",
        {"messages": [USER, {"role": "assistant", "tool_calls": []}]},
        "messages[1].tool_calls",
        "empty_array",
        "",
    ),
    (
        "tool-call-id-missing",
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].id",
        "missing_required_parameter",
        "",
    ),
    (
        "tool-call-type-wrong",
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "fn", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].type",
        "invalid_value",
        "",
    ),
    (
        "tool-call-name-missing",
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"arguments": "{}"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].function.name",
        "missing_required_parameter",
        "",
    ),
    (
        "tool-call-arguments-object",
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "invalid_type",
        "expected a string, but got an object",
    ),
    (
        "tool-message-without-call-id",
        {"messages": [USER, A_CALL, {"role": "tool", "content": "x"}]},
        "messages[2].tool_call_id",
        "missing_required_parameter",
        "",
    ),
    (
        "tool-message-without-preceding-call",
        {"messages": [USER, tool_result("call_1")]},
        "messages.[1].role",
        None,
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "tool-message-after-intervening-user",
        {
            "messages": [
                USER,
                A_CALL,
                tool_result("call_1"),
                USER,
                tool_result("call_1"),
            ]
        },
        "messages.[4].role",
        None,
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "tool-call-id-unknown",
        {"messages": [USER, A_CALL, tool_result("call_zzz")]},
        "messages.[2].tool_call_id",
        None,
        "'call_zzz' not found in 'tool_calls'",
    ),
    (
        "call-unanswered-before-user",
        {
            "messages": [
                USER,
                assistant_calls("call_1", "call_2"),
                tool_result("call_1"),
                USER,
            ]
        },
        "messages.[1].role",
        None,
        "did not have response messages: call_2",
    ),
    (
        "call-unanswered-at-end",
        {"messages": [USER, A_CALL]},
        "messages.[1].role",
        None,
        "did not have response messages: call_1",
    ),
    ("tools-empty", {"tools": []}, "tools", "empty_array", ""),
    (
        "tool-type-wrong",
        {"tools": [{"type": "retrieval", "function": WEATHER_TOOL["function"]}]},
        "tools[0].type",
        "invalid_value",
        "",
    ),
    (
        "tool-function-missing",
        {"tools": [{"type": "function"}]},
        "tools[0].function",
        "missing_required_parameter",
        "",
    ),
    (
        "tool-name-bad-chars",
        {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
        "tools[0].function.name",
        "invalid_value",
        "does not match pattern",
    ),
    (
        "tool-name-too-long",
        {"tools": [{"type": "function", "function": {"name": "f" * 65}}]},
        "tools[0].function.name",
        "string_above_max_length",
        "",
    ),
    (
        "tool-parameters-not-object",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
        "tools[0].function.parameters",
        "invalid_type",
        "",
    ),
    (
        "tool-strict-schema-lax",
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": LAX_SCHEMA, "strict": True},
                }
            ]
        },
        "tools[0].function.parameters",
        None,
        "'additionalProperties' is required to be supplied and to be false",
    ),
    (
        "tool-choice-without-tools",
        {"tool_choice": "auto"},
        "tool_choice",
        None,
        "only allowed when 'tools' are specified",
    ),
    (
        "tool-choice-unknown-function",
        {
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "nope"}},
        },
        "tool_choice",
        None,
        "'nope'",
    ),
    (
        "response-format-type-unknown",
        {"response_format": {"type": "yaml"}},
        "response_format.type",
        "invalid_value",
        "",
    ),
    (
        "json-schema-missing",
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema",
        "missing_required_parameter",
        "",
    ),
    (
        "json-schema-name-missing",
        {"response_format": {"type": "json_schema", "json_schema": {"schema": LAX_SCHEMA}}},
        "response_format.json_schema.name",
        "missing_required_parameter",
        "",
    ),
    (
        "json-schema-schema-missing",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "out"}}},
        "response_format.json_schema.schema",
        "missing_required_parameter",
        "",
    ),
    (
        "json-schema-strict-missing-required",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "out",
                    "strict": True,
                    "schema": {**LAX_SCHEMA, "additionalProperties": False},
                },
            }
        },
        "response_format",
        None,
        "Missing 'a'",
    ),
    (
        "json-schema-strict-nested-lax",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "out",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"inner": LAX_SCHEMA},
                        "required": ["inner"],
                        "additionalProperties": False,
                    },
                },
            }
        },
        "response_format",
        None,
        "context=('properties', 'inner')",
    ),
    (
        "json-object-without-json-word",
        {"response_format": {"type": "json_object"}},
        "messages",
        None,
        "must contain the word 'json'",
    ),
    (
        "temperature-above",
        {"temperature": 2.5},
        "temperature",
        "decimal_above_max_value",
        "<= 2",
    ),
    (
        "temperature-below",
        {"temperature": -0.1},
        "temperature",
        "decimal_below_min_value",
        ">= 0",
    ),
    ("temperature-string", {"temperature": "hot"}, "temperature", "invalid_type", ""),
    ("max-tokens-zero", {"max_tokens": 0}, "max_tokens", "integer_below_min_value", ""),
    ("max-tokens-string", {"max_tokens": "10"}, "max_tokens", "invalid_type", ""),
    ("max-tokens-bool", {"max_tokens": True}, "max_tokens", "invalid_type", ""),
    (
        "max-completion-tokens-negative",
        {"max_completion_tokens": -1},
        "max_completion_tokens",
        "integer_below_min_value",
        "",
    ),
    (
        "max-completion-tokens-float",
        {"max_completion_tokens": 1.5},
        "max_completion_tokens",
        "invalid_type",
        "",
    ),
    ("stream-string", {"stream": "yes"}, "stream", "invalid_type", ""),
    (
        "stream-options-without-stream",
        {"stream_options": {"include_usage": True}},
        "stream_options",
        None,
        "only allowed when 'stream' is enabled",
    ),
    ("n-above-one", {"n": 2}, "n", "unsupported_by_fake_server", ""),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("overrides", "param", "code", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in INVALID],
)
async def test_invalid_requests_are_rejected_like_the_real_api(
    server: FakeOpenAIServer,
    client: openai.AsyncOpenAI,
    overrides: dict[str, Any],
    param: str | None,
    code: str | None,
    fragment: str,
) -> None:
    server.enqueue(TextReply("must not be used"))
    body: dict[str, Any] = {"model": MODEL, "messages": [USER], **overrides}
    wire = {k: v for k, v in body.items() if v is not None}

    with pytest.raises(openai.BadRequestError) as caught:
        await send(client, wire)

    error = caught.value
    assert error.status_code == 400
    assert error.type == "invalid_request_error"
    assert error.param == param
    assert error.code == code
    assert fragment in error.message
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}
    assert error.request_id is not None
    assert error.request_id.startswith("req_")
    # A refused request never reaches the "model": the script is untouched.
    assert server.pending == 1
    assert server.requests[-1].status == 400
    assert server.chat_requests == []
    with pytest.raises(OpenAIRequestError) as direct:
        validate_chat_request(body)
    assert (direct.value.param, direct.value.code) == (param, code)


def test_every_rejection_case_is_accepted_once_fixed() -> None:
    """Guards the table above: a broken base request would make every case pass vacuously."""
    validate_chat_request({"model": MODEL, "messages": [USER]})
    validate_chat_request(
        {"model": MODEL, "messages": [USER, A_CALL, tool_result("call_1")], "tools": [WEATHER_TOOL]}
    )


@pytest.mark.asyncio
async def test_unknown_model_is_404_when_models_are_restricted() -> None:
    with FakeOpenAIServer(api_key=API_KEY, models=["gpt-4o"]) as fake:
        fake.enqueue(TextReply("ok"))
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key=API_KEY, max_retries=0
        ) as sdk:
            with pytest.raises(openai.NotFoundError) as caught:
                await sdk.chat.completions.create(model="gpt-nope", messages=[USER])
            assert caught.value.code == "model_not_found"
            completion = await sdk.chat.completions.create(model="gpt-4o", messages=[USER])
            assert completion.model == "gpt-4o"
            models = await sdk.models.list()
            assert [m.id for m in models.data] == ["gpt-4o"]


# --------------------------------------------------------------------------- auth


@pytest.mark.asyncio
async def test_wrong_api_key_is_401_without_leaking_the_key(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TextReply("must not be used"))
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="sk-wrong-secret-key", max_retries=0
    ) as sdk:
        with pytest.raises(openai.AuthenticationError) as caught:
            await sdk.chat.completions.create(model=MODEL, messages=[USER])

    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    assert "sk-wrong-secret-key" not in caught.value.message
    assert "Incorrect API key provided" in caught.value.message
    assert server.pending == 1
    assert server.requests[-1].status == 401


def test_missing_api_key_is_401(server: FakeOpenAIServer) -> None:
    body = json.dumps({"model": MODEL, "messages": [USER]}).encode()

    status, _, payload = raw_request(server, "/v1/chat/completions", body, key=None)

    assert status == 401
    error = error_of(payload)
    assert error["type"] == "invalid_request_error"
    assert "didn't provide an API key" in error["message"]
    assert server.requests[-1].json == {"model": MODEL, "messages": [USER]}


def test_auth_can_be_disabled() -> None:
    with FakeOpenAIServer(api_key=None) as fake:
        fake.enqueue(TextReply("ok"))
        body = json.dumps({"model": MODEL, "messages": [USER]}).encode()
        status, _, payload = raw_request(fake, "/v1/chat/completions", body, key=None)
    assert status == 200
    assert json.loads(payload)["choices"][0]["message"]["content"] == "ok"


# --------------------------------------------------------------------------- raw HTTP


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        pytest.param(b"{not json", "could not parse the JSON body", id="not-json"),
        pytest.param(b"", "could not parse the JSON body", id="empty"),
        pytest.param(b"[1, 2]", "expected an object, but got an array", id="array"),
        pytest.param(b'{"messages": []}', "you must provide a model parameter", id="no-model"),
    ],
)
def test_malformed_bodies_get_400_envelope(
    server: FakeOpenAIServer, data: bytes, fragment: str
) -> None:
    server.enqueue(TextReply("must not be used"))

    status, headers, payload = raw_request(server, "/v1/chat/completions", data)

    assert status == 400
    assert headers["Content-Type"] == "application/json"
    error = error_of(payload)
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert server.pending == 1
    assert server.requests[-1].raw_body == data


def test_unknown_route_is_404(server: FakeOpenAIServer) -> None:
    status, _, payload = raw_request(server, "/v1/completions", b"{}")
    assert status == 404
    assert error_of(payload)["message"] == "Invalid URL (POST /v1/completions)"

    status, _, payload = raw_request(server, "/v1/chat/completions", method="GET")
    assert status == 404
    assert "GET /v1/chat/completions" in error_of(payload)["message"]


@pytest.mark.asyncio
async def test_models_endpoint(client: openai.AsyncOpenAI) -> None:
    page = await client.models.list()
    assert [m.id for m in page.data] == list(DEFAULT_MODELS)
    assert all(m.object == "model" for m in page.data)
    model = await client.models.retrieve("gpt-4o")
    assert model.id == "gpt-4o"


# --------------------------------------------------------------------------- scripted errors


@pytest.mark.asyncio
async def test_rate_limit_carries_retry_after(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(ErrorReply.rate_limit(retry_after=1))

    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model=MODEL, messages=[USER])

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.type == "requests"


@pytest.mark.asyncio
async def test_sdk_retry_honours_retry_after(server: FakeOpenAIServer) -> None:
    server.enqueue(ErrorReply.rate_limit(retry_after=0.2), TextReply("after retry"))
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=1) as sdk:
        started = time.monotonic()
        completion = await sdk.chat.completions.create(model=MODEL, messages=[USER])
        elapsed = time.monotonic() - started

    assert completion.choices[0].message.content == "after retry"
    assert [r.status for r in server.requests] == [429, 200]
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"
    assert 0.2 <= elapsed < 5


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reply", "exc_type", "status", "code"),
    [
        pytest.param(ErrorReply.server_error(), openai.InternalServerError, 500, None, id="500"),
        pytest.param(ErrorReply.overloaded(), openai.InternalServerError, 503, None, id="503"),
        pytest.param(
            ErrorReply.context_length_exceeded(),
            openai.BadRequestError,
            400,
            "context_length_exceeded",
            id="context-length",
        ),
        pytest.param(
            ErrorReply.insufficient_quota(),
            openai.RateLimitError,
            429,
            "insufficient_quota",
            id="quota",
        ),
        pytest.param(
            ErrorReply(403, "Country not supported", code="unsupported_country"),
            openai.PermissionDeniedError,
            403,
            "unsupported_country",
            id="custom-403",
        ),
    ],
)
async def test_scripted_errors_map_to_sdk_exceptions(
    server: FakeOpenAIServer,
    client: openai.AsyncOpenAI,
    reply: ErrorReply,
    exc_type: type[openai.APIStatusError],
    status: int,
    code: str | None,
) -> None:
    server.enqueue(reply)

    with pytest.raises(exc_type) as caught:
        await client.chat.completions.create(model=MODEL, messages=[USER])

    assert type(caught.value) is exc_type
    assert caught.value.status_code == status
    assert caught.value.code == code
    assert reply.message in caught.value.message
    assert server.pending == 0


@pytest.mark.asyncio
async def test_script_exhaustion_fails_loudly(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model=MODEL, messages=[USER])

    assert caught.value.status_code == 500
    assert caught.value.code == "fake_script_exhausted"
    assert "script exhausted" in caught.value.message
    assert caught.value.response.headers["x-should-retry"] == "false"


def test_unused_replies_are_reported() -> None:
    with FakeOpenAIServer() as fake:
        fake.enqueue(TextReply("never asked for"))
        with pytest.raises(AssertionError, match="1 scripted reply never used"):
            fake.assert_script_consumed()


def test_enqueue_rejects_non_replies(server: FakeOpenAIServer) -> None:
    with pytest.raises(TypeError):
        server.enqueue("hello")  # type: ignore[arg-type]
    assert server.pending == 0


def test_raw_reply_bytes_reach_the_client_verbatim(server: FakeOpenAIServer) -> None:
    server.enqueue(
        RawReply(200, b'{"choices": [', {"Content-Type": "application/json", "X-A": "b"})
    )
    body = json.dumps({"model": MODEL, "messages": [USER]}).encode()

    status, headers, payload = raw_request(server, "/v1/chat/completions", body)

    assert status == 200
    assert payload == b'{"choices": ['
    assert headers["X-A"] == "b"


@pytest.mark.asyncio
async def test_malformed_success_bodies_reach_the_sdk(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    """Pins what runtime code must be ready for: neither failure is an OpenAIError."""
    server.enqueue(
        RawReply(200, b'{"choices": ['),
        RawReply(200, b"<html>bad gateway</html>", {"Content-Type": "text/html"}),
    )

    with pytest.raises(json.JSONDecodeError):
        await client.chat.completions.create(model=MODEL, messages=[USER])
    # Without strict response validation the SDK hands back the text itself.
    odd: object = await client.chat.completions.create(model=MODEL, messages=[USER])
    assert odd == "<html>bad gateway</html>"


@pytest.mark.asyncio
async def test_disconnect_is_a_connection_error(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(DisconnectReply())

    with pytest.raises(openai.APIConnectionError) as caught:
        await client.chat.completions.create(model=MODEL, messages=[USER])

    assert not isinstance(caught.value, openai.APITimeoutError)
    assert server.requests[-1].status is None


@pytest.mark.asyncio
async def test_delay_triggers_client_timeout(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    server.enqueue(TextReply("too late", delay=5))

    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model=MODEL, messages=[USER], timeout=0.3)
    assert time.monotonic() - started < 3


# --------------------------------------------------------------------------- server hygiene


@pytest.mark.asyncio
async def test_concurrent_requests_each_get_one_reply(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    count = 12
    server.enqueue(*(TextReply(f"r{i}", delay=0.05) for i in range(count)))

    completions = await asyncio.gather(
        *(client.chat.completions.create(model=MODEL, messages=[USER]) for _ in range(count))
    )

    texts = sorted(c.choices[0].message.content or "" for c in completions)
    assert texts == sorted(f"r{i}" for i in range(count))
    assert len(server.requests) == count
    assert server.pending == 0


def test_close_is_prompt_even_with_a_sleeping_reply() -> None:
    fake = FakeOpenAIServer(api_key=None).start()
    fake.enqueue(TextReply("slow", delay=30))
    body = json.dumps({"model": MODEL, "messages": [USER]}).encode()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            raw_request(fake, "/v1/chat/completions", body)
        except Exception as error:
            outcome.append(error)

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 5
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.requests, "request never arrived"
    url = fake.url

    started = time.monotonic()
    fake.close()
    assert time.monotonic() - started < 3
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert outcome, "the client should see the dropped connection"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/v1/models", timeout=2)
    with pytest.raises(RuntimeError):
        _ = fake.base_url


@pytest.mark.asyncio
async def test_server_is_quiet(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(TextReply("ok"))
    await client.chat.completions.create(model=MODEL, messages=[USER])
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model=MODEL, messages=[])

    captured = capfd.readouterr()
    assert captured.err == ""
    assert captured.out == ""


def test_two_servers_do_not_share_state() -> None:
    with FakeOpenAIServer() as one, FakeOpenAIServer() as two:
        assert one.port != two.port
        one.enqueue(TextReply("a"))
        assert two.pending == 0
