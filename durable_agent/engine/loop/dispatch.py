"""Dispatching a batch's calls to the node runner: concurrently, bounded, in call order.

A sub-agent's call goes to the runner's `subagent_call` (a child run), every other call to
its `tool_call`. A name that is neither a function tool, a sub-agent nor a listed toolset
tool gets its retry prompt here: no node could run it, and only this run knows which
tools it listed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from ...contract.checkpoint import AgentCheckpoint, AgentExecutor
from ...contract.state import AgentRunState
from ..ids import IdSource
from ..node_io import ToolCallInput
from ..nodes import unknown_tool
from ..runner import NodeRunner
from ..spec import AgentSpec
from ..subagents import SubagentCall, SubagentResume, subagent_depth
from .outcomes import Outcome
from .toolset_index import ToolsetIndex

__all__ = ["Dispatch", "ToolDispatcher"]


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One call to run: its node input and, in-process, the waiting or suspended sub-agent
    run it goes on with."""

    input: ToolCallInput
    resume: SubagentResume | AgentCheckpoint | None = None


class ToolDispatcher:
    """Runs one run's tool calls through its node runner."""

    def __init__(
        self,
        agent: AgentSpec,
        state: AgentRunState,
        runner: NodeRunner,
        toolsets: ToolsetIndex,
        *,
        executor: AgentExecutor,
        ids: IdSource,
        prefix: str,
        max_concurrent: int | None,
    ) -> None:
        self.agent = agent
        self.state = state
        self.runner = runner
        self.toolsets = toolsets
        self.executor = executor
        self.ids = ids
        self.prefix = prefix
        self.max_concurrent = max_concurrent

    async def run(self, batch: list[Dispatch]) -> list[Outcome]:
        """Each call's outcome, in `batch`'s order."""
        if not self.agent.toolsets:
            return await self._dispatch(batch)
        index = self.toolsets.index()
        agent = self.agent
        names = sorted({*agent.tools, *agent.subagents, *index})
        local = {
            position: unknown_tool(item.input.call, names)
            for position, item in enumerate(batch)
            if item.input.call.name not in agent.tools
            and item.input.call.name not in agent.subagents
            and item.input.call.name not in index
        }
        remote = iter(await self._dispatch([p for i, p in enumerate(batch) if i not in local]))
        return [local[i] if i in local else next(remote) for i in range(len(batch))]

    async def _dispatch(self, batch: list[Dispatch]) -> list[Outcome]:
        if not batch:
            return []
        if len(batch) == 1:
            return [await self._run_one(batch[0])]
        limit = self.max_concurrent
        if limit is None or limit >= len(batch):
            return list(await asyncio.gather(*(self._run_one(p) for p in batch)))
        semaphore = asyncio.Semaphore(limit)

        async def bounded(item: Dispatch) -> Outcome:
            async with semaphore:
                return await self._run_one(item)

        return list(await asyncio.gather(*(bounded(p) for p in batch)))

    def _run_one(self, item: Dispatch) -> Awaitable[Outcome]:
        subagent = self.agent.subagents.get(item.input.call.name)
        if subagent is None:
            return self.runner.tool_call(item.input)
        state = self.state
        return self.runner.subagent_call(
            SubagentCall(
                input=item.input,
                subagent=subagent,
                parent_run_id=state.run_id,
                depth=subagent_depth(state) + 1,
                executor=self.executor,
                ids=self.ids,
                prefix=self.prefix,
                parent_agent=self.agent.name,
                resume=item.resume,
            )
        )
