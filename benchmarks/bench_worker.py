"""One benchmark worker process: `AgentWorkflow` (agent) or the bare workflows (bare).

    python -m benchmarks.bench_worker --kind agent|bare --address HOST:PORT --task-queue Q
        [--steps 2,10,100] [--waiting-steps 300] [--profile PATH] [--passthrough-benchmarks]

`benchmarks.scale_bench` runs each kind in a process of its own so that the CPU one kind of
workflow costs can be read from that process's /proc/<pid>/stat, apart from the client,
the server and the other kind. Both kinds connect with `DurableAgentPlugin`, so they share
its pydantic converter and sandbox settings (the plugin also adds `AgentWorkflow` and its
activities to the bare worker, which then simply never gets an agent run on its queue).

The worker prints `ready` on stdout once it polls, and shuts down on SIGTERM or SIGINT.
With `--profile PATH`, cProfile (per-thread CPU time, `time.thread_time`) records from
`ready` to shutdown: the main thread (event loop: activities, pollers, payload conversion
of activities) and every workflow-task thread (activations in the sandbox), since the SDK
runs workflow code on a thread pool that a main-thread profiler would not see. PATH gets
all threads merged; `PATH.workflow` the workflow-task threads alone.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import logging
import pstats
import signal
import threading
import time
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from benchmarks.scale_bench import (
    BareWaitingWorkflow,
    bare_options,
    passthrough_runner,
    waiting_agent,
)
from benchmarks.temporal_bench import (
    BARE_ACTIVITIES,
    MAX_CONCURRENT_ACTIVITIES,
    MAX_CONCURRENT_WORKFLOW_TASKS,
    BareAgentWorkflow,
    bench_agent,
)
from durable_agent.logs import configure_logging
from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.registry import registry
from durable_agent.temporal.worker import exit_process

READY = "ready"


class ThreadProfiles:
    """A CPU-time profiler per workflow-task thread, started as each thread starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.profilers: list[cProfile.Profile] = []

    def start_thread(self) -> None:
        profiler = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profilers.append(profiler)
        profiler.enable()

    def executor(self) -> ThreadPoolExecutor:
        """The SDK's default workflow-task pool, with a profiler in each of its threads."""
        return ThreadPoolExecutor(
            max_workers=MAX_CONCURRENT_WORKFLOW_TASKS,
            thread_name_prefix="temporal_workflow_",
            initializer=self.start_thread,
        )


class Collector:
    """The garbage collector's time and collections per generation in this process, written
    to a file when asked (SIGUSR1): the parent reads it around each round."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self.requests = 0
        self._began = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._began
            self.collections[info["generation"]] += 1

    def write(self) -> None:
        self.requests += 1
        stats = {"request": self.requests, "seconds": self.seconds, "collections": self.collections}
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(stats))
        partial.replace(self.path)


async def run(args: argparse.Namespace) -> None:
    configure_logging("console", level=logging.WARNING)
    if args.kind == "agent":
        for steps in args.steps:
            registry.register(bench_agent(steps), replace=True)
        if args.waiting_steps:
            registry.register(waiting_agent(args.waiting_steps), replace=True)
    options: dict[str, Any] = {}
    if args.kind == "agent":
        client = await Client.connect(args.address, plugins=[DurableAgentPlugin()])
        if args.passthrough_benchmarks:
            options["workflow_runner"] = passthrough_runner()
    else:
        # Bare Temporal: the same converter, no durable-agent plugin.
        client = await Client.connect(args.address, data_converter=pydantic_data_converter)
        options.update(bare_options(args.passthrough_benchmarks))
    threads = ThreadProfiles() if args.profile else None
    executor = threads.executor() if threads else None
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[] if args.kind == "agent" else [BareAgentWorkflow, BareWaitingWorkflow],
        activities=[] if args.kind == "agent" else BARE_ACTIVITIES,
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
        max_concurrent_workflow_tasks=MAX_CONCURRENT_WORKFLOW_TASKS,
        workflow_task_executor=executor,
        **options,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running = asyncio.create_task(worker.run())
    # `run` validates against the server before it polls; `is_running` turns true then.
    while not worker.is_running:
        if running.done():
            await running  # raises why it did not start
            return
        await asyncio.sleep(0.01)
    main_profiler = cProfile.Profile(time.thread_time) if args.profile else None
    if main_profiler is not None:
        main_profiler.enable()
    if args.gc_stats is not None:
        loop.add_signal_handler(signal.SIGUSR1, Collector(args.gc_stats).write)
    print(READY, flush=True)
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not running.done():
        await worker.shutdown()
    stopping.cancel()
    if main_profiler is not None:
        main_profiler.disable()
    await running
    if executor is not None:
        # The threads end first, so no profiler is still recording when it is read.
        executor.shutdown(wait=True)
    if main_profiler is not None and threads is not None:
        dump(args.profile, main_profiler, threads.profilers)


def dump(path: Path, main: cProfile.Profile, workflow: list[cProfile.Profile]) -> None:
    merged = pstats.Stats(main)
    if workflow:
        threads = pstats.Stats(*workflow)
        threads.dump_stats(f"{path}.workflow")
        merged.add(threads)
    merged.dump_stats(path)


def _steps(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A worker for benchmarks.scale_bench.")
    parser.add_argument("--kind", choices=["agent", "bare"], required=True)
    parser.add_argument("--address", required=True, help="HOST:PORT of the Temporal server")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument(
        "--steps", type=_steps, default=[2, 10, 100], help="k of the bench agents to register"
    )
    parser.add_argument(
        "--waiting-steps",
        type=int,
        default=0,
        help="register the agent that waits for approval after this many steps (0: none)",
    )
    parser.add_argument("--profile", type=Path, default=None, help="cProfile stats file")
    parser.add_argument(
        "--gc-stats",
        type=Path,
        default=None,
        help="write the garbage collector's collections and time per generation here on SIGUSR1",
    )
    parser.add_argument(
        "--passthrough-benchmarks",
        action="store_true",
        help="pass the benchmarks package through the sandbox (see scale_bench)",
    )
    return parser.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> None:
    """Exits without interpreter finalization (`exit_process`): the SDK's native threads
    can abort it after a clean shutdown, and the benchmark reads the exit code."""
    args = parse_args(argv)
    try:
        asyncio.run(run(args))
    except BaseException:
        traceback.print_exc()
        exit_process(1)
    exit_process(0)


if __name__ == "__main__":
    main()
