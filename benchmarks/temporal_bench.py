"""AgentWorkflow against a bare hand-written agent workflow, on one Temporal dev server.

    python -m benchmarks.temporal_bench [--ks 20,100,500] [--repeats N]
        [--throughput-runs 100] [--throughput-steps 10] [--throughput-rounds 2]
        [--resume-runs 10] [--stream-k 100] [--stream-latency-runs 10]
        [--results benchmarks/RESULTS.md]
    python -m benchmarks.temporal_bench --streaming-only   # just the streaming rows

Starts its own dev server (temporary SQLite file, free port, headless) and one in-process
worker that hosts both workflows, then alternates runs of

- A: `AgentWorkflow` with a `TestModel` agent scripting k tool-call steps and a final text
  (per step one `model_request` and one `tool_call` activity; per run one
  `prepare_model_request` and one `validate_output`), and
- B: `BareAgentWorkflow` below: per step a "model call" activity (it receives the previous
  tool result, as a real model call must, and returns a small tool-call description) and a
  "tool call" activity; nothing else.

Both tools return the same 250-byte string. It reports wall time per step, history events
and bytes (summed over a continue-as-new chain), throughput of concurrent runs and resume
latency, prints a Markdown report and writes it to `benchmarks/RESULTS.md`. The diagnosis
section splits the history bytes by event type, payload and JSON key, and the time per step
into workflow-task and activity phases (from the server's event timestamps) and process CPU,
plus the workflow code's own cost from replaying the histories (the slope between two k).
The streaming rows (`benchmarks/stream_bench.py`) measure the live event stream: the same
run streaming with one subscriber, not streaming, and a bare loop, plus time to first delta.
The default run takes about 6-7 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import temporalio
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import History, HistoryEvent
    from temporalio.client import Client, WorkflowHandle, WorkflowHistory
    from temporalio.worker import Replayer, Worker

    from benchmarks import stream_bench
    from durable_agent import (
        AgentBuilder,
        AgentExecutionNode,
        ModelResponse,
        TestModel,
        TextPart,
        ToolCallPart,
        UsageLimits,
    )
    from durable_agent.agent import Agent
    from durable_agent.logs import configure_logging
    from durable_agent.temporal import (
        AgentWorkflow,
        AgentWorkflowInput,
        DurableAgentPlugin,
        ResumeSignal,
    )
    from durable_agent.temporal.compaction.caches import history_cache
    from durable_agent.temporal.devserver import DevServer
    from durable_agent.temporal.registry import registry

TOOL_RESULT = "x" * 250
"""What both tools return: 250 bytes."""

ACTIVITY_TIMEOUT = dt.timedelta(seconds=120)
MAX_CONCURRENT_ACTIVITIES = 100
"""The SDK's default, set explicitly; one worker hosts A and B, so both get the same slots."""
MAX_CONCURRENT_WORKFLOW_TASKS = 100
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
STREAMING_RESULTS_FILE = Path(__file__).with_name("RESULTS-streaming.md")
COMMAND = "python -m benchmarks.temporal_bench"

# -- B: the bare workflow -----------------------------------------------------------------


class BareStart(BaseModel):
    prompt: str
    steps: int
    suspend_before_model: bool = False


class BareModelInput(BaseModel):
    step: int
    steps: int
    """Script length: stands in for the model deciding when it is done."""
    content: str
    """The prompt on the first call, then the previous tool result."""


class BareModelOutput(BaseModel):
    tool: str | None = None
    call_id: str | None = None
    arguments: dict[str, int] | None = None
    text: str | None = None


class BareToolInput(BaseModel):
    tool: str
    call_id: str
    arguments: dict[str, int]


class BareStatus(BaseModel):
    waiting: bool
    step: int


@activity.defn(name="bare_model_call")
async def bare_model_call(input: BareModelInput) -> BareModelOutput:
    if input.step < input.steps:
        return BareModelOutput(
            tool="lookup", call_id=f"c{input.step}", arguments={"key": input.step}
        )
    return BareModelOutput(text="done")


@activity.defn(name="bare_tool_call")
async def bare_tool_call(input: BareToolInput) -> str:
    return TOOL_RESULT


@workflow.defn(name="BareAgentWorkflow")
class BareAgentWorkflow:
    """A minimal hand-written agent loop: model call, tool call, repeat."""

    def __init__(self) -> None:
        self._waiting = False
        self._resumed = False
        self._step = 0

    @workflow.run
    async def run(self, input: BareStart) -> str:
        content = input.prompt
        while True:
            if input.suspend_before_model:
                self._waiting = True
                await workflow.wait_condition(lambda: self._resumed)
                self._waiting = self._resumed = False
            reply = await workflow.execute_activity(
                bare_model_call,
                BareModelInput(step=self._step, steps=input.steps, content=content),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )
            if reply.tool is None or reply.call_id is None:
                return reply.text or ""
            self._step += 1
            content = await workflow.execute_activity(
                bare_tool_call,
                BareToolInput(
                    tool=reply.tool, call_id=reply.call_id, arguments=reply.arguments or {}
                ),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )

    @workflow.signal
    def resume(self) -> None:
        self._resumed = True

    @workflow.query
    def status(self) -> BareStatus:
        return BareStatus(waiting=self._waiting, step=self._step)


