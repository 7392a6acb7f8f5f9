"""AgentWorkflow (A) against the bare agent workflow (B) at scale, one worker process each.

    python -m benchmarks.scale_bench [all|throughput|history|replay|profile]
        [--runs 100] [--steps 10] [--rounds 3] [--history-steps 100] [--history-repeats 3]
        [--replay-steps 300] [--replays 5] [--top 25] [--reimport-benchmarks]
        [--results benchmarks/RESULTS-scale.md]

`benchmarks.temporal_bench` hosts A and B in one process with its client, so its CPU
figures mix the two workflows, the client and each other's idle work. Here one dev server
(temporary SQLite file, free port, headless) serves two worker processes
(`benchmarks.bench_worker`), A's and B's, each on a task queue of its own, and every CPU
figure is the delta of that one process's utime + stime from /proc/<pid>/stat (the server's
the same way), so "CPU per step" is what hosting that kind of workflow costs. The workflows
and agents are temporal_bench's: A = `AgentWorkflow` with a `TestModel` scripting k
`lookup` tool calls then a text, B = `BareAgentWorkflow` (model-call activity, tool-call
activity, repeat); both tools return 250 bytes. Linux only (/proc).

- throughput: rounds alternate A B, then B A, ...; in each round `--runs` concurrent
  `--steps`-step runs start at once and the round lasts until the last result. Medians over
  rounds, as steps/s and CPU ms per step, because a wall-time median alone hides whether
  the worker or the server is the bottleneck.
- history: `--history-steps` k runs, alternating, for history bytes and events per step
  (summed over a continue-as-new chain) and wall time per step, with temporal_bench's
  diagnosis (bytes by event type and JSON key, time by phase) of the median-time runs.
- replay: a `--replay-steps` run left waiting, as a run waiting for a human is: A's agent
  calls a `requires_approval` tool after its k steps, B (`BareWaitingWorkflow`) waits for a
  signal after its k steps. Each history is replayed with a fresh `Replayer` (the plugin's
  sandbox, as on a worker) in this process: what a worker pays to rebuild such a run after
  a restart or a cache eviction. The runs are terminated afterwards.
- profile: a third, agent-only worker under cProfile (per-thread CPU time, workflow-task
  threads included) runs one `--runs` x `--steps` round of A; the summary splits the CPU
  into workflow side and activity side and into categories by source file, to say where
  A's extra cost goes.

`all` (the default) runs the four on one server and writes `benchmarks/RESULTS-scale.md`;
a single measure only prints its section. The server and every worker are stopped at the
end, on error too, and the workers die with this process (PR_SET_PDEATHSIG) if it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import pstats
import shutil
import signal
import statistics
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import temporalio
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import History
    from temporalio.client import Client, WorkflowHistory
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.service import RPCError
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from benchmarks.temporal_bench import (
        ACTIVITY_TIMEOUT,
        MAX_CONCURRENT_ACTIVITIES,
        MAX_CONCURRENT_WORKFLOW_TASKS,
        BareAgentWorkflow,
        BareModelInput,
        BareStart,
        BareToolInput,
        Bench,
        Handle,
        HistoryStats,
        Report,
        Run,
        StepResult,
        _diagnosis,
        _free_port,
        _load,
        _ratio,
        bare_model_call,
        bare_tool_call,
        lookup,
        lookup_script,
        process_cpu,
    )
    from durable_agent import (
        AgentBuilder,
        ModelResponse,
        TestModel,
        TextPart,
        ToolCallPart,
        UsageLimits,
    )
    from durable_agent.agent import Agent
    from durable_agent.logs import configure_logging
    from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin
    from durable_agent.temporal.devserver import DevServer, die_with_parent
    from durable_agent.temporal.plugin import PASSTHROUGH_MODULES
    from durable_agent.temporal.registry import registry
    from durable_agent.temporal.worker import exit_process

COMMAND = "python -m benchmarks.scale_bench"
RESULTS_FILE = Path(__file__).with_name("RESULTS-scale.md")
ROOT = Path(__file__).parent.parent
"""The repository: the workers run from it (`python -m benchmarks.bench_worker`)."""
MEASURES = ("all", "throughput", "history", "replay", "profile")
WARMUP_STEPS = 2
KINDS = ("A", "B")

# -- the waiting runs of the replay measure -------------------------------------------------


@workflow.defn(name="BareWaitingWorkflow")
class BareWaitingWorkflow(BareAgentWorkflow):
    """B's loop, waiting for the `resume` signal once the model has answered with text, the
    way A waits for an approval once the model has called the tool that needs one."""

    @workflow.run
    async def run(self, input: BareStart) -> str:
        content = input.prompt
        while True:
            reply = await workflow.execute_activity(
                bare_model_call,
                BareModelInput(step=self._step, steps=input.steps, content=content),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )
            if reply.tool is None or reply.call_id is None:
                break
            self._step += 1
            content = await workflow.execute_activity(
                bare_tool_call,
                BareToolInput(
                    tool=reply.tool, call_id=reply.call_id, arguments=reply.arguments or {}
                ),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )
        self._waiting = True
        await workflow.wait_condition(lambda: self._resumed)
        self._waiting = False
        return reply.text or ""


async def deploy(key: int) -> str:
    """Deploys a key; every call waits for a human's approval.

    Args:
        key: the key
    """
    return "deployed"


def waiting_agent_name(steps: int) -> str:
    return f"bench-{steps}-steps-then-approval"


def waiting_agent(steps: int) -> Agent:
    """temporal_bench's k-step agent, whose model then calls `deploy` and so waits."""
    script = [
        *lookup_script(steps),
        ModelResponse(parts=[ToolCallPart(id=f"c{steps}", name="deploy", arguments={"key": 0})]),
        ModelResponse(parts=[TextPart(text="done")]),
    ]
    return (
        AgentBuilder(TestModel.with_responses(script))
        .name(waiting_agent_name(steps))
        .tool(lookup)
        .tool(deploy, requires_approval=True)
        .usage_limits(UsageLimits(request_limit=None))
        .build()
    )


