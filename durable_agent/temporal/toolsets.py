"""Toolsets (MCP servers) on Temporal workers.

- `ToolsetPool`: the worker side of a server's life. Each worker has its own
  (`WorkerRuntime.toolsets`): a toolset is opened once by the worker and kept open while it
  runs, so a stdio server is one process per worker, reused across calls and runs (its
  session reconnects, restarting the process, when it dies). `check` lists every toolset
  of the given agents at worker start, so a command that does not exist, a server that
  speaks no MCP, an invalid schema or two servers with clashing tool names stop the worker
  with the reason instead of failing runs later; a server that merely does not answer yet
  is logged and retried by the runs.
(A model request names the run's listed toolset tools by the digest of their definitions:
`compaction.caches.ToolDefinitionsCache`.)
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from durable_agent import UserError
from durable_agent.contract.tools import OUTPUT_TOOL_NAME
from durable_agent.contract.toolsets import (
    Toolset,
    ToolsetError,
    ToolsetListing,
    check_approval_names,
    index_toolset_tools,
)
from durable_agent.engine.spec import AgentSpec

__all__ = [
    "ToolsetPool",
    "ToolsetStartupError",
]

log = structlog.get_logger("durable_agent.toolsets")


class ToolsetStartupError(UserError):
    """A toolset of a hosted agent cannot work: the worker refuses to start."""

    kind = "toolset_startup"


class ToolsetPool:
    def __init__(self) -> None:
        self._open: dict[int, Toolset] = {}
        self._checked: set[int] = set()

    @property
    def open_toolsets(self) -> list[Toolset]:
        return list(self._open.values())

    async def acquire(self, toolset: Toolset) -> None:
        """Opens `toolset` for this worker, unless it already is (activities call this
        before using one, in case `check` could not reach it at worker start)."""
        if id(toolset) not in self._open:
            self._open[id(toolset)] = toolset
            await toolset.__aenter__()

    async def close(self) -> None:
        """The worker stopped: every toolset it opened closes (stdio servers exit)."""
        toolsets = list(self._open.values())
        self._open.clear()
        self._checked.clear()
        for toolset in toolsets:
            try:
                await toolset.__aexit__(None, None, None)
            except Exception as error:
                log.warning("closing a toolset failed", toolset=toolset.name, error=repr(error))

    async def check(self, agents: Sequence[AgentSpec]) -> None:
        """Opens and lists each agent's toolsets; raises `ToolsetStartupError` for what no
        retry can fix, logs what may be transient (a server that does not answer yet).
        An agent whose toolsets all answered is not listed again until they are closed."""
        for agent in agents:
            if id(agent) in self._checked:
                continue
            listings: list[ToolsetListing] = []
            for toolset in agent.toolsets:
                await self.acquire(toolset)
                try:
                    listings.append(await toolset.list_tools())
                except ToolsetError as error:
                    log.warning(
                        "toolset not reachable at worker start; runs retry it",
                        agent=agent.name,
                        toolset=toolset.name,
                        error=error.message,
                    )
                except UserError as error:
                    raise ToolsetStartupError(f"agent {agent.name!r}: {error.message}") from None
            if len(listings) < len(agent.toolsets):
                continue  # names are checked once every toolset of the agent answered
            reserved = [OUTPUT_TOOL_NAME] if agent.output_type is not None else []
            try:
                index = index_toolset_tools(listings, agent.tools, reserved)
                check_approval_names(agent.approval_required, agent.tools, index)
                check_approval_names(agent.approvers, agent.tools, index, setting="approvers")
            except UserError as error:
                raise ToolsetStartupError(f"agent {agent.name!r}: {error.message}") from None
            self._checked.add(id(agent))
            if listings:  # an agent whose tools are all functions has no toolset to ready
                log.info(
                    "toolsets ready",
                    agent=agent.name,
                    toolsets=[listing.toolset for listing in listings],
                    tools=len(agent.tools) + len(index),
                    toolset_tools=len(index),
                )


"""One per process, shared by every worker the plugin configures."""
