"""The new providers inside `AgentWorkflow` on a real dev server, against local servers
speaking the Messages and Responses APIs: a thinking, streaming Anthropic run with a tool;
a `FallbackModel` whose first model keeps failing (one activity per member, each attempt in
history, the answering model asked once); a model chosen per run by name (`AgentClient.start
(model=...)`, `durable-agent run --model`), unknown names refused before any model request;
a worker SIGKILLed mid-stream."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from durable_agent import AgentBuilder, InvalidInput
from durable_agent.engine.overrides import AgentOverrides
from durable_agent.models import FallbackModel
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.models.openai import OpenAIResponsesModel
from durable_agent.temporal import AgentClient, AgentWorkflow
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from durable_agent.temporal.runner import FALLBACK_PATCH
from tests.cli_support import cli_runner
from tests.support.anthropic_server import (
    AnthropicErrorReply,
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
)
from tests.temporal_support import client_knowing

from .temporal_support import (
    activity_summaries,
    fast_activity,
    new_replayer,
    new_worker,
    start_agent,
    unique,
)

ANTHROPIC_KEY = f"sk-ant-wf-{uuid.uuid4().hex}"
OPENAI_KEY = f"sk-wf-{uuid.uuid4().hex}"
ROOT = Path(__file__).resolve().parents[1]
FAST = AgentActivityConfig(
    model_request=fast_activity(start_to_close=60, heartbeat=10, maximum_attempts=2)
)


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    """The keys live only in the worker's environment, as in production."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with FakeAnthropicServer(api_key=ANTHROPIC_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


@pytest.fixture
def gpt(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeResponsesServer(api_key=OPENAI_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


async def model_request_events(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, int]]:
    """(summary, attempt) of each model_request activity's final start, in order."""
    summaries = dict(await _scheduled(handle))
    out = []
    history = await handle.fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in summaries:
                out.append((summaries[attrs.scheduled_event_id], attrs.attempt))
    return out


async def _scheduled(handle: WorkflowHandle[Any, Any]) -> list[tuple[int, str]]:
    history = await handle.fetch_history()
    converter = handle._client.data_converter.payload_converter
    return [
        (event.event_id, converter.from_payload(event.user_metadata.summary, str))
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "model_request"
    ]


async def test_a_thinking_streaming_anthropic_run_with_a_tool(
    client: Client, claude: FakeAnthropicServer
) -> None:
    model = AnthropicModel(
        "claude-sonnet-4-5", base_url=claude.base_url, stream=True, thinking=1024
    )
    agent = (
        AgentBuilder(model)
        .name(unique("claude"))
        .instructions("Be brief.")
        .tool(get_weather)
        .build()
    )
    claude.enqueue(
        MessageReply(
            [Thinking("Need the weather tool."), ToolUse("get_weather", {"city": "Oslo"})]
        ),
        MessageReply([Thinking("It said sunny."), Text("Sunny in Oslo.")], chunk_chars=3),
    )

    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, agent.name, "Weather in Oslo?")
        result = await asyncio.wait_for(handle.result(), 60)
        records = [r async for r in AgentClient(client).get(handle.id).stream()]
        status = await handle.query(AgentWorkflow.status)

    assert result.output == "Sunny in Oslo."
    assert result.usage.requests == 2
    second = claude.bodies[1]
    # The thinking block crossed the activity boundary and the workflow history unchanged.
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Need the weather tool.",
        "signature": claude.sign("Need the weather tool."),
    }
    deltas = [r.data for r in records if r.kind == "model_delta"]
    assert "".join(d["text"] for d in deltas if d["part"] == "text") == "Sunny in Oslo."
    assert any(d["part"] == "thinking" for d in deltas)
    assert status.model == "anthropic:claude-sonnet-4-5"