BARE_ACTIVITIES: list[Callable[..., Any]] = [bare_model_call, bare_tool_call]

# -- A: the agent -------------------------------------------------------------------------


async def lookup(key: int) -> str:
    """Looks a key up.

    Args:
        key: the key
    """
    return TOOL_RESULT


def agent_name(steps: int) -> str:
    return f"bench-{steps}-steps"


def lookup_script(steps: int) -> list[ModelResponse]:
    """The model's side of a k-step run: a `lookup` call per step (the final text apart)."""
    return [
        ModelResponse(parts=[ToolCallPart(id=f"c{i}", name="lookup", arguments={"key": i})])
        for i in range(steps)
    ]


def bench_agent(steps: int) -> Agent:
    script = [*lookup_script(steps), ModelResponse(parts=[TextPart(text="done")])]
    return (
        AgentBuilder(TestModel.with_responses(script))
        .name(agent_name(steps))
        .tool(lookup)
        .usage_limits(UsageLimits(request_limit=None))
        .build()
    )


# -- history analysis ---------------------------------------------------------------------

E = EventType


def _ns(event: HistoryEvent) -> int:
    return event.event_time.ToNanoseconds()


@dataclasses.dataclass
class Category:
    count: int = 0
    event_bytes: int = 0
    payload_bytes: int = 0
    """Input (scheduled, started) or result (completed) payloads, plus user metadata."""


@dataclasses.dataclass
class HistoryStats:
    events: int
    bytes: int
    categories: dict[str, Category]
    workflow_tasks: int
    wft_queue_ns: int
    """Workflow task scheduled -> started, summed."""
    wft_run_ns: int
    """Workflow task started -> completed (the worker processing an activation), summed."""
    activity_queue_ns: int
    activity_run_ns: int
    span_ns: int
    """First to last event, summed over the runs of a continue-as-new chain."""
    runs: int = 1
    """Workflow runs: more than one when the workflow continued as new."""
    max_run_bytes: int = 0
    """The largest single run's history, which is what Temporal's limits apply to."""

    @classmethod
    def of_chain(cls, histories: Sequence[WorkflowHistory]) -> HistoryStats:
        parts = [cls.of(h.events) for h in histories]
        categories: dict[str, Category] = {}
        for part in parts:
            for name, c in part.categories.items():
                total = categories.setdefault(name, Category())
                total.count += c.count
                total.event_bytes += c.event_bytes
                total.payload_bytes += c.payload_bytes
        return cls(
            events=sum(p.events for p in parts),
            bytes=sum(p.bytes for p in parts),
            categories=categories,
            workflow_tasks=sum(p.workflow_tasks for p in parts),
            wft_queue_ns=sum(p.wft_queue_ns for p in parts),
            wft_run_ns=sum(p.wft_run_ns for p in parts),
            activity_queue_ns=sum(p.activity_queue_ns for p in parts),
            activity_run_ns=sum(p.activity_run_ns for p in parts),
            span_ns=sum(p.span_ns for p in parts),
            runs=len(parts),
            max_run_bytes=max(p.bytes for p in parts),
        )

    @classmethod
    def of(cls, events: Sequence[HistoryEvent]) -> HistoryStats:
        categories: dict[str, Category] = {}
        activity_types: dict[int, str] = {}
        by_id = {e.event_id: e for e in events}
        wft_queue = wft_run = act_queue = act_run = workflow_tasks = 0
        for event in events:
            kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
            payload = event.user_metadata.ByteSize() if event.HasField("user_metadata") else 0
            if event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                activity_types[event.event_id] = attrs.activity_type.name
                kind += f" {attrs.activity_type.name}"
                payload += attrs.input.ByteSize()
            elif event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                kind += f" {activity_types.get(started.scheduled_event_id, '?')}"
                act_queue += _ns(event) - _ns(by_id[started.scheduled_event_id])
            elif event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                kind += f" {activity_types.get(done.scheduled_event_id, '?')}"
                payload += done.result.ByteSize()
                act_run += _ns(event) - _ns(by_id[done.started_event_id])
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                payload += event.workflow_execution_started_event_attributes.input.ByteSize()
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                payload += event.workflow_execution_completed_event_attributes.result.ByteSize()
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs_can = event.workflow_execution_continued_as_new_event_attributes
                payload += attrs_can.input.ByteSize()
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                payload += event.workflow_execution_signaled_event_attributes.input.ByteSize()
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                wft_started = event.workflow_task_started_event_attributes
                wft_queue += _ns(event) - _ns(by_id[wft_started.scheduled_event_id])
            elif event.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                workflow_tasks += 1
                wft_done = event.workflow_task_completed_event_attributes
                wft_run += _ns(event) - _ns(by_id[wft_done.started_event_id])
            category = categories.setdefault(kind, Category())
            category.count += 1
            category.event_bytes += event.ByteSize()
            category.payload_bytes += payload
        size = History(events=events).ByteSize()
        return cls(
            events=len(events),
            bytes=size,
            categories=categories,
            workflow_tasks=workflow_tasks,
            wft_queue_ns=wft_queue,
            wft_run_ns=wft_run,
            activity_queue_ns=act_queue,
            activity_run_ns=act_run,
            span_ns=_ns(events[-1]) - _ns(events[0]),
            max_run_bytes=size,
        )


