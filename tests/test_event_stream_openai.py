"""Token streaming end to end: `OpenAIChatModel(stream=True)` in a `model_request` activity
on a real dev server, against a real local HTTP server streaming chat-completion chunks, and
a subscriber reading the run's stream. Measures the time from the model server's first
token to the subscriber's first delta, and a stream cut off mid-answer is retried without
leaving garbled text behind."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, AgentStreamRecord
from durable_agent.cli.live import RunView
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import AgentActivityConfig, AgentClient, AgentRegistration
from tests.support.openai_server import FakeOpenAIServer, TextReply

from .temporal_support import fast_activity, new_worker, unique

API_KEY = f"sk-stream-{uuid.uuid4().hex}"
ANSWER = " ".join(f"word{n}" for n in range(60))
CUT = "Une réponse qui s'arrête au milieu"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def openai_agent(server: FakeOpenAIServer, name: str) -> AgentRegistration:
    """A streaming OpenAI chat agent on `server`, with quick retries."""
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, stream=True)
    fast = fast_activity()
    return AgentRegistration(
        AgentBuilder(model).name(name).build(),
        AgentActivityConfig(
            prepare_model_request=fast,
            model_request=fast,
            validate_output=fast,
            delta_flush_interval=timedelta(milliseconds=100),
        ),
    )


def content_times(server: FakeOpenAIServer) -> list[float]:
    """When the server wrote each chunk that carries text."""
    out = []
    for at, event in server.chunk_times:
        if event.startswith("{"):
            choices = json.loads(event)["choices"]
            if choices and choices[0]["delta"].get("content"):
                out.append(at)
    return out


async def test_tokens_reach_a_subscriber_while_the_model_writes(
    client: Client, server: FakeOpenAIServer
) -> None:
    name = unique("openai-stream")
    agent = openai_agent(server, name)
    server.enqueue(TextReply(ANSWER, chunk_chars=6, chunk_delay=0.03))
    agents = AgentClient(client)
    received: list[tuple[float, AgentStreamRecord]] = []
    async with new_worker(client, agents=[agent]) as worker:
        handle = await agents.start(name, "write", task_queue=worker.task_queue)
        async for record in handle.stream(poll_interval=0.02):
            received.append((time.time(), record))
        result = await handle.result()
    assert result.output == ANSWER
    deltas = [(at, r) for at, r in received if r.kind == "model_delta"]
    assert "".join(r.data["text"] for _, r in deltas) == ANSWER
    sent = content_times(server)
    first_token, last_token = sent[0], sent[-1]
    first_delta = deltas[0][0]
    ttfd = first_delta - first_token
    lasted = last_token - first_token
    print(f"\ntime to first delta: {ttfd * 1e3:.0f} ms; stream lasted {lasted * 1e3:.0f} ms")
    assert first_delta < last_token, "the first delta arrived while the model still wrote"
    assert ttfd < 2.0
    # End-to-end delay of each delta: from the chunk that completed its text to the reader.
    written = ""
    chunk_texts = []
    for at, event in server.chunk_times:
        if event.startswith("{"):
            choices = json.loads(event)["choices"]
            if choices and choices[0]["delta"].get("content"):
                written += choices[0]["delta"]["content"]
                chunk_texts.append((at, len(written)))
    delays = []
    shown = 0
    for at, record in deltas:
        shown += len(record.data["text"])
        done_at = next(t for t, length in chunk_texts if length >= shown)
        delays.append(at - done_at)
    print(
        f"record delay: median {statistics.median(delays) * 1e3:.0f} ms, "
        f"max {max(delays) * 1e3:.0f} ms over {len(delays)} delta records"
    )
    assert len(deltas) >= 3, "deltas come in several batches while the model writes"


async def test_a_stream_cut_off_midway_is_retried_and_clients_drop_the_cut_text(
    client: Client, server: FakeOpenAIServer
) -> None:
    name = unique("openai-cut")
    agent = openai_agent(server, name)
    server.enqueue(
        TextReply(CUT, chunk_chars=5, chunk_delay=0.15, cut_after=3),
        TextReply(ANSWER, chunk_chars=12, chunk_delay=0.01),
    )
    agents = AgentClient(client)
    view = RunView("")
    shown: list[str] = []
    async with new_worker(client, agents=[agent]) as worker:
        handle = await agents.start(name, "write", task_queue=worker.task_queue)
        records = []
        async for record in handle.stream(poll_interval=0.02):
            records.append(record)
            view.apply(record)
            shown.append(view.text(1))
        result = await handle.result()
    assert result.output == ANSWER
    kinds = [r.kind for r in records]
    assert kinds.count("model_retry") == 1
    cut = "".join(
        r.data["text"] for r in records[: kinds.index("model_retry")] if r.kind == "model_delta"
    )
    assert cut
    assert CUT[:15].startswith(cut), "what the cut attempt wrote before it broke (3 chunks)"
    assert shown[-1] == ANSWER
    after_retry = shown[kinds.index("model_retry") :]
    assert all(ANSWER.startswith(text) for text in after_retry)
    assert [r.seq for r in records] == list(range(len(records)))
