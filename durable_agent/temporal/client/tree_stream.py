"""`AgentRunHandle.stream(children=True)`: a run's records with its sub-agents', live.

Each `subagent_start` record names the child workflow of a sub-agent call; from it on, that
child's records are read too (and its children's, at any depth) and handed out as they
come, tagged with the child's `workflow_id` and `depth`. A record's `seq` stays its own
run's. The stream ends once the run and every child it started have ended.

A child's records come under the call that started it, between the parent's
`subagent_start` and `subagent_end` of that call: the parent's end of a call is held back
until the child's stream has ended. Live, the child has ended by then anyway; read after
the fact (a finished lead's whole stream is there at once) the child's records would
otherwise all follow the parent's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from durable_agent.contract.records import AgentStreamRecord, SubagentEndData, SubagentStartData

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
    ended: dict[str, asyncio.Event] = {}
    """By workflow id: set once that run's stream has been read to its end."""

    def follow(workflow_id: str, depth: int, start: int | None) -> None:
        if workflow_id in ended:
            return
        ended[workflow_id] = asyncio.Event()
        task = asyncio.create_task(pump(workflow_id, depth, start))
        tasks.add(task)

    async def pump(workflow_id: str, depth: int, start: int | None) -> None:
        calls: dict[str, str] = {}
        """This run's sub-agent calls under way: tool call id -> the child's workflow id."""
        try:
            for attempt in range(NOT_STARTED_RETRIES + 1):
                try:
                    async for record in read(workflow_id, start):
                        if depth:
                            record = record.model_copy(
                                update={"workflow_id": workflow_id, "depth": depth}
                            )
                        data = record.data
                        if isinstance(data, SubagentEndData) and data.tool_call_id in calls:
                            await ended[calls.pop(data.tool_call_id)].wait()
                        await queue.put(record)
                        if isinstance(data, SubagentStartData) and data.workflow_id is not None:
                            calls[data.tool_call_id] = data.workflow_id
                            follow(data.workflow_id, depth + 1, None)
                    return
                except RunNotFound:
                    if not depth or attempt == NOT_STARTED_RETRIES:
                        raise
                    await asyncio.sleep(poll_interval)
        except Exception as error:  # handed to the reader, which raises it
            await queue.put(error)
        finally:
            ended[workflow_id].set()
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
