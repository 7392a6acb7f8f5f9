"""Model quotas (issue 30). `runs` runs of `steps` model requests each (a `lookup` call that
returns at once, until the last request, which answers) start at once on two worker
processes, against a chat-completions server that refuses with 429 and Retry-After (the
seconds until its oldest accepted request leaves the window) once `limit` requests came in the
last WINDOW seconds. Once with the quota configured on both workers (`--quota
openai:gpt-4o-mini=rpm:N`, N the server's limit a minute), once without; rounds alternate
the order. Each round has a fresh server, task queue (so a fresh quota keeper) and workers.

Per round: completion time (the first start to the last result), against the ideal the limit
allows: the first `limit` requests go at once and each window lets `limit` more go, so the
last of R requests goes no earlier than (ceil(R / limit) - 1) * WINDOW; the server's answers and
429s; how many runs completed; the workers' and the server's CPU."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks import workload
from benchmarks.harness import Session, log, median, ratio
from durable_agent import AgentBuilder, UsageLimits
from durable_agent.agent.agent import Agent
from durable_agent.models.openai import OpenAIChatModel

MODEL = "gpt-4o-mini"
KEY = f"openai:{MODEL}"
AGENT = "bench-quota"
WINDOW = 10.0
SIDES = ("with quota", "without quota")


def agent(base_url: str) -> Agent[Any]:
    """The agent both sides run: the server decides how many `lookup` calls it makes."""
    model = OpenAIChatModel(MODEL, base_url=base_url, api_key="sk-test")
    builder = AgentBuilder(model).name(AGENT).tool(workload.lookup)
    return builder.usage_limits(UsageLimits(request_limit=None)).build()


def answer(steps: int) -> Callable[[dict[str, Any]], Any]:
    """The server's reply to a conversation's request n: a `lookup` call while n < steps,
    then a text (n is one more than the assistant messages the request carries)."""
    from tests.support.openai_server import TextReply, ToolCall, ToolCallsReply

    def reply(body: dict[str, Any]) -> Any:
        made = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if made + 1 < steps:
            return ToolCallsReply([ToolCall(f"c{made}", "lookup", {"key": made})])
        return TextReply("done")

    return reply


def ideal(requests: int, limit: int) -> float:
    return (math.ceil(requests / limit) - 1) * WINDOW


async def one_round(
    session: Session, side: str, runs: int, steps: int, limit: int, timeout: float
) -> dict[str, Any]:
    from durable_agent.temporal import AgentClient
    from tests.support.limited_server import limited_server

    queue = f"bench-quota-{uuid.uuid4().hex[:8]}"
    options = {"limit": limit, "window": WINDOW, "retry_after": None}
    with limited_server(**options, answer=answer(steps), replies=100_000) as limited:
        args = ["--base-url", limited.server.base_url]
        if side == "with quota":
            args += ["--quota", f"{KEY}=rpm:{round(limit * 60 / WINDOW)}"]
        workers = await asyncio.gather(
            *(session.worker("quota", *args, queue=queue) for _ in range(2))
        )
        try:
            agents = AgentClient(session.client, task_queue=queue)
            cpu, server_cpu = sum(w.cpu() for w in workers), session.server_cpu()
            began = time.perf_counter()
            started = await asyncio.gather(
                *(agents.start(AGENT, f"question {i}") for i in range(runs))
            )
            results = [asyncio.ensure_future(run.result()) for run in started]
            await asyncio.wait(results, timeout=timeout)
            completion = time.perf_counter() - began
            cpu = sum(w.cpu() for w in workers) - cpu
            server_cpu = session.server_cpu() - server_cpu
            for result in results:
                result.cancel()
            completed = sum(
                1
                for r in results
                if r.done() and not r.cancelled() and not r.exception()
                if r.result().status == "completed"
            )
        finally:
            for worker in workers:
                await session.stop(worker)
        answered, refused = limited.answered, limited.refused
    requests = answered + refused
    return {
        "side": side,
        "completion_s": completion,
        "vs_ideal": ratio(completion, ideal(runs * steps, limit)),
        "answered": answered,
        "refused": refused,
        "requests": requests,
        "refused_share": refused / requests if requests else 0.0,
        "completed": completed,
        "all_completed": completed == runs,
        "worker_cpu_s": cpu,
        "server_cpu_s": server_cpu,
    }


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    runs, steps, limit, rounds, timeout = (10, 2, 10, 1, 120) if quick else (50, 5, 50, 2, 600)
    rows = []
    for i in range(rounds):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            row = {"round": i + 1, **await one_round(session, side, runs, steps, limit, timeout)}
            rows.append(row)
            log(
                f"  quota {runs}x{steps} {side} #{i + 1}: {row['completion_s']:.1f} s, "
                f"{row['refused']} 429s of {row['requests']} requests, "
                f"{row['completed']}/{runs} completed"
            )
    sides = {}
    for side in SIDES:
        mine = [r for r in rows if r["side"] == side]
        keys = ("completion_s", "vs_ideal", "refused_share")
        sides[side] = {key: median(r[key] for r in mine) for key in keys}
        for key in ("refused", "requests"):  # whole numbers, unless two rounds split them
            count = median(r[key] for r in mine)
            sides[side][key] = int(count) if count.is_integer() else count
        sides[side]["all_completed"] = all(r["all_completed"] for r in mine)
    return {
        "runs": runs,
        "steps": steps,
        "requests_needed": runs * steps,
        "limit": limit,
        "window_s": WINDOW,
        "quota": f"{KEY}=rpm:{round(limit * 60 / WINDOW)}",
        "ideal_s": ideal(runs * steps, limit),
        "rounds": rows,
        **sides,
    }
