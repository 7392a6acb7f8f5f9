"""The streaming rows of the Temporal benchmark: what the live event stream costs.

Part of `python -m benchmarks.temporal_bench` (`--stream-k 100`, 0 to skip); with
`--streaming-only` it runs just these and writes `benchmarks/RESULTS-streaming.md`.

The same k-step agent runs four ways on the benchmark's worker and dev server. Each step
the model "writes" a 73-character sentence for `WRITE_SECONDS` (13 chunks) before it calls a
tool, as models do; a run that does not stream gets the same response after the same time.

- A streaming, one live subscriber: `stream_deltas` on (the default), and one reader
  following the run with `AgentRunHandle.stream()` (the stream's poll query).
- A streaming, one plain subscriber: the same, read by Workflow Streams' own
  `WorkflowStreamClient.subscribe()` (update polls, its default 100 ms cooldown).
- A streaming off: `stream_deltas=False`, nobody reading.
- B: `BareTalkingWorkflow` below, a hand-written loop whose model activity takes the same
  time and returns the same sentence, with no agent runtime and no stream.

Then, with the fake OpenAI server streaming chat-completion chunks over real HTTP to an
`OpenAIChatModel(stream=True)`, the time from the server writing its first token to the
subscriber holding the first `model_delta`, and each delta record's delay from the chunk
that completed it to the subscriber.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle, WorkflowHistory
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    from durable_agent import (
        AgentBuilder,
        AgentStreamRecord,
        FunctionModel,
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        UsageLimits,
    )
    from durable_agent.agent import Agent
    from durable_agent.models import AgentInfo
    from durable_agent.models.openai import OpenAIChatModel
    from durable_agent.temporal import AgentActivityConfig, AgentClient
    from durable_agent.temporal.registry import registry

__all__ = [
    "BARE_TALKING_ACTIVITIES",
    "BareTalkingWorkflow",
    "StreamReport",
    "measure",
    "register_agents",
    "render",
]

SAY = "Step {n:03}: I will look key {n:03} up, then decide what to do with its result."
WRITE_SECONDS = 0.13
CHUNK_CHARS = 6
RESULT = "x" * 250
ACTIVITY_TIMEOUT = timedelta(seconds=120)
E = EventType


def _say(step: int) -> str:
    return SAY.format(n=step)


# -- A: the agent, streaming or not ---------------------------------------------------------


def agent_name(steps: int) -> str:
    return f"bench-stream-{steps}-steps"


def _step(messages: list[ModelMessage]) -> int:
    return 1 + sum(1 for m in messages if isinstance(m, ModelResponse))


def _response(step: int, steps: int) -> ModelResponse:
    if step > steps:
        return ModelResponse(parts=[TextPart(text="done")])
    return ModelResponse(
        parts=[
            TextPart(text=_say(step)),
            ToolCallPart(id=f"c{step}", name="lookup", arguments={"key": step}),
        ]
    )


def stream_agent(steps: int) -> Agent[Any]:
    async def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(WRITE_SECONDS)
        return _response(_step(messages), steps)

    async def streamed(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | ModelResponse]:
        response = _response(_step(messages), steps)
        text = "".join(p.text for p in response.parts if isinstance(p, TextPart))
        pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
        for piece in pieces:
            await asyncio.sleep(WRITE_SECONDS / len(pieces))
            yield piece
        yield response

    async def lookup(key: int) -> str:
        """Looks a key up.

        Args:
            key: the key
        """
        return RESULT

    model = FunctionModel(whole, stream_function=streamed, name="bench-writer")
    return (
        AgentBuilder(model)
        .name(agent_name(steps))
        .tool(lookup)
        .usage_limits(UsageLimits(request_limit=None))
        .build()
    )


# -- B: a bare loop that talks as long -------------------------------------------------------


class TalkInput(BaseModel):
    step: int
    steps: int
    content: str


class TalkOutput(BaseModel):
    said: str
    tool: str | None = None
    call_id: str | None = None
    arguments: dict[str, int] | None = None


@activity.defn(name="bare_talking_model_call")
async def bare_talking_model_call(input: TalkInput) -> TalkOutput:
    await asyncio.sleep(WRITE_SECONDS)
    if input.step < input.steps:
        step = input.step + 1
        return TalkOutput(
            said=_say(step), tool="lookup", call_id=f"c{step}", arguments={"key": step}
        )
    return TalkOutput(said="done")


@activity.defn(name="bare_talking_tool_call")
async def bare_talking_tool_call(call_id: str) -> str:
    return RESULT


@workflow.defn(name="BareTalkingWorkflow")
class BareTalkingWorkflow:
    @workflow.run
    async def run(self, steps: int) -> str:
        content, step = "go", 0
        while True:
            reply = await workflow.execute_activity(
                bare_talking_model_call,
                TalkInput(step=step, steps=steps, content=content),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )
            if reply.call_id is None:
                return reply.said
            step += 1
            content = await workflow.execute_activity(
                bare_talking_tool_call, reply.call_id, start_to_close_timeout=ACTIVITY_TIMEOUT
            )


BARE_TALKING_ACTIVITIES: list[Callable[..., Any]] = [
    bare_talking_model_call,
    bare_talking_tool_call,
]


def register_agents(steps: int) -> None:
    registry.register(stream_agent(steps), AgentActivityConfig(), replace=True)


# -- measuring -------------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    label: str
    steps: int
    wall: float
    events: int
    bytes: int
    signals: int
    updates: int
    records: int | None = None


@dataclasses.dataclass
class Latency:
    runs: int
    ttfd: list[float]
    delays: list[float]


@dataclasses.dataclass
class StreamReport:
    steps: int
    rows: list[Row]
    latency: Latency | None
    started: dt.datetime
    elapsed: float


def _stats(histories: list[WorkflowHistory]) -> tuple[int, int, int, int]:
    events = [e for h in histories for e in h.events]
    size = sum(e.ByteSize() for e in events)
    signals = sum(1 for e in events if e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    updates = sum(
        1 for e in events if e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )
    return len(events), size, signals, updates


async def _chain(client: Client, handle: WorkflowHandle[Any, Any]) -> list[WorkflowHistory]:
    histories = []
    run_id = handle.first_execution_run_id or handle.run_id
    while True:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return histories
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def _timed(
    client: Client,
    label: str,
    steps: int,
    start: Callable[[], Awaitable[WorkflowHandle[Any, Any]]],
    read: Callable[[WorkflowHandle[Any, Any]], Coroutine[Any, Any, int]] | None = None,
) -> Row:
    began = time.perf_counter()
    handle = await start()
    reader = asyncio.create_task(read(handle)) if read is not None else None
    await handle.result()
    wall = time.perf_counter() - began
    records = await reader if reader is not None else None
    events, size, signals, updates = _stats(await _chain(client, handle))
    return Row(label, steps, wall, events, size, signals, updates, records)


async def measure(
    client: Client, task_queue: str, steps: int, *, latency_runs: int, log: Callable[[str], None]
) -> StreamReport:
    """The rows at `steps` and the latency runs, on the benchmark's worker (which must host
    `BareTalkingWorkflow` and its activities)."""
    started = dt.datetime.now(dt.UTC)
    began = time.perf_counter()
    register_agents(steps)
    agents = AgentClient(client, task_queue=task_queue)

    def start_a(**fields: Any) -> Callable[[], Awaitable[WorkflowHandle[Any, Any]]]:
        async def start() -> WorkflowHandle[Any, Any]:
            run = await agents.start(agent_name(steps), "go", **fields)
            return run.handle

        return start

    async def start_b() -> WorkflowHandle[Any, Any]:
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            BareTalkingWorkflow.run,
            steps,
            id=f"bench-talk-{steps}-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        return handle

    async def follow(handle: WorkflowHandle[Any, Any]) -> int:
        return len([r async for r in agents.get(handle.id).stream()])

    async def follow_plain(handle: WorkflowHandle[Any, Any]) -> int:
        stream = WorkflowStreamClient.create(client, handle.id)
        return len([item async for item in stream.subscribe(["events"])])

    plan: list[tuple[str, Callable[[], Awaitable[Row]]]] = [
        (
            "A streaming, 1 live subscriber (AgentRunHandle.stream)",
            lambda: _timed(client, "A streaming + stream()", steps, start_a(), follow),
        ),
        (
            "A streaming off",
            lambda: _timed(client, "A streaming off", steps, start_a(stream_deltas=False)),
        ),
        ("B bare", lambda: _timed(client, "B bare", steps, start_b)),
        (
            "A streaming, 1 plain Workflow Streams subscriber",
            lambda: _timed(client, "A streaming + subscribe()", steps, start_a(), follow_plain),
        ),
    ]
    rows = []
    for label, run in plan:
        row = await run()
        log(
            f"  streaming k={steps} {label}: {row.wall:.1f} s, {row.events} events, "
            f"{row.bytes:,} bytes, {row.signals} signals, {row.updates} updates"
        )
        rows.append(row)
    latency = await _latency(client, task_queue, latency_runs, log) if latency_runs else None
    return StreamReport(steps, rows, latency, started, time.perf_counter() - began)


async def _latency(
    client: Client, task_queue: str, runs: int, log: Callable[[str], None]
) -> Latency:
    from tests.support.openai_server import FakeOpenAIServer, TextReply

    text = " ".join(f"token{n}" for n in range(40))
    name = f"bench-openai-stream-{uuid.uuid4().hex[:6]}"
    agents = AgentClient(client, task_queue=task_queue)
    ttfd: list[float] = []
    delays: list[float] = []
    with FakeOpenAIServer(api_key="sk-bench") as server:
        model = OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key="sk-bench", stream=True
        )
        registry.register(AgentBuilder(model).name(name).build(), replace=True)
        for _ in range(runs):
            before = len(server.chunk_times)
            server.enqueue(TextReply(text, chunk_chars=8, chunk_delay=0.02))
            run = await agents.start(name, "write")
            received: list[tuple[float, AgentStreamRecord]] = [
                (time.time(), r) async for r in run.stream()
            ]
            chunks = _content_chunks(server.chunk_times[before:])
            deltas = [(at, r) for at, r in received if r.kind == "model_delta"]
            ttfd.append(deltas[0][0] - chunks[0][0])
            shown = 0
            for at, record in deltas:
                shown += len(record.data["text"])
                completed = next(t for t, length in chunks if length >= shown)
                delays.append(at - completed)
    log(f"  time to first delta: median {statistics.median(ttfd) * 1e3:.0f} ms over {runs} runs")
    return Latency(runs, ttfd, delays)


def _content_chunks(events: list[tuple[float, str]]) -> list[tuple[float, int]]:
    """(time written, characters of content written so far) for each content chunk."""
    out: list[tuple[float, int]] = []
    written = 0
    for at, event in events:
        if not event.startswith("{"):
            continue
        choices = json.loads(event)["choices"]
        piece = choices[0]["delta"].get("content") if choices else None
        if piece:
            written += len(piece)
            out.append((at, written))
    return out


# -- the report ------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def render(report: StreamReport, command: str) -> list[str]:
    k = report.steps
    rows = {row.label: row for row in report.rows}
    off = rows["A streaming off"]
    bare = rows["B bare"]
    lines = [
        "",
        f"## The live event stream at k = {k}",
        "",
        f"Command: `{command}`. Each step the model writes a {len(_say(1))}-character sentence "
        f"for {WRITE_SECONDS * 1e3:.0f} ms ({CHUNK_CHARS}-character chunks) before it calls a "
        "tool; without streaming the same response comes after the same time. One run each, "
        "on the benchmark's worker and dev server. Bytes and events are summed over the "
        "continue-as-new chain; signals are the `model_deltas` batches, updates the plain "
        "subscriber's polls.",
        "",
        "| run | ms/step | events/step | bytes/step | bytes vs off | bytes vs B | signals "
        "| updates | records read |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report.rows:
        lines.append(
            f"| {row.label} | {row.wall / k * 1e3:.0f} | {row.events / k:.1f} | "
            f"{row.bytes / k:,.0f} | {row.bytes / off.bytes:.2f} | {row.bytes / bare.bytes:.2f} | "
            f"{row.signals} | {row.updates} | "
            f"{row.records if row.records is not None else '-'} |"
        )
    live = rows["A streaming + stream()"]
    lines += [
        "",
        f"Streaming on with one live subscriber: history {live.bytes / off.bytes:.2f}x the "
        f"same run with streaming off (target: at most 1.5x), "
        f"{(live.bytes - off.bytes) / k:,.0f} bytes and "
        f"{(live.events - off.events) / k:.1f} events more per step, all of them the deltas' "
        "signals and their workflow tasks; `AgentRunHandle.stream()` reads with queries, "
        "which history does not record, so more readers add nothing. A plain "
        "`WorkflowStreamClient.subscribe()` polls with updates: each one is recorded.",
    ]
    latency = report.latency
    if latency is not None:
        lines += [
            "",
            f"Latency, `OpenAIChatModel(stream=True)` against the fake server streaming 40 "
            f"chunks 20 ms apart over HTTP, {latency.runs} runs, a subscriber on "
            "`AgentRunHandle.stream()` (poll interval 100 ms), wall clocks of one machine:",
            "",
            "| | median ms | p95 ms | max ms | samples |",
            "| --- | ---: | ---: | ---: | ---: |",
            _latency_row("first token at the server → first delta at the client", latency.ttfd),
            _latency_row(
                "a delta record: the chunk that completed it → the client", latency.delays
            ),
        ]
    return lines


def _latency_row(label: str, values: list[float]) -> str:
    return (
        f"| {label} | {statistics.median(values) * 1e3:.0f} | {_pct(values, 0.95) * 1e3:.0f} | "
        f"{max(values) * 1e3:.0f} | {len(values)} |"
    )
