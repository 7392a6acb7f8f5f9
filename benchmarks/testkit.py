"""The test kit (issue 40): how long `AgentTestEnvironment` takes from `async with` to a
run's first result, and what `durable_agent.evals.evaluate` costs over starting the same
runs directly.

`env_start`: `AgentTestEnvironment([agent])` (the time-skipping test server, a worker, the
clients) entered, one run of a text agent started and its result awaited, timed from before
the `async with` (goal: 5 s or less); then the block left (teardown, timed apart).

`evals`: `cases` runs of A's 3-step agent (two `lookup` calls, then its answer: three model
requests and two tool calls each) on one A worker process, side by side: started directly
with `AgentClient.start` and awaited, at most `concurrency` at a time; and evaluated as a
pydantic-evals dataset of `cases` prompts with `evaluate(..., max_concurrency=concurrency)`
(each case's run started, awaited, its tool calls read from its history, scored by one
evaluator). Rounds alternate the order. Goal: evaluating within 1.3x the direct time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from benchmarks import workload
from benchmarks.harness import Session, log, median, ratio

STEPS = 2
"""`workload.agent(2)`: two lookups, then the answer (three model requests)."""
SIDES = ("direct", "evaluate")


async def env_start(rounds: int) -> dict[str, Any]:
    from durable_agent import AgentBuilder, TestModel
    from durable_agent.testing import AgentTestEnvironment

    agent = AgentBuilder(TestModel.with_text("ready")).name("bench-env").build()
    firsts, teardowns = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        environment = AgentTestEnvironment([agent])
        async with environment as env:
            result = await (await env.client.start("bench-env", "go")).result()
            assert result.output == "ready"
            firsts.append(time.perf_counter() - began)
            leaving = time.perf_counter()
        teardowns.append(time.perf_counter() - leaving)
    return {
        "rounds": rounds,
        "first_result_s": median(firsts),
        "first_result_max_s": max(firsts),
        "teardown_s": median(teardowns),
        "goal_s": 5.0,
    }


async def direct(session: Session, queue: str, cases: int, concurrency: int) -> float:
    from durable_agent.temporal import AgentClient

    agents = AgentClient(session.client, task_queue=queue)
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            run = await agents.start(workload.agent_name(STEPS), f"Case {index}")
            assert (await run.result()).status == "completed"

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(cases)))
    return time.perf_counter() - began


async def evaluated(session: Session, queue: str, cases: int, concurrency: int) -> float:
    from dataclasses import dataclass

    from pydantic_evals import Case, Dataset
    from pydantic_evals.evaluators import Evaluator, EvaluatorContext

    from durable_agent.evals import EvalRun, evaluate
    from durable_agent.temporal import AgentClient

    @dataclass
    class Looked(Evaluator[str, EvalRun]):
        def evaluate(self, ctx: EvaluatorContext[str, EvalRun]) -> bool:
            return len(ctx.output.tool_calls) == STEPS and ctx.output.status == "completed"

    dataset = Dataset(
        name="bench",
        cases=[Case(name=f"c{i}", inputs=f"Case {i}") for i in range(cases)],
        evaluators=[Looked()],
    )
    agents = AgentClient(session.client, task_queue=queue)
    began = time.perf_counter()
    report = await evaluate(
        workload.agent_name(STEPS),
        dataset,
        client=agents,
        name=f"bench-{uuid.uuid4().hex[:8]}",
        max_concurrency=concurrency,
        progress=False,
    )
    took = time.perf_counter() - began
    passed = sum(all(r.value for r in case.assertions.values()) for case in report.cases)
    assert not report.failures, report.failures[:1]
    assert passed == cases, passed
    return took


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    cases, concurrency, rounds, starts = (20, 20, 1, 1) if quick else (100, 20, 2, 3)
    log(f"  testkit: AgentTestEnvironment start to first result, {starts} time(s)")
    started = await env_start(starts)
    log(f"  testkit: first result after {started['first_result_s']:.2f} s")
    worker = await session.worker("agent", "--steps", str(STEPS))
    await (await workload.start(session.client, "A", worker.queue, STEPS)).result()  # warm
    rows = []
    try:
        for index in range(rounds):
            for side in SIDES if index % 2 == 0 else SIDES[::-1]:
                run = direct if side == "direct" else evaluated
                wall = await run(session, worker.queue, cases, concurrency)
                rows.append({"round": index + 1, "side": side, "wall_s": wall})
                log(f"  testkit {side} #{index + 1}: {cases} runs in {wall:.2f} s")
    finally:
        await session.stop(worker)
    walls = {side: median(r["wall_s"] for r in rows if r["side"] == side) for side in SIDES}
    return {
        "env": started,
        "cases": cases,
        "steps": STEPS + 1,
        "concurrency": concurrency,
        "rounds": rounds,
        "direct_s": walls["direct"],
        "evaluate_s": walls["evaluate"],
        "evaluate/direct": ratio(walls["evaluate"], walls["direct"]),
        "goal_ratio": 1.3,
        "rows": rows,
    }
