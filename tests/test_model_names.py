"""Models named in a string (`model_from_name`), and the sample application's example agents
on each of the three providers by setting `DURABLE_AGENT_MODEL`, against the local servers."""

from __future__ import annotations

import pytest

from durable_agent import UserError
from durable_agent.models import FallbackModel, model_from_name
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.support.anthropic_server import FakeAnthropicServer, MessageReply, Text, ToolUse
from tests.support.openai_server import FakeOpenAIServer, TextReply, ToolCallsReply
from tests.support.responses_server import (
    FakeResponsesServer,
    FunctionCall,
    OutputText,
    ResponseReply,
)


def test_names_make_models() -> None:
    claude = model_from_name("anthropic:claude-sonnet-4-5")
    assert isinstance(claude, AnthropicModel)
    assert claude.model_name == "claude-sonnet-4-5"
    assert not claude.streams
    responses = model_from_name("openai-responses:gpt-5", stream=True)
    assert isinstance(responses, OpenAIResponsesModel)
    assert responses.streams
    assert isinstance(model_from_name("openai:gpt-4o-mini"), OpenAIChatModel)
    assert isinstance(model_from_name("openai-chat:gpt-4o-mini"), OpenAIChatModel)
    chain = model_from_name("anthropic:claude-haiku-4-5, openai-responses:gpt-5-mini")
    assert isinstance(chain, FallbackModel)
    assert [m.model_name for m in chain.models] == ["claude-haiku-4-5", "gpt-5-mini"]
    assert [m.provider for m in chain.models] == ["anthropic", "openai"]


@pytest.mark.parametrize("name", ["", "claude-sonnet-4-5", "google:gemini-2.5-pro", "anthropic:"])
def test_bad_names_say_what_is_expected(name: str) -> None:
    with pytest.raises(UserError, match="PROVIDER:MODEL"):
        model_from_name(name)


def weather_agent() -> object:
    from workflows.agents import build_weather

    return build_weather()


async def test_the_sample_agents_run_on_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropicServer(api_key="sk-ant-sample") as server:
        monkeypatch.setenv("DURABLE_AGENT_MODEL", "anthropic:claude-sonnet-4-5")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-sample")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        server.enqueue(
            MessageReply([ToolUse("get_weather", {"city": "Lyon"})]),
            MessageReply([Text("Sunny in Lyon.")], chunk_chars=3),
        )
        agent = weather_agent()

        result = await agent.run("Weather in Lyon?")  # type: ignore[attr-defined]

    assert result.output == "Sunny in Lyon."
    tool_result = server.bodies[1]["messages"][2]["content"][0]
    assert tool_result["content"] == "sunny and 21°C in Lyon"
    assert agent.model.streams  # type: ignore[attr-defined]  # `watch` shows its text live


async def test_the_sample_agents_run_on_the_responses_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeResponsesServer(api_key="sk-sample") as server:
        monkeypatch.setenv("DURABLE_AGENT_MODEL", "openai-responses:gpt-5")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-sample")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.enqueue(
            ResponseReply([FunctionCall("get_weather", {"city": "Lyon"})]),
            ResponseReply([OutputText("Sunny in Lyon.")]),
        )

        result = await weather_agent().run("Weather in Lyon?")  # type: ignore[attr-defined]

    assert result.output == "Sunny in Lyon."
    assert server.bodies[1]["input"][-1]["output"] == "sunny and 21°C in Lyon"


async def test_the_sample_agents_run_on_chat_completions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAIServer(api_key="sk-sample-chat") as server:
        monkeypatch.setenv("DURABLE_AGENT_MODEL", "openai:gpt-4o-mini")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-sample-chat")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.enqueue(
            ToolCallsReply([("call_1", "get_weather", {"city": "Lyon"})]),
            TextReply("Sunny in Lyon."),
        )

        result = await weather_agent().run("Weather in Lyon?")  # type: ignore[attr-defined]

    assert result.output == "Sunny in Lyon."
    assert server.chat_requests[1]["messages"][-1]["content"] == "sunny and 21°C in Lyon"