def passthrough_runner() -> SandboxedWorkflowRunner:
    """Temporal's own sandbox with the plugin's pass-through modules and the `benchmarks`
    package passed through as well.

    A new workflow run re-imports its workflow's module in a fresh sandbox unless the module
    is passed through. The plugin passes `durable_agent` through, so A's module is imported
    once per process; B's (`benchmarks.temporal_bench`, whose body builds pydantic models)
    would be imported again for every run. Passing `benchmarks` through (the default;
    `--reimport-benchmarks` turns it off) puts B on A's footing. The class is Temporal's
    own: A's worker gets the plugin's sandbox from it, B's (no plugin) keeps it.
    """
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            *PASSTHROUGH_MODULES, "benchmarks"
        )
    )


def bare_options(passthrough: bool) -> dict[str, Any]:
    """Worker or replayer options for B: bare Temporal, no durable-agent plugin, the same
    pydantic data converter, Temporal's sandbox (with `benchmarks` passed through)."""
    runner = passthrough_runner() if passthrough else SandboxedWorkflowRunner()
    return {"workflow_runner": runner}


# -- processes ------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class CollectorStats:
    """A worker's garbage collector so far: collections and seconds spent, per generation."""

    collections: tuple[int, int, int]
    seconds: tuple[float, float, float]

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)

    def since(self, earlier: CollectorStats) -> CollectorStats:
        a, b, c = (x - y for x, y in zip(self.collections, earlier.collections, strict=True))
        d, e, f = (x - y for x, y in zip(self.seconds, earlier.seconds, strict=True))
        return CollectorStats((a, b, c), (d, e, f))


