"""Toolsets: tools an agent gets from outside its own definition, listed at run time.

A function tool is known when the agent is built. A toolset's tools (an MCP server's, say)
are known only once a run asks the toolset for them, and they can change while the server
runs. So a run lists each toolset once, keeps the listing in its state
(`AgentRunState.toolset_listings`) and uses that listing for everything that follows: the
schemas the model is shown, argument validation, approvals by name, retries. A resumed run,
a replayed workflow and a run continued as new see exactly the tools the run saw, without
asking the server again. The listing is refreshed only when a call reports that the
toolset's tools changed.

Calls to toolset tools go through the same node as function tools (`nodes.tool_call`), so
validation, `ModelRetry`, `ApprovalRequired`, `CallDeferred` and result limits behave the
same; only where the arguments are checked and who runs the call differ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from pydantic import BaseModel, Field

from ._fields import WIRE_CONFIG, omit_empty, omit_none
from .errors import AgentError, UserError
from .tools import ToolContext, ToolDefinition

__all__ = [
    "Toolset",
    "ToolsetError",
    "ToolsetListing",
    "ToolsetMisconfigured",
    "ToolsetResult",
    "ToolsetTool",
    "check_approval_names",
    "index_toolset_tools",
    "listing_digest",
]


class ToolsetError(AgentError):
    """A toolset could not be reached or failed mid-call (a server down, slow or crashed).

    Retryable: on Temporal the activity is retried under the tool's activity options.
    """

    kind = "toolset_unavailable"
    retryable = True


class ToolsetMisconfigured(UserError):
    """A toolset cannot work as configured (a command that does not exist, a server that
    speaks another protocol, an invalid schema, clashing names). No retry can fix it."""

    kind = "toolset_misconfigured"


class ToolsetTool(BaseModel):
    """One tool of a toolset, as a run listed it.

    `name` is what the model sees and calls (the toolset's prefix included); `remote_name`
    is what the toolset itself calls it.
    """

    model_config = WIRE_CONFIG
    name: str
    toolset: str
    remote_name: str
    description: str = ""
    parameters_json_schema: dict[str, Any] = Field(default_factory=dict)

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters_json_schema=self.parameters_json_schema,
        )


class ToolsetListing(BaseModel):
    """Every tool one toolset offered when the run listed it.

    `digest` identifies the listing (see `listing_digest`); `stale` marks a listing a call
    reported as out of date, to be listed again before the next model request.
    """

    model_config = WIRE_CONFIG
    toolset: str
    tools: list[ToolsetTool] = Field(default_factory=list)
    digest: str
    stale: bool = omit_empty(False)


class ToolsetResult(BaseModel):
    """What one call of a toolset tool returned, ready to become a tool return.

    `is_error` results (the tool itself reported a failure) reach the model as error
    returns; `error_kind` names why.
    """

    content: Any = None
    is_error: bool = False
    error_kind: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)


def listing_digest(tools: Iterable[ToolsetTool]) -> str:
    """A stable hash of a tool list: the same tools give the same digest in any process."""
    canonical = json.dumps(
        [tool.model_dump(mode="json") for tool in tools], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@runtime_checkable
class Toolset(Protocol):
    """What an agent needs from a source of tools. `durable_agent.mcp`'s servers are one.

    A toolset is opened (`async with toolset:`) for as long as it may be used: for one run
    in-process, for a worker's lifetime on Temporal. Opening may be cheap and connect
    lazily; it is counted, so nested opens share one connection.
    """

    @property
    def name(self) -> str:
        """Unique among an agent's toolsets; names the toolset in errors, summaries, state."""
        ...

    @property
    def max_retries(self) -> int:
        """How often the model may send bad arguments (or be told to retry) for one tool."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def list_tools(self) -> ToolsetListing:
        """Every tool the toolset offers now; raises `ToolsetError`/`ToolsetMisconfigured`."""
        ...

    def argument_problem(self, tool: ToolsetTool, arguments: dict[str, Any]) -> str | None:
        """Why `arguments` do not fit the tool's schema (a retry prompt), or None.

        Pure and deterministic: on Temporal it also checks a human's override arguments in
        workflow code.
        """
        ...

    async def call_tool(
        self, ctx: ToolContext, tool: ToolsetTool, arguments: dict[str, Any]
    ) -> ToolsetResult:
        """Runs one call with validated arguments. May raise `ModelRetry`,
        `ApprovalRequired` or `CallDeferred` like a function tool."""
        ...

    async def tools_changed(self, digest: str) -> bool:
        """Whether the toolset now offers tools other than the listing `digest` names.

        Asked after each call, so it must be cheap when nothing changed.
        """
        ...


def check_approval_names(
    approval_required: Iterable[str],
    function_tools: Mapping[str, object],
    index: Mapping[str, ToolsetTool],
    *,
    setting: str = "approval_required_tools",
) -> None:
    """Approval names that may belong to a toolset can be checked only once it is listed:
    a misspelt name would otherwise let a dangerous tool run unapproved (or, for
    `setting="approvers"`, be decided by anyone)."""
    known = set(function_tools) | set(index)
    unknown = sorted(set(approval_required) - known)
    if unknown:
        raise UserError(
            f"{setting} names unknown tool(s) {unknown}; the agent's tools are "
            f"{sorted(known) or 'none'} (toolset tools by the name the model sees, prefix "
            "included)"
        )


def index_toolset_tools(
    listings: Sequence[ToolsetListing],
    function_tools: Mapping[str, object],
    reserved: Iterable[str] = (),
) -> dict[str, ToolsetTool]:
    """The run's toolset tools by the name the model calls them, refusing clashes.

    Two toolsets offering the same name, or a toolset tool named like a function tool (or a
    reserved name such as the output tool), would make a call ambiguous: the error names
    both and says how to tell them apart.
    """
    index: dict[str, ToolsetTool] = {}
    taken = set(reserved)
    for listing in listings:
        for tool in listing.tools:
            if tool.name in taken:
                raise ToolsetMisconfigured(
                    f"toolset {listing.toolset!r} offers a tool named {tool.name!r}, a name "
                    "reserved by the agent; give the toolset a tool_prefix"
                )
            if tool.name in function_tools:
                raise ToolsetMisconfigured(
                    f"toolset {listing.toolset!r} offers a tool named {tool.name!r}, and the "
                    "agent has a function tool of that name; give the toolset a tool_prefix "
                    "(e.g. tool_prefix=" + repr(listing.toolset) + ") or rename the function tool"
                )
            other = index.get(tool.name)
            if other is not None:
                raise ToolsetMisconfigured(
                    f"toolsets {other.toolset!r} and {listing.toolset!r} both offer a tool named "
                    f"{tool.name!r}; give one of them a tool_prefix (e.g. "
                    f"tool_prefix={listing.toolset!r}) so the model can tell them apart"
                )
            index[tool.name] = tool
    return index
