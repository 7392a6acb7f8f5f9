"""How working nodes are executed: the seam between the loop and where work happens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..contract.checkpoint import AgentExecutor
from ..contract.environment import EnvironmentChange
from ..contract.messages import ModelRequest, ModelResponse
from ..contract.records import StreamSink
from ..contract.toolsets import ToolsetListing
from ..models.base import DeltaSink
from . import nodes
from .ids import IdSource
from .subagents import SubagentCall, SubagentSuspended, SubagentWaiting

__all__ = ["Driver", "NodeRunner", "SubagentOutcome"]

SubagentOutcome = nodes.ToolCallOutcome | SubagentWaiting | SubagentSuspended
"""What a sub-agent call gives: the call's outcome, or (in-process) its run left waiting for
a human or suspended by the executor."""


class NodeRunner(Protocol):
    async def prepare_model_request(
        self, input: nodes.PrepareModelRequestInput
    ) -> ModelRequest: ...

    async def model_request(
        self, input: nodes.ModelRequestInput, deltas: DeltaSink | None = None
    ) -> ModelResponse:
        """`deltas`, when given, asks a streaming model to stream; where the deltas go is the
        driver's business (in-process: this sink; on Temporal: the workflow, by signal)."""
        ...

    async def list_tools(self, input: nodes.ListToolsInput) -> ToolsetListing:
        """Asked only for agents with toolsets, when a run needs a toolset's tool list."""
        ...

    async def tool_call(self, input: nodes.ToolCallInput) -> nodes.ToolCallOutcome: ...

    async def subagent_call(
        self, call: SubagentCall
    ) -> nodes.ToolCallOutcome | SubagentWaiting | SubagentSuspended:
        """Runs a sub-agent on the call's prompt: in-process its own loop, on Temporal a
        child workflow. A failed sub-agent is an error return, not an exception; a waiting
        one (in-process only) is `SubagentWaiting`."""
        ...

    async def validate_output(self, input: nodes.ValidateOutputInput) -> nodes.OutputOutcome: ...

    async def workspace_merge(self, input: nodes.WorkspaceMergeInput) -> EnvironmentChange:
        """Merges the workspace changes of one response's calls (a store's I/O, which the
        loop may not do): asked only when two or more calls changed it, or for a change
        whose paths are not listed (a sub-agent's on Temporal)."""
        ...


@dataclass(frozen=True)
class Driver:
    """What differs between running in-process and on Temporal, and nothing else: where
    node work runs, where boundaries go, where ids and time come from, where stream records
    go, what prefixes idempotency keys, how many tool calls may run at once, and whether a
    streaming model's deltas are wanted (`model_deltas`: per run on Temporal, where they cost
    history; in-process they are wanted whenever there is a sink)."""

    runner: NodeRunner
    executor: AgentExecutor
    ids: IdSource
    sink: StreamSink | None = None
    idempotency_prefix: str | None = None
    max_concurrent_tools: int | None = None
    model_deltas: bool = True
