"""python -m benchmarks.memory_owners [A|B ...] [--first N] [--more N]

Where the Python memory of a cached waiting run goes (issue 41, item 4): the `memory`
measure says how much a run keeps (RSS, objects, blocks); this says which code allocated
it. One side at a time, in this process (tracemalloc only sees its own), on a dev server of
its own: `--first` runs of one step left waiting (A's for an approval, B's for a signal),
a snapshot after a full collection, `--more` runs again, a second snapshot. What the second
holds beyond the first, per run, is grouped by its owner: the innermost frame of the
allocation in `durable_agent` or `benchmarks`, else in `temporalio`, else the innermost.

A diagnosis, not a measurement for the report: tracemalloc slows the worker several times
over (workflow tasks then overrun their 5 s warning), and sees neither the SDK's Rust core
nor protobuf's arenas, the rest of the RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.worker import Worker

from benchmarks import workload
from benchmarks.harness import Session, log, parse_sides
from benchmarks.memory import all_waiting, start_waiting
from durable_agent.cli.logs import configure_logging

__all__ = ["main", "owners", "parse"]

FRAMES = 25
OURS = ("/durable_agent/", "/benchmarks/")


PASSING = ("/durable_agent/temporal/sandbox.py", "/benchmarks/memory_owners.py")
"""Frames of ours that only pass the SDK's calls on (the sandbox's wrapper of every workflow
instance, this diagnosis's own `main`): they would own all the SDK allocates."""


def owner(traceback: Sequence[tracemalloc.Frame]) -> str:
    """`file:line` of the frame that answers for an allocation (frames run oldest first)."""
    frames = [f for f in traceback if not f.filename.endswith(PASSING)]
    for marks in (OURS, ("/temporalio/",)):
        for frame in reversed(frames):
            if any(mark in frame.filename for mark in marks):
                return _short(frame)
    return _short(traceback[-1])


def _short(frame: tracemalloc.Frame) -> str:
    """The frame's file from its package down (`durable_agent/...`, `temporalio/...`), a
    standard module's by its name."""
    name = frame.filename
    for mark in (*OURS, "/site-packages/"):
        if mark in name:
            name = name[name.rindex(mark) :].lstrip("/").removeprefix("site-packages/")
            break
    else:
        name = Path(name).name
    return f"{name}:{frame.lineno}"


def _snapshot() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )


async def owners(kind: str, first: int, more: int) -> dict[str, Any]:
    """Per waiting run of side `kind`: traced bytes and blocks in all and by owner."""
    async with Session() as session:
        client, hosted = await workload.in_process_side(session.server.address, kind)
        queue = f"memory-owners-{uuid.uuid4().hex[:8]}"
        runner = workload.sandbox_runner()
        async with Worker(client, task_queue=queue, workflow_runner=runner, **hosted):
            handles = await start_waiting(session.client, kind, queue, first)
            await all_waiting(session.client, kind, queue, handles)
            before = _snapshot()
            handles += await start_waiting(session.client, kind, queue, more)
            await all_waiting(session.client, kind, queue, handles)
            after = _snapshot()
    sizes: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    for stat in after.compare_to(before, "traceback"):
        name = owner(list(stat.traceback))
        sizes[name] += stat.size_diff
        blocks[name] += stat.count_diff
    return {
        "kind": kind,
        "runs": more,
        "bytes_a_run": sum(sizes.values()) / more,
        "blocks_a_run": sum(blocks.values()) / more,
        "owners": [(name, size / more, blocks[name] / more) for name, size in sizes.most_common()],
    }


def _print(found: dict[str, Any], top: int) -> None:
    print(
        f"{found['kind']}: {found['bytes_a_run'] / 1024:.1f} KiB and "
        f"{found['blocks_a_run']:.0f} blocks a waiting run ({found['runs']} runs)"
    )
    for name, size, blocks in found["owners"][:top]:
        print(f"  {size:8.0f} B {blocks:6.1f} blocks  {name}")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--first", type=int, default=100, help="runs before the first snapshot")
    parser.add_argument("--more", type=int, default=400, help="runs between the snapshots")
    parser.add_argument("--top", type=int, default=20, help="owners listed per side")
    return parse_sides(parser, argv)


def main() -> None:
    args = parse()
    configure_logging("console", level=logging.WARNING)
    tracemalloc.start(FRAMES)
    for kind in args.sides:
        log(f"memory owners: side {kind}")
        _print(asyncio.run(owners(kind, args.first, args.more)), args.top)


if __name__ == "__main__":
    main()
