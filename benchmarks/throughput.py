"""Concurrent runs: rounds rotate A L B, L B A, B A L, ...; in each, `runs` k-step runs start
at once and the round ends with the last result. Per step: wall, steps/s, CPU of that side's worker
process and of the server, its garbage collector's time and the objects it freed (reference
cycles: what reference counting could not free), workflow tasks and history bytes."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks import workload
from benchmarks.harness import Session, chain, compare, history_figures, log, order

SIDES = ("A", "L", "B")
"""L: A with `local_activities` for its quick nodes, the choice the README weighs."""
KEYS = (
    "steps_per_s",
    "worker_cpu_ms",
    "server_cpu_ms",
    "gc_ms",
    "gc_freed",
    "workflow_tasks",
    "history_bytes",
)


async def one_round(session: Session, kind: str, queue: str, runs: int, steps: int) -> Any:
    handles = await asyncio.gather(
        *(workload.start(session.client, kind, queue, steps) for _ in range(runs))
    )
    await asyncio.gather(*(h.result() for h in handles))
    return handles


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    runs, rounds = (10, 1) if quick else (100, 5)
    out = {}
    for steps in (3,) if quick else (10, 1):
        pair = await session.pair("--steps", f"2,{steps}", kinds=SIDES)
        rows = []
        for i in range(rounds):
            for kind in order(i, SIDES):
                worker, total = pair[kind], runs * steps
                gc_before = await worker.collector()
                async with session.timed(worker) as sample:
                    handles = await one_round(session, kind, worker.queue, runs, steps)
                gc_after = await worker.collector()
                histories = [h for x in handles for h in await chain(session.client, x)]
                figures = history_figures(histories)
                gc = [a - b for a, b in zip(gc_after["seconds"], gc_before["seconds"], strict=True)]
                collections = [
                    a - b
                    for a, b in zip(gc_after["collections"], gc_before["collections"], strict=True)
                ]
                freed = sum(gc_after["collected"]) - sum(gc_before["collected"])
                row = {
                    "round": i + 1,
                    "kind": kind,
                    "wall_s": sample["wall"],
                    "steps_per_s": total / sample["wall"],
                    "worker_cpu_ms": sample["worker_cpu"] / total * 1e3,
                    "server_cpu_ms": sample["server_cpu"] / total * 1e3,
                    "gc_ms": sum(gc) / total * 1e3,
                    "gc_collections": collections,
                    "gc_freed": freed / total,
                    "workflow_tasks": figures["workflow_tasks"] / total,
                    "history_bytes": figures["bytes"] / total,
                }
                rows.append(row)
                log(f"  {runs}x{steps} {kind} #{i + 1}: {row['steps_per_s']:.1f} steps/s")
        for worker in pair.values():
            await session.stop(worker)
        out[f"{runs}x{steps}"] = {
            "runs": runs,
            "steps": steps,
            "rounds": rows,
            **compare(rows, KEYS),
        }
    return out
