"""A `FallbackModel`'s `chat` spans name the member that was asked (issue 38, item 9), not the
chain (`chat fallback:claude-sonnet-4-5,gpt-5`): in-process, where the chain is walked in one
request, and on Temporal, where each member is a `model_request` activity of its own. Real
SDK exporters over OTLP/HTTP to the receiver in the test; the providers are local servers
speaking the Messages and Responses APIs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from durable_agent import AgentBuilder
from durable_agent.engine import telemetry
from durable_agent.models import FallbackModel
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.models.openai import OpenAIResponsesModel
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.support.anthropic_server import AnthropicErrorReply, FakeAnthropicServer
from tests.support.responses_server import FakeResponsesServer, OutputText, ResponseReply

from .otlp_receiver import OtlpReceiver, ReceivedSpan
from .temporal_support import fast_activity, new_worker, start_agent, unique
from .test_tracing import traced_client

FAST = AgentActivityConfig(
    model_request=fast_activity(start_to_close=60, heartbeat=10, maximum_attempts=2)
)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


@pytest.fixture
def provider(receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    sdk = TracerProvider()
    sdk.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces"))
    )
    yield sdk
    sdk.shutdown()


@pytest.fixture
def traced(provider: TracerProvider) -> Iterator[TracerProvider]:
    token = telemetry.use_provider(provider)
    yield provider
    telemetry._provider.reset(token)


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-trace")
    with FakeAnthropicServer(api_key="sk-ant-trace") as fake:
        yield fake


@pytest.fixture
def gpt(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-trace")
    with FakeResponsesServer(api_key="sk-trace") as fake:
        yield fake


def chain(first: FakeAnthropicServer, second: FakeResponsesServer) -> FallbackModel:
    return FallbackModel(
        AnthropicModel("claude-sonnet-4-5", base_url=first.base_url),
        OpenAIResponsesModel("gpt-5", base_url=second.base_url),
    )


def chats(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start)


def asked(span: ReceivedSpan, model: str, served_by: str, *, failed: bool) -> None:
    assert span.name == f"chat {model}"
    assert span.attributes["gen_ai.request.model"] == model
    assert span.attributes["gen_ai.provider.name"] == served_by
    assert (span.status_code == 2) is failed  # ERROR
    if failed:
        assert span.attributes["error.type"] == "model_http_error"
    else:
        assert span.attributes["gen_ai.response.model"] == model


async def test_in_process_each_member_asked_is_its_own_chat_span(
    traced: TracerProvider,
    receiver: OtlpReceiver,
    claude: FakeAnthropicServer,
    gpt: FakeResponsesServer,
) -> None:
    claude.enqueue(AnthropicErrorReply.overloaded())
    gpt.enqueue(ResponseReply([OutputText("from gpt")]))
    agent = AgentBuilder(chain(claude, gpt)).name(unique("fallback-trace")).build()
    result = await agent.run("hi")
    assert result.output == "from gpt"
    spans = await receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    down, up = chats(spans)
    asked(down, "claude-sonnet-4-5", "anthropic", failed=True)
    asked(up, "gpt-5", "openai", failed=False)
    assert {down.parent_span_id, up.parent_span_id} == {run.span_id}
    assert not [s for s in spans if "fallback:" in s.name]


@pytest.mark.server
async def test_on_temporal_each_member_activity_names_its_member(
    dev_server: DevServer,
    provider: TracerProvider,
    receiver: OtlpReceiver,
    claude: FakeAnthropicServer,
    gpt: FakeResponsesServer,
) -> None:
    client = await traced_client(dev_server, provider)
    agent = AgentBuilder(chain(claude, gpt)).name(unique("fallback-trace")).build()
    claude.enqueue(AnthropicErrorReply.overloaded(), AnthropicErrorReply.overloaded())
    gpt.enqueue(ResponseReply([OutputText("from gpt")]))
    async with new_worker(client, agents=[AgentRegistration(agent, FAST)]) as worker:
        handle = await start_agent(client, worker, agent.name, "hi")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output == "from gpt"
    spans = await receiver.wait_for(lambda s: any(x.name == f"run_end {agent.name}" for x in s))
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    first, second, answered = chats(spans)  # the first member's two attempts, then the next
    asked(first, "claude-sonnet-4-5", "anthropic", failed=True)
    asked(second, "claude-sonnet-4-5", "anthropic", failed=True)
    asked(answered, "gpt-5", "openai", failed=False)
    assert {s.parent_span_id for s in (first, second, answered)} == {run.span_id}
    assert not [s for s in spans if "fallback:" in s.name]
    (end,) = [s for s in spans if s.name.startswith("run_end")]
    assert end.attributes["durable_agent.status"] == "completed"
