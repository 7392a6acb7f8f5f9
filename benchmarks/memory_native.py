"""python -m benchmarks.memory_native [A|B ...] [--first N] [--more N]

Where the C heap of a cached waiting run goes (issue 41, item 4): the part of its RSS that
`benchmarks.memory_owners` (tracemalloc) cannot see: the SDK's Rust core, protobuf's
arenas, pydantic-core, and Python's own objects over 512 bytes, which Python takes from
`malloc`. Needs `heaptrack` (`apt-get install heaptrack`).

One side at a time, each in a process of its own under heaptrack, twice: `--first` runs of
one step left waiting (A's for an approval, B's for a signal, the workload of the `memory`
measure), then `--first` + `--more`. Each process leaves while its runs wait, without
freeing anything, so what heaptrack reports as leaked is what was live then. What the
second holds beyond the first, per run, is grouped by the kind of code that allocated it
(`KINDS`, matched against the whole native stack).

A diagnosis, not a measurement for the report: heaptrack slows the process, and it sees
`malloc`, not the arenas of Python's small-object allocator (`memory` reports those).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.worker import Worker

from benchmarks import workload
from benchmarks.harness import Handle, Session, log, parse_sides, wait_until
from benchmarks.memory import STEPS, start_waiting

__all__ = ["KINDS", "kind_of", "load_stacks", "main", "per_run"]

_CORE = "temporalio_sdk_core"
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core: state machines (slot map)", (_CORE, "slotmap")),
    ("core: history updates", (_CORE, "HistoryPaginator")),
    ("core: command queues", (_CORE, "vec_deque")),
    ("core: the rest", (_CORE,)),
    ("SDK bridge and client", ("temporal_sdk_bridge",)),
    ("protobuf messages Python holds", ("upb_",)),
    ("Python objects over 512 bytes", ("_PyObject_Malloc",)),
    ("pydantic-core", ("_pydantic_core",)),
)
"""Kinds of allocation: the first whose marks a stack all contains; else `other`."""

_WAITED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
}
"""A run whose history ends with one of these has work pending: it does not wait yet."""


def kind_of(stack: str) -> str:
    """The kind of an allocation from its stack (`frame;frame;...`, outermost first)."""
    for kind, marks in KINDS:
        if all(mark in stack for mark in marks):
            return kind
    return "other"


def load_stacks(path: Path) -> Counter[str]:
    """Bytes still allocated by kind, from heaptrack's flame-graph output of leaked bytes
    (one `frames value` line a stack)."""
    kinds: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, value = line.rstrip().rpartition(" ")
        if stack and value.isdigit():
            kinds[kind_of(stack)] += int(value)
    return kinds


def per_run(first: Counter[str], more: Counter[str], runs: int) -> dict[str, float]:
    """What the larger process holds beyond the smaller one, per run of the difference."""
    return {
        kind: (more[kind] - first[kind]) / runs
        for kind in sorted(set(first) | set(more), key=lambda k: first[k] - more[k])
    }


# -- the process heaptrack watches -----------------------------------------------------------


async def _waits(handle: Handle) -> bool:
    """Whether the run waits: its activities done (two a step and the last model call) and
    no task pending. Read from its history, not by asking it (a query to a worker under
    heaptrack did not return)."""
    events = [e async for e in handle.fetch_history_events()]
    done = sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED for e in events)
    return done == 2 * STEPS + 1 and events[-1].event_type not in _WAITED


async def _child(kind: str, runs: int, address: str) -> None:
    """Starts `runs` waiting runs on a worker in this process, on the dev server at
    `address`, then leaves at once. The server is the parent's: a process heaptrack watches
    starts none (a fork there could hang on heaptrack's lock)."""
    client, hosted = await workload.in_process_side(address, kind, STEPS)
    hosted["max_cached_workflows"] = runs + 100
    queue = f"memory-native-{uuid.uuid4().hex[:8]}"
    runner = workload.sandbox_runner()
    async with Worker(client, task_queue=queue, workflow_runner=runner, **hosted):
        handles = await start_waiting(client, kind, queue, runs)
        pending = list(handles)

        async def all_wait() -> bool:
            nonlocal pending
            waiting = await asyncio.gather(*(_waits(h) for h in pending))
            pending = [h for h, w in zip(pending, waiting, strict=True) if not w]
            return not pending

        await wait_until(all_wait, 120 + runs / 5, f"the {kind} runs did not all wait")
        gc.collect()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # nothing freed: what heaptrack reports as leaked was live now


def _traced(kind: str, runs: int, folder: Path, address: str) -> Counter[str]:
    """Live bytes by kind in a process of `runs` waiting runs of side `kind`."""
    prefix = folder / f"{kind}-{runs}"
    child = ["--child", kind, str(runs), address]
    command = [sys.executable, "-m", "benchmarks.memory_native", *child]
    subprocess.run(["heaptrack", "-o", str(prefix), *command], check=True, capture_output=True)
    (data,) = folder.glob(f"{prefix.name}.*")
    stacks = folder / f"{prefix.name}.stacks"
    subprocess.run(
        ["heaptrack_print", "-f", str(data), "--flamegraph-cost-type", "leaked", "-F", str(stacks)],
        check=True,
        capture_output=True,
    )
    return load_stacks(stacks)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--first", type=int, default=100, help="runs of the smaller process")
    parser.add_argument("--more", type=int, default=200, help="runs the larger one adds")
    parser.add_argument(
        "--child", nargs=3, metavar=("SIDE", "RUNS", "ADDRESS"), help=argparse.SUPPRESS
    )
    return parse_sides(parser, argv)


async def _measure(sides: list[str], first: int, more: int) -> dict[str, dict[str, float]]:
    """Per side, the growth per run between a process of `first` runs and one of `more`
    more, on one dev server."""
    found: dict[str, dict[str, float]] = {}
    async with Session() as session:
        with tempfile.TemporaryDirectory(prefix="memory-native-") as folder:
            for kind in sides:
                log(f"memory native: side {kind}, {first} then {first + more} runs")
                address = session.server.address
                smaller = await asyncio.to_thread(_traced, kind, first, Path(folder), address)
                larger = await asyncio.to_thread(_traced, kind, first + more, Path(folder), address)
                found[kind] = per_run(smaller, larger, more)
    return found


def main() -> None:
    args = parse()
    if args.child:
        side, runs, address = args.child
        asyncio.run(_child(side, int(runs), address))
        return
    if shutil.which("heaptrack") is None or shutil.which("heaptrack_print") is None:
        sys.exit("heaptrack is not installed: apt-get install heaptrack")
    found = asyncio.run(_measure(args.sides, args.first, args.more))
    kinds = sorted({k for side in found.values() for k in side}, key=lambda k: (k == "other", k))
    print("| kind, C heap per waiting run | " + " | ".join(found) + " |")
    print("| --- |" + " ---: |" * len(found))
    for kind in kinds:
        cells = " | ".join(f"{side.get(kind, 0.0) / 1024:.1f} kB" for side in found.values())
        print(f"| {kind} | {cells} |")
    totals = " | ".join(f"**{sum(side.values()) / 1024:.1f} kB**" for side in found.values())
    print(f"| all | {totals} |")


if __name__ == "__main__":
    main()
