"""`OpenAIResponsesModel` against a local server speaking the Responses API (JSON and SSE),
through the official `openai` SDK over real HTTP: function tools, reasoning items kept
across turns without server-side state, streaming, usage, errors, agent runs."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from durable_agent import (
    AgentBuilder,
    ModelDelta,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.contract.tools import ToolDefinition
from durable_agent.models.openai import OpenAIResponsesModel
from tests.support.responses_server import (
    FakeResponsesServer,
    FunctionCall,
    OutputText,
    Reasoning,
    ResponseReply,
    ResponsesErrorReply,
    ResponsesUsage,
)

API_KEY = "sk-test-responses-0123"
MODEL = "gpt-5"
NO_PARAMS = ModelRequestParameters()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeResponsesServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def model_for(server: FakeResponsesServer, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(MODEL, base_url=server.base_url, **options)


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


def weather_agent(model: OpenAIResponsesModel, calls: list[str] | None = None) -> Any:
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        if calls is not None:
            calls.append(city)
        return f"sunny in {city}"

    return AgentBuilder(model).instructions("Answer weather questions.").tool(get_weather).build()


async def test_a_text_reply_and_what_was_sent(server: FakeResponsesServer) -> None:
    server.enqueue(
        ResponseReply([OutputText("Hello.")], usage=ResponsesUsage(36, 87, cached_tokens=12))
    )

    response = await model_for(server).request([user("hi")], NO_PARAMS)

    assert response.text == "Hello."
    assert response.model_name == MODEL
    assert response.provider_name == "openai"
    assert response.finish_reason == "stop"
    assert response.metadata["response_id"].startswith("resp_")
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (36, 87, 123)
    assert usage.cache_read_tokens == 12
    [request] = server.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body == {
        "model": MODEL,
        "input": [{"role": "user", "content": "hi"}],
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "stream": False,
    }


async def test_tool_round_trip_with_reasoning_kept_across_turns(
    server: FakeResponsesServer,
) -> None:
    server.enqueue(
        ResponseReply(
            [
                Reasoning(["**Finding the weather**", "I will call get_weather."]),
                FunctionCall("get_weather", {"city": "Paris"}, "call_abc"),
            ],
            usage=ResponsesUsage(50, 120, reasoning_tokens=100),
        ),
        ResponseReply([Reasoning([]), OutputText("Sunny in Paris.")]),
    )
    calls: list[str] = []
    agent = weather_agent(model_for(server, reasoning={"effort": "low", "summary": "auto"}), calls)

    result = await agent.run("Weather in Paris?")

    assert result.output == "Sunny in Paris."
    assert calls == ["Paris"]
    first, second = server.bodies
    assert first["reasoning"] == {"effort": "low", "summary": "auto"}
    assert first["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": first["tools"][0]["parameters"],
            "strict": False,
            "description": "Current weather for a city.",
        }
    ]
    assert first["input"] == [
        {"role": "system", "content": "Answer weather questions."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    reasoning, call, output = second["input"][2:]
    # The reasoning goes back whole, with the encrypted content the server issued (which it
    # checks), its id, and the function call that followed it, paired by its item id.
    assert reasoning["type"] == "reasoning"
    assert reasoning["id"].startswith("rs_")
    assert reasoning["encrypted_content"].startswith("gAAAAAB")
    assert reasoning["summary"] == [
        {"type": "summary_text", "text": "**Finding the weather**"},
        {"type": "summary_text", "text": "I will call get_weather."},
    ]
    assert call == {
        "type": "function_call",
        "call_id": "call_abc",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "id": call["id"],
    }
    assert call["id"].startswith("fc_")
    assert output == {
        "type": "function_call_output",
        "call_id": "call_abc",
        "output": "sunny in Paris",
    }
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert responses[0].metadata["reasoning_tokens"] == 100
    assert responses[0].finish_reason == "tool_calls"
    thinking = [p for p in responses[0].parts if isinstance(p, ThinkingPart)]
    assert [p.text for p in thinking] == ["**Finding the weather**", "I will call get_weather."]
    assert thinking[0].signature
    assert thinking[1].signature is None
    assert {p.id for p in thinking} == {reasoning["id"]}


async def test_reasoning_survives_a_history_written_and_read_back(
    server: FakeResponsesServer,
) -> None:
    """No server-side state: a history serialized (a week-old checkpoint on another
    worker) and read back continues with its reasoning."""
    server.enqueue(
        ResponseReply([Reasoning(["thinking"]), OutputText("First answer.")]),
        ResponseReply([OutputText("Second answer.")]),
    )
    model = model_for(server)
    first = await model.request([user("one")], NO_PARAMS)
    from durable_agent import ModelMessagesTypeAdapter

    history = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json([user("one"), first, user("two")])
    )
    fresh = pickle.loads(pickle.dumps(model))

    second = await fresh.request(history, NO_PARAMS)

    assert second.text == "Second answer."
    sent = server.bodies[1]["input"]
    assert [item.get("type", "message") for item in sent] == [
        "message",
        "reasoning",
        "message",
        "message",
    ]
    assert sent[2]["id"].startswith("msg_")  # the item that followed the reasoning


class Forecast(BaseModel):
    city: str
    degrees: int


async def test_structured_output_as_a_json_schema(server: FakeResponsesServer) -> None:
    server.enqueue(ResponseReply([OutputText('{"city": "Oslo", "degrees": 4}')]))
    agent = AgentBuilder(model_for(server)).output_type(Forecast).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", degrees=4)
    text = server.bodies[0]["text"]
    assert text["format"]["type"] == "json_schema"
    assert text["format"]["name"] == "Forecast"
    assert text["format"]["schema"]["required"] == ["city", "degrees"]


async def test_structured_output_through_the_output_tool(server: FakeResponsesServer) -> None:
    server.enqueue(ResponseReply([FunctionCall("final_result", {"city": "Oslo", "degrees": 4})]))
    agent = AgentBuilder(model_for(server, structured_output="tool")).output_type(Forecast).build()

    result = await agent.run("Forecast for Oslo")

    assert result.output == Forecast(city="Oslo", degrees=4)
    body = server.bodies[0]
    assert body["tool_choice"] == "required"
    assert [t["name"] for t in body["tools"]] == ["final_result"]


async def test_streaming_text_reasoning_and_tool_calls(server: FakeResponsesServer) -> None:
    server.enqueue(
        ResponseReply(
            [
                Reasoning(["Looking up Paris."]),
                OutputText("Let me check the weather."),
                FunctionCall("get_weather", {"city": "Paris"}),
            ],
            usage=ResponsesUsage(40, 30, reasoning_tokens=20),
            chunk_chars=6,
        )
    )
    seen: list[ModelDelta] = []

    response = await model_for(server, stream=True).request_stream(
        [user("Paris?")], NO_PARAMS, seen.append
    )

    thinking, text, call = response.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == "Looking up Paris."
    assert thinking.signature
    assert text == TextPart(text="Let me check the weather.")
    assert isinstance(call, ToolCallPart)
    assert call.arguments == {"city": "Paris"}
    assert "".join(d.text for d in seen if d.kind == "thinking") == "Looking up Paris."
    assert [d.text for d in seen if d.kind == "text"] == [
        "Let me",
        " check",
        " the w",
        "eather",
        ".",
    ]
    assert response.usage.output_tokens == 30
    assert response.metadata["reasoning_tokens"] == 20
    assert server.bodies[0]["stream"] is True
    written = server.events_written
    assert written[0] == "response.created"
    assert "response.function_call_arguments.delta" in written
    assert written[-1] == "response.completed"


async def test_a_stream_cut_off_or_failed_is_retryable(server: FakeResponsesServer) -> None:
    server.enqueue(
        ResponseReply([OutputText("never finished")], cut_after=6),
        ResponseReply([OutputText("unused")], fail_with="server_error"),
    )
    model = model_for(server, stream=True)

    with pytest.raises(ModelHTTPError) as cut:
        await model.request_stream([user("hi")], NO_PARAMS, print)
    with pytest.raises(ModelHTTPError) as failed:
        await model.request_stream([user("hi")], NO_PARAMS, print)

    assert cut.value.retryable
    assert cut.value.status_code is None
    assert failed.value.retryable
    assert "server_error" in failed.value.message


async def test_an_incomplete_response_says_length(server: FakeResponsesServer) -> None:
    server.enqueue(ResponseReply([OutputText("cut sh")], incomplete_reason="max_output_tokens"))
    response = await model_for(server).request([user("hi")], NO_PARAMS)
    assert response.finish_reason == "length"
    assert response.text == "cut sh"


async def test_429_is_retryable_with_retry_after(server: FakeResponsesServer) -> None:
    server.enqueue(ResponsesErrorReply.rate_limit(retry_after=3))

    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)

    assert isinstance(caught.value.__cause__, openai.RateLimitError)
    assert caught.value.status_code == 429
    assert caught.value.retryable
    assert caught.value.retry_after == 3
    assert len(server.requests) == 1


async def test_503_is_retryable(server: FakeResponsesServer) -> None:
    server.enqueue(ResponsesErrorReply.unavailable())
    with pytest.raises(ModelHTTPError) as caught:
        await model_for(server).request([user("hi")], NO_PARAMS)
    assert caught.value.status_code == 503
    assert caught.value.retryable


async def test_400_and_401_are_permanent_and_say_what_to_fix(
    server: FakeResponsesServer,
) -> None:
    # A strict schema the API refuses (optional `limit` is not required): its own 400.
    loose = ToolDefinition(
        name="lookup",
        parameters_json_schema={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
            "additionalProperties": False,
        },
        strict=True,
    )
    server.enqueue(ResponseReply([OutputText("never sent")]))

    with pytest.raises(ModelHTTPError) as refused:
        await model_for(server).request(
            [user("hi")], ModelRequestParameters(function_tools=[loose])
        )
    with pytest.raises(ModelHTTPError) as bad_key:
        await model_for(server, api_key="sk-wrong").request([user("hi")], NO_PARAMS)

    assert refused.value.status_code == 400
    assert not refused.value.retryable
    assert "Invalid schema for function 'lookup'" in refused.value.message
    assert "fix what it names" in refused.value.message
    assert bad_key.value.status_code == 401
    assert not bad_key.value.retryable
    assert "OPENAI_API_KEY" in bad_key.value.message
    assert server.pending == 1


async def test_a_conversation_from_another_provider_continues_here(
    server: FakeResponsesServer,
) -> None:
    history: list[ModelMessage] = [
        user("Weather in Paris?"),
        ModelResponse(
            parts=[
                ThinkingPart(
                    text="Claude's thinking",
                    signature="EqQBCgIYAh-anthropic-signature",
                    provider_name="anthropic",
                ),
                TextPart(text="Checking."),
                ToolCallPart(id="toolu_01XYZ", name="get_weather", arguments={"city": "Paris"}),
            ],
            provider_name="anthropic",
        ),
        ModelRequest(
            parts=[ToolReturnPart(tool_call_id="toolu_01XYZ", name="get_weather", content="sunny")]
        ),
    ]
    server.enqueue(ResponseReply([OutputText("It is sunny.")]))

    response = await model_for(server).request(history, NO_PARAMS)

    assert response.text == "It is sunny."
    sent = server.bodies[0]["input"]
    assert sent[1:] == [
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "toolu_01XYZ",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "toolu_01XYZ", "output": "sunny"},
    ]


async def test_the_key_stays_out_of_repr_and_pickles(server: FakeResponsesServer) -> None:
    model = OpenAIResponsesModel(MODEL, api_key="sk-secret-responses", base_url=server.base_url)
    assert "sk-secret-responses" not in repr(model)
    assert b"sk-secret-responses" not in pickle.dumps(model)
    assert model.provider == "openai"