async def test_a_fallback_model_moves_on_after_the_first_models_retries(
    client: Client, claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    model = FallbackModel(
        AnthropicModel("claude-sonnet-4-5", base_url=claude.base_url),
        OpenAIResponsesModel("gpt-5", base_url=gpt.base_url),
    )
    agent = AgentBuilder(model).name(unique("fallback")).tool(get_weather).build()
    claude.enqueue(
        MessageReply([ToolUse("get_weather", {"city": "Rome"}, "toolu_01R")]),
        AnthropicErrorReply.overloaded(),
        AnthropicErrorReply.rate_limit(retry_after=0.2),
    )
    gpt.enqueue(ResponseReply([Reasoning(["Tool said sunny."]), OutputText("Sunny in Rome.")]))

    async with new_worker(client, agents=[AgentRegistration(agent, FAST)]) as worker:
        handle = await start_agent(client, worker, agent.name, "Weather in Rome?")
        result = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentWorkflow.status)

    assert result.output == "Sunny in Rome."
    # Claude: step 1 answered, then both attempts of step 2 overloaded / rate limited;
    # GPT-5 asked once, for step 2 only, with Claude's conversation.
    assert [r.status for r in claude.requests] == [200, 529, 429]
    assert [r.status for r in gpt.requests] == [200]
    sent = gpt.bodies[0]["input"]
    assert [item.get("type", "message") for item in sent] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert sent[1]["call_id"] == "toolu_01R"
    assert await model_request_events(handle) == [
        ("model_request · step 1 · anthropic:claude-sonnet-4-5", 1),
        ("model_request · step 2 · anthropic:claude-sonnet-4-5", 2),
        ("model_request · step 2 · openai:gpt-5", 1),
    ]
    assert status.model == "openai:gpt-5"  # who answered the latest request
    # The history, with its move to the second model (behind a patch marker), replays.
    history = await handle.fetch_history()
    markers = [
        e.SerializeToString()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert any(FALLBACK_PATCH.encode() in marker for marker in markers)
    replayer = new_replayer(agents=[AgentRegistration(agent, FAST)])
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_a_permanent_error_does_not_fall_back(
    client: Client, claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    model = FallbackModel(
        AnthropicModel("claude-sonnet-4-5", base_url=claude.base_url),
        OpenAIResponsesModel("gpt-5", base_url=gpt.base_url),
    )
    agent = AgentBuilder(model).name(unique("fallback-400")).build()
    claude.enqueue(AnthropicErrorReply.invalid("messages: text content blocks must be non-empty"))

    async with new_worker(client, agents=[AgentRegistration(agent, FAST)]) as worker:
        handle = await start_agent(client, worker, agent.name, "hi")
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)

    assert len(claude.requests) == 1
    assert gpt.requests == []
    assert [summary for _, summary in await _scheduled(handle)] == [
        "model_request · step 1 · anthropic:claude-sonnet-4-5"
    ]


def per_run_agent(claude: FakeAnthropicServer, gpt: FakeResponsesServer) -> AgentRegistration:
    agent = (
        AgentBuilder(OpenAIResponsesModel("gpt-5", base_url=gpt.base_url))
        .name(unique("per-run"))
        .allowed_models(
            {
                "claude": AnthropicModel("claude-opus-4-1", base_url=claude.base_url),
                "backup": FallbackModel(
                    AnthropicModel("claude-haiku-4-5", base_url=claude.base_url),
                    OpenAIResponsesModel("gpt-5-mini", base_url=gpt.base_url),
                ),
            }
        )
        .build()
    )
    return AgentRegistration(agent, FAST)


async def test_a_model_is_chosen_per_run_by_name(
    client: Client, claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    hosted = per_run_agent(claude, gpt)
    name = hosted.agent.name
    agents = AgentClient(client)
    claude.enqueue(MessageReply([Text("Claude here.")]))
    gpt.enqueue(ResponseReply([OutputText("GPT here.")]))

    async with new_worker(client, agents=[hosted]) as worker:
        on_claude = await agents.start(name, "hi", task_queue=worker.task_queue, model="claude")
        default = await agents.start(name, "hi", task_queue=worker.task_queue)
        assert (await on_claude.result()).output == "Claude here."
        assert (await default.result()).output == "GPT here."
        # A client that knows the agent refuses before anything starts.
        knowing = AgentClient(await client_knowing(client, hosted.agent))
        with pytest.raises(InvalidInput, match="no allowed model named 'gpt-9'"):
            await knowing.start(name, "hi", task_queue=worker.task_queue, model="gpt-9")

    assert claude.bodies[0]["model"] == "claude-opus-4-1"
    assert gpt.bodies[0]["model"] == "gpt-5"


async def test_an_unknown_model_fails_the_run_before_any_model_request(
    client: Client, claude: FakeAnthropicServer, gpt: FakeResponsesServer
) -> None:
    """Where the client does not have the agent (another process), the worker refuses."""
    hosted = per_run_agent(claude, gpt)
    name = hosted.agent.name

    async with new_worker(client, agents=[hosted]) as worker:
        handle = await start_agent(
            client, worker, name, "hi", overrides=AgentOverrides(model="gpt-9")
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
        status = await handle.query(AgentWorkflow.status)

    assert "no allowed model named 'gpt-9'" in str(failed.value.cause)
    assert status.status == "failed"
    assert await activity_summaries(handle) == []
    assert claude.requests == gpt.requests == []


async def test_cli_run_with_model(
    dev_server: DevServer,
    client: Client,
    claude: FakeAnthropicServer,
    gpt: FakeResponsesServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hosted = per_run_agent(claude, gpt)
    name = hosted.agent.name
    cli = cli_runner(dev_server.address, capsys)
    claude.enqueue(AnthropicErrorReply.unavailable(), AnthropicErrorReply.unavailable())
    gpt.enqueue(ResponseReply([OutputText("mini answered")]))

    async with new_worker(client, agents=[hosted]) as worker:
        ok = await cli(
            "run", name, "hi", "--model", "backup", "--wait", "--task-queue", worker.task_queue
        )
        # The CLI does not have the agent: the worker refuses the run.
        remote = await cli("run", name, "hi", "--model", "gpt-9", "--task-queue", worker.task_queue)

    assert ok.code == 0, ok.err
    assert "mini answered" in ok.out
    assert remote.code == 1
    assert "failed: invalid_input: agent" in remote.err
    assert "no allowed model named 'gpt-9'" in remote.err
    assert [r.status for r in claude.requests] == [503, 503]
    assert gpt.bodies[0]["model"] == "gpt-5-mini"


# --------------------------------------------------------------------------- worker crash


def start_worker(
    server: DevServer, task_queue: str, claude: FakeAnthropicServer, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_TASK_QUEUE": task_queue,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": claude.base_url,
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.Popen(
        [sys.executable, "worker.py", "--no-examples", "--agents", "tests.provider_agents"],
        cwd=ROOT,
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
    )


async def test_a_worker_killed_mid_stream(
    client: Client, dev_server: DevServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    text = "A long answer that streams slowly, piece by piece, to the end."
    claude.enqueue(
        MessageReply([Text(text)], chunk_chars=4, delay=0.3),
        MessageReply([Text(text)], chunk_chars=4),
    )
    task_queue = f"stream-crash-{uuid.uuid4().hex[:8]}"
    first = start_worker(dev_server, task_queue, claude, tmp_path / "worker1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        handle = await AgentClient(client).start(
            "anthropic-stream-demo", "Tell me.", task_queue=task_queue
        )
        deadline = asyncio.get_running_loop().time() + 60
        while claude.events_written.count("content_block_delta") < 3:
            assert asyncio.get_running_loop().time() < deadline, "the stream never started"
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = start_worker(dev_server, task_queue, claude, tmp_path / "worker2.log")
        result = await asyncio.wait_for(handle.result(), 90)
        records = [r async for r in handle.stream()]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(20)

    assert result.output == text
    assert result.usage.requests == 1
    first_body, second_body = (r.body for r in claude.requests)
    assert first_body == second_body  # the same request, asked again by the retry
    assert first_body["stream"] is True
    kinds = [r.kind for r in records]
    assert "model_retry" in kinds  # the killed attempt's text was superseded
    final = [r for r in records if r.kind == "model_response"]
    assert final[-1].data["text"] == text
