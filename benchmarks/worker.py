"""One benchmark worker process, so that its CPU (read from /proc) is one side's alone.

    python -m benchmarks.worker agent|local|bare|quota ADDRESS TASK_QUEUE --gc-file PATH
        [--steps 2,10,100] [--waiting 300] [--profile PATH] [--base-url URL] [--quota SPEC]
        [--max-cached N]

agent: `DurableAgentPlugin(agents=...)` with the workload's agents; local: the same, their
quick nodes as local activities (`workload.LOCAL`). bare: no plugin, the same
pydantic converter, Temporal's own sandbox (`workload.sandbox_runner`). quota: the quota
measure's agent on the chat-completions server at `--base-url`, each `--quota` (as `python
worker.py --quota`) given to the plugin's `quotas`. Prints `ready` once it polls; stops on
SIGTERM. On SIGUSR1 it writes its garbage collector's collections and
seconds per generation to `--gc-file`; on SIGUSR2 a census beside it (`.census`: tracked
objects by type, resident memory, allocated blocks, the small-object allocator's arenas, after
a full collection).
`--profile PATH`: cProfile with per-thread CPU time in the event loop's thread and every
workflow-task thread; PATH gets all of them, `PATH.workflow` the workflow-task threads
alone.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ctypes
import gc
import json
import logging
import os
import pstats
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from benchmarks import quota, workload
from durable_agent.cli.logs import configure_logging
from durable_agent.engine.quotas import parse_quota
from durable_agent.temporal import AgentActivityConfig, AgentRegistration, DurableAgentPlugin

SLOTS = 100
"""max_concurrent_activities and max_concurrent_workflow_tasks (the SDK's defaults)."""


class Collector:
    def __init__(self, path: Path) -> None:
        self.path, self.asked, self.began = path, 0, 0.0
        self.seconds, self.collections = [0.0, 0.0, 0.0], [0, 0, 0]
        self.collected = [0, 0, 0]
        gc.callbacks.append(self.observe)

    def observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self.began
            self.collections[info["generation"]] += 1
            self.collected[info["generation"]] += info["collected"]

    def write(self) -> None:
        self.asked += 1
        stats = {
            "asked": self.asked,
            "seconds": self.seconds,
            "collections": self.collections,
            "collected": self.collected,
        }
        self.path.with_suffix(".tmp").write_text(json.dumps(stats))
        self.path.with_suffix(".tmp").replace(self.path)

    def census(self) -> None:
        """The objects the collector tracks, by type, after a full collection: what is
        alive, not what is garbage waiting for the next one; and the process's resident
        memory then (kB) and the interpreter's allocated blocks, which count what the
        collector does not track (strings, bytes, numbers)."""
        self.asked += 1
        gc.collect()
        types = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
        found = {
            "asked": self.asked,
            "types": types,
            "rss_kb": resident_kb(),
            "blocks": sys.getallocatedblocks(),
            "arenas_kb": arenas_kb(),
            **c_heap_kb(),
        }
        if tracemalloc.is_tracing():  # PYTHONTRACEMALLOC=1: what of the RSS is Python's
            found["traced_kb"] = tracemalloc.get_traced_memory()[0] // 1024
            found["tracing_kb"] = tracemalloc.get_tracemalloc_memory() // 1024
        census = self.path.with_suffix(".census")
        census.with_suffix(".tmp").write_text(json.dumps(found))
        census.with_suffix(".tmp").replace(census)


_ARENAS = re.compile(r"^\d[\d,]* arenas \* \d+ bytes/arena\s*=\s*([\d,]+)$", re.MULTILINE)


def arenas_kb() -> int:
    """kB in the arenas of Python's small-object allocator: the part of the RSS that Python's
    small objects fill, the space between them included (the census' `blocks` counts only the
    objects). Read from `sys._debugmallocstats`, which writes to the C stderr alone, so that
    descriptor is pointed at a file while it runs. 0 where the interpreter has no such line
    (a build without pymalloc)."""
    with tempfile.TemporaryFile() as written:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(written.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        written.seek(0)
        text = written.read().decode(errors="replace")
    found = _ARENAS.search(text)
    return int(found.group(1).replace(",", "")) // 1024 if found else 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def c_heap_kb() -> dict[str, int]:
    """kB of the C heap (glibc's `mallinfo2`, every malloc arena): in use (`heap_kb`, the
    Rust core's, protobuf's, Python's objects over 512 bytes; Python's small-object arenas
    are mapped apart) and free but held by the allocator (`heap_free_kb`: what was freed
    between blocks still in use, which the RSS keeps). Empty without glibc 2.33 or later."""
    try:
        info = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    info.restype = _MallInfo2
    found = info()
    return {
        "heap_kb": (found.uordblks + found.hblkhd) // 1024,
        "heap_free_kb": found.fordblks // 1024,
    }


def resident_kb() -> int:
    """VmRSS of this process, from /proc (Linux only)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def run(args: argparse.Namespace) -> None:
    # the quota measure's 429s are expected: each would log a warning and a traceback
    configure_logging("console", level=logging.ERROR if args.kind == "quota" else logging.WARNING)
    steps = [int(k) for k in args.steps.split(",")]
    runner = workload.sandbox_runner()
    if args.kind in ("agent", "local"):
        agents = [workload.agent(k) for k in steps]
        agents += [workload.agent(args.waiting, waiting=True)] if args.waiting else []
        options = workload.LOCAL if args.kind == "local" else AgentActivityConfig()
        plugin = DurableAgentPlugin(agents=[AgentRegistration(a, options) for a in agents])
        client = await Client.connect(args.address, plugins=[plugin])
        workflows, activities = [], []
    elif args.kind == "quota":
        quotas = dict(parse_quota(spec) for spec in args.quota)
        plugin = DurableAgentPlugin(agents=[quota.agent(args.base_url)], quotas=quotas)
        client = await Client.connect(args.address, plugins=[plugin])
        workflows, activities = [], []
    else:
        client = await Client.connect(args.address, data_converter=pydantic_data_converter)
        workflows, activities = [workload.BareAgentWorkflow], workload.BARE_ACTIVITIES
    profilers: list[cProfile.Profile] = []
    lock = threading.Lock()

    def profile_thread() -> None:
        profiler = cProfile.Profile(time.thread_time)
        with lock:
            profilers.append(profiler)
        profiler.enable()

    executor = ThreadPoolExecutor(SLOTS, "temporal_workflow_", profile_thread)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=workflows,
        activities=activities,
        max_concurrent_activities=SLOTS,
        max_concurrent_workflow_tasks=SLOTS,
        workflow_runner=runner,
        workflow_task_executor=executor if args.profile else None,
        **({"max_cached_workflows": args.max_cached} if args.max_cached else {}),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    collector = Collector(args.gc_file)
    loop.add_signal_handler(signal.SIGUSR1, collector.write)
    loop.add_signal_handler(signal.SIGUSR2, collector.census)
    running = asyncio.create_task(worker.run())
    while not worker.is_running:
        if running.done():
            return await running
        await asyncio.sleep(0.01)
    main = cProfile.Profile(time.thread_time)
    if args.profile:
        main.enable()
    print("ready", flush=True)
    await asyncio.wait([running, asyncio.create_task(stop.wait())], return_when="FIRST_COMPLETED")
    await worker.shutdown()
    main.disable()
    executor.shutdown(wait=True)
    if args.profile:
        merged = pstats.Stats(main)
        if profilers:
            threads = pstats.Stats(*profilers)
            threads.dump_stats(f"{args.profile}.workflow")
            merged.add(threads)
        merged.dump_stats(args.profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=["agent", "local", "bare", "quota"])
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("--gc-file", type=Path, required=True)
    parser.add_argument("--steps", default="2")
    parser.add_argument("--waiting", type=int, default=0)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--base-url")
    parser.add_argument("--quota", action="append", default=[])
    parser.add_argument("--max-cached", type=int, help="max_cached_workflows (SDK default)")
    code = 0
    try:
        asyncio.run(run(parser.parse_args()))
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK's native threads can abort interpreter finalization


if __name__ == "__main__":
    main()