class WorkerProcess:
    """A `benchmarks.bench_worker` child; its CPU is read from /proc, its collector's
    figures from the file it writes when signalled."""

    def __init__(
        self,
        kind: str,
        task_queue: str,
        process: asyncio.subprocess.Process,
        gc_stats: Path | None = None,
    ) -> None:
        self.kind = kind
        self.task_queue = task_queue
        self.process = process
        self.gc_stats = gc_stats
        self._gc_requests = 0

    async def collector(self, timeout: float = 10) -> CollectorStats | None:
        """The worker's collector figures now (None: it was started without a file)."""
        if self.gc_stats is None:
            return None
        self._gc_requests += 1
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                stats = json.loads(self.gc_stats.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                stats = {"request": 0}
            if stats["request"] >= self._gc_requests:
                a, b, c = stats["collections"]
                d, e, f = (float(s) for s in stats["seconds"])
                return CollectorStats((a, b, c), (d, e, f))
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {self.kind} worker wrote no collector figures")
            await asyncio.sleep(0.02)

    @classmethod
    async def start(
        cls,
        kind: str,
        address: str,
        task_queue: str,
        *,
        steps: Iterable[int],
        waiting_steps: int = 0,
        profile: Path | None = None,
        passthrough: bool = False,
        gc_stats: Path | None = None,
        timeout: float = 120,
    ) -> WorkerProcess:
        command = [
            sys.executable,
            "-m",
            "benchmarks.bench_worker",
            "--kind",
            kind,
            "--address",
            address,
            "--task-queue",
            task_queue,
            "--steps",
            ",".join(str(k) for k in sorted(set(steps))),
            "--waiting-steps",
            str(waiting_steps),
        ]
        if profile is not None:
            command += ["--profile", str(profile)]
        if passthrough:
            command.append("--passthrough-benchmarks")
        if gc_stats is not None:
            command += ["--gc-stats", str(gc_stats)]
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        worker = cls(kind, task_queue, process, gc_stats)
        try:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), timeout)
            if line.strip() != b"ready":
                raise RuntimeError(
                    f"the {kind} worker did not start (exit code {await process.wait()}); "
                    "its error is above"
                )
        except BaseException:
            await worker.stop()
            raise
        return worker

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        seconds = process_cpu(self.pid)
        if seconds is None:
            raise RuntimeError(f"cannot read /proc/{self.pid}/stat (this benchmark needs Linux)")
        return seconds

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit code."""
        if self.process.returncode is None:
            try:
                self.process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(self.process.wait(), timeout)
            except ProcessLookupError:
                pass
            except TimeoutError:
                self.process.kill()
        return await self.process.wait()


class Harness:
    """The dev server, the client, and the workers started on it; stops them all on exit."""

    def __init__(self, *, passthrough: bool = False) -> None:
        self.passthrough = passthrough
        """Workers and replayers pass `benchmarks` through the sandbox (`passthrough_runner`)."""
        self.directory = Path(tempfile.mkdtemp(prefix="durable-agent-scale-"))
        self.server = DevServer(self.directory / "bench.db", port=_free_port(), ui_port=None)
        self.workers: list[WorkerProcess] = []
        self._client: Client | None = None

    async def __aenter__(self) -> Harness:
        _log(f"starting the Temporal dev server on {self.server.address} ({self.directory})")
        try:
            await self.server.start()
            self._client = await Client.connect(self.server.address, plugins=[DurableAgentPlugin()])
        except BaseException:
            self._cleanup()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            for worker in list(self.workers):
                await self.stop(worker)
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def client(self) -> Client:
        assert self._client is not None, "use the harness in `async with`"
        return self._client

    def server_cpu(self) -> float | None:
        return process_cpu(self.server.process.pid if self.server.process else None)

    async def worker(
        self,
        kind: str,
        *,
        steps: Iterable[int],
        waiting_steps: int = 0,
        profile: Path | None = None,
    ) -> WorkerProcess:
        queue = f"scale-{kind}-{uuid.uuid4().hex[:8]}"
        worker = await WorkerProcess.start(
            kind,
            self.server.address,
            queue,
            steps=steps,
            waiting_steps=waiting_steps,
            profile=profile,
            passthrough=self.passthrough,
            gc_stats=self.directory / f"{queue}-gc.json",
        )
        self.workers.append(worker)
        _log(f"{kind} worker ready: pid {worker.pid}, task queue {queue}")
        return worker

    async def stop(self, worker: WorkerProcess) -> int:
        if worker in self.workers:
            self.workers.remove(worker)
        code = await worker.stop()
        if code != 0:
            _log(f"the {worker.kind} worker (pid {worker.pid}) exited with code {code}")
        return code


@dataclasses.dataclass
class Pair:
    """A's worker and B's, with a `Bench` starting runs on each one's task queue."""

    harness: Harness
    a: WorkerProcess
    b: WorkerProcess

    @classmethod
    async def open(cls, harness: Harness, steps: Iterable[int], waiting_steps: int) -> Pair:
        ks = {WARMUP_STEPS, *steps}
        a, b = await asyncio.gather(
            harness.worker("agent", steps=ks, waiting_steps=waiting_steps),
            harness.worker("bare", steps=ks),
            return_exceptions=True,
        )
        failed = [x for x in (a, b) if isinstance(x, BaseException)]
        if failed:
            for started in (a, b):
                if isinstance(started, WorkerProcess):
                    await harness.stop(started)
            raise failed[0]
        assert isinstance(a, WorkerProcess)
        assert isinstance(b, WorkerProcess)
        return cls(harness, a, b)

    def worker(self, kind: str) -> WorkerProcess:
        return self.a if kind == "A" else self.b

    def bench(self, kind: str) -> Bench:
        server = self.harness.server.process
        queue = self.worker(kind).task_queue
        return Bench(self.harness.client, queue, server.pid if server else None)

    def start(self, kind: str) -> Callable[[int], Awaitable[Handle]]:
        bench = self.bench(kind)
        return bench.start_a if kind == "A" else bench.start_b

    async def warm_up(self) -> None:
        """A first run of each kind pays for imports and sandbox setup: keep it out of the
        figures."""
        for kind in KINDS:
            await (await self.start(kind)(WARMUP_STEPS)).result()

    async def stop(self) -> None:
        for worker in (self.a, self.b):
            await self.harness.stop(worker)


def _order(i: int) -> tuple[str, ...]:
    return KINDS if i % 2 == 0 else KINDS[::-1]


@dataclasses.dataclass
class Sample:
    wall: float
    worker_cpu: float
    server_cpu: float | None


class Stopwatch:
    """Wall time, and the CPU of one worker process and of the server, from now on."""

    def __init__(self, worker: WorkerProcess, harness: Harness) -> None:
        self.worker = worker
        self.harness = harness
        self.server = harness.server_cpu()
        self.cpu = worker.cpu()
        self.began = time.perf_counter()

    def stop(self) -> Sample:
        wall = time.perf_counter() - self.began
        cpu = self.worker.cpu() - self.cpu
        server = self.harness.server_cpu()
        server_cpu = (
            server - self.server if server is not None and self.server is not None else None
        )
        return Sample(wall, cpu, server_cpu)


def _median(values: Iterable[float | None]) -> float | None:
    known = list(values)
    if not known or any(v is None for v in known):
        return None
    return statistics.median(v for v in known if v is not None)


# -- throughput -----------------------------------------------------------------------------


@dataclasses.dataclass
class Round:
    kind: str
    index: int
    sample: Sample
    workflow_tasks: int
    bytes: int
    collector: CollectorStats | None = None


@dataclasses.dataclass
class ThroughputResult:
    runs: int
    steps: int
    rounds: list[Round]

    def of(self, kind: str) -> list[Round]:
        return [r for r in self.rounds if r.kind == kind]


async def throughput(pair: Pair, runs: int, steps: int, rounds: int) -> ThroughputResult:
    result = ThroughputResult(runs, steps, [])
    for i in range(rounds):
        for kind in _order(i):
            start = pair.start(kind)
            worker = pair.worker(kind)
            collected = await worker.collector()
            watch = Stopwatch(worker, pair.harness)
            handles = await asyncio.gather(*(start(steps) for _ in range(runs)))
            await asyncio.gather(*(h.result() for h in handles))
            sample = watch.stop()
            after = await worker.collector()
            collector = after.since(collected) if after and collected else None
            bench = pair.bench(kind)
            histories = [h for handle in handles for h in await bench.chain(handle)]
            tasks = sum(
                1
                for h in histories
                for e in h.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            )
            size = sum(History(events=h.events).ByteSize() for h in histories)
            result.rounds.append(Round(kind, i + 1, sample, tasks, size, collector))
            total = runs * steps
            _log(
                f"  throughput {kind} #{i + 1}: {sample.wall:.1f} s, {total / sample.wall:.1f} "
                f"steps/s, worker CPU {sample.worker_cpu / total * 1e3:.1f} ms/step"
            )
    return result


