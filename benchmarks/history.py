"""k-step runs one at a time, alternating A and B: wall and worker CPU per step (medians),
and the history of the median-time run: events and bytes over its continue-as-new chain, by
event type, and the activity payloads' JSON bytes by key."""

from __future__ import annotations

from typing import Any

from benchmarks import workload
from benchmarks.harness import Session, chain, compare, history_figures, log, order


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    steps, repeats = (10, 1) if quick else (100, 3)
    pair = await session.pair("--steps", f"2,{steps}")
    rows = []
    for i in range(repeats):
        for kind in order(i):
            async with session.timed(pair[kind]) as sample:
                handle = await workload.start(session.client, kind, pair[kind].queue, steps)
                await handle.result()
            figures = history_figures(await chain(session.client, handle))
            rows.append(
                {
                    "kind": kind,
                    "wall_ms": sample["wall"] / steps * 1e3,
                    "worker_cpu_ms": sample["worker_cpu"] / steps * 1e3,
                    "events_per_step": figures["events"] / steps,
                    "bytes_per_step": figures["bytes"] / steps,
                    "history": figures,
                }
            )
            log(f"  {steps} steps {kind}: {figures['events']} events, {figures['bytes']:,} bytes")
    for worker in pair.values():
        await session.stop(worker)
    median_run = {}
    for kind in ("A", "B"):
        side = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["wall_ms"])
        median_run[kind] = side[(len(side) - 1) // 2]["history"]
    slim = [{k: v for k, v in r.items() if k != "history"} for r in rows]
    keys = ("wall_ms", "worker_cpu_ms", "events_per_step", "bytes_per_step")
    return {"steps": steps, "runs": slim, **compare(slim, keys), "median_run": median_run}
