"""A's worker under cProfile (per-thread CPU time, workflow-task threads included) for one
round of concurrent runs, in a worker process of its own. The profiler inflates the times:
read shares. Own time (tottime) is grouped by the module each function belongs to, found
from `sys.path`, so no source path is written here."""

from __future__ import annotations

import asyncio
import os
import pstats
import re
import sys
from typing import Any

from benchmarks import workload
from benchmarks.harness import Session, log

StatKey = tuple[str, int, str]
BUILTIN = re.compile(r"of '([\w.]+)\.\w+' objects|built-in method ([\w.]+)\.\w+>")
WORKFLOW_ON_LOOP = ("temporalio.worker._workflow", "_handle_activation")
ACTIVITY_ON_LOOP = ("temporalio.worker._activity", "_handle_start_activity_task")
DEPTH = {"durable_agent.temporal": 3, "temporalio.worker": 3, "durable_agent": 2, "temporalio": 2}


def module(key: StatKey) -> str:
    """The dotted module of a profiled function (a builtin's from its owner's name)."""
    file, _, function = key
    if file == "~":
        found = BUILTIN.search(function)
        return next((g for g in found.groups() if g), "builtins") if found else "builtins"
    path = os.path.abspath(file)
    roots = [os.path.abspath(p or ".") + os.sep for p in sys.path]
    root = max((r for r in roots if path.startswith(r)), key=len, default=None)
    if root is None:
        return file  # <frozen ...>, <string>
    name = path[len(root) :].removesuffix(".py").replace(os.sep, ".")
    return name.removesuffix(".__init__")


def category(name: str) -> str:
    """A module's package, deep enough to tell the parts of this library and the SDK apart."""
    depth = next((d for prefix, d in DEPTH.items() if name.startswith(prefix)), 1)
    return ".".join(name.split(".")[:depth])


def summarize(stats: dict[StatKey, Any], workflow_threads: float, steps: int) -> dict[str, Any]:
    def ms(seconds: float) -> float:
        return seconds / steps * 1e3

    def cumulative(where: tuple[str, str]) -> float:
        return sum(v[3] for k, v in stats.items() if k[2] == where[1] and module(k) == where[0])

    total = sum(v[2] for v in stats.values())
    on_loop, activities = cumulative(WORKFLOW_ON_LOOP), cumulative(ACTIVITY_ON_LOOP)
    by_category: dict[str, float] = {}
    for key, value in stats.items():
        name = category(module(key))
        by_category[name] = by_category.get(name, 0.0) + value[2]
    ranked = sorted(stats.items(), key=lambda item: -item[1][2])[:25]
    return {
        "profiled_ms": ms(total),
        "sides_ms": {
            "workflow activations (workflow-task threads)": ms(workflow_threads),
            "workflow tasks on the event loop": ms(on_loop),
            "activities": ms(activities),
            "rest of the event loop": ms(total - workflow_threads - on_loop - activities),
        },
        "by_package_ms": {
            k: ms(v) for k, v in sorted(by_category.items(), key=lambda kv: -kv[1]) if ms(v) >= 0.05
        },
        "top_functions": [
            {
                "function": f"{module(key)}.{key[2]}" if key[0] != "~" else key[2],
                "calls": value[1],
                "tottime_ms": ms(value[2]),
                "cumtime_ms": ms(value[3]),
            }
            for key, value in ranked
        ],
    }


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    runs, steps = (10, 3) if quick else (100, 10)
    path = session.directory / "agent.prof"
    worker = await session.worker("agent", "--steps", str(steps), "--profile", str(path))
    log(f"  profile: {runs} x {steps} steps of A")
    try:
        async with session.timed(worker) as sample:
            handles = await asyncio.gather(
                *(workload.start(session.client, "A", worker.queue, steps) for _ in range(runs))
            )
            await asyncio.gather(*(h.result() for h in handles))
    finally:
        code = await session.stop(worker)
    if code != 0:
        raise RuntimeError(f"the profiled worker exited with code {code}")
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    threads = path.with_name(path.name + ".workflow")
    workflow = sum(v[2] for v in pstats.Stats(str(threads)).stats.values())  # type: ignore[attr-defined]
    total = runs * steps
    return {
        "runs": runs,
        "steps": steps,
        "wall_s": sample["wall"],
        "worker_cpu_ms": sample["worker_cpu"] / total * 1e3,
        **summarize(stats, workflow, total),
    }
