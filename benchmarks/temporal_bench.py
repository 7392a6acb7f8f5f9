"""AgentWorkflow against a bare hand-written agent workflow, on one Temporal dev server.

    python -m benchmarks.temporal_bench [--ks 20,100,500] [--repeats N]

Starts its own dev server (temporary SQLite file, free port, headless) and one in-process
worker that hosts both workflows, then alternates runs of

- A: `AgentWorkflow` with a `TestModel` agent scripting k tool-call steps and a final text
  (per step one `model_request` and one `tool_call` activity; per run one
  `prepare_model_request` and one `validate_output`), and
- B: `BareAgentWorkflow` below: per step a "model call" activity (it receives the previous
  tool result, as a real model call must, and returns a small tool-call description) and a
  "tool call" activity; nothing else.

Both tools return the same 250-byte string. It reports wall time per step, history events
and bytes, throughput of concurrent runs and resume latency, prints a Markdown report and
writes it to `benchmarks/RESULTS.md`. The diagnosis section splits the history bytes by
event type and payload, and the time per step into workflow-task and activity phases (from
the server's event timestamps), plus the pure workflow-code cost measured by replaying one
history of each kind.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
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

    from activities.registry import registry
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
    from workflows import (
        AgentWorkflow,
        AgentWorkflowInput,
        DurableAgentPlugin,
        ResumeSignal,
    )
    from workflows.devserver import DevServer

TOOL_RESULT = "x" * 250
"""What both tools return: 250 bytes."""

ACTIVITY_TIMEOUT = dt.timedelta(seconds=120)
MAX_CONCURRENT_ACTIVITIES = 100
"""The SDK's default, set explicitly; one worker hosts A and B, so both get the same slots."""
MAX_CONCURRENT_WORKFLOW_TASKS = 100
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
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


BARE_ACTIVITIES = [bare_model_call, bare_tool_call]

# -- A: the agent -------------------------------------------------------------------------


async def lookup(key: int) -> str:
    """Looks a key up.

    Args:
        key: the key
    """
    return TOOL_RESULT


def agent_name(steps: int) -> str:
    return f"bench-{steps}-steps"


def bench_agent(steps: int) -> Agent:
    script = [
        ModelResponse(parts=[ToolCallPart(id=f"c{i}", name="lookup", arguments={"key": i})])
        for i in range(steps)
    ]
    script.append(ModelResponse(parts=[TextPart(text="done")]))
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
        return cls(
            events=len(events),
            bytes=History(events=events).ByteSize(),
            categories=categories,
            workflow_tasks=workflow_tasks,
            wft_queue_ns=wft_queue,
            wft_run_ns=wft_run,
            activity_queue_ns=act_queue,
            activity_run_ns=act_run,
            span_ns=_ns(events[-1]) - _ns(events[0]),
        )


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
    history: WorkflowHistory
    stats: HistoryStats


Handle = WorkflowHandle[Any, Any]


class Bench:
    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

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
        began = time.perf_counter()
        handle = await start(steps)
        await handle.result()
        wall = time.perf_counter() - began
        history = await handle.fetch_history()
        return Run(wall, history, HistoryStats.of(history.events))

    async def throughput(
        self, start: Callable[[int], Awaitable[Handle]], runs: int, steps: int
    ) -> float:
        began = time.perf_counter()
        handles = await asyncio.gather(*(start(steps) for _ in range(runs)))
        await asyncio.gather(*(h.result() for h in handles))
        return time.perf_counter() - began

    async def resume_a(self, steps: int) -> list[float]:
        handle = await self.start_a(steps, suspend=True)
        for step in range(steps + 1):
            await _poll(
                lambda: handle.query(AgentWorkflow.status),
                lambda v, s=step: v.status == "waiting" and v.run_step == s,
            )
            await handle.signal(AgentWorkflow.resume, ResumeSignal())
        await handle.result()
        history = await handle.fetch_history()
        return resume_latencies(history.events, "model_request")

    async def resume_b(self, steps: int) -> list[float]:
        handle = await self.start_b(steps, suspend=True)
        for step in range(steps + 1):
            await _poll(
                lambda: handle.query(BareAgentWorkflow.status),
                lambda v, s=step: v.waiting and v.step == s,
            )
            await handle.signal(BareAgentWorkflow.resume)
        await handle.result()
        history = await handle.fetch_history()
        return resume_latencies(history.events, "bare_model_call")


