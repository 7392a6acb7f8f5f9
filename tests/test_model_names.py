"""Models named in a string (`model_from_name`), the one table of providers it reads (a new
provider is its module and one row, issue 37), and the sample application's example agents
on each of the three providers by setting `DURABLE_AGENT_MODEL`, against the local servers."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import durable_agent.models
from durable_agent import AgentBuilder, ModelResponse, TextPart, Usage, UserError
from durable_agent.engine import telemetry
from durable_agent.engine.pricing import price_response
from durable_agent.engine.quotas import model_key, parse_quota
from durable_agent.models import FallbackModel, Model, model_from_name
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.models.openai import OpenAIChatModel, OpenAIResponsesModel
from durable_agent.models.providers import PROVIDERS, class_names, provider_class
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


# -- the providers' table --------------------------------------------------------------------


def test_the_models_floor_imports_only_the_contract() -> None:
    from tests.test_architecture import PACKAGE, imported, modules

    for path in modules("models"):
        for name in imported(path):
            assert name.startswith(("durable_agent.contract", "durable_agent.models")), (
                f"{path.relative_to(PACKAGE)} imports {name}"
            )
    for module, _ in PROVIDERS.values():
        assert module.startswith("durable_agent.models.")


def test_every_row_is_a_provider_class_the_package_imports_lazily() -> None:
    assert class_names() == ["AnthropicModel", "OpenAIChatModel", "OpenAIResponsesModel"]
    for prefix, (_, name) in PROVIDERS.items():
        cls = provider_class(prefix)
        assert isinstance(cls, type)
        assert issubclass(cls, Model)
        assert getattr(durable_agent.models, name) is cls
        assert name in durable_agent.models.__all__
        model = cls("some-model")
        assert model.provider in ("anthropic", "openai")
        assert model_key(model) == f"{model.provider}:some-model"
    with pytest.raises(AttributeError):
        _ = durable_agent.models.NoSuchModel


GEMINI_MODULE = """
    from durable_agent.contract.messages import ModelResponse, TextPart
    from durable_agent.contract.usage import Usage
    from durable_agent.models.base import Model


    class GeminiModel(Model):
        def __init__(self, model_name, *, stream=False, provider="google"):
            self._model_name, self._stream, self._provider = model_name, stream, provider

        @property
        def model_name(self):
            return self._model_name

        @property
        def provider(self):
            return self._provider

        @property
        def streams(self):
            return self._stream

        async def request(self, messages, params):
            return ModelResponse(
                parts=[TextPart(text="hello from gemini")],
                usage=Usage(input_tokens=1000, output_tokens=100),
                model_name=self._model_name,
                provider_name=self._provider,
            )
"""

GEMINI_TOKENS = {"input_tokens": 1000, "output_tokens": 100}


@pytest.fixture
def gemini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Model]]:
    """A provider the package has never heard of: its own module (outside the package, on
    the path only for this test) and one row of `PROVIDERS`, nothing else."""
    (tmp_path / "fake_gemini_provider.py").write_text(textwrap.dedent(GEMINI_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(PROVIDERS, "gemini", ("fake_gemini_provider", "GeminiModel"))
    yield cast(type[Model], provider_class("gemini"))
    sys.modules.pop("fake_gemini_provider", None)


async def test_a_new_provider_is_its_module_and_one_row(gemini: type[Model]) -> None:
    # By name, alone and in a fallback chain.
    model = model_from_name("gemini:gemini-2.5-flash", stream=True)
    assert isinstance(model, gemini)
    assert model.model_name == "gemini-2.5-flash"
    assert model.streams
    chain = model_from_name("gemini:gemini-2.5-flash, anthropic:claude-haiku-4-5")
    assert isinstance(chain, FallbackModel)
    assert [m.provider for m in chain.models] == ["google", "anthropic"]
    with pytest.raises(UserError, match="openai-responses, gemini "):
        model_from_name("nope:x")  # the error lists the new row too

    # Imported lazily from the package, as the others are.
    assert durable_agent.models.GeminiModel is gemini
    from durable_agent.models import GeminiModel

    assert GeminiModel is gemini

    # Its quota key and its price come from the class's own `provider`.
    assert model_key(model) == "google:gemini-2.5-flash"
    assert parse_quota("google:gemini-2.5-flash=rpm:60")[0] == model_key(model)
    table = calc_price(PriceUsage(**GEMINI_TOKENS), "gemini-2.5-flash", provider_id="google")
    expected = float(table.total_price)
    assert expected > 0
    unpriced = ModelResponse(parts=[TextPart(text="hi")], usage=Usage(**GEMINI_TOKENS))
    assert price_response(unpriced, model, None).usage.cost == pytest.approx(expected)

    # A run on it: priced, and its span names the provider.
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    token = telemetry.use_provider(tracer_provider)
    try:
        result = await AgentBuilder(model).name("gemini-agent").build().run("hi")
    finally:
        telemetry._provider.reset(token)
    assert result.output == "hello from gemini"
    assert result.usage.cost == pytest.approx(expected)
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chats
    assert chats[0].attributes is not None
    assert chats[0].attributes["gen_ai.provider.name"] == "google"


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
