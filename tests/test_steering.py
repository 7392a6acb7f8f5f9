"""Steering: a user message sent while a run works reaches the model's next request.

In-process through the run controller, and on Temporal through the `steer` signal and the
`steer_run` update (the client's `steer`, `durable-agent steer`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog
from temporalio.client import Client

from durable_agent import (
    AgentBuilder,
    AgentCheckpoint,
    AgentStreamRecord,
    FunctionModel,
    InvalidInput,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    UserError,
    UserPromptPart,
)
from durable_agent.cli.app import amain
from durable_agent.temporal import AgentClient, AgentWorkflow
from durable_agent.temporal.client import Rejected, RunClosed
from durable_agent.temporal.devserver import DevServer

from .helpers import RecordingExecutor, call, text_response, tool_response
from .temporal_support import new_worker, unique, wait_for_status


def user_texts(message: ModelMessage) -> list[str]:
    if not isinstance(message, ModelRequest):
        return []
    return [p.text for p in message.parts if isinstance(p, UserPromptPart)]


class Gate:
    """A tool that waits until the test lets it finish, so messages arrive mid-call."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def weather(self, city: str) -> str:
        self.started.set()
        await self.release.wait()
        return f"sunny in {city}"


class Steerable:
    """A model that calls `weather` once, then answers with the user texts it was sent."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: Any) -> ModelResponse:
        self.requests.append(messages)
        if len(self.requests) == 1:
            return tool_response(call("weather", "w1", city="Paris"))
        seen = [text for m in messages for text in user_texts(m)]
        return text_response("read: " + " | ".join(seen))


def steerable_agent(name: str, model: Steerable, gate: Gate) -> Any:
    return AgentBuilder(FunctionModel(model)).name(name).tool(gate.weather).build()


# -- in-process ------------------------------------------------------------------------------


async def test_in_process_steer_during_a_tool_reaches_the_next_request() -> None:
    model, gate, executor = Steerable(), Gate(), RecordingExecutor()
    agent = steerable_agent("steer-local", model, gate).with_executor(executor)
    records: list[AgentStreamRecord] = []
    controller = agent.controller(sink=records.append)
    run = asyncio.ensure_future(controller.start(controller.new_state("Weather in Paris?")))
    await gate.started.wait()
    controller.steer("also check Rome")
    gate.release.set()
    state = await run

    assert state.output == "read: Weather in Paris? | also check Rome"
    second = model.requests[1][-1]
    assert user_texts(second) == ["also check Rome"]  # with the tool's return, in one request
    steered = [r for r in records if r.kind == "steered"]
    assert [r.data for r in steered] == [{"message": "also check Rome"}]
    queued = [c for c in executor.checkpoints if c.state.pending_steering]
    assert [c.node.value for c in queued] == ["tool_return", "prepare_model_request"]
    assert AgentCheckpoint.model_validate_json(queued[0].model_dump_json()) == queued[0]
    assert state.pending_steering == []


async def test_in_process_steer_during_the_final_answer_asks_the_model_again() -> None:
    answered = asyncio.Event()
    release = asyncio.Event()
    seen: list[list[str]] = []

    async def model(messages: list[ModelMessage], info: Any) -> ModelResponse:
        seen.append(user_texts(messages[-1]))
        if len(seen) == 1:
            answered.set()
            await release.wait()
            return text_response("Paris is sunny.")
        return text_response("Rome is sunny too.")

    agent = AgentBuilder(FunctionModel(model)).name("steer-final").build()
    controller = agent.controller()
    run = asyncio.ensure_future(controller.start(controller.new_state("Paris?")))
    await answered.wait()
    controller.steer("and Rome?")
    release.set()
    state = await run
    assert seen == [["Paris?"], ["and Rome?"]]
    assert state.output == "Rome is sunny too."
    assert state.run_step == 2


async def test_in_process_steer_refuses_an_empty_message_and_an_ended_run() -> None:
    agent = AgentBuilder(FunctionModel(lambda m, i: text_response("ok"))).name("s").build()
    controller = agent.controller()
    with pytest.raises(UserError, match="not started"):
        controller.steer("hello")
    state = await controller.start(controller.new_state("hi"))
    assert state.output == "ok"
    with pytest.raises(InvalidInput, match="steering message is empty"):
        controller.steer("  ")
    with pytest.raises(UserError, match="cannot steer a run that is completed"):
        controller.steer("too late")


# -- on Temporal -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def steer_run(client: Client) -> AsyncIterator[tuple[Any, Steerable, Gate]]:
    """A running agent whose tool call is in flight, on a worker of its own."""
    name = unique("steer")
    model, gate = Steerable(), Gate()
    agent = steerable_agent(name, model, gate)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(name, "Weather in Paris?")
        await asyncio.wait_for(gate.started.wait(), 20)
        yield handle, model, gate


async def test_steer_during_a_slow_tool_reaches_the_next_model_request(client: Client) -> None:
    async with steer_run(client) as (handle, model, gate):
        events = len((await handle.handle.fetch_history()).events)
        with pytest.raises(Rejected) as refused:
            await handle.steer("   ")
        assert refused.value.type == "invalid_steering"
        assert "steering message is empty" in refused.value.message
        assert len((await handle.handle.fetch_history()).events) == events  # never entered

        accepted = await handle.steer("also check Rome")
        assert accepted.message == "steering message queued for the model's next request"
        assert accepted.status == "running"
        assert (await handle.status()).steering == ["also check Rome"]
        gate.release.set()
        result = await handle.result()
        latest = await handle.handle.query(AgentWorkflow.latest_checkpoint)

    assert result.output == "read: Weather in Paris? | also check Rome"
    assert user_texts(model.requests[1][-1]) == ["also check Rome"]
    assert len(model.requests) == 2
    assert latest is not None
    assert latest.state.pending_steering == []


async def test_steer_signal_with_bad_input_is_dropped(client: Client) -> None:
    with structlog.testing.capture_logs():
        async with steer_run(client) as (handle, _, gate):
            await handle.handle.signal("steer", {"message": ""})
            await handle.handle.signal("steer", "not an object")
            await handle.handle.signal("steer", {"message": "also check Rome"})
            await _until(lambda: _steering(handle), ["also check Rome"])
            gate.release.set()
            result = await handle.result()
    assert result.output == "read: Weather in Paris? | also check Rome"


async def test_steer_refuses_a_closed_run(client: Client) -> None:
    async with steer_run(client) as (handle, _, gate):
        gate.release.set()
        await handle.result()
        with pytest.raises(RunClosed, match="completed"):
            await handle.steer("too late")


async def test_cli_steer(client: Client, dev_server: DevServer, capsys: Any) -> None:
    async with steer_run(client) as (handle, _, gate):
        base = ["--address", dev_server.address, "--task-queue", handle._task_queue]
        capsys.readouterr()
        assert await amain(["steer", handle.id, "", *base]) == 1
        assert "rejected: the steering message is empty" in capsys.readouterr().err
        assert await amain(["steer", handle.id, "also check Rome", *base]) == 0
        assert "queued for the model's next request" in capsys.readouterr().out
        view = await wait_for_status(handle.handle, "running")
        assert view.steering == ["also check Rome"]
        assert await amain(["status", handle.id, *base]) == 0
        assert "also check Rome  (queued for the next model request)" in capsys.readouterr().out
        gate.release.set()
        assert (await handle.result()).output.endswith("also check Rome")


async def _steering(handle: Any) -> list[str]:
    return list((await handle.status()).steering)


async def _until(probe: Any, wanted: Any, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (got := await probe()) != wanted:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"got {got!r}, wanted {wanted!r}")
        await asyncio.sleep(0.1)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield
