"""`OpenAIChatModel` inside `AgentWorkflow` on a real dev server, against the fake OpenAI server.

These pin the contract between the model and Temporal: retryable HTTP errors are retried by
the activity retry policy (honouring Retry-After), permanent ones fail the workflow on the
first attempt with the server's message, and the API key stays in the worker's process.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import io
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import structlog
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_agent import Agent, AgentBuilder
from durable_agent.cli.logs import configure_logging
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.support.openai_server import (
    ErrorReply,
    FakeOpenAIServer,
    Reply,
    TextReply,
    ToolCallsReply,
)

from .temporal_support import fast_activity, new_worker

API_KEY = f"sk-wf-{uuid.uuid4().hex}"
MODEL = "gpt-4o-mini"
FAST_RETRIES = AgentActivityConfig(
    model_request=fast_activity(start_to_close=120, heartbeat=30, maximum_interval=60)
)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """The key lives only in the worker's environment, as in production."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(api_key=API_KEY) as fake:
        yield fake
        assert fake.errors == [], "the fake itself crashed"


def weather_agent(server: FakeOpenAIServer, calls: list[str]) -> Agent:
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"sunny in {city}"

    return (
        AgentBuilder(OpenAIChatModel(MODEL, base_url=server.base_url))
        .name(unique("openai-weather"))
        .instructions("Answer weather questions.")
        .tool(get_weather)
        .build()
    )


