"""Cost of one in-process loop step: a model request plus one tool call, with TestModel.

    python -m benchmarks.loop_step [--steps 1000] [--repeats 5] [--freeze-imports]

Reports the median microseconds per step over the repeats. A step passes five checkpoints
(prepare_model_request, before_model_request, model_response, tool_call, tool_return), so
this is the overhead the durable loop adds on top of the model and the tools. Each repeat
starts after a full collection, so one repeat's leftovers are not collected in the next
one's time; the run's own garbage is collected as it goes, as in any process.

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


async def one_run(steps: int) -> tuple[float, int]:
    script = [
        ModelResponse(parts=[ToolCallPart(id=f"c{i}", name="lookup", arguments={"key": i})])
        for i in range(steps)
    ]
    script.append(ModelResponse(parts=[TextPart(text="done")]))
    executor = CountingExecutor()
    agent = (
        AgentBuilder(TestModel.with_responses(script))
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
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--freeze-imports", action="store_true")
    args = parser.parse_args()
    if args.freeze_imports:
        gc.collect()
        gc.freeze()
    timings = []
    checkpoints = 0
    for _ in range(args.repeats):
        gc.collect()
        elapsed, checkpoints = asyncio.run(one_run(args.steps))
        timings.append(elapsed / args.steps * 1e6)
    print(f"steps per run:        {args.steps}")
    print(f"checkpoints per run:  {checkpoints}")
    print(f"median us per step:   {statistics.median(timings):.1f}")
    print(f"min / max us per step: {min(timings):.1f} / {max(timings):.1f}")


if __name__ == "__main__":
    main()
