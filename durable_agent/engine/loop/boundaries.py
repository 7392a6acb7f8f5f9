"""Boundaries: the checkpoint before each node's work, handed to the executor, and the
conversation the checkpoints share.

A checkpoint is taken *before* a node's work, so resuming from it means doing exactly that
work and going on. Checkpoints share the conversation list instead of copying it (five
boundaries a step copying it would make each step cost O(history)); `Conversation` copies
a list still held by a checkpoint once before it grows, so a later message never shows up
in a checkpoint someone kept.
"""

from __future__ import annotations

import asyncio
import weakref

from ...contract._fields import trusted
from ...contract.checkpoint import (
    AgentCheckpoint,
    AgentCheckpointMetadata,
    AgentExecutionNode,
    AgentExecutor,
    AgentResumeEvidence,
    Continue,
    ExecutionSuspended,
    Suspend,
)
from ...contract.errors import AgentExecutorError
from ...contract.messages import ModelMessage
from ...contract.records import CheckpointData, NodeStartData, SuspendedData
from ...contract.state import AgentRunState
from ...contract.trace_context import TraceContext
from ..ids import IdSource, new_id
from ..subagents import PARENT_RUN_ID, PARENT_TOOL_CALL_ID
from .recorder import Recorder

__all__ = ["Boundaries", "Conversation"]


class Conversation:
    """Appends to the run's conversation, in place unless a checkpoint still holds it."""

    def __init__(self, state: AgentRunState) -> None:
        self.state = state
        self._owned: list[ModelMessage] | None = None
        """The conversation list this loop made itself, so it may append to it in place."""
        self.views: list[weakref.ref[AgentRunState]] = []
        """Checkpoint states handed out since the last message, sharing the conversation."""

    def add(self, message: ModelMessage) -> None:
        state = self.state
        history = state.message_history
        shared = history is not self._owned or any(
            (view := ref()) is not None and view.message_history is history for ref in self.views
        )
        if shared:
            history = [*history, message]
            state.message_history = self._owned = history
        else:
            history.append(message)
        self.views.clear()


class Boundaries:
    """Takes a run's checkpoints and asks its executor whether the run goes on."""

    def __init__(
        self,
        state: AgentRunState,
        executor: AgentExecutor,
        ids: IdSource,
        recorder: Recorder,
        conversation: Conversation,
    ) -> None:
        self.state = state
        self.executor = executor
        self.ids = ids
        self.recorder = recorder
        self.conversation = conversation
        metadata = state.metadata
        self._parent: tuple[str | None, str | None] = (
            metadata.get(PARENT_RUN_ID),
            metadata.get(PARENT_TOOL_CALL_ID),
        )
        """A sub-agent's run names its parent run and call in each checkpoint's metadata."""
        self._metadata: tuple[TraceContext | None, AgentCheckpointMetadata] | None = None

    def checkpoint(self, node: AgentExecutionNode, stream_cursor: int) -> AgentCheckpoint:
        state = self.state
        view = state.snapshot(view=True)
        self.conversation.views.append(weakref.ref(view))
        return trusted(
            AgentCheckpoint,
            checkpoint_id=new_id(self.ids, "ckpt"),
            run_id=state.run_id,
            conversation_id=state.conversation_id,
            node=node,
            run_step=state.run_step,
            resume=AgentResumeEvidence.from_state(state, node, stream_cursor),
            state=view,
            metadata=self._checkpoint_metadata(state.trace_context),
        )

    def _checkpoint_metadata(self, trace_context: TraceContext | None) -> AgentCheckpointMetadata:
        """One metadata model for the checkpoints of a run while its trace stays the same
        (checkpoints, like messages, are never changed), instead of one per boundary."""
        kept = self._metadata
        if kept is not None and kept[0] is trace_context:
            return kept[1]
        metadata = trusted(
            AgentCheckpointMetadata,
            span_id=trace_context.span_id if trace_context else None,
            trace_id=trace_context.trace_id if trace_context else None,
            parent_run_id=self._parent[0],
            parent_tool_call_id=self._parent[1],
        )
        self._metadata = trace_context, metadata
        return metadata

    def recorded(self, node: AgentExecutionNode) -> AgentCheckpoint:
        """The boundary's `node_start` and `checkpoint` records, and its checkpoint."""
        recorder = self.recorder
        cursor = recorder.emit(node, _NODE_START)
        checkpoint = self.checkpoint(node, cursor)
        recorder.record(node, CheckpointData, checkpoint_id=checkpoint.checkpoint_id)
        return checkpoint

    async def cross(self, node: AgentExecutionNode) -> None:
        """The boundary before `node`'s work: returns when the executor continues, raises
        `ExecutionSuspended` when it suspends."""
        recorder = self.recorder
        cursor = recorder.emit(node, _NODE_START)
        checkpoint = self.checkpoint(node, cursor)
        recorder.record(node, CheckpointData, checkpoint_id=checkpoint.checkpoint_id)
        executor = self.executor
        try:
            decision = await executor.checkpoint(checkpoint)
        except (asyncio.CancelledError, ExecutionSuspended):
            raise
        except Exception as exc:
            raise AgentExecutorError(
                f"executor {type(executor).__name__} failed at {node.value}: {exc}"
            ) from exc
        if type(decision) is Continue:
            # Every boundary but a pause ends here; inside a workflow's sandbox each
            # `isinstance` goes through the sandbox's wrapper.
            return
        if isinstance(decision, Suspend):
            self.recorder.record(node, SuspendedData, reason=decision.reason)
            raise ExecutionSuspended(node, decision.reason, checkpoint)
        if not isinstance(decision, Continue):
            raise AgentExecutorError(
                f"executor {type(executor).__name__} returned {decision!r} at "
                f"{node.value}; expected Continue() or Suspend(reason=...)"
            )

    async def failed(self, *, tell_executor: bool) -> None:
        """The `run_failed` boundary. The run has already failed: an executor error here
        must not hide the cause, so the executor's answer and errors are ignored."""
        checkpoint = self.recorded(AgentExecutionNode.RUN_FAILED)
        if not tell_executor:
            return
        try:
            await self.executor.checkpoint(checkpoint)
        except asyncio.CancelledError:
            raise
        except Exception:
            pass


_NODE_START = NodeStartData()
