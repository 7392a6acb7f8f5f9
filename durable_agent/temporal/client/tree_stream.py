"""`AgentRunHandle.stream(children=True)`: a run's records with its sub-agents', live.

Each `subagent_start` record names the child workflow of a sub-agent call; from it on, that
child's records are read too (and its children's, at any depth) and handed out as they
come, tagged with the child's `workflow_id` and `depth`. A record's `seq` stays its own
run's. The stream ends once the run and every child it started have ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from durable_agent.contract.records import AgentStreamRecord, SubagentStartData

from ..run_errors import RunNotFound

__all__ = ["follow_tree"]

NOT_STARTED_RETRIES = 50
"""How often (every `poll_interval`) a child that is named but not started yet is asked for:
the parent records the call before the server has started the child."""

_DONE = object()

Reader = Callable[[str, int | None], AsyncIterator[AgentStreamRecord]]
"""Opens the stream of one workflow id, from after a seq (None: from its first record)."""


async def follow_tree(
    root: str, after: int | None, read: Reader, *, poll_interval: float
) -> AsyncIterator[AgentStreamRecord]:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()
    started: set[str] = set()

    def follow(workflow_id: str, depth: int, start: int | None) -> None:
        if workflow_id in started:
            return
        started.add(workflow_id)
        task = asyncio.create_task(pump(workflow_id, depth, start))
        tasks.add(task)

    async def pump(workflow_id: str, depth: int, start: int | None) -> None:
        try:
            for attempt in range(NOT_STARTED_RETRIES + 1):
                try:
                    async for record in read(workflow_id, start):
                        if depth:
                            record = record.model_copy(
                                update={"workflow_id": workflow_id, "depth": depth}
                            )
                        await queue.put(record)
                        data = record.data
                        child = data.workflow_id if isinstance(data, SubagentStartData) else None
                        if child is not None:
                            follow(child, depth + 1, None)
                    return
                except RunNotFound:
                    if not depth or attempt == NOT_STARTED_RETRIES:
                        raise
                    await asyncio.sleep(poll_interval)
        except Exception as error:  # handed to the reader, which raises it
            await queue.put(error)
        finally:
            await queue.put(_DONE)

    follow(root, 0, after)
    finished = 0
    try:
        while finished < len(tasks):
            item = await queue.get()
            if item is _DONE:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
