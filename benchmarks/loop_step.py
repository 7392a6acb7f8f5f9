"""Cost of one in-process loop step: a model request plus one tool call, with TestModel.

    python -m benchmarks.loop_step [--steps 1000] [--repeats 5] [--freeze-imports]
    python -m benchmarks.loop_step --steps 1000 5000 --repeats 7 [--model unscripted]

Reports the median microseconds per step over the repeats. Given several lengths, it runs
them in turns (1,000 then 5,000, then 1,000 again, ...) and reports each length's median and
their ratio: this machine's speed drifts by tens of percent over minutes, so lengths timed
one after the other in separate commands compare the minutes more than the lengths.

A step passes five checkpoints (prepare_model_request, before_model_request,
model_response, tool_call, tool_return), so this is the overhead the durable loop adds on
top of the model and the tools. Each repeat starts after a full collection, so one
repeat's leftovers are not collected in the next one's time; the run's own garbage is
collected as it goes, as in any process.

`--model unscripted` answers with a model that works out each step's response from the
conversation's length instead of TestModel's script: a run of n steps then holds no n
scripted responses (about nine objects each that the collector walks, as many as the
conversation's own eleven a step), as a real model client holds none.

`--freeze-imports` moves what the process holds before the first repeat (imported modules,
pydantic schemas) out of the collector's reach (`gc.freeze()`, as long-running servers do):
a diagnostic that separates the loop's own cost per step from CPython's full collections,
which walk that whole heap more often the more objects a longer run keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

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

CONTINUE = Continue()


class CountingExecutor:
    def __init__(self) -> None:
        self.count = 0

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue:
        self.count += 1
        return CONTINUE


def lookup(key: int) -> str:
    return "x" * 250


def step_response(step: int, steps: int) -> ModelResponse:
    """The model's answer at `step` of a `steps`-lookup run: a lookup, then the text."""
    if step < steps:
        return ModelResponse(
            parts=[ToolCallPart(id=f"c{step}", name="lookup", arguments={"key": step})]
        )
    return ModelResponse(parts=[TextPart(text="done")])


class UnscriptedModel(Model):
    """TestModel's script for `steps` lookups, worked out per request: the conversation
    is the prompt's request, then a response and a tool return per step, so its length
    says which step is next."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    @property
    def model_name(self) -> str:
        return "unscripted"

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        return step_response(len(messages) // 2, self.steps)


def scripted(steps: int) -> TestModel:
    return TestModel.with_responses([step_response(step, steps) for step in range(steps + 1)])


MODELS = {"test": scripted, "unscripted": UnscriptedModel}


async def one_run(steps: int, model: str = "test") -> tuple[float, int]:
    executor = CountingExecutor()
    agent = (
        AgentBuilder(MODELS[model](steps))
        .tool(lookup)
        .usage_limits(UsageLimits(request_limit=None))
        .build()
        .with_executor(executor)
    )
    started = time.perf_counter()
    result = await agent.run("go")
    elapsed = time.perf_counter() - started
    assert result.output == "done"
    assert result.usage.tool_calls == steps
    return elapsed, executor.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", choices=sorted(MODELS), default="test")
    parser.add_argument("--freeze-imports", action="store_true")
    args = parser.parse_args()
    if any(steps < 1 for steps in args.steps):
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.freeze_imports:
        gc.collect()
        gc.freeze()
    timings: dict[int, list[float]] = {steps: [] for steps in args.steps}
    checkpoints: dict[int, int] = {}
    for _ in range(args.repeats):
        for steps in timings:
            gc.collect()
            elapsed, checkpoints[steps] = asyncio.run(one_run(steps, args.model))
            timings[steps].append(elapsed / steps * 1e6)
    medians = {steps: statistics.median(t) for steps, t in timings.items()}
    for steps, t in timings.items():
        print(f"steps per run:        {steps}")
        print(f"checkpoints per run:  {checkpoints[steps]}")
        print(f"median us per step:   {medians[steps]:.1f}")
        print(f"min / max us per step: {min(t):.1f} / {max(t):.1f}")
    if len(medians) > 1:
        first, *rest = medians
        for steps in rest:
            ratio = medians[steps] / medians[first]
            print(f"{steps} / {first} steps, median per step: {ratio:.2f}")


if __name__ == "__main__":
    main()
