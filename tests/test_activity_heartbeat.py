"""Node activities heartbeat from event-loop timers, and leave nothing for the collector.

A worker runs thousands of node activities; one whose heartbeat timer kept a reference
cycle held its whole context (info, timer, context variables) until the garbage collector
found it, which is most of what made the collector run on a busy worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from durable_agent.temporal.activities import _guard


def _environment(heartbeat: float) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=heartbeat))
    return env


async def test_a_guarded_activity_heartbeats_while_it_runs_and_stops_after() -> None:
    env = _environment(0.15)
    beats: list[float] = []
    env.on_heartbeat = lambda *details: beats.append(asyncio.get_running_loop().time())

    async def body() -> None:
        async with _guard("agent", "tool_call", 1):
            await asyncio.sleep(0.3)

    await env.run(body)
    during = len(beats)
    assert during >= 2, beats
    await asyncio.sleep(0.2)
    assert len(beats) == during


async def test_a_guarded_activity_leaves_no_cycle_for_the_collector() -> None:
    env = _environment(30)

    async def body() -> int:
        async with _guard("agent", "tool_call", 1):
            return 1

    await env.run(body)  # the first run may set up what later runs share
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert await env.run(body) == 1
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0
