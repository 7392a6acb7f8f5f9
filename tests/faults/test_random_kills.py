"""50 concurrent runs on two worker processes while a killer SIGKILLs a random worker every
few seconds and starts a replacement: every run completes exactly once with the right
output, and no tool call finishes twice unless a kill made it start twice."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.failure.v1 import Failure as HistoryFailure
from temporalio.client import WorkflowExecutionStatus

from durable_agent.temporal.devserver import DevServer

from .agents import AGENTS, FANOUT_TOOL_STEPS, fanout_output
from .support import Faults, Handle, WorkerProcess, unique

pytestmark = pytest.mark.server

RUNS = 50
MAX_KILLS = 6
KILL_EVERY = (1.5, 3.0)
DEADLINE = 120.0


def test_every_call_may_lose_an_attempt_to_each_kill() -> None:
    """A call whose every attempt lands on the next victim fails only after more kills than
    the killer makes: the run then fails for some other reason, which the test should see."""
    (fanout,) = (r.activities for r in AGENTS if r.agent.name == "fault-fanout")
    for node in (fanout.model_request, fanout.tool_call):
        retry_policy = node.get("retry_policy")
        assert retry_policy is not None
        assert retry_policy.maximum_attempts > MAX_KILLS + 1


async def killer(faults: Faults, done: asyncio.Event, kills: list[tuple[float, str]]) -> None:
    """SIGKILLs a random working worker every 1.5-3 s and starts a replacement, until `done`.

    Only workers that already poll are victims: killing one still importing proves nothing.
    """
    rng = random.Random()
    while len(kills) < MAX_KILLS and not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), rng.uniform(*KILL_EVERY))
            return
        except TimeoutError:
            pass
        ready = [w for w in faults.alive_workers if w.ready()]
        if not ready:
            continue
        victim: WorkerProcess = rng.choice(ready)
        victim.kill()
        kills.append((round(time.monotonic() - faults.started, 1), victim.label))
        faults.spawn_worker()  # not waited for: the survivor goes on meanwhile


async def tool_attempts(handle: Handle) -> dict[str, tuple[int, HistoryFailure]]:
    """Per tool call id: the attempt Temporal recorded as the one that completed, and the
    failure of the attempt before it (empty for a first attempt)."""
    history = await handle.fetch_history()
    converter = handle._client.data_converter.payload_converter
    calls: dict[int, str] = {}
    out: dict[str, tuple[int, HistoryFailure]] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = converter.from_payload(event.user_metadata.summary, str)
            if summary.startswith("tool "):
                calls[event.event_id] = summary.rsplit(" ", 1)[-1]
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            call_id = calls.get(attributes.scheduled_event_id)
            if call_id is not None:
                out[call_id] = (attributes.attempt, attributes.last_failure)
    return out


async def test_fifty_runs_with_random_worker_kills(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "random-kills") as faults:
        await asyncio.gather(faults.start_worker(), faults.start_worker())
        prefix = unique("fanout")
        handles = await asyncio.gather(
            *(
                faults.start_run("fault-fanout", f"run {i}", workflow_id=f"{prefix}-{i:02d}")
                for i in range(RUNS)
            )
        )
        began = time.monotonic()
        done = asyncio.Event()
        kills: list[tuple[float, str]] = []
        kill_task = asyncio.create_task(killer(faults, done, kills))
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles)), DEADLINE
            )
        finally:
            done.set()
            await kill_task
        elapsed = time.monotonic() - began
        print(f"{RUNS} runs in {elapsed:.1f}s with {len(kills)} kills at {kills}")
        assert kills, "the killer never struck; the test proved nothing"

        # Each run completed exactly once, with its own output.
        ids = [h.id for h in handles]
        for workflow_id, result in zip(ids, results, strict=True):
            assert result.output == fanout_output(workflow_id), workflow_id
            assert result.status == "completed"
        client = await faults.client()
        executions: dict[str, list[WorkflowExecutionStatus | None]] = defaultdict(list)
        async for execution in client.list_workflows(f'WorkflowId STARTS_WITH "{prefix}-"'):
            executions[execution.id].append(execution.status)
        assert sorted(executions) == sorted(ids)
        wrong = {k: v for k, v in executions.items() if v != [WorkflowExecutionStatus.COMPLETED]}
        assert not wrong, wrong

        recorded = {h.id: await tool_attempts(h) for h in handles}
        retried = check_tool_calls(faults, ids, recorded)
        print(f"retried tool calls (call, started attempts, finished attempts): {retried}")

        # Every step of every run got its model response (a kill may have made one twice).
        responses: dict[str, set[int]] = defaultdict(set)
        for workflow_id, step, _ in faults.lines("model_responses"):
            responses[workflow_id].add(int(step))
        for workflow_id in ids:
            assert sorted(responses[workflow_id]) == [1, 2, 3, 4], workflow_id


def check_tool_calls(
    faults: Faults, ids: list[str], recorded: dict[str, dict[str, tuple[int, HistoryFailure]]]
) -> list[tuple[tuple[str, str], list[int], list[int]]]:
    """Every call finished; more than once only if it started more than once; attempts
    above 1 only where Temporal recorded a retry after a lost (timed-out) attempt."""
    started: dict[tuple[str, str], list[int]] = defaultdict(list)
    finished: dict[tuple[str, str], list[int]] = defaultdict(list)
    for name, table in (("tool_started", started), ("tool_finished", finished)):
        for workflow_id, call_id, attempt, key, _ in faults.lines(name):
            # The idempotency key is the same on every attempt and every worker.
            assert key == f"{workflow_id}:{call_id}", (name, workflow_id, call_id, key)
            table[(workflow_id, call_id)].append(int(attempt))
    expected = {(w, f"call_work_{n}") for w in ids for n in range(1, FANOUT_TOOL_STEPS + 1)}
    assert set(finished) == expected, "some tool call never finished"
    assert set(started) == expected
    retried = []
    for call, attempts in sorted(started.items()):
        workflow_id, call_id = call
        attempt, last_failure = recorded[workflow_id][call_id]
        done = finished[call]
        # Temporal never hands out one attempt twice, and accepts only the latest.
        assert len(attempts) == len(set(attempts)), (call, attempts)
        assert max(attempts) == attempt, (call, attempts, attempt)
        assert attempt in done, (call, done, attempt)
        assert set(done) <= set(attempts), (call, attempts, done)
        if len(done) > 1:
            assert len(attempts) > 1, (call, attempts, done)
        if attempt == 1:
            assert attempts == done == [1], (call, attempts, done)
            continue
        # Retried only because a worker vanished (heartbeats stopped), never because
        # the tool failed.
        assert last_failure.HasField("timeout_failure_info"), (call, last_failure)
        assert last_failure.timeout_failure_info.timeout_type in (
            TimeoutType.TIMEOUT_TYPE_HEARTBEAT,
            TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE,
        ), (call, last_failure)
        retried.append((call, attempts, done))
    return retried
