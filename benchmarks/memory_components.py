"""python -m benchmarks.memory_components [--runs N] [--top N]

Which part of a cached waiting run (issue 41, item 4) keeps its Python objects: the
question a redesign of the wait would have to answer first. `memory_owners` says which code
allocated what a run keeps, `memory_native` where its C heap goes; this says who holds it
now. `--runs` runs of A's one-step agent are left waiting for an approval on a worker in
this process (on a dev server of its own); after a full collection, the objects reachable
from one run's SDK instance and from no other run's are that run's own, and each is put
down to the first component that reaches it without passing through another component,
the workflow object, the SDK instance or a coroutine. Coroutines (the run's waiting call
chain) are a group of their own; what none reaches alone (shared between components) is
the rest.

Sizes are `sys.getsizeof`, a lower bound: it leaves out the allocator's rounding and
what an object holds outside the collector's view (an instance's inline attribute values on
3.11). The `memory` measure's blocks and RSS are the figures to quote; this splits them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import types
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.worker import Worker

from benchmarks import workload
from benchmarks.harness import Session, log
from benchmarks.memory import all_waiting, start_waiting
from durable_agent.cli.logs import configure_logging

__all__ = ["Part", "main", "own_objects", "parse", "parts", "reachable"]

OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
"""Shared by every run by construction (classes, modules, code): never a run's own."""
WAITING = (asyncio.Task, types.CoroutineType, types.FrameType)
HANDLERS = ("_signals", "_queries", "_updates")
"""The SDK instance's handler tables: a run's dynamic handlers live there."""


@dataclass(frozen=True)
class Part:
    name: str
    objects: int
    bytes: int
    types: list[tuple[str, int]]


def reachable(root: object, stop: set[int]) -> dict[int, object]:
    """Everything `root` reaches (itself included) without entering an object whose id is
    in `stop` or an `OPAQUE` one."""
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        item = todo.pop()
        key = id(item)
        if key in seen or key in stop or isinstance(item, OPAQUE):
            continue
        seen[key] = item
        todo.extend(gc.get_referents(item))
    return seen


def own_objects(run: object, others: Sequence[object]) -> dict[int, object]:
    """What `run` reaches and none of `others` does."""
    shared: set[int] = set()
    for other in others:
        shared |= set(reachable(other, set()))
    return {key: item for key, item in reachable(run, set()).items() if key not in shared}


def _part(name: str, found: Mapping[int, object]) -> Part:
    kinds = Counter(type(item).__name__ for item in found.values())
    size = sum(sys.getsizeof(item) for item in found.values())
    return Part(name, len(found), size, kinds.most_common(4))


def parts(
    own: Mapping[int, object],
    components: Sequence[tuple[str, object]],
    walls: Iterable[object] = (),
) -> list[Part]:
    """`own` split between `components` (in order: the first to reach an object alone gets
    it), the waiting coroutines and the rest; each object is in one part. A component's
    reach stops at the other components, at `walls` and at every coroutine, task and frame."""
    stop = {id(item) for _, item in components} | {id(item) for item in walls}
    waiting = {key: item for key, item in own.items() if isinstance(item, WAITING)}
    stop |= set(waiting)
    taken = set(waiting)  # a component that is a task (the SDK's primary one) is a waiter
    found: list[Part] = []
    for name, component in components:
        reach = {id(component): component} if id(component) in own else {}
        for child in gc.get_referents(component):
            reach.update(reachable(child, stop | taken))
        mine = {key: item for key, item in reach.items() if key in own and key not in taken}
        taken |= set(mine)
        found.append(_part(name, mine))
    found.append(_part("the waiting coroutines", waiting))
    rest = {k: v for k, v in own.items() if k not in taken}
    found.append(_part("the rest", rest))
    return found


def _components(instance: Any) -> list[tuple[str, object]]:
    """A waiting run's parts, the loop's first (while a run has one: a waiting run has
    let go of it and its state), then the workflow's components, then the SDK instance's."""
    run = instance._object
    controller = run.live.controller
    loop = controller.loop  # None: a waiting run keeps its state packed (`LiveRun.park`)
    named: list[tuple[str, object]] = []
    if loop is not None:
        named += [
            ("conversation (state.message_history)", loop.state.message_history),
            ("state (the rest of it)", loop.state),
            ("loop", loop),
        ]
    named.append(("controller, agent and runner", controller))
    named += [(f"workflow.{name}", value) for name, value in vars(run).items()]
    sdk = vars(instance)
    named += [(f"sdk.{name}", sdk[name]) for name in HANDLERS]
    named += [(f"sdk.{n}", v) for n, v in sdk.items() if n not in (*HANDLERS, "_object")]
    # Plain values (ints, None, interned strings) are nobody's: `reachable` would find them
    # shared or count a number twice.
    return [(n, v) for n, v in named if gc.is_tracked(v)]


async def measure(runs: int) -> tuple[int, list[Part]]:
    """A waiting run's own bytes and its parts, from `runs` runs waiting on this process."""
    from temporalio.worker._workflow_instance import _WorkflowInstanceImpl

    async with Session() as session:
        client, hosted = await workload.in_process_side(session.server.address, "A")
        queue = f"memory-components-{uuid.uuid4().hex[:8]}"
        runner = workload.sandbox_runner()
        async with Worker(client, task_queue=queue, workflow_runner=runner, **hosted):
            handles = await start_waiting(session.client, "A", queue, runs)
            await all_waiting(session.client, "A", queue, handles)
            gc.collect()
            instances = [o for o in gc.get_objects() if type(o) is _WorkflowInstanceImpl]
            if len(instances) < 3:
                raise RuntimeError(f"{len(instances)} runs cached; the split needs 3 or more")
            run, *others = instances[:3]
            own = own_objects(run, others)
            found = parts(own, _components(run), walls=(run, run._object))
            return sum(sys.getsizeof(item) for item in own.values()), found


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="runs left waiting (3 or more)")
    parser.add_argument("--top", type=int, default=25, help="parts listed")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs {args.runs}: the split compares one run with two others; use 3+")
    return args


def main() -> None:
    args = parse()
    configure_logging("console", level=logging.WARNING)
    log(f"memory components: {args.runs} runs of A waiting")
    total, found = asyncio.run(measure(args.runs))
    print(f"A: {total / 1024:.1f} KiB (getsizeof) of its own objects a waiting run")
    for part in sorted(found, key=lambda p: -p.bytes)[: args.top]:
        if part.objects:
            kinds = ", ".join(f"{name} {count}" for name, count in part.types)
            print(f"  {part.bytes:7d} B {part.objects:4d} objects  {part.name}  ({kinds})")


if __name__ == "__main__":
    main()
