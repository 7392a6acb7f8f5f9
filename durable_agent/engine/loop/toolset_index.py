"""The run's toolset tools: listed once, kept in run state, indexed by the name the model
calls them.

A toolset's tools (an MCP server's) are known only once a run lists them. The listing is
kept in `state.toolset_listings`, so later steps, resumes and replays use it instead of
asking again; a call that reports the toolset changed marks it stale, to be listed again
before the next model request.
"""

from __future__ import annotations

import asyncio

from ...contract.state import AgentRunState
from ...contract.tools import OUTPUT_TOOL_NAME, ToolDefinition
from ...contract.toolsets import (
    ToolsetListing,
    ToolsetTool,
    check_approval_names,
    index_toolset_tools,
)
from ..node_io import ListToolsInput, RunRef
from ..runner import NodeRunner
from ..spec import AgentSpec

__all__ = ["ToolsetIndex"]


class ToolsetIndex:
    """One run's listed toolset tools, and what the loop asks of them."""

    def __init__(self, agent: AgentSpec, state: AgentRunState, runner: NodeRunner) -> None:
        self.agent = agent
        self.state = state
        self.runner = runner
        self._indexed: list[ToolsetListing] | None = None
        self._index: dict[str, tuple[ToolsetTool, str]] = {}
        self._definitions: list[ToolDefinition] = []

    async def list_toolsets(self, ref: RunRef) -> None:
        """Lists each toolset this run has no fresh listing of, and keeps the listings in
        state."""
        state = self.state
        agent = self.agent
        known = {listing.toolset: listing for listing in state.toolset_listings}
        wanted = [
            toolset.name
            for toolset in agent.toolsets
            if (listing := known.get(toolset.name)) is None or listing.stale
        ]
        if not wanted:
            return
        inputs = [ListToolsInput.for_run(ref, toolset=name) for name in wanted]
        if len(inputs) == 1:
            fresh = [await self.runner.list_tools(inputs[0])]
        else:
            fresh = list(await asyncio.gather(*(self.runner.list_tools(i) for i in inputs)))
        for name, listing in zip(wanted, fresh, strict=True):
            known[name] = listing.model_copy(update={"toolset": name})
        listings = [known[toolset.name] for toolset in agent.toolsets]
        reserved = [OUTPUT_TOOL_NAME] if agent.output_type is not None else []
        index = index_toolset_tools(listings, agent.tools, reserved)
        if not state.toolset_listings:
            # Only at a run's first listing: a tool the server dropped later must not fail it.
            check_approval_names(agent.approval_required, agent.tools, index)
            check_approval_names(agent.approvers, agent.tools, index, setting="approvers")
        state.toolset_listings = listings

    def index(self) -> dict[str, tuple[ToolsetTool, str]]:
        """The run's listed toolset tools by name, with their listing's digest."""
        listings = self.state.toolset_listings
        if self._indexed is not listings:
            self._index = {
                tool.name: (tool, listing.digest) for listing in listings for tool in listing.tools
            }
            self._definitions = [tool.definition() for tool, _ in self._index.values()]
            self._indexed = listings
        return self._index

    def listed(self, tool_name: str) -> tuple[ToolsetTool, str] | None:
        """The listed toolset tool of that name with its listing's digest, or None."""
        return self.index().get(tool_name) if self.agent.toolsets else None

    def definitions(self) -> list[ToolDefinition]:
        """What the model is shown of the run's toolset tools (the same list object until
        the listings change, so a runner can remember what it derived from it)."""
        if not self.agent.toolsets:
            return []
        self.index()
        return self._definitions

    def mark_stale(self, tool_name: str) -> None:
        entry = self.listed(tool_name)
        if entry is None:
            return
        self.state.toolset_listings = [
            listing.model_copy(update={"stale": True})
            if listing.toolset == entry[0].toolset
            else listing
            for listing in self.state.toolset_listings
        ]

    def max_retries(self, tool_name: str) -> int:
        entry = self.listed(tool_name)
        if entry is not None:
            return self.agent.toolset(entry[0].toolset).max_retries
        return self.agent.tool_max_retries(tool_name)