def render_throughput(tp: ThroughputResult) -> list[str]:
    total = tp.runs * tp.steps

    def per_step(seconds: float | None) -> str:
        return f"{seconds / total * 1e3:.1f}" if seconds is not None else "n/a"

    lines = [
        "",
        f"## Throughput: {tp.runs} concurrent {tp.steps}-step runs per round",
        "",
        f"{len(tp.of('A'))} round(s) per kind, alternating (A B, then B A, ...). A round starts "
        "all runs at once and ends with the last result. Worker CPU = utime + stime of that "
        "kind's worker process over the round, server CPU the same for the dev server; both "
        "per step (runs x steps). Collector: the worker's garbage collector over the round "
        "(`gc.callbacks`), its time per step (part of the worker CPU), and its collections "
        "of generations 0 / 1 / 2 with their total milliseconds over the round.",
        "",
        "| round | kind | wall s | steps/s | worker CPU ms/step | server CPU ms/step "
        "| workflow tasks/step | history bytes/step | collector ms/step | collections |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in tp.rounds:
        gc_time = per_step(r.collector.total_seconds) if r.collector else "n/a"
        gcs = "n/a"
        if r.collector:
            counts = " / ".join(str(n) for n in r.collector.collections)
            millis = " / ".join(f"{t * 1e3:.0f}" for t in r.collector.seconds)
            gcs = f"{counts} ({millis} ms)"
        lines.append(
            f"| {r.index} | {r.kind} | {r.sample.wall:.1f} | {total / r.sample.wall:.1f} | "
            f"{per_step(r.sample.worker_cpu)} | {per_step(r.sample.server_cpu)} | "
            f"{r.workflow_tasks / total:.2f} | {r.bytes / total:,.0f} | {gc_time} | {gcs} |"
        )
    med: dict[str, dict[str, float | None]] = {}
    for kind in KINDS:
        rounds = tp.of(kind)
        med[kind] = {
            "wall": _median(r.sample.wall for r in rounds),
            "worker": _median(r.sample.worker_cpu for r in rounds),
            "server": _median(r.sample.server_cpu for r in rounds),
            "tasks": _median(r.workflow_tasks for r in rounds),
            "bytes": _median(r.bytes for r in rounds),
            "collector": _median(
                r.collector.total_seconds if r.collector else None for r in rounds
            ),
        }
    lines += [
        "",
        "Medians over the rounds:",
        "",
        "| | wall s | steps/s | worker CPU ms/step | server CPU ms/step | workflow tasks/step "
        "| history bytes/step | collector ms/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        m = med[kind]
        wall = m["wall"] or float("nan")
        lines.append(
            f"| {kind} | {wall:.1f} | {total / wall:.1f} | {per_step(m['worker'])} | "
            f"{per_step(m['server'])} | {(m['tasks'] or 0) / total:.2f} | "
            f"{(m['bytes'] or 0) / total:,.0f} | {per_step(m['collector'])} |"
        )
    a, b = med["A"], med["B"]

    def ratio(key: str, invert: bool = False) -> str:
        x, y = a[key], b[key]
        if x is None or y is None:
            return "n/a"
        return _ratio(y, x) if invert else _ratio(x, y)

    lines.append(
        f"| A/B | {ratio('wall')} | {ratio('wall', invert=True)} | {ratio('worker')} | "
        f"{ratio('server')} | {ratio('tasks')} | {ratio('bytes')} | |"
    )
    return lines


# -- history --------------------------------------------------------------------------------


async def timed_run(pair: Pair, kind: str, steps: int) -> Run:
    watch = Stopwatch(pair.worker(kind), pair.harness)
    handle = await pair.start(kind)(steps)
    await handle.result()
    sample = watch.stop()
    histories = await pair.bench(kind).chain(handle)
    return Run(
        sample.wall,
        sample.worker_cpu,
        sample.server_cpu,
        histories,
        HistoryStats.of_chain(histories),
    )


async def history(pair: Pair, steps: int, repeats: int) -> StepResult:
    result = StepResult(steps, [], [])
    for i in range(repeats):
        for kind in _order(i):
            run = await timed_run(pair, kind, steps)
            (result.a if kind == "A" else result.b).append(run)
            _log(
                f"  history k={steps} {kind} #{i + 1}: {run.wall / steps * 1e3:.1f} ms/step, "
                f"{run.stats.events} events, {run.stats.bytes:,} bytes"
            )
    return result


def render_history(result: StepResult, args: argparse.Namespace, started: dt.datetime) -> list[str]:
    k = result.steps
    a, b = result.a_run.stats, result.b_run.stats
    a_cpu = statistics.median(r.worker_cpu for r in result.a) / k * 1e3
    b_cpu = statistics.median(r.worker_cpu for r in result.b) / k * 1e3
    lines = [
        "",
        f"## History: {k}-step runs",
        "",
        f"{len(result.a)} run(s) of each kind, alternating, one at a time. Wall and worker CPU "
        "are medians over the runs; events and bytes are from the median-time run, summed "
        "over its continue-as-new chain (bytes = protobuf size of the events as fetched).",
        "",
        "| | wall ms/step | worker CPU ms/step | events | events/step | bytes | bytes/step "
        "| workflow runs | largest run bytes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, stats, ms, cpu in (("A", a, result.a_ms, a_cpu), ("B", b, result.b_ms, b_cpu)):
        lines.append(
            f"| {label} | {ms:.1f} | {cpu:.1f} | {stats.events:,} | {stats.events / k:.2f} | "
            f"{stats.bytes:,} | {stats.bytes / k:,.0f} | {stats.runs} | {stats.max_run_bytes:,} |"
        )
    lines.append(
        f"| A/B | {_ratio(result.a_ms, result.b_ms)} | {_ratio(a_cpu, b_cpu)} | "
        f"{_ratio(a.events, b.events)} | {_ratio(a.events, b.events)} | "
        f"{_ratio(a.bytes, b.bytes)} | {_ratio(a.bytes, b.bytes)} | | |"
    )
    report = Report(args, started, [result], None, [], [], {})
    diagnosis = _diagnosis(report, {k: result})
    lines += [f"#{line}" if line.startswith("## ") else line for line in diagnosis]
    return lines


# -- replay ---------------------------------------------------------------------------------


@dataclasses.dataclass
class ReplayResult:
    kind: str
    steps: int
    runs: int
    events: int
    bytes: int
    timings: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.timings)


async def _wait_until(done: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def _replay_once(kind: str, histories: Sequence[WorkflowHistory], passthrough: bool) -> float:
    """A replay as each kind's worker would do it: A with the plugin (which adds
    AgentWorkflow and its sandbox), B as bare Temporal."""
    if kind == "A":
        options: dict[str, Any] = {"workflow_runner": passthrough_runner()} if passthrough else {}
        replayer = Replayer(workflows=[], plugins=[DurableAgentPlugin()], **options)
    else:
        replayer = Replayer(
            workflows=[BareAgentWorkflow, BareWaitingWorkflow],
            data_converter=pydantic_data_converter,
            **bare_options(passthrough),
        )
    began = time.perf_counter()
    for h in histories:
        await replayer.replay_workflow(h)
    return time.perf_counter() - began


async def replay(pair: Pair, steps: int, replays: int) -> dict[str, ReplayResult]:
    # The replayed AgentWorkflow looks its agent up in this process's registry.
    registry.register(waiting_agent(steps), replace=True)
    client = pair.harness.client
    suffix = uuid.uuid4().hex[:10]
    handle_a: Handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=waiting_agent_name(steps), prompt="go"),
        id=f"scale-a-waiting-{steps}-{suffix}",
        task_queue=pair.a.task_queue,
    )
    handle_b: Handle = await client.start_workflow(
        BareWaitingWorkflow.run,
        BareStart(prompt="go", steps=steps),
        id=f"scale-b-waiting-{steps}-{suffix}",
        task_queue=pair.b.task_queue,
    )
    try:

        async def a_waits() -> bool:
            view = await handle_a.query(AgentWorkflow.status)
            if view.status in ("failed", "completed", "cancelled"):
                raise RuntimeError(f"the waiting A run ended: {view.status} {view.error}")
            return view.status == "waiting" and bool(view.pending_approvals)

        async def b_waits() -> bool:
            return (await handle_b.query(BareWaitingWorkflow.status)).waiting

        timeout = 60 + steps
        _log(f"  replay: waiting for the {steps}-step runs to wait")
        await _wait_until(a_waits, timeout, f"the A run did not wait for approval ({steps} steps)")
        await _wait_until(b_waits, timeout, f"the B run did not wait ({steps} steps)")
        chains = {
            "A": await pair.bench("A").chain(handle_a),
            "B": await pair.bench("B").chain(handle_b),
        }
        out = {
            kind: ReplayResult(
                kind,
                steps,
                len(chain),
                sum(len(h.events) for h in chain),
                sum(History(events=h.events).ByteSize() for h in chain),
                [],
            )
            for kind, chain in chains.items()
        }
        for kind in KINDS:  # not timed: the first replay imports and sets up the sandbox
            await _replay_once(kind, chains[kind], pair.harness.passthrough)
        for i in range(replays):
            for kind in _order(i):
                out[kind].timings.append(
                    await _replay_once(kind, chains[kind], pair.harness.passthrough)
                )
        for kind in KINDS:
            _log(f"  replay {kind}: median {out[kind].median:.3f} s")
        return out
    finally:
        for handle in (handle_a, handle_b):
            with contextlib.suppress(RPCError):  # it ended another way
                await handle.terminate(reason="scale_bench: replay measured")


def render_replay(result: dict[str, ReplayResult], replays: int) -> list[str]:
    a, b = result["A"], result["B"]
    k = a.steps
    lines = [
        "",
        f"## Replay: a {k}-step run left waiting",
        "",
        f"A's agent calls a tool declared `requires_approval=True` after its {k} steps and "
        f"waits for the approval; B (`BareWaitingWorkflow`) waits for a signal after its {k} "
        "steps. Each history (every run of the chain) is replayed with a fresh "
        "`Replayer(workflows=[...], plugins=[DurableAgentPlugin()])` in the benchmark process, "
        f"after one untimed replay; {replays} timed replays each, alternating. A replay's "
        "time includes its fixed cost (the replayer, the run's sandbox), so ms/step is an "
        "upper bound that shrinks with k.",
        "",
        "| | workflow runs | events | bytes | replay s (median) | min s | max s | ms/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in (a, b):
        lines.append(
            f"| {r.kind} | {r.runs} | {r.events:,} | {r.bytes:,} | {r.median:.3f} | "
            f"{min(r.timings):.3f} | {max(r.timings):.3f} | {r.median / k * 1e3:.2f} |"
        )
    lines.append(
        f"| A/B | | {_ratio(a.events, b.events)} | {_ratio(a.bytes, b.bytes)} | "
        f"{_ratio(a.median, b.median)} | | | {_ratio(a.median, b.median)} |"
    )
    return lines


# -- profile --------------------------------------------------------------------------------

StatKey = tuple[str, int, str]
"""pstats' (file, line, function); builtins have file `~`."""
StatRow = tuple[int, int, float, float]
"""Primitive calls, calls, tottime, cumtime (thread CPU seconds)."""

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pydantic (de)serialization", ("/pydantic/", "/pydantic_core/", "pydantic_core.")),
    ("data converter (temporalio/converter.py)", ("temporalio/converter.py",)),
    ("sandbox (temporalio/worker/workflow_sandbox)", ("temporalio/worker/workflow_sandbox/",)),
    ("logging (structlog, logging)", ("/structlog/", "/logging/")),
    (
        "checkpoints (durable_agent state.py, executor.py)",
        (
            "durable_agent/state.py",
            "durable_agent/executor.py",
            "durable_agent/temporal/executor.py",
        ),
    ),
    (
        "search attributes / upserts",
        ("durable_agent/temporal/search_attributes.py", "upsert", "search_attribute"),
    ),
    ("protobuf", ("google/protobuf/", "google._upb")),
    ("json", ("/json/", "_json.")),
    (
        "durable_agent workflow (temporal/workflow/, loop/, controller.py)",
        (
            "durable_agent/temporal/workflow/",
            "durable_agent/loop/",
            "durable_agent/controller.py",
        ),
    ),
    (
        "durable_agent activities (activities.py, nodes.py)",
        ("durable_agent/temporal/activities.py", "durable_agent/nodes.py"),
    ),
    ("durable_agent, other", ("durable_agent/",)),
    ("temporalio workflow instance", ("temporalio/worker/_workflow_instance.py",)),
    ("temporalio, other (worker, bridge, client)", ("temporalio/", "temporal_sdk_bridge")),
    ("asyncio", ("/asyncio/",)),
)
OTHER = "other (stdlib, builtins, ...)"

WORKFLOW_SIDE = (
    "temporalio/worker/_workflow_instance.py",
    "temporalio/worker/_workflow.py",
    "temporalio/worker/workflow_sandbox/",
    "durable_agent/temporal/workflow/",
    "durable_agent/loop/",
    "durable_agent/controller.py",
)
ACTIVITY_SIDE = (
    "temporalio/worker/_activity.py",
    "durable_agent/temporal/activities.py",
    "durable_agent/nodes.py",
)
WORKFLOW_ON_LOOP = ("temporalio/worker/_workflow.py", "_handle_activation")
"""Where the event loop handles a workflow task around its activation (which runs on a
workflow-task thread): creating a new run's instance and sandbox, completing the task."""
ACTIVITY_ON_LOOP = ("temporalio/worker/_activity.py", "_handle_start_activity_task")
"""One activity task from start to completion, the activity's own code included."""


def _where(key: StatKey) -> str:
    """`file:function`, what the categories match."""
    return f"{key[0]}:{key[2]}"


def _short(file: str) -> str:
    for prefix in ("site-packages/", f"{ROOT}/", f"{sysconfig.get_paths()['stdlib']}/"):
        if prefix in file:
            return file.split(prefix, 1)[1]
    return file


def _label(key: StatKey) -> str:
    file, line, func = key
    return f"`{func}`" if file == "~" else f"`{_short(file)}:{line}({func})`"


def category(key: StatKey) -> str:
    where = _where(key)
    for name, patterns in CATEGORIES:
        if any(p in where for p in patterns):
            return name
    return OTHER


@dataclasses.dataclass
class ProfileResult:
    runs: int
    steps: int
    sample: Sample
    stats: dict[StatKey, StatRow]
    """Every profiled thread, merged."""
    workflow_threads: float
    """Thread CPU seconds of the workflow-task threads alone."""

    @property
    def total(self) -> float:
        return sum(v[2] for v in self.stats.values())

    def cumulative(self, file_part: str, func: str) -> float:
        return sum(v[3] for k, v in self.stats.items() if k[2] == func and file_part in k[0])


def _load_stats(path: Path) -> dict[StatKey, StatRow]:
    raw: dict[StatKey, tuple[Any, ...]] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    return {key: (int(v[0]), int(v[1]), float(v[2]), float(v[3])) for key, v in raw.items()}


async def profile(harness: Harness, runs: int, steps: int) -> ProfileResult:
    path = harness.directory / "agent.prof"
    worker = await harness.worker("agent", steps=[steps], profile=path)
    server = harness.server.process
    bench = Bench(harness.client, worker.task_queue, server.pid if server else None)
    try:
        _log(f"  profile: {runs} x {steps} steps of A under cProfile")
        watch = Stopwatch(worker, harness)
        handles = await asyncio.gather(*(bench.start_a(steps) for _ in range(runs)))
        await asyncio.gather(*(h.result() for h in handles))
        sample = watch.stop()
    finally:
        code = await harness.stop(worker)
    if code != 0:
        raise RuntimeError(f"the profiled worker exited with code {code}; its error is above")
    return _read_profile(path, runs, steps, sample)


def _read_profile(path: Path, runs: int, steps: int, sample: Sample) -> ProfileResult:
    """The worker's dumps: all threads in `path`, the workflow-task threads in
    `path.workflow` (absent when no workflow task ran)."""
    stats = _load_stats(path)
    workflow_path = Path(f"{path}.workflow")
    workflow_threads = (
        sum(v[2] for v in _load_stats(workflow_path).values()) if workflow_path.exists() else 0.0
    )
    return ProfileResult(runs, steps, sample, stats, workflow_threads)


def render_profile(result: ProfileResult, top: int) -> list[str]:
    total_steps = result.runs * result.steps
    total = result.total

    def ms(seconds: float) -> str:
        return f"{seconds / total_steps * 1e3:.2f}"

    def pct(seconds: float) -> str:
        return f"{seconds / total * 100:.1f}%" if total else "n/a"

    def row(label: str, seconds: float) -> str:
        return f"| {label} | {seconds:.2f} | {ms(seconds)} | {pct(seconds)} |"

    activations = result.workflow_threads
    on_loop = result.cumulative(*WORKFLOW_ON_LOOP)
    activities = result.cumulative(*ACTIVITY_ON_LOOP)
    rest = total - activations - on_loop - activities
    lines = [
        "",
        f"## Profile: A's worker under cProfile, {result.runs} x {result.steps} steps",
        "",
        "A third worker process, A's alone, runs one round under cProfile with per-thread CPU "
        "time (`time.thread_time`), from its `ready` to its shutdown, in the event loop's "
        "thread and in every workflow-task thread (where the SDK runs activations). The "
        "profiler slows the worker down, so read shares rather than absolutes; this worker "
        "has no warm-up run, so the round's first runs' setup is in it; the SDK's "
        f"Rust threads are not Python and do not appear. Round wall {result.sample.wall:.1f} s; "
        f"worker process CPU (/proc, profiler included) {result.sample.worker_cpu:.1f} s = "
        f"{ms(result.sample.worker_cpu)} ms/step; profiled Python threads {total:.2f} s = "
        f"{ms(total)} ms/step.",
        "",
        "| side | CPU s | ms/step | share |",
        "| --- | ---: | ---: | ---: |",
        row("workflow: activations (workflow-task threads)", activations),
        row(
            "workflow: task handling on the event loop (`_workflow.py` `_handle_activation`: "
            "a new run's instance and sandbox, completions)",
            on_loop,
        ),
        row(
            "activities (`_activity.py` `_handle_start_activity_task`: decode, run, complete)",
            activities,
        ),
        row("rest of the event loop (polling, asyncio, ...)", rest),
        row("**workflow side**", activations + on_loop),
        row("**activity side**", activities),
        "",
        "By category (tottime, own time without callees, summed by source path or builtin "
        "name; the first matching row wins, in this order; builtins such as `exec` or "
        f"`isinstance` fall under *{OTHER}* whoever calls them):",
        "",
        "| category | tottime s | ms/step | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    by_category: dict[str, float] = {}
    for key, (_, _, tt, _) in result.stats.items():
        name = category(key)
        by_category[name] = by_category.get(name, 0.0) + tt
    for name in [*(n for n, _ in CATEGORIES), OTHER]:
        lines.append(row(name, by_category.get(name, 0.0)))

    def cumulative(side: tuple[str, ...], title: str, count: int = 10) -> list[str]:
        keys = [k for k in result.stats if any(p in k[0] for p in side)]
        keys.sort(key=lambda k: -result.stats[k][3])
        out = [
            "",
            f"{title} ({', '.join(f'`{p}`' for p in side)}): top functions by cumulative "
            "time (with what they call; nested entries overlap):",
            "",
            "| function | calls | cumtime s | ms/step |",
            "| --- | ---: | ---: | ---: |",
        ]
        for key in keys[:count]:
            calls, cum = result.stats[key][1], result.stats[key][3]
            out.append(f"| {_label(key)} | {calls:,} | {cum:.2f} | {ms(cum)} |")
        return out

    lines += cumulative(WORKFLOW_SIDE, "Workflow side")
    lines += cumulative(ACTIVITY_SIDE, "Activity side")
    lines += [
        "",
        f"Top {top} functions by tottime:",
        "",
        "| # | function | category | calls | tottime s | ms/step | cumtime s |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    ranked = sorted(result.stats.items(), key=lambda item: -item[1][2])
    for i, (key, (_, calls, tt, ct)) in enumerate(ranked[:top], 1):
        lines.append(
            f"| {i} | {_label(key)} | {category(key)} | {calls:,} | {tt:.3f} | {ms(tt)} | "
            f"{ct:.2f} |"
        )
    return lines


# -- the report -----------------------------------------------------------------------------


def _header(
    args: argparse.Namespace, started: dt.datetime, elapsed: float, load: tuple[str, str]
) -> list[str]:
    return [
        "# Scale benchmark: `AgentWorkflow` (A) vs a bare agent workflow (B), a worker "
        "process each",
        "",
        f"Command: `{args.command}`  ",
        f"Date: {started:%Y-%m-%d %H:%M} UTC; took {elapsed:.0f} s  ",
        f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}, temporalio {temporalio.__version__}; load average "
        f"before/after: {load[0]} / {load[1]} (a shared machine: compare ratios, not "
        "absolutes).",
        "",
        "One `temporal server start-dev` (SQLite file, headless) and one worker process per "
        "kind (`python -m benchmarks.bench_worker`, each on its own task queue, "
        f"max_concurrent_activities={MAX_CONCURRENT_ACTIVITIES}, "
        f"max_concurrent_workflow_tasks={MAX_CONCURRENT_WORKFLOW_TASKS}, connected with "
        "`DurableAgentPlugin`: pydantic converter and sandboxed runner for both, logs at "
        "WARNING). A = `AgentWorkflow`, a `TestModel` agent scripting k `lookup` tool calls "
        "then a text; B = `BareAgentWorkflow` from `benchmarks/temporal_bench.py` (per step "
        "a model-call and a tool-call activity). Both tools return 250 bytes. CPU figures are "
        "utime + stime of one process from /proc/<pid>/stat. Each worker ran one "
        f"{WARMUP_STEPS}-step run before the figures.",
        "",
        (
            "The `benchmarks` package is passed through the sandbox, so B's workflow module is "
            "imported once per process, as A's (`durable_agent`) is."
            if args.passthrough_benchmarks
            else "The sandbox re-imports a workflow's module for every new run unless it is "
            "passed through: `DurableAgentPlugin` passes `durable_agent` (A's module) through, "
            "while B's module (`benchmarks.temporal_bench`) is re-imported per run, as in "
            "temporal_bench (`--reimport-benchmarks`)."
        ),
    ]


def _command(argv: Sequence[str]) -> str:
    return " ".join([COMMAND, *argv])


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="AgentWorkflow vs a bare agent workflow, one worker process each."
    )
    parser.add_argument("measure", nargs="?", choices=MEASURES, default="all")
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs per round")
    parser.add_argument("--steps", type=int, default=10, help="steps per throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds per kind")
    parser.add_argument("--history-steps", type=int, default=100)
    parser.add_argument("--history-repeats", type=int, default=3)
    parser.add_argument("--replay-steps", type=int, default=300)
    parser.add_argument("--replays", type=int, default=5, help="timed replays per kind")
    parser.add_argument("--top", type=int, default=25, help="functions in the profile table")
    parser.add_argument(
        "--reimport-benchmarks",
        action="store_true",
        help="do not pass the benchmarks package through the sandbox: B's workflow module is "
        "then imported again for every run (A's never is), as temporal_bench measures it",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_FILE, help="Markdown output of `all`"
    )
    items = list(argv) if argv is not None else sys.argv[1:]
    args = parser.parse_args(items)
    args.passthrough_benchmarks = not args.reimport_benchmarks
    args.command = _command(items)
    return args


async def amain(args: argparse.Namespace) -> str:
    configure_logging("console", level=logging.WARNING)
    task = asyncio.current_task()
    if task is not None:  # SIGTERM unwinds like Ctrl-C: the server and workers are stopped
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    started = dt.datetime.now(dt.UTC)
    load_before = _load()
    began = time.perf_counter()
    measure = args.measure
    wanted = set(MEASURES[1:]) if measure == "all" else {measure}
    body: list[str] = []
    async with Harness(passthrough=args.passthrough_benchmarks) as harness:
        if wanted & {"throughput", "history", "replay"}:
            steps = {args.steps, args.history_steps}
            waiting = args.replay_steps if "replay" in wanted else 0
            pair = await Pair.open(harness, steps, waiting)
            await pair.warm_up()
            if "throughput" in wanted:
                _log(f"throughput: {args.rounds} round(s) of {args.runs} x {args.steps} steps")
                tp = await throughput(pair, args.runs, args.steps, args.rounds)
                body += render_throughput(tp)
            if "history" in wanted:
                _log(f"history: {args.history_repeats} x {args.history_steps} steps each")
                hist = await history(pair, args.history_steps, args.history_repeats)
                body += render_history(hist, args, started)
            if "replay" in wanted:
                _log(f"replay: {args.replay_steps} steps, {args.replays} replays each")
                rep = await replay(pair, args.replay_steps, args.replays)
                body += render_replay(rep, args.replays)
            await pair.stop()  # the profile's worker gets the machine to itself
        if "profile" in wanted:
            _log(f"profile: {args.runs} x {args.steps} steps")
            prof = await profile(harness, args.runs, args.steps)
            body += render_profile(prof, args.top)
    elapsed = time.perf_counter() - began
    return "\n".join(_header(args, started, elapsed, (load_before, _load())) + body) + "\n"


def main(argv: Iterable[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        text = asyncio.run(amain(args))
    except asyncio.CancelledError:
        raise SystemExit("scale_bench: stopped by SIGTERM") from None
    print(text)
    if args.measure == "all":
        args.results.write_text(text)
        _log(f"wrote {args.results}")


if __name__ == "__main__":
    # Run the importable module rather than this `__main__` copy, so the workflows replayed
    # here are the ones the workers import (and `--passthrough-benchmarks` passes through).
    from benchmarks import scale_bench

    scale_bench.main()
    exit_process(0)  # the SDK's native threads can abort interpreter finalization