async def run_workflow(
    client: Client, agent: AgentRegistration, prompt: str
) -> WorkflowHandle[Any, Any]:
    async with new_worker(client, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=agent.agent.name, prompt=prompt),
            id=unique("wf"),
            task_queue=worker.task_queue,
        )
        with contextlib.suppress(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    return handle


async def model_request_attempts(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The attempt number recorded when each model_request activity finally started."""
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    attempts = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs_started = event.activity_task_started_event_attributes
            if scheduled[attrs_started.scheduled_event_id] == "model_request":
                attempts.append(attrs_started.attempt)
    return attempts


async def last_model_request_failure(handle: WorkflowHandle[Any, Any]) -> Failure | None:
    """The failure of the attempt before the one that succeeded, as history records it."""
    history = await handle.fetch_history()
    model_requests = set()
    last: Failure | None = None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "model_request":
                model_requests.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in model_requests and attrs.HasField("last_failure"):
                last = attrs.last_failure
    return last


def readable_history(history_json: str) -> str:
    """The history JSON plus every base64 payload in it decoded, since payloads are encoded."""
    texts = [history_json]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            with contextlib.suppress(binascii.Error, ValueError):
                texts.append(base64.b64decode(node, validate=True).decode("utf-8", "replace"))

    walk(json.loads(history_json))
    return "\n".join(texts)


def timed(arrivals: list[float], reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A reply that notes when its request arrived, to measure the retry delays."""

    def factory(body: dict[str, Any]) -> Reply:
        arrivals.append(time.monotonic())
        return reply

    return factory


async def test_tool_calling_run_completes(client: Client, server: FakeOpenAIServer) -> None:
    calls: list[str] = []
    agent = AgentRegistration(weather_agent(server, calls))
    server.enqueue(
        ToolCallsReply([("call_1", "get_weather", {"city": "Paris"})]),
        TextReply("Sunny in Paris."),
    )

    handle = await run_workflow(client, agent, "Weather in Paris?")

    result = await handle.result()
    assert result.status == "completed"
    assert result.output == "Sunny in Paris."
    assert result.run_step == 2
    assert result.usage.requests == 2
    assert result.usage.tool_calls == 1
    assert calls == ["Paris"]
    first, second = server.chat_requests
    assert first["messages"][0] == {"role": "system", "content": "Answer weather questions."}
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "sunny in Paris",
    }
    assert await model_request_attempts(handle) == [1, 1]
    server.assert_script_consumed()


async def test_rate_limit_and_server_error_are_retried_by_temporal(
    client: Client, server: FakeOpenAIServer
) -> None:
    agent = AgentRegistration(weather_agent(server, []), FAST_RETRIES)
    arrivals: list[float] = []
    server.enqueue(
        timed(arrivals, ErrorReply.rate_limit(retry_after=1)),
        timed(arrivals, ErrorReply.server_error()),
        timed(arrivals, TextReply("Recovered.")),
    )

    handle = await run_workflow(client, agent, "Weather?")

    result = await handle.result()
    assert result.output == "Recovered."
    assert [r.status for r in server.requests] == [429, 500, 200]
    assert await model_request_attempts(handle) == [3]
    # Retry-After: 1 set the first retry's delay (the dev server's timers are too coarse
    # to tell 1 s from the 0.2 s interval apart; the next test pins the delay itself).
    assert arrivals[1] - arrivals[0] >= 0.95
    last = await last_model_request_failure(handle)
    assert last is not None
    assert last.message == ErrorReply.server_error().message
    assert last.application_failure_info.type == "model_http_error"
    assert not last.application_failure_info.non_retryable
    server.assert_script_consumed()


async def test_retry_after_becomes_the_next_retry_delay(
    client: Client, server: FakeOpenAIServer
) -> None:
    agent = AgentRegistration(weather_agent(server, []), FAST_RETRIES)
    arrivals: list[float] = []
    server.enqueue(
        timed(arrivals, ErrorReply.rate_limit(retry_after=2)),
        timed(arrivals, TextReply("Waited.")),
    )

    handle = await run_workflow(client, agent, "Weather?")

    assert (await handle.result()).output == "Waited."
    last = await last_model_request_failure(handle)
    assert last is not None
    assert last.application_failure_info.next_retry_delay.ToTimedelta() == timedelta(seconds=2)
    assert arrivals[1] - arrivals[0] >= 1.95


async def test_bad_request_fails_the_workflow_on_the_first_attempt(
    client: Client, server: FakeOpenAIServer
) -> None:
    agent = AgentRegistration(weather_agent(server, []), FAST_RETRIES)
    reply = ErrorReply.context_length_exceeded()
    server.enqueue(reply, TextReply("must never be used"))

    handle = await run_workflow(client, agent, "Weather?")

    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    chain: list[BaseException] = []
    error: BaseException | None = info.value
    while error is not None:
        chain.append(error)
        error = getattr(error, "cause", None) or error.__cause__
    failures = [
        e for e in chain if isinstance(e, ApplicationError) and e.type == "model_http_error"
    ]
    assert failures, f"no model_http_error in {chain!r}"
    assert failures[0].message.startswith(f"{reply.message} (HTTP 400: ")
    assert failures[0].non_retryable
    assert len(server.requests) == 1
    assert server.pending == 1
    assert await model_request_attempts(handle) == [1]


async def test_api_key_never_reaches_history_or_logs(
    client: Client, server: FakeOpenAIServer
) -> None:
    """Runs through a retried error and a tool call with everything logged at DEBUG."""
    agent = AgentRegistration(weather_agent(server, []), FAST_RETRIES)
    server.enqueue(
        ErrorReply.rate_limit(retry_after=0.2),
        ToolCallsReply([("call_1", "get_weather", {"city": "Oslo"})]),
        TextReply("Sunny in Oslo."),
    )
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_structlog = structlog.get_config()
    buffer = io.StringIO()
    try:
        configure_logging("json", logging.DEBUG)
        # Loggers must not be cached in the production configuration, or it would outlive
        # this test.
        structlog.configure(cache_logger_on_first_use=False)
        capture = logging.StreamHandler(buffer)
        capture.setFormatter(root.handlers[0].formatter)
        root.addHandler(capture)

        handle = await run_workflow(client, agent, "Weather in Oslo?")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        structlog.configure(**saved_structlog)

    result = await handle.result()
    assert result.output == "Sunny in Oslo."
    # The key was in use: the fake accepts nothing else.
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in server.requests)
    history = readable_history((await handle.fetch_history()).to_json())
    assert "Sunny in Oslo." in history  # payloads were decoded, so the search means something
    assert "Rate limit reached" in history
    assert API_KEY not in history
    logged = buffer.getvalue()
    # The capture works: it saw the activities, the retried failure and the SDK's debug lines.
    assert '"activity started"' in logged
    assert '"model request failed"' in logged
    assert "openai" in logged
    assert API_KEY not in logged
    assert API_KEY[-12:] not in logged
