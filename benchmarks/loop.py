"""The in-process loop: microseconds a step (a model request and a tool call through five
checkpoints) with no model or tool cost. Each timing is a fresh process, after a warm-up run
and a full collection; the lengths take turns, so the machine's drift hits both alike.

    python -m benchmarks.loop STEPS MODEL   # one timing, printed in µs a step

`test` is TestModel's script; `unscripted` works each response out from the conversation's
length, holding no script, as a real model client holds none.

Timings on a shared machine swing by tens of percent between minutes, more than a change to
the loop moves them. So the loop is also counted in instructions, under valgrind's callgrind
when it is installed: a run of N steps minus a run of `BASE_STEPS`, over N - BASE_STEPS, is
what a step costs, start-up cancelled out, the same on any quiet or busy minute (garbage
collection included: the count grows with the run's length only if the loop's work does).
"""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import ROOT, log, median, ratio
from durable_agent import (
    AgentBuilder,
    AgentCheckpoint,
    Continue,
    Model,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
    UsageLimits,
)


class CountingExecutor:
    def __init__(self) -> None:
        self.count = 0

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue:
        self.count += 1
        return Continue()


def lookup(key: int) -> str:
    return "x" * 250


def response(step: int, steps: int) -> ModelResponse:
    if step < steps:
        return ModelResponse(
            parts=[ToolCallPart(id=f"c{step}", name="lookup", arguments={"key": step})]
        )
    return ModelResponse(parts=[TextPart(text="done")])


class UnscriptedModel(Model):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    @property
    def model_name(self) -> str:
        return "unscripted"

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        return response(len(messages) // 2, self.steps)


def model(name: str, steps: int) -> Model:
    if name == "unscripted":
        return UnscriptedModel(steps)
    return TestModel.with_responses([response(step, steps) for step in range(steps + 1)])


async def one_run(steps: int, model_name: str = "test") -> tuple[float, int]:
    """Seconds for a `steps`-lookup run, and the checkpoints it passed."""
    executor = CountingExecutor()
    builder = AgentBuilder(model(model_name, steps)).tool(lookup)
    agent = builder.usage_limits(UsageLimits(request_limit=None)).build()
    started = time.perf_counter()
    result = await agent.with_executor(executor).run("go")
    elapsed = time.perf_counter() - started
    assert result.output == "done"
    assert result.usage.tool_calls == steps
    return elapsed, executor.count


def timing(steps: int, model_name: str) -> float:
    """µs a step, from a process of its own."""
    command = [sys.executable, "-m", "benchmarks.loop", str(steps), model_name]
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return float(out)


BASE_STEPS = 100
"""The run whose instructions are subtracted: start-up, imports and the warm-up run."""


def instructions(steps: int, model_name: str) -> int:
    """Instructions a `steps`-step run's process executes, counted by callgrind."""
    command = [
        *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
        *(sys.executable, "-m", "benchmarks.loop", str(steps), model_name),
    ]
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {done.stderr[-500:]}")
    return int(found.group(1))


def counted(
    lengths: Sequence[int], base: int, models: Sequence[str] = ("test", "unscripted")
) -> dict[str, Any] | None:
    """Instructions a step at each length, per model (and the longest length's over the
    shortest's); None without valgrind."""
    if shutil.which("valgrind") is None:
        log("  loop instructions: valgrind is not installed, skipped")
        return None
    out: dict[str, Any] = {}
    for name in models:
        start = instructions(base, name)
        per_step = {
            str(steps): (instructions(steps, name) - start) / (steps - base) for steps in lengths
        }
        short, long = per_step[str(min(lengths))], per_step[str(max(lengths))]
        out[name] = {"per_step": per_step, f"{max(lengths)}/{min(lengths)}": ratio(long, short)}
        log(f"  loop {name}: {per_step} instructions a step")
    return {"base_steps": base, "models": out}


def measure(quick: bool) -> dict[str, Any]:
    lengths, repeats = ((200, 1000), 3) if quick else ((1000, 5000), 11)
    out: dict[str, Any] = {}
    for name in ("test", "unscripted"):
        timings: dict[int, list[float]] = {steps: [] for steps in lengths}
        for _ in range(repeats):
            for steps in lengths:
                timings[steps].append(timing(steps, name))
        medians = {steps: median(t) for steps, t in timings.items()}
        short, long = lengths
        out[name] = {
            "us_per_step": {str(k): t for k, t in timings.items()},
            "median_us_per_step": {str(k): m for k, m in medians.items()},
            f"{long}/{short}": ratio(medians[long], medians[short]),
        }
        log(f"  loop {name}: {medians}")
    return {
        "lengths": list(lengths),
        "repeats": repeats,
        "models": out,
        # A counted run takes half a minute of start-up under callgrind: not in --quick.
        "instructions": None if quick else counted(lengths, BASE_STEPS),
    }


if __name__ == "__main__":
    steps, name = int(sys.argv[1]), sys.argv[2]
    asyncio.run(one_run(5, name))
    gc.collect()
    elapsed, _ = asyncio.run(one_run(steps, name))
    print(elapsed / steps * 1e6)
