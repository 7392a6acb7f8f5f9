"""Memory a cached waiting run keeps in its worker (issue 41, item 4): runs of one step left
waiting, A's for the approval of a `deploy` call, B's for a signal, on a worker of each
side with room in its cache for all of them. Each side's worker is measured after a full
collection with a tenth of the runs waiting and again with all of them, so what the first
runs of a process cost once (imports, type adapters, caches filled) is left out: per run,
the growth of its resident memory (RSS), of the arenas of Python's small-object allocator
(the part of the RSS its small objects fill, with the space between them), of the C heap
(the SDK's Rust core, protobuf and Python's larger allocations: in use, and freed but held
by `malloc` between blocks still in use), of the objects its collector tracks and of the
interpreter's allocated blocks (which count strings and bytes too), over the runs between.

Whether a run waits is read without asking it (a query could fill what it keeps): A's from
the `PendingApprovals` search attribute, B's from its `is_waiting` query (it keeps nothing
for one).

The runs wait after one step (the goal's figure), and again after `LONGER` steps: what a
run keeps grows with its conversation (A's) or its last activity results (B's), so the
second figure, per step between the two, shows what a longer run costs beyond its first.
A run that waits keeps its conversation packed (`LiveRun.park`).

Started all at once, runs free memory (what they kept only until the wait) between blocks
other runs still use, which neither allocator can give back: the RSS then counts the burst's
working set too. The third measure starts the ten-step runs `WAVE` at a time, each wave
waiting before the next starts, as runs arriving over time do: the next wave reuses what
the last one freed, so the RSS is closer to what a waiting run keeps."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from benchmarks import workload
from benchmarks.harness import Handle, Session, WorkerProcess, log, ratio, wait_until

SIDES = ("A", "B")
STEPS = 1
LONGER = 10
"""Steps of the second measure's runs before they wait."""
WAVE = 20
"""Runs the third measure starts at a time, each wave waiting before the next starts."""
TOP = 12
"""Types listed per side: the most numerous per run."""


async def start_waiting(
    client: Client, kind: str, queue: str, count: int, steps: int = STEPS
) -> list[Handle]:
    handles = []
    for first in range(0, count, 100):  # starts in batches: the server's two cores are shared
        batch = min(100, count - first)
        handles += await asyncio.gather(
            *(workload.start(client, kind, queue, steps, waiting=True) for _ in range(batch))
        )
    return handles


async def all_waiting(client: Client, kind: str, queue: str, handles: list[Handle]) -> None:
    async def check() -> bool:
        if kind == "A":
            query = f"TaskQueue = '{queue}' AND PendingApprovals > 0"
            return (await client.count_workflows(query)).count >= len(handles)
        for first in range(0, len(handles), 100):
            batch = handles[first : first + 100]
            try:
                if not all(await asyncio.gather(*(workload.is_waiting(kind, h) for h in batch))):
                    return False
            except RPCError:  # a query timed out: a slow worker (tracemalloc's) is busy
                return False
        return True

    await wait_until(check, 120 + len(handles) / 5, f"the {kind} runs did not all wait")


async def _leave_waiting(
    client: Client,
    kind: str,
    queue: str,
    count: int,
    steps: int,
    wave: int | None,
    handles: list[Handle],
) -> None:
    """Adds `count` waiting runs to `handles`: all at once, or `wave` at a time, each wave
    waiting before the next starts (so the next reuses what the last one freed)."""
    size = wave or max(count, 1)  # all at once: one wave (none when there is no run)
    for first in range(0, count, size):
        new = await start_waiting(client, kind, queue, min(size, count - first), steps)
        handles += new
        # A's check counts the queue's waiting runs, so it is given all of them; B's asks each.
        await all_waiting(client, kind, queue, handles if kind == "A" else new)


async def one_side(
    session: Session,
    kind: str,
    worker: WorkerProcess,
    runs: int,
    steps: int,
    wave: int | None = None,
) -> dict[str, Any]:
    first = max(1, runs // 10)
    handles: list[Handle] = []
    client, queue = session.client, worker.queue
    try:
        await _leave_waiting(client, kind, queue, first, steps, wave, handles)
        before = await worker.memory()
        await _leave_waiting(client, kind, queue, runs - first, steps, wave, handles)
        after = await worker.memory()
    finally:
        for handle in handles:
            with contextlib.suppress(RPCError):
                await handle.terminate(reason="benchmark: memory measured")
    counted = runs - first
    types = {
        t: (after["types"].get(t, 0) - before["types"].get(t, 0)) / counted
        for t in set(after["types"]) | set(before["types"])
    }
    top = sorted(types.items(), key=lambda item: (-item[1], item[0]))[:TOP]
    return {
        "rss_kb_per_run": (after["rss_kb"] - before["rss_kb"]) / counted,
        "objects_per_run": sum(types.values()),
        "blocks_per_run": (after["blocks"] - before["blocks"]) / counted,
        "rss_mb": [round(before["rss_kb"] / 1024, 1), round(after["rss_kb"] / 1024, 1)],
        **{
            f"{key}_per_run": (after[key] - before[key]) / counted
            for key in ("arenas_kb", "heap_kb", "heap_free_kb", "traced_kb", "tracing_kb")
            if key in after
        },
        "by_type": dict(top),
    }


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    one = await _both_sides(session, STEPS, 100 if quick else 1000)
    longer = await _both_sides(session, LONGER, 50 if quick else 300)
    per_step = {
        kind: (longer[kind]["rss_kb_per_run"] - one[kind]["rss_kb_per_run"]) / (LONGER - STEPS)
        for kind in SIDES
    }
    waves = await _both_sides(session, LONGER, 30 if quick else 300, wave=10 if quick else WAVE)
    return {
        **one,
        "longer": {**longer, "rss_kb_per_step": per_step},
        "in_waves": waves,
        "goal": 1.5,
    }


async def _both_sides(
    session: Session, steps: int, runs: int, wave: int | None = None
) -> dict[str, Any]:
    # Room for every run (and the warm-up's): a cached run is what is measured.
    pair = await session.pair("--waiting", str(steps), "--max-cached", str(runs + 100))
    sides = {}
    how = f"{wave} at a time" if wave else "all at once"
    try:
        for kind in SIDES:
            sides[kind] = await one_side(session, kind, pair[kind], runs, steps, wave)
            log(
                f"  memory {kind}, {steps} step(s), {how}: "
                f"{sides[kind]['rss_kb_per_run']:.1f} kB, "
                f"{sides[kind]['objects_per_run']:.0f} objects a waiting run"
            )
    finally:
        for worker in pair.values():
            await session.stop(worker)
    a, b = sides["A"], sides["B"]
    return {
        "runs": runs,
        "steps": steps,
        "wave": wave,
        **sides,
        "A/B": {
            key: ratio(a[key], b[key])
            for key in (
                "rss_kb_per_run",
                "arenas_kb_per_run",
                "heap_kb_per_run",
                "objects_per_run",
                "blocks_per_run",
            )
            if key in a and key in b
        },
    }
