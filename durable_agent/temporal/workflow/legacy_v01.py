"""Continue-as-new for runs started by release 0.1, which never carried their conversation.

Such a run's earlier messages stay in the runs that hold them (`segments`), as they did
when it began; the successor carries only the conversation's length and digest, and the
model-request activity reads the messages back from those runs. Every run started since
carries its history (`Chain.successor`); this shape is kept only so 0.1's runs finish.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentCheckpoint
    from ..wire import AgentWorkflowInput, Continuation, HistorySegment

__all__ = ["continuation_without_history"]


def continuation_without_history(
    input: AgentWorkflowInput,
    checkpoint: AgentCheckpoint,
    *,
    digest: str,
    run_id: str,
    segments: list[HistorySegment],
    carried: dict[str, Any],
) -> AgentWorkflowInput:
    state = checkpoint.state
    held = state.history_offset + len(state.message_history)
    segment = HistorySegment(run_id=run_id, start=state.history_offset, end=held)
    trimmed = state.model_copy(update={"message_history": [], "history_offset": held})
    return input.model_copy(
        update={
            "message_history": [],
            "continuation": Continuation(
                checkpoint=checkpoint.model_copy(update={"state": trimmed}),
                history_digest=digest,
                segments=[*segments, segment],
                **carried,
            ),
        }
    )
