"""The run's environment ref across one response's calls: where calls start, how their
changes apply.

Every call of one model response starts from the same snapshot: the ref the run had when
the response's first calls ran (`state.environment_batch.base`), however the calls are
split (concurrently, one by one, or some after a human's approval). Each call that changed
the tree leaves a ref made from that base; the run's ref is then the base with every such
change applied in call order (a path several changed keeps the later call's version).

One change from the base is taken as it is (no I/O). Two or more, or one whose paths are
not listed (a sub-agent's child workflow hands back only its final ref), are merged by the
runner (`NodeRunner.workspace_merge`): the loop itself does no I/O. Each change of the
run's ref is announced by a `workspace_changed` record.

A run without an environment ref never gets here past the first test: nothing of this
touches its state, its records or its node runner.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...contract._fields import trusted
from ...contract.checkpoint import AgentExecutionNode
from ...contract.environment import ENVIRONMENT_REF, EnvironmentBatch, EnvironmentChange
from ...contract.messages import ToolCall
from ...contract.records import WorkspaceChangedData
from ...contract.state import AgentRunState
from ..node_io import RunRef, WorkspaceMergeInput
from ..runner import NodeRunner
from .recorder import Recorder

__all__ = ["WorkspaceSteps"]

N = AgentExecutionNode


class WorkspaceSteps:
    """One run's environment ref through its responses' calls."""

    def __init__(self, state: AgentRunState, recorder: Recorder, runner: NodeRunner) -> None:
        self.state = state
        self.recorder = recorder
        self.runner = runner

    def start_ref(self, ref: RunRef) -> RunRef:
        """`ref` for the current response's calls: its metadata names the snapshot they
        all start from (the batch's base, recorded the first time)."""
        state = self.state
        current = state.metadata.get(ENVIRONMENT_REF)
        if not isinstance(current, str):
            return ref
        batch = state.environment_batch
        if batch is None or batch.step != state.run_step:
            batch = state.environment_batch = EnvironmentBatch(step=state.run_step, base=current)
        if ref.metadata.get(ENVIRONMENT_REF) == batch.base:
            return ref
        return ref.model_copy(update={"metadata": {**ref.metadata, ENVIRONMENT_REF: batch.base}})

    async def apply(
        self, changes: Sequence[tuple[ToolCall, EnvironmentChange]], ref: RunRef
    ) -> None:
        """Applies the changes the calls just run made (in call order with the earlier
        calls' of the same response)."""
        state = self.state
        batch = state.environment_batch
        current = state.metadata.get(ENVIRONMENT_REF)
        if not changes or batch is None or not isinstance(current, str):
            return
        changed = {**batch.changed, **{call.id: c.environment_ref for call, c in changes}}
        state.environment_batch = batch.model_copy(update={"changed": changed})
        only = changes[0][1] if len(changed) == 1 else None
        if only is not None and only.listed and only.base == current:
            result = only
        else:
            order = {call.id: i for i, call in enumerate(state.pending_tool_calls)}
            in_order = sorted(changed, key=lambda call_id: order.get(call_id, len(order)))
            result = await self.runner.workspace_merge(
                WorkspaceMergeInput.for_run(
                    ref,
                    base=batch.base,
                    current=current,
                    changes=[changed[call_id] for call_id in in_order],
                )
            )
        if result.environment_ref == current:
            return
        state.metadata = {**state.metadata, ENVIRONMENT_REF: result.environment_ref}
        self.recorder.emit(
            N.TOOL_CALL,
            trusted(
                WorkspaceChangedData,
                added=result.added,
                modified=result.modified,
                deleted=result.deleted,
                environment_ref=result.environment_ref,
            ),
        )

    def done(self) -> None:
        """The response's calls are all done: the next response's calls start afresh."""
        if self.state.environment_batch is not None:
            self.state.environment_batch = None