def _leaf_bytes(value: Any, key: str, out: Counter[str]) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            _leaf_bytes(item, name, out)
    elif isinstance(value, list):
        for item in value:
            _leaf_bytes(item, key, out)
    else:
        out[key] += len(json.dumps({key: value}, separators=(",", ":"))) - 2


def payload_key_bytes(events: Sequence[HistoryEvent]) -> Counter[str]:
    """JSON bytes of activity inputs and results by leaf key (`"key":value`), summed."""
    out: Counter[str] = Counter()
    for event in events:
        if event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
        elif event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads = event.activity_task_completed_event_attributes.result.payloads
        else:
            continue
        for payload in payloads:
            _leaf_bytes(json.loads(payload.data), "(value)", out)
    return out


def resume_latencies(events: Sequence[HistoryEvent], activity_type: str) -> list[float]:
    """Seconds from each `resume` signal to the next scheduling of `activity_type`."""
    out: list[float] = []
    signaled: int | None = None
    for event in events:
        if event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if event.workflow_execution_signaled_event_attributes.signal_name == "resume":
                signaled = _ns(event)
        elif (
            event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and signaled is not None
            and event.activity_task_scheduled_event_attributes.activity_type.name == activity_type
        ):
            out.append((_ns(event) - signaled) / 1e9)
            signaled = None
    return out


# -- runs ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    wall: float
    worker_cpu: float
    """CPU seconds of this process (worker, client, Temporal core threads) during the run."""
    server_cpu: float | None
    """CPU seconds of the dev server process during the run (Linux only)."""
    histories: list[WorkflowHistory]
    """One per workflow run, in order (several after continue-as-new)."""
    stats: HistoryStats

    @property
    def events(self) -> list[HistoryEvent]:
        return [e for h in self.histories for e in h.events]


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of another process, from /proc (None elsewhere)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Handle = WorkflowHandle[Any, Any]


class Bench:
    def __init__(self, client: Client, task_queue: str, server_pid: int | None) -> None:
        self.client = client
        self.task_queue = task_queue
        self.server_pid = server_pid

    def _id(self, kind: str, steps: int) -> str:
        return f"bench-{kind}-{steps}-{uuid.uuid4().hex[:10]}"

    async def start_a(self, steps: int, *, suspend: bool = False) -> Handle:
        handle: Handle = await self.client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(
                agent=agent_name(steps),
                prompt="go",
                suspend_at=[AgentExecutionNode.BEFORE_MODEL_REQUEST] if suspend else [],
            ),
            id=self._id("a", steps),
            task_queue=self.task_queue,
        )
        return handle

    async def start_b(self, steps: int, *, suspend: bool = False) -> Handle:
        handle: Handle = await self.client.start_workflow(
            BareAgentWorkflow.run,
            BareStart(prompt="go", steps=steps, suspend_before_model=suspend),
            id=self._id("b", steps),
            task_queue=self.task_queue,
        )
        return handle

    async def timed(self, start: Callable[[int], Awaitable[Handle]], steps: int) -> Run:
        server_before = process_cpu(self.server_pid)
        cpu_before = time.process_time()
        began = time.perf_counter()
        handle = await start(steps)
        await handle.result()
        wall = time.perf_counter() - began
        worker_cpu = time.process_time() - cpu_before
        server_after = process_cpu(self.server_pid)
        server_cpu = (
            server_after - server_before
            if server_before is not None and server_after is not None
            else None
        )
        histories = await self.chain(handle)
        return Run(wall, worker_cpu, server_cpu, histories, HistoryStats.of_chain(histories))

    async def chain(self, handle: Handle) -> list[WorkflowHistory]:
        """The histories of every run the workflow went through, following continue-as-new."""
        histories: list[WorkflowHistory] = []
        run_id = handle.first_execution_run_id or handle.run_id
        while True:
            run = self.client.get_workflow_handle(handle.id, run_id=run_id)
            history = await run.fetch_history()
            histories.append(history)
            last = history.events[-1]
            if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                return histories
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id

    async def throughput(
        self, start: Callable[[int], Awaitable[Handle]], runs: int, steps: int
    ) -> Batch:
        server_before = process_cpu(self.server_pid)
        cpu_before = time.process_time()
        began = time.perf_counter()
        handles = await asyncio.gather(*(start(steps) for _ in range(runs)))
        await asyncio.gather(*(h.result() for h in handles))
        wall = time.perf_counter() - began
        worker_cpu = time.process_time() - cpu_before
        server_after = process_cpu(self.server_pid)
        histories = [h for handle in handles for h in await self.chain(handle)]
        return Batch(
            wall=wall,
            worker_cpu=worker_cpu,
            server_cpu=server_after - server_before
            if server_before is not None and server_after is not None
            else None,
            workflow_tasks=sum(
                1
                for h in histories
                for e in h.events
                if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            ),
            bytes=sum(History(events=h.events).ByteSize() for h in histories),
        )

    async def resume_a(self, steps: int) -> list[float]:
        handle = await self.start_a(steps, suspend=True)
        for step in range(steps + 1):

            async def suspended(step: int = step) -> bool:
                view = await handle.query(AgentWorkflow.status)
                return view.status == "waiting" and view.run_step == step

            await _poll(suspended)
            await handle.signal(AgentWorkflow.resume, ResumeSignal())
        await handle.result()
        events = [e for h in await self.chain(handle) for e in h.events]
        return resume_latencies(events, "model_request")

    async def resume_b(self, steps: int) -> list[float]:
        handle = await self.start_b(steps, suspend=True)
        for step in range(steps + 1):

            async def suspended(step: int = step) -> bool:
                view = await handle.query(BareAgentWorkflow.status)
                return view.waiting and view.step == step

            await _poll(suspended)
            await handle.signal(BareAgentWorkflow.resume)
        await handle.result()
        history = await handle.fetch_history()
        return resume_latencies(history.events, "bare_model_call")


