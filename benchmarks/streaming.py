"""The live event stream. The same k-step agent runs streaming with one `AgentRunHandle.stream()`
reader, streaming off, and streaming read by a plain `WorkflowStreamClient.subscribe()`; B is a
bare loop whose model activity takes as long and says as much. Each step the model writes a
sentence for `WRITE_SECONDS` before its tool call. Then `OpenAIChatModel(stream=True)`
against the fake OpenAI server: first token written → first delta read, and each delta's
delay from the chunk that completed it. One in-process worker (no CPU is measured here)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client
    from temporalio.contrib.workflow_streams import WorkflowStreamClient
    from temporalio.worker import Worker

    from benchmarks import workload
    from benchmarks.harness import Session, chain, history_figures, log, median, ratio
    from durable_agent import (
        AgentBuilder,
        FunctionModel,
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        UsageLimits,
    )
    from durable_agent.agent.agent import Agent
    from durable_agent.models import AgentInfo
    from durable_agent.models.openai import OpenAIChatModel
    from durable_agent.temporal import AgentClient, DurableAgentPlugin

SAY = "Step {n:03}: I will look key {n:03} up, then decide what to do with its result."
WRITE_SECONDS = 0.13
CHUNK_CHARS = 6


def _response(step: int, steps: int) -> ModelResponse:
    if step > steps:
        return ModelResponse(parts=[TextPart(text="done")])
    call = ToolCallPart(id=f"c{step}", name="lookup", arguments={"key": step})
    return ModelResponse(parts=[TextPart(text=SAY.format(n=step)), call])


def talking_agent(steps: int) -> Agent[Any]:
    def step(messages: list[ModelMessage]) -> int:
        return 1 + sum(isinstance(m, ModelResponse) for m in messages)

    async def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(WRITE_SECONDS)
        return _response(step(messages), steps)

    async def streamed(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | ModelResponse]:
        response = _response(step(messages), steps)
        text = "".join(p.text for p in response.parts if isinstance(p, TextPart))
        pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
        for piece in pieces:
            await asyncio.sleep(WRITE_SECONDS / len(pieces))
            yield piece
        yield response

    model = FunctionModel(whole, stream_function=streamed, name="bench-writer")
    builder = AgentBuilder(model).name("bench-talking").tool(workload.lookup)
    return builder.usage_limits(UsageLimits(request_limit=None)).build()


class Talk(BaseModel):
    step: int
    steps: int
    said: str = ""
    call_id: str | None = None


@activity.defn(name="bare_talking_model_call")
async def bare_talking_model_call(talk: Talk) -> Talk:
    await asyncio.sleep(WRITE_SECONDS)
    if talk.step < talk.steps:
        step = talk.step + 1
        return Talk(step=step, steps=talk.steps, said=SAY.format(n=step), call_id=f"c{step}")
    return Talk(step=talk.step, steps=talk.steps, said="done")


@activity.defn(name="bare_talking_tool_call")
async def bare_talking_tool_call(call_id: str) -> str:
    return workload.RESULT


@workflow.defn(name="BareTalkingWorkflow")
class BareTalkingWorkflow:
    @workflow.run
    async def run(self, steps: int) -> str:
        talk = Talk(step=0, steps=steps)
        while True:
            talk = await workflow.execute_activity(
                bare_talking_model_call, talk, start_to_close_timeout=workload.TIMEOUT
            )
            if talk.call_id is None:
                return talk.said
            await workflow.execute_activity(
                bare_talking_tool_call, talk.call_id, start_to_close_timeout=workload.TIMEOUT
            )


async def _row(client: Client, start: Any, read: Any = None) -> dict[str, Any]:
    began = time.perf_counter()
    handle = await start()
    reader = asyncio.create_task(read(handle)) if read else None
    await handle.result()
    wall = time.perf_counter() - began
    histories = await chain(client, handle)
    events = [e.event_type for h in histories for e in h.events]
    figures = history_figures(histories)
    return {
        "wall_s": wall,
        "events": figures["events"],
        "bytes": figures["bytes"],
        "signals": events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        "updates": events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        "records_read": await reader if reader else None,
    }


def _content_chunks(events: list[tuple[float, str]]) -> list[tuple[float, int]]:
    """(time written, characters of content written so far) for each content chunk."""
    out, written = [], 0
    for at, event in events:
        choices = json.loads(event)["choices"] if event.startswith("{") else None
        piece = choices[0]["delta"].get("content") if choices else None
        if piece:
            written += len(piece)
            out.append((at, written))
    return out


async def _latency(agents: AgentClient, server: Any, runs: int) -> dict[str, list[float]]:
    from tests.support.openai_server import TextReply

    first, delays = [], []
    for _ in range(runs):
        before = len(server.chunk_times)
        server.enqueue(
            TextReply(" ".join(f"token{n}" for n in range(40)), chunk_chars=8, chunk_delay=0.02)
        )
        run = await agents.start("bench-openai", "write")
        received = [(time.time(), r) async for r in run.stream()]
        chunks = _content_chunks(server.chunk_times[before:])
        deltas = [(at, r) for at, r in received if r.kind == "model_delta"]
        first.append(deltas[0][0] - chunks[0][0])
        shown = 0
        for at, record in deltas:
            shown += len(record.data["text"])
            delays.append(at - next(t for t, length in chunks if length >= shown))
    return {
        "first token written → first delta read": first,
        "a delta's chunk written → the delta read": delays,
    }


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    from tests.support.openai_server import FakeOpenAIServer

    steps, latency_runs = (5, 2) if quick else (100, 10)
    queue = f"bench-stream-{uuid.uuid4().hex[:8]}"
    with FakeOpenAIServer(api_key="sk-bench") as server:
        openai = OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key="sk-bench", stream=True
        )
        agents_list = [talking_agent(steps), AgentBuilder(openai).name("bench-openai").build()]
        plugin = DurableAgentPlugin(agents=agents_list)
        client = await Client.connect(session.server.address, plugins=[plugin])
        agents = AgentClient(client, task_queue=queue)
        async with Worker(
            client,
            task_queue=queue,
            workflows=[BareTalkingWorkflow],
            activities=[bare_talking_model_call, bare_talking_tool_call],
            workflow_runner=workload.sandbox_runner(),
        ):

            def start_a(**fields: Any) -> Any:
                async def start() -> Any:
                    return (await agents.start("bench-talking", "go", **fields)).handle

                return start

            async def start_b() -> Any:
                id = f"bench-talk-{uuid.uuid4().hex[:8]}"
                return await client.start_workflow(
                    BareTalkingWorkflow.run, steps, id=id, task_queue=queue
                )

            async def follow(handle: Any) -> int:
                return len([r async for r in agents.get(handle.id).stream()])

            async def follow_plain(handle: Any) -> int:
                stream = WorkflowStreamClient.create(client, handle.id)
                return len([item async for item in stream.subscribe(["events"])])

            rows = {
                "A streaming, stream()": await _row(client, start_a(), follow),
                "A streaming off": await _row(client, start_a(stream_deltas=False)),
                "B bare": await _row(client, start_b),
                "A streaming, subscribe()": await _row(client, start_a(), follow_plain),
            }
            latency = await _latency(agents, server, latency_runs)
    off, bare = rows["A streaming off"], rows["B bare"]
    for label, row in rows.items():
        row.update(
            ms_per_step=row["wall_s"] / steps * 1e3,
            events_per_step=row["events"] / steps,
            bytes_per_step=row["bytes"] / steps,
            bytes_vs_off=ratio(row["bytes"], off["bytes"]),
            bytes_vs_bare=ratio(row["bytes"], bare["bytes"]),
        )
        log(f"  streaming {label}: {row['bytes']:,} bytes")
    summary = {k: median(v) * 1e3 for k, v in latency.items()}
    return {"steps": steps, "runs": rows, "latency": latency, "latency_median_ms": summary}
