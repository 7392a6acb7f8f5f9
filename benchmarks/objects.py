"""What a run in flight keeps alive in its worker: `runs` k-step runs left waiting (A's and
L's for the approval of a last call, B's for a signal), each side's worker census of the
objects its garbage collector tracks, by type, against the same worker idle, per run.

Those objects live as long as the run stays cached: the collector's young collections
walk and promote them, which is the throughput measure's `gc_ms`. A census is taken after
a full collection, so it counts what is alive, not garbage still to be collected."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.service import RPCError

from benchmarks import workload
from benchmarks.harness import Session, WorkerProcess, log, ratio, wait_until

SIDES = ("A", "L", "B")
TOP = 15
"""Types listed per side: the most numerous per run."""


async def census_of_runs(
    session: Session, kind: str, worker: WorkerProcess, runs: int, steps: int
) -> dict[str, Any]:
    """Objects per run, in all and by type (the `TOP` most numerous), that `runs` waiting
    runs keep on `worker`."""
    idle = await worker.census()
    handles = await asyncio.gather(
        *(
            workload.start(session.client, kind, worker.queue, steps, waiting=True)
            for _ in range(runs)
        )
    )
    try:

        async def all_wait() -> bool:
            waits = await asyncio.gather(*(workload.is_waiting(kind, h) for h in handles))
            return all(waits)

        await wait_until(all_wait, 60 + runs * steps / 10, f"the {kind} runs did not all wait")
        busy = await worker.census()
    finally:
        for handle in handles:
            with contextlib.suppress(RPCError):
                await handle.terminate(reason="benchmark: objects counted")
    grown = {t: (busy.get(t, 0) - idle.get(t, 0)) / runs for t in set(busy) | set(idle)}
    # ties by name: a set's order differs between processes
    top = sorted(grown.items(), key=lambda item: (-item[1], item[0]))[:TOP]
    return {"objects_per_run": sum(grown.values()), "by_type": dict(top)}


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    runs, steps = (5, 3) if quick else (100, 10)
    pair = await session.pair("--waiting", str(steps), kinds=SIDES)
    sides = {}
    try:
        for kind, worker in pair.items():
            sides[kind] = await census_of_runs(session, kind, worker, runs, steps)
            log(f"  objects {kind}: {sides[kind]['objects_per_run']:.0f} a run")
    finally:
        for worker in pair.values():
            await session.stop(worker)
    per_run = {kind: side["objects_per_run"] for kind, side in sides.items()}
    return {
        "runs": runs,
        "steps": steps,
        **sides,
        "A/B": ratio(per_run["A"], per_run["B"]),
        "L/B": ratio(per_run["L"], per_run["B"]),
    }
