"""The `tool_call` and `tool_return` nodes: which call of a response's batch is next.

Async tools of one response run together (one `tool_call` boundary per call, then the
batch, then a `tool_return` boundary per call); sync tools, or an agent that asks for
sequential calls, run one by one (`tool_call`, `tool_return`, next call). The batch itself
is `ToolBatch`'s.
"""

from __future__ import annotations

from ...contract.checkpoint import AgentExecutionNode
from ...contract.errors import AgentExecutorError
from ...contract.messages import ToolCall
from ...contract.records import WaitingData
from ...contract.state import AgentRunState, RunStatus
from ..node_io import RunRef
from ..spec import AgentSpec
from .batch import ToolBatch
from .recorder import Recorder

__all__ = ["ToolSteps"]

N = AgentExecutionNode


class ToolSteps:
    """Moves one run through its response's tool calls."""

    def __init__(
        self, agent: AgentSpec, state: AgentRunState, recorder: Recorder, batch: ToolBatch
    ) -> None:
        self.agent = agent
        self.state = state
        self.recorder = recorder
        self.batch = batch

    def call_order(self) -> dict[str, int]:
        """Each call of the latest response by id: its position in the response."""
        response = self.state.latest_response
        if response is None:
            return {}
        return {c.id: i for i, c in enumerate(response.tool_calls)}

    def _parallel(self) -> bool:
        """Async tools run concurrently unless the agent asks for sequential execution."""
        if not self.agent.parallel_tool_calls:
            return False
        tools = self.agent.tools
        return all(
            (tool := tools.get(c.name)) is None or tool.is_async
            for c in self.state.pending_tool_calls
        )

    def _next_call(self) -> ToolCall | None:
        calls = self.state.pending_tool_calls
        ids = [c.id for c in calls]
        active = self.state.active_tool_call_id
        index = ids.index(active) + 1 if active in ids else 0
        return calls[index] if index < len(calls) else None

    def _active_call(self) -> ToolCall:
        for call in self.state.pending_tool_calls:
            if call.id == self.state.active_tool_call_id:
                return call
        raise AgentExecutorError(
            f"no pending tool call {self.state.active_tool_call_id!r} to run; the checkpoint "
            "state is inconsistent"
        )

    async def tool_call(self, ref: RunRef) -> AgentExecutionNode:
        state = self.state
        if self._parallel():
            following = self._next_call()
            if following is not None:
                state.active_tool_call_id = following.id
                return N.TOOL_CALL
            await self.batch.run(state.pending_tool_calls, ref)
            state.active_tool_call_id = state.pending_tool_calls[0].id
        else:
            await self.batch.run([self._active_call()], ref)
        return N.TOOL_RETURN

    def tool_return(self) -> AgentExecutionNode | None:
        state = self.state
        following = self._next_call()
        if following is not None:
            state.active_tool_call_id = following.id
            return N.TOOL_RETURN if self._parallel() else N.TOOL_CALL
        state.active_tool_call_id = None
        if state.pending_approval_tool_returns or state.deferred_tool_returns:
            state.status = RunStatus.WAITING
            self.recorder.emit(
                N.TOOL_RETURN,
                WaitingData(
                    pending_approvals=[a.tool_call_id for a in state.pending_approval_tool_returns],
                    deferred=[d.tool_call_id for d in state.deferred_tool_returns],
                ),
            )
            return None
        self.batch.workspace.done()
        return N.PREPARE_MODEL_REQUEST
