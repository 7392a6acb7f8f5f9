"""A worker whose workflow cache is full evicts runs and replays them when they wake (issue
41, item 4): the memory a waiting run keeps is bounded by the cache, not by how many runs
wait, only if a run evicted mid-wait comes back whole."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.temporal import AgentClient

from .helpers import CallLog
from .temporal_support import deploy_agent, new_worker, until_pending_approval

RUNS = 12
CACHED = 2


async def test_a_full_cache_evicts_waiting_runs_and_replays_them_without_errors(
    client: Client,
) -> None:
    """Twelve runs wait for an approval on a worker that caches two: each is evicted while
    it waits (its status queried meanwhile replays it, and is evicted again), then is
    approved and finishes. Every run ends with its output, the tool ran once a run, and no
    history has a failed workflow task (a replay that diverged, or a task that raised)."""
    log = CallLog()
    spec = deploy_agent(log, prefix="evict")
    async with new_worker(
        client, agents=[spec], max_cached_workflows=CACHED, max_concurrent_workflow_tasks=CACHED
    ) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        runs = [await agents.start(spec.name, f"deploy #{n}") for n in range(RUNS)]

        for run in runs:  # one at a time: each query brings an evicted run back
            await until_pending_approval(run)
        assert log.calls == [], "nothing runs before its approval"
        for run in reversed(runs):  # the least recently cached first
            view = await run.status()
            await run.approve(view.pending_approvals[0].tool_call_id, by="ops")
        results = await asyncio.wait_for(asyncio.gather(*(run.result() for run in runs)), 120)

    assert [r.output for r in results] == ["finished"] * RUNS
    assert log.counts["deploy"] == RUNS
    # Twelve runs waited at once on a cache of two, so at least ten were evicted and came
    # back by a replay (to answer a query or take the approval) at least once each.
    for run in runs:
        history = await client.get_workflow_handle(run.id).fetch_history()
        types = [event.event_type for event in history.events]
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in types, run.id