async def _poll(
    query: Callable[[], Awaitable[Any]], done: Callable[[Any], bool], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if done(await query()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not reach the expected state")
        await asyncio.sleep(0.05)


async def replay_seconds(history: WorkflowHistory, repeats: int = 3) -> float:
    """Median time to replay `history` on a fresh replayer: the workflow code's own cost."""
    timings = []
    for _ in range(repeats):
        # The plugin adds AgentWorkflow (and the sandbox runner) as on the worker.
        replayer = Replayer(workflows=[BareAgentWorkflow], plugins=[DurableAgentPlugin()])
        began = time.perf_counter()
        await replayer.replay_workflow(history)
        timings.append(time.perf_counter() - began)
    return statistics.median(timings)


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
class Throughput:
    runs: int
    steps: int
    a_seconds: float
    b_seconds: float


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


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def _kb(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


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
        "Worker logs at WARNING.",
        "",
        "A = `AgentWorkflow`, `TestModel` scripting k tool calls then a text; per step one "
        "`model_request` + one `tool_call` activity, per run one `prepare_model_request` + one "
        "`validate_output`. B = `BareAgentWorkflow` (in the benchmark module): per step one "
        "model-call activity (gets the previous tool result) + one tool-call activity. Both "
        "tools return 250 bytes. Runs alternate A/B in one process against one server; "
        "times are medians over the repeats, history figures are from the median-time run.",
        "",
        "## Per step",
        "",
        "| k | runs | A ms/step | B ms/step | A/B time | A events | B events | A/B events "
        "| A bytes | B bytes | A/B bytes | A bytes/step | B bytes/step |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for r in report.steps:
        a, b = r.a_run.stats, r.b_run.stats
        lines.append(
            f"| {r.steps} | {len(r.a)}+{len(r.b)} | {r.a_ms:.1f} | {r.b_ms:.1f} | "
            f"{_ratio(r.a_ms, r.b_ms)} | {a.events:,} | {b.events:,} | "
            f"{_ratio(a.events, b.events)} | {a.bytes:,} | {b.bytes:,} | "
            f"{_ratio(a.bytes, b.bytes)} | {a.bytes / r.steps:,.0f} | {b.bytes / r.steps:,.0f} |"
        )
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
        lines += [
            "",
            f"## Throughput: {tp.runs} concurrent {tp.steps}-step runs on one worker",
            "",
            "| | wall s | runs/s | steps/s |",
            "| --- | ---: | ---: | ---: |",
            f"| A | {tp.a_seconds:.1f} | {tp.runs / tp.a_seconds:.1f} | "
            f"{total / tp.a_seconds:.0f} |",
            f"| B | {tp.b_seconds:.1f} | {tp.runs / tp.b_seconds:.1f} | "
            f"{total / tp.b_seconds:.0f} |",
            f"| A/B | {_ratio(tp.a_seconds, tp.b_seconds)} | "
            f"{_ratio(tp.b_seconds, tp.a_seconds)} | {_ratio(tp.b_seconds, tp.a_seconds)} |",
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
    lines += _targets(by_k, growth)
    lines += _diagnosis(report, by_k)
    return "\n".join(lines) + "\n"


def _flags(args: argparse.Namespace) -> str:
    flags = []
    if args.ks != DEFAULT_KS:
        flags.append(f"--ks {args.ks}")
    if args.repeats is not None:
        flags.append(f"--repeats {args.repeats}")
    return "".join(f" {f}" for f in flags)


def _targets(by_k: dict[int, StepResult], growth: float | None) -> list[str]:
    lines = ["", "## Acceptance targets", "", "| target | value | |", "| --- | ---: | --- |"]
    if 100 in by_k:
        r = by_k[100]
        bytes_ratio = r.a_run.stats.bytes / r.b_run.stats.bytes
        time_ratio = r.a_ms / r.b_ms
        lines.append(
            f"| history bytes at k=100 ≤ 2× bare | {bytes_ratio:.2f}× | {_yes(bytes_ratio <= 2)} |"
        )
        lines.append(
            f"| wall time per step at k=100 ≤ 1.1× bare | {time_ratio:.2f}× | "
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

    def per_step(ns: int) -> str:
        return f"{ns / k / 1e6:.2f}"

    lines += [
        "",
        "Where the time goes, ms per step, from the server's event timestamps (workflow task "
        "run = started → completed, i.e. the worker processing one activation; queue = "
        "scheduled → started):",
        "",
        "| phase | A | B | A − B |",
        "| --- | ---: | ---: | ---: |",
        f"| workflow tasks per step | {a.workflow_tasks / k:.2f} | {b.workflow_tasks / k:.2f} "
        f"| {(a.workflow_tasks - b.workflow_tasks) / k:+.2f} |",
    ]
    for label, av, bv in (
        ("workflow task queue", a.wft_queue_ns, b.wft_queue_ns),
        ("workflow task run", a.wft_run_ns, b.wft_run_ns),
        ("activity queue", a.activity_queue_ns, b.activity_queue_ns),
        ("activity run", a.activity_run_ns, b.activity_run_ns),
        ("first → last event", a.span_ns, b.span_ns),
    ):
        lines.append(f"| {label} | {per_step(av)} | {per_step(bv)} | {per_step(av - bv)} |")
    lines.append(
        f"| client wall time | {r.a_run.wall / k * 1e3:.2f} | {r.b_run.wall / k * 1e3:.2f} | "
        f"{(r.a_run.wall - r.b_run.wall) / k * 1e3:.2f} |"
    )
    if report.replay:
        ra, rb = report.replay.get("A", 0.0), report.replay.get("B", 0.0)
        lines += [
            "",
            f"Pure workflow-code cost, replaying the k={k} history with `Replayer` (sandbox, "
            f"same plugin; median of 3): A {ra / k * 1e3:.2f} ms/step, B {rb / k * 1e3:.2f} "
            f"ms/step ({_ratio(ra, rb)}×).",
        ]
    return lines


# -- main ---------------------------------------------------------------------------------

DEFAULT_KS = "20,100,500"


def _ks(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def repeats_for(steps: int, repeats: int | None) -> int:
    if repeats is not None:
        return repeats
    return 3 if steps < 500 else 2


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
            workflows=[BareAgentWorkflow],
            activities=BARE_ACTIVITIES,
            max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
            max_concurrent_workflow_tasks=MAX_CONCURRENT_WORKFLOW_TASKS,
        ):
            bench = Bench(client, task_queue)
            _log("warming up")
            await _alternate(bench, 2, 2)
            results = []
            for steps in ks:
                results.append(await _alternate(bench, steps, repeats_for(steps, args.repeats)))
            throughput = None
            if args.throughput_runs:
                _log(f"throughput: {args.throughput_runs} x {args.throughput_steps} steps")
                a_s = b_s = 0.0
                a_s = await bench.throughput(
                    bench.start_a, args.throughput_runs, args.throughput_steps
                )
                b_s = await bench.throughput(
                    bench.start_b, args.throughput_runs, args.throughput_steps
                )
                _log(f"  A {a_s:.1f} s, B {b_s:.1f} s")
                throughput = Throughput(args.throughput_runs, args.throughput_steps, a_s, b_s)
            resume_a: list[float] = []
            resume_b: list[float] = []
            if args.resume_runs:
                _log(f"resume latency: {args.resume_runs} runs each")
                for _ in range(args.resume_runs):
                    resume_a += await bench.resume_a(1)
                    resume_b += await bench.resume_b(1)
        replay: dict[str, float] = {}
        if results:
            k = 100 if 100 in ks else max(ks)
            pick = next(r for r in results if r.steps == k)
            _log(f"replaying the k={k} histories")
            replay["A"] = await replay_seconds(pick.a_run.history)
            replay["B"] = await replay_seconds(pick.b_run.history)
    finally:
        server.stop()
    report = Report(args, started, results, throughput, resume_a, resume_b, replay)
    report.elapsed = time.perf_counter() - began
    return report


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
        help="runs of A and of B per k (default: 3 for k < 500, 2 for k >= 500)",
    )
    parser.add_argument("--throughput-runs", type=int, default=100)
    parser.add_argument("--throughput-steps", type=int, default=10)
    parser.add_argument("--resume-runs", type=int, default=10)
    parser.add_argument("--results", type=Path, default=RESULTS_FILE, help="Markdown output")
    return parser.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> None:
    args = parse_args(argv)
    report = asyncio.run(amain(args))
    text = render(report)
    print(text)
    args.results.write_text(text)
    _log(f"wrote {args.results}")


if __name__ == "__main__":
    main()
