"""A k-step run left waiting, as a run waiting for a human is (A: its agent then calls a tool
that needs approval; B: its loop then waits for a signal), replayed in this process with a
fresh `Replayer` as each side's worker would (A with the plugin), after one untimed replay;
replays alternate A and B. The time includes the replayer's fixed cost."""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from benchmarks import workload
from benchmarks.harness import Session, chain, compare, history_figures, log, order, wait_until
from durable_agent.temporal import DurableAgentPlugin


def replayer(kind: str, steps: int) -> Replayer:
    if kind == "A":
        plugin = DurableAgentPlugin(agents=[workload.agent(steps, waiting=True)])
        return Replayer(workflows=[], plugins=[plugin], workflow_runner=workload.sandbox_runner())
    return Replayer(
        workflows=[workload.BareAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workload.sandbox_runner(),
    )


async def replay_seconds(kind: str, steps: int, histories: list[WorkflowHistory]) -> float:
    began = time.perf_counter()
    fresh = replayer(kind, steps)
    for history in histories:
        await fresh.replay_workflow(history)
    return time.perf_counter() - began


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    steps, replays = (20, 2) if quick else (300, 5)
    pair = await session.pair("--waiting", str(steps))
    handles = {
        kind: await workload.start(session.client, kind, pair[kind].queue, steps, waiting=True)
        for kind in pair
    }
    try:
        for kind, handle in handles.items():
            waits = functools.partial(workload.is_waiting, kind, handle)
            await wait_until(waits, 60 + steps, f"the {kind} run did not wait")
        chains = {kind: await chain(session.client, h) for kind, h in handles.items()}
    finally:
        for handle in handles.values():
            with contextlib.suppress(RPCError):
                await handle.terminate(reason="benchmark: replay measured")
        for worker in pair.values():
            await session.stop(worker)
    for kind in ("A", "B"):  # untimed: imports, the first sandbox
        await replay_seconds(kind, steps, chains[kind])
    figures = {kind: history_figures(histories) for kind, histories in chains.items()}
    rows = []
    for i in range(replays):
        for kind in order(i):
            seconds = await replay_seconds(kind, steps, chains[kind])
            rows.append(
                {
                    "kind": kind,
                    "replay_ms": seconds * 1e3,
                    "ms_per_step": seconds / steps * 1e3,
                    "events": figures[kind]["events"],
                    "bytes": figures[kind]["bytes"],
                }
            )
            log(f"  replay {kind} #{i + 1}: {seconds:.3f} s")
    return {"steps": steps, "replays": rows, **compare(rows, ("replay_ms", "events", "bytes"))}