async def _poll(done: Callable[[], Awaitable[bool]], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await done():
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not reach the expected state")
        await asyncio.sleep(0.05)


async def replay_seconds(histories: Sequence[WorkflowHistory], repeats: int = 3) -> float:
    """Time to replay every run's history on a fresh replayer (median of `repeats` per run,
    summed): the workflow code's own cost, without the server."""
    total = 0.0
    for history in histories:
        timings = []
        for _ in range(repeats):
            # The plugin adds AgentWorkflow (and the sandbox runner) as on the worker.
            replayer = Replayer(workflows=[BareAgentWorkflow], plugins=[DurableAgentPlugin()])
            began = time.perf_counter()
            await replayer.replay_workflow(history)
            timings.append(time.perf_counter() - began)
        total += statistics.median(timings)
    return total


# -- the report ---------------------------------------------------------------------------


@dataclasses.dataclass
class StepResult:
    steps: int
    a: list[Run]
    b: list[Run]

    @staticmethod
    def _median_run(runs: list[Run]) -> Run:
        return sorted(runs, key=lambda r: r.wall)[(len(runs) - 1) // 2]

    @property
    def a_ms(self) -> float:
        return statistics.median(r.wall for r in self.a) / self.steps * 1e3

    @property
    def b_ms(self) -> float:
        return statistics.median(r.wall for r in self.b) / self.steps * 1e3

    @property
    def a_run(self) -> Run:
        return self._median_run(self.a)

    @property
    def b_run(self) -> Run:
        return self._median_run(self.b)


@dataclasses.dataclass
class Batch:
    """Concurrent runs of one kind, timed together."""

    wall: float
    worker_cpu: float
    server_cpu: float | None
    workflow_tasks: int
    bytes: int


@dataclasses.dataclass
class Throughput:
    runs: int
    steps: int
    a_rounds: list[Batch]
    b_rounds: list[Batch]
    cache_hits: int
    cache_misses: int

    @staticmethod
    def _median(batches: list[Batch]) -> Batch:
        servers = [b.server_cpu for b in batches if b.server_cpu is not None]
        return Batch(
            wall=statistics.median(b.wall for b in batches),
            worker_cpu=statistics.median(b.worker_cpu for b in batches),
            server_cpu=statistics.median(servers) if len(servers) == len(batches) else None,
            workflow_tasks=round(statistics.median(b.workflow_tasks for b in batches)),
            bytes=round(statistics.median(b.bytes for b in batches)),
        )

    @property
    def a(self) -> Batch:
        return self._median(self.a_rounds)

    @property
    def b(self) -> Batch:
        return self._median(self.b_rounds)


@dataclasses.dataclass
class Report:
    args: argparse.Namespace
    started: dt.datetime
    steps: list[StepResult]
    throughput: Throughput | None
    resume_a: list[float]
    resume_b: list[float]
    replay: dict[str, float]
    elapsed: float = 0.0
    load: tuple[str, str] = ("n/a", "n/a")
    streaming: stream_bench.StreamReport | None = None


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def _yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(report: Report) -> str:
    args = report.args
    lines = [
        "# Temporal benchmark: `AgentWorkflow` (A) vs a bare agent workflow (B)",
        "",
        f"Command: `{COMMAND}{_flags(args)}`  ",
        f"Date: {report.started:%Y-%m-%d %H:%M} UTC; took {report.elapsed:.0f} s  ",
        f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, temporalio {temporalio.__version__}; "
        "`temporal server start-dev` (SQLite file), one in-process worker hosting A and B "
        f"(max_concurrent_activities={MAX_CONCURRENT_ACTIVITIES}, "
        f"max_concurrent_workflow_tasks={MAX_CONCURRENT_WORKFLOW_TASKS}, "
        "sandboxed runner from `DurableAgentPlugin`, pydantic converter for both). "
        f"Worker logs at WARNING. Load average at start/end: {report.load[0]} / "
        f"{report.load[1]} (other jobs share the machine: compare ratios, not absolutes).",
        "",
        "A = `AgentWorkflow`, `TestModel` scripting k tool calls then a text; per step one "
        "`model_request` + one `tool_call` activity, per run one `prepare_model_request` + one "
        "`validate_output`. B = `BareAgentWorkflow` (in the benchmark module): per step one "
        "model-call activity (gets the previous tool result) + one tool-call activity. Both "
        "tools return 250 bytes. Runs alternate A/B in one process against one server; "
        "times are medians over the repeats, history figures are from the median-time run. "
        "History bytes = protobuf size of the history events as fetched from the server.",
        "",
        "## Per step",
        "",
        "| k | repeats | A ms/step | B ms/step | A/B time | A events | B events | A/B events "
        "| A bytes | B bytes | A/B bytes | A bytes/step | B bytes/step | A workflow runs "
        "| A largest run bytes |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: |",
    ]
    for r in report.steps:
        a, b = r.a_run.stats, r.b_run.stats
        lines.append(
            f"| {r.steps} | {len(r.a)}+{len(r.b)} | {r.a_ms:.1f} | {r.b_ms:.1f} | "
            f"{_ratio(r.a_ms, r.b_ms)} | {a.events:,} | {b.events:,} | "
            f"{_ratio(a.events, b.events)} | {a.bytes:,} | {b.bytes:,} | "
            f"{_ratio(a.bytes, b.bytes)} | {a.bytes / r.steps:,.0f} | {b.bytes / r.steps:,.0f} | "
            f"{a.runs} | {a.max_run_bytes:,} |"
        )
    lines += [
        "",
        "Events and bytes are summed over every run of a workflow: `AgentWorkflow` continues "
        "as new when the server suggests it (or after `continue_as_new_after_steps`), so "
        "*A workflow runs* > 1 means a continue-as-new chain; B never continues as new.",
    ]
    by_k = {r.steps: r for r in report.steps}
    growth: float | None = None
    if 100 in by_k and 500 in by_k:
        a100, a500 = by_k[100].a_run.stats.bytes, by_k[500].a_run.stats.bytes
        b100, b500 = by_k[100].b_run.stats.bytes, by_k[500].b_run.stats.bytes
        growth = a500 / a100
        lines += [
            "",
            f"History growth, bytes(k=500)/bytes(k=100): A {growth:.2f}, B {b500 / b100:.2f} "
            "(5.00 = exactly linear). Marginal bytes per step between k=100 and k=500: "
            f"A {(a500 - a100) / 400:,.0f}, B {(b500 - b100) / 400:,.0f}.",
        ]
    tp = report.throughput
    if tp is not None:
        total = tp.runs * tp.steps

        def row(label: str, x: Batch) -> str:
            server = f"{x.server_cpu / total * 1e3:.1f}" if x.server_cpu is not None else "n/a"
            return (
                f"| {label} | {x.wall:.1f} | {tp.runs / x.wall:.2f} | {total / x.wall:.1f} | "
                f"{x.worker_cpu / total * 1e3:.1f} | {server} | "
                f"{x.workflow_tasks / total:.2f} | {x.bytes / total:,.0f} |"
            )

        ta, tb = tp.a, tp.b
        server_ratio = (
            _ratio(ta.server_cpu, tb.server_cpu)
            if ta.server_cpu is not None and tb.server_cpu is not None
            else "n/a"
        )
        lines += [
            "",
            f"## Throughput: {tp.runs} concurrent {tp.steps}-step runs on one worker",
            "",
            f"{len(tp.a_rounds)} round(s) per kind, alternating (A B, then B A); in each, all "
            "runs start at once and the wall time runs from the first start to the last "
            "result. Medians over the rounds; CPU per step. Wall per round: A "
            + ", ".join(f"{x.wall:.1f}" for x in tp.a_rounds)
            + " s; B "
            + ", ".join(f"{x.wall:.1f}" for x in tp.b_rounds)
            + " s.",
            "",
            "| | wall s | runs/s | steps/s | worker CPU ms/step | server CPU ms/step "
            "| workflow tasks/step | history bytes/step |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            row("A", ta),
            row("B", tb),
            f"| A/B | {_ratio(ta.wall, tb.wall)} | {_ratio(tb.wall, ta.wall)} | "
            f"{_ratio(tb.wall, ta.wall)} | {_ratio(ta.worker_cpu, tb.worker_cpu)} | "
            f"{server_ratio} | {_ratio(ta.workflow_tasks, tb.workflow_tasks)} | "
            f"{_ratio(ta.bytes, tb.bytes)} |",
            "",
            f"A's model-request history cache during the batches: {tp.cache_hits} hits, "
            f"{tp.cache_misses} misses (a miss reads the prefix back by query).",
        ]
    if report.resume_a:
        lines += [
            "",
            "## Resume latency",
            "",
            f"{args.resume_runs} runs of a 1-tool-step agent with "
            "`suspend_at=[before_model_request]` (2 suspensions per run). Time from the "
            "`resume` signal (`WorkflowExecutionSignaled`) to the model activity's "
            "`ActivityTaskScheduled`, both server timestamps. B waits on a signal the same way.",
            "",
            "| | median ms | min ms | max ms | samples |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for label, values in (("A", report.resume_a), ("B", report.resume_b)):
            if values:
                lines.append(
                    f"| {label} | {statistics.median(values) * 1e3:.1f} | "
                    f"{min(values) * 1e3:.1f} | {max(values) * 1e3:.1f} | {len(values)} |"
                )
    if report.streaming is not None:
        lines += stream_bench.render(report.streaming, f"{COMMAND}{_flags(args)}")
    lines += _targets(by_k, growth)
    lines += _diagnosis(report, by_k)
    return "\n".join(lines) + "\n"


def render_streaming(report: Report) -> str:
    """`--streaming-only`: the streaming section alone."""
    assert report.streaming is not None
    head = [
        "# Temporal benchmark: the live event stream",
        "",
        f"Date: {report.started:%Y-%m-%d %H:%M} UTC; took {report.elapsed:.0f} s; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, temporalio "
        f"{temporalio.__version__}; load average at start/end: {report.load[0]} / "
        f"{report.load[1]} (shared machine: compare ratios).",
    ]
    body = stream_bench.render(report.streaming, f"{COMMAND}{_flags(report.args)}")
    return "\n".join(head + body) + "\n"


def _flags(args: argparse.Namespace) -> str:
    flags = []
    if args.ks != DEFAULT_KS:
        flags.append(f"--ks {args.ks}")
    if args.repeats is not None:
        flags.append(f"--repeats {args.repeats}")
    for name, default in (
        ("throughput_runs", 100),
        ("throughput_steps", 10),
        ("throughput_rounds", 2),
        ("resume_runs", 10),
        ("stream_k", 100),
        ("stream_latency_runs", 10),
    ):
        if getattr(args, name) != default:
            flags.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    if args.streaming_only:
        flags.append("--streaming-only")
    return "".join(f" {f}" for f in flags)


def _targets(by_k: dict[int, StepResult], growth: float | None) -> list[str]:
    lines = ["", "## Acceptance targets", "", "| target | value | |", "| --- | ---: | --- |"]
    if 100 in by_k:
        r = by_k[100]
        bytes_ratio = r.a_run.stats.bytes / r.b_run.stats.bytes
        time_ratio = r.a_ms / r.b_ms
        lines.append(
            f"| history bytes at k=100 ≤ 2x bare | {bytes_ratio:.2f}x | {_yes(bytes_ratio <= 2)} |"
        )
        lines.append(
            f"| wall time per step at k=100 ≤ 1.1x bare | {time_ratio:.2f}x | "
            f"{_yes(time_ratio <= 1.1)} |"
        )
    if growth is not None:
        lines.append(
            f"| A bytes(k=500)/bytes(k=100) ≤ 5.5 | {growth:.2f} | {_yes(growth <= 5.5)} |"
        )
    return lines


def _diagnosis(report: Report, by_k: dict[int, StepResult]) -> list[str]:
    if not by_k:
        return []
    k = 100 if 100 in by_k else max(by_k)
    r = by_k[k]
    a, b = r.a_run.stats, r.b_run.stats
    lines = [
        "",
        f"## Diagnosis (k={k}, the median-time run of each)",
        "",
        "Where the history bytes go, per step (event bytes include the payload; payload = "
        "activity input or result, workflow input/result, plus user metadata such as the "
        "activity summary):",
        "",
        "| event | A count | A bytes/step | A payload/step | B count | B bytes/step "
        "| B payload/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    names = sorted(
        set(a.categories) | set(b.categories),
        key=lambda n: (
            -(
                a.categories.get(n, Category()).event_bytes
                + b.categories.get(n, Category()).event_bytes
            )
        ),
    )
    for name in names:
        ca, cb = a.categories.get(name, Category()), b.categories.get(name, Category())
        lines.append(
            f"| {name} | {ca.count} | {ca.event_bytes / k:,.0f} | {ca.payload_bytes / k:,.0f} | "
            f"{cb.count} | {cb.event_bytes / k:,.0f} | {cb.payload_bytes / k:,.0f} |"
        )
    lines.append(
        f"| **total** | {a.events} | {a.bytes / k:,.0f} | "
        f"{sum(c.payload_bytes for c in a.categories.values()) / k:,.0f} | {b.events} | "
        f"{b.bytes / k:,.0f} | {sum(c.payload_bytes for c in b.categories.values()) / k:,.0f} |"
    )

    key_a = payload_key_bytes(r.a_run.events)
    key_b = payload_key_bytes(r.b_run.events)
    top = [name for name, _ in (key_a + key_b).most_common(14)]
    lines += [
        "",
        'Activity payload JSON by leaf key (bytes of `"key":value`, all inputs and results, '
        "per step; the rest of a payload is structure: braces, commas, key names of objects):",
        "",
        "| key | A bytes/step | B bytes/step |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| `{n}` | {key_a[n] / k:,.0f} | {key_b[n] / k:,.0f} |" for n in top]
    lines.append(
        f"| all leaves | {sum(key_a.values()) / k:,.0f} | {sum(key_b.values()) / k:,.0f} |"
    )

    lines += [
        "",
        "Where the time goes, ms per step, from the server's event timestamps (workflow task "
        "run = started → completed: the task's round trip through the worker, including "
        "the activation; queue = scheduled → started: the server dispatching the task, which "
        "the worker does not control; activities start eagerly, so their queue time is ~0). "
        "CPU rows are process CPU time over the whole run, divided by k:",
        "",
        "| phase | A | B | A - B | A/B |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]

    def row(label: str, av: float, bv: float, digits: int = 2) -> str:
        return (
            f"| {label} | {av:.{digits}f} | {bv:.{digits}f} | {av - bv:+.{digits}f} | "
            f"{_ratio(av, bv)} |"
        )

    ms = 1e6 * k
    lines.append(row("workflow tasks per step", a.workflow_tasks / k, b.workflow_tasks / k))
    for label, av, bv in (
        ("workflow task queue", a.wft_queue_ns, b.wft_queue_ns),
        ("workflow task run", a.wft_run_ns, b.wft_run_ns),
        ("activity queue", a.activity_queue_ns, b.activity_queue_ns),
        ("activity run", a.activity_run_ns, b.activity_run_ns),
        (
            "worker-side phases (task run + activity run)",
            a.wft_run_ns + a.activity_run_ns,
            b.wft_run_ns + b.activity_run_ns,
        ),
        ("first → last event", a.span_ns, b.span_ns),
    ):
        lines.append(row(label, av / ms, bv / ms))
    lines.append(row("client wall time", r.a_run.wall / k * 1e3, r.b_run.wall / k * 1e3))
    a_cpu = statistics.median(x.worker_cpu for x in r.a) / k
    b_cpu = statistics.median(x.worker_cpu for x in r.b) / k
    lines.append(row("worker process CPU (median of runs)", a_cpu * 1e3, b_cpu * 1e3))
    a_srv = [x.server_cpu for x in r.a if x.server_cpu is not None]
    b_srv = [x.server_cpu for x in r.b if x.server_cpu is not None]
    if a_srv and b_srv:
        sa, sb = statistics.median(a_srv) / k, statistics.median(b_srv) / k
        lines.append(row("dev server CPU (median of runs)", sa * 1e3, sb * 1e3))
    if report.replay:
        ra, rb = report.replay["A"], report.replay["B"]
        big, small = int(report.replay["big"]), int(report.replay["small"])
        how = (
            f"slope between the k={small} and k={big} histories"
            if small
            else f"the k={big} history / {big}"
        )
        lines += [
            "",
            "Workflow code alone, replaying the histories with `Replayer` (sandbox and plugin "
            f"as on the worker; median of 3 replays; {how}): A {ra * 1e3:.2f} ms/step, "
            f"B {rb * 1e3:.2f} ms/step ({_ratio(ra, rb)}x).",
        ]
    return lines


# -- main ---------------------------------------------------------------------------------

DEFAULT_KS = "20,100,500"


def _ks(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def repeats_for(steps: int, repeats: int | None) -> int:
    if repeats is not None:
        return repeats
    return 3 if steps < 500 else 1


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _alternate(bench: Bench, steps: int, repeats: int) -> StepResult:
    result = StepResult(steps, [], [])
    for i in range(repeats):
        order = [("A", bench.start_a, result.a), ("B", bench.start_b, result.b)]
        for label, start, runs in order if i % 2 == 0 else reversed(order):
            run = await bench.timed(start, steps)
            runs.append(run)
            _log(
                f"  k={steps} {label} #{i + 1}: {run.wall:.2f} s, {run.wall / steps * 1e3:.1f} "
                f"ms/step, {run.stats.events} events, {run.stats.bytes:,} bytes"
            )
    return result


async def amain(args: argparse.Namespace) -> Report:
    configure_logging("console", level=logging.WARNING)
    started = dt.datetime.now(dt.UTC)
    load_at_start = _load()
    began = time.perf_counter()
    ks = _ks(args.ks)
    for steps in {*ks, 0, 1, 2, args.throughput_steps}:
        registry.register(bench_agent(steps), replace=True)
    directory = Path(tempfile.mkdtemp(prefix="durable-agent-bench-"))
    server = DevServer(directory / "bench.db", port=_free_port(), ui_port=None)
    _log(f"starting the Temporal dev server on {server.address} ({directory})")
    await server.start()
    try:
        client = await Client.connect(server.address, plugins=[DurableAgentPlugin()])
        task_queue = f"bench-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[BareAgentWorkflow, stream_bench.BareTalkingWorkflow],
            activities=[*BARE_ACTIVITIES, *stream_bench.BARE_TALKING_ACTIVITIES],
            max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
            max_concurrent_workflow_tasks=MAX_CONCURRENT_WORKFLOW_TASKS,
        ):
            bench = Bench(client, task_queue, server.process.pid if server.process else None)
            _log("warming up")
            await _alternate(bench, 2, 2)
            streaming = None
            if args.stream_k:
                _log(f"streaming rows at k={args.stream_k}")
                streaming = await stream_bench.measure(
                    client,
                    task_queue,
                    args.stream_k,
                    latency_runs=args.stream_latency_runs,
                    log=_log,
                )
            if args.streaming_only:
                ks = []
            results = []
            for steps in ks:
                results.append(await _alternate(bench, steps, repeats_for(steps, args.repeats)))
            throughput = None
            if args.throughput_runs and args.throughput_rounds and not args.streaming_only:
                _log(f"throughput: {args.throughput_runs} x {args.throughput_steps} steps")
                hits, misses = history_cache.hits, history_cache.misses
                throughput = Throughput(args.throughput_runs, args.throughput_steps, [], [], 0, 0)
                for i in range(args.throughput_rounds):
                    order = [("A", bench.start_a, throughput.a_rounds)]
                    order.append(("B", bench.start_b, throughput.b_rounds))
                    for label, start, rounds in order if i % 2 == 0 else reversed(order):
                        batch = await bench.throughput(
                            start, args.throughput_runs, args.throughput_steps
                        )
                        rounds.append(batch)
                        _log(f"  {label} #{i + 1}: {batch.wall:.1f} s")
                throughput.cache_hits = history_cache.hits - hits
                throughput.cache_misses = history_cache.misses - misses
            resume_a: list[float] = []
            resume_b: list[float] = []
            if args.resume_runs and not args.streaming_only:
                _log(f"resume latency: {args.resume_runs} runs each")
                for _ in range(args.resume_runs):
                    resume_a += await bench.resume_a(1)
                    resume_b += await bench.resume_b(1)
        replay = await _replays(results)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    report = Report(args, started, results, throughput, resume_a, resume_b, replay)
    report.streaming = streaming
    report.elapsed = time.perf_counter() - began
    report.load = (load_at_start, _load())
    return report


async def _replays(results: list[StepResult]) -> dict[str, float]:
    """Workflow-code seconds per step from replays: the slope between two k if there are two."""
    if not results:
        return {}
    by_k = {r.steps: r for r in results}
    big = 100 if 100 in by_k else max(by_k)
    smaller = [k for k in by_k if k <= big - 50]
    small = max(smaller) if smaller else None  # a slope over fewer steps is mostly noise
    _log(f"replaying the k={big} histories" + (f" and k={small}" if small else ""))
    out: dict[str, float] = {}
    for label in ("A", "B"):
        runs = {k: by_k[k].a_run if label == "A" else by_k[k].b_run for k in by_k}
        t_big = await replay_seconds(runs[big].histories)
        if small is None:
            out[label] = t_big / big
        else:
            t_small = await replay_seconds(runs[small].histories)
            out[label] = (t_big - t_small) / (big - small)
    out["big"] = float(big)
    out["small"] = float(small or 0)
    return out


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="AgentWorkflow vs a bare agent workflow on a local Temporal dev server."
    )
    parser.add_argument("--ks", default=DEFAULT_KS, help="steps per run, comma separated")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs of A and of B per k (default: 3 for k < 500, 1 for k >= 500)",
    )
    parser.add_argument("--throughput-runs", type=int, default=100)
    parser.add_argument("--throughput-steps", type=int, default=10)
    parser.add_argument(
        "--throughput-rounds", type=int, default=2, help="batches of A and of B, alternating"
    )
    parser.add_argument("--resume-runs", type=int, default=10)
    parser.add_argument(
        "--stream-k", type=int, default=100, help="steps of the streaming rows (0: skip them)"
    )
    parser.add_argument(
        "--stream-latency-runs", type=int, default=10, help="time-to-first-delta runs"
    )
    parser.add_argument(
        "--streaming-only",
        action="store_true",
        help=f"only the streaming rows, written to {STREAMING_RESULTS_FILE.name}",
    )
    parser.add_argument("--results", type=Path, default=None, help="Markdown output")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.results is None:
        args.results = STREAMING_RESULTS_FILE if args.streaming_only else RESULTS_FILE
    return args


def main(argv: Iterable[str] | None = None) -> None:
    args = parse_args(argv)
    report = asyncio.run(amain(args))
    text = render_streaming(report) if args.streaming_only else render(report)
    print(text)
    args.results.write_text(text)
    _log(f"wrote {args.results}")


if __name__ == "__main__":
    main()
