"""Continue-as-new: when a run hands over to its successor, and what it carries.

A run continues as new only at `prepare_model_request` (no tool batch or human decision is
in flight) or between a session's turns, when Temporal suggests it or after the agent's
`continue_as_new_after_steps`. The successor gets the checkpoint with the whole
conversation after the agent's history processors, the decisions already taken, the
stream's recent records and the chain's links; it never needs an earlier run. Runs started
by release 0.1 go on their own way (`legacy_v01`).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentCheckpoint, AgentExecutionNode
    from ...contract.errors import ConversationTooLarge
    from ...contract.messages import ModelMessage
    from ..compaction.digest import EMPTY_DIGEST
    from ..executor import TemporalExecutor
    from ..runner import ActivityNodeRunner
    from ..wire import (
        AgentWorkflowInput,
        Continuation,
        ForkOrigin,
        HistoryPageQuery,
        HistorySegment,
        RunLink,
    )
    from .decisions import HumanDecisions
    from .events import EventStream
    from .legacy_v01 import continuation_without_history
    from .live import LiveRun
    from .port import WorkflowPort
    from .sessions import Session

__all__ = ["CONTINUATION_LIMIT_BYTES", "Chain"]

CONTINUATION_LIMIT_BYTES = 1_900_000
"""Just under Temporal's default 2 MB payload limit: a larger continuation is refused by
the server, and every workflow task after it would fail. Measured on the payload the
workflow's converter writes (UTF-8 JSON for the plugin's: an emoji is four bytes), before
a codec, which adds a few dozen."""


class Chain:
    """This run's place in its workflow's continue-as-new chain, and the next link."""

    def __init__(
        self,
        live: LiveRun,
        executor: TemporalExecutor,
        session: Session,
        decisions: HumanDecisions,
        events: EventStream,
        port: WorkflowPort,
        *,
        external_storage: bool,
    ) -> None:
        self._live = live
        self._executor = executor
        self._session = session
        self._decisions = decisions
        self._events = events
        self._port = port
        self._external_storage = external_storage
        continuation = live.input.continuation
        self.earlier_links: list[RunLink] = list(continuation.runs) if continuation else []
        """The earlier runs of this workflow's continue-as-new chain, oldest first."""
        self.forked_from: ForkOrigin | None = continuation.forked_from if continuation else None
        """For a fork or retry: the boundary it came from (carried across continue-as-new)."""
        self.segments: list[HistorySegment] = []
        self.earlier_runs = 0
        self.start_step = 0
        """The run step this run (or this session turn) started at."""
        self.after_steps: int | None = None
        """The agent's `continue_as_new_after_steps`."""
        self.session_steps = 0
        """Model requests of this run's earlier session turns."""

    def restore(self, continuation: Continuation) -> None:
        self.segments = list(continuation.segments)
        self.earlier_runs = continuation.earlier_runs or len(continuation.segments)
        self._decisions.restore(continuation)
        self._executor.latest = continuation.checkpoint
        self._executor.earlier_checkpoints = continuation.checkpoint_count
        self._executor.pause_reason = continuation.pause_reason

    # -- when --------------------------------------------------------------------------------

    def turn_finished(self, run_step: int) -> None:
        self.session_steps += run_step - self.start_step
        self.start_step = run_step

    def due(self, checkpoint: AgentCheckpoint) -> bool:
        """At a boundary: only at `prepare_model_request`, where no tool batch or human
        decision is in flight."""
        if checkpoint.node is not AgentExecutionNode.PREPARE_MODEL_REQUEST:
            return False
        if self._session.prompt_updates:
            # A `send_prompt` waits for this turn's answer: continue after answering it.
            return False
        if self._port.continue_as_new_suggested():
            return True
        steps = self.session_steps + checkpoint.run_step - self.start_step
        return self.after_steps is not None and steps >= self.after_steps

    def due_between_turns(self) -> bool:
        """Between turns, as within one: when Temporal suggests it or after the steps set."""
        if self._executor.node is None:  # no checkpoint yet (read without unpacking one)
            return False
        if self._port.continue_as_new_suggested():
            return True
        return self.after_steps is not None and self.session_steps >= self.after_steps

    # -- what --------------------------------------------------------------------------------

    def own_link(self) -> RunLink:
        continuation = self._live.input.continuation
        return RunLink(
            run_id=self._port.identity().run_id,
            first_seq=continuation.stream_seq if continuation else 0,
            first_checkpoint=self._executor.earlier_checkpoints,
        )

    def links(self) -> list[RunLink]:
        """Every run of the chain, this one last."""
        return [*self.earlier_links, self.own_link()]

    def successor(
        self, checkpoint: AgentCheckpoint, runner: ActivityNodeRunner
    ) -> AgentWorkflowInput:
        """The input of the next run, going on from `checkpoint`."""
        state = checkpoint.state
        if state.history_offset:
            identity = self._port.identity()
            self._port.logger.info(
                "continuing as new",
                extra={
                    "node": checkpoint.node.value,
                    "messages": state.history_offset + len(state.message_history),
                },
            )
            return continuation_without_history(
                self._live.input,
                checkpoint,
                digest=runner.digest_of(state.message_history),
                run_id=identity.run_id,
                segments=self.segments,
                carried=self._carried(),
            )
        agent = self._live.agent
        assert agent is not None
        kept = agent.process_history(state.message_history)
        continued = self._live.input.model_copy(
            update={
                "message_history": [],
                "continuation": Continuation(
                    checkpoint=checkpoint.model_copy(
                        update={"state": state.model_copy(update={"message_history": kept})}
                    ),
                    history_digest=EMPTY_DIGEST,
                    carries_history=True,
                    session=self._session.carry(),
                    earlier_runs=self.earlier_runs + 1,
                    **self._carried(),
                ),
            }
        )
        if not self._external_storage:
            # Bytes as the server gets them (a character may be four), not characters.
            size = workflow.payload_converter().to_payload(continued).ByteSize()
            if size > CONTINUATION_LIMIT_BYTES:
                raise ConversationTooLarge(
                    f"continuing as new would carry {size} bytes ({len(kept)} messages), more "
                    f"than Temporal accepts in one payload ({CONTINUATION_LIMIT_BYTES}); "
                    "configure external storage (DURABLE_AGENT_STORAGE, see the README) so "
                    "large payloads leave history, or bound the history with "
                    "AgentBuilder.history_processor(keep_last_messages(n))"
                )
        self._port.logger.info(
            "continuing as new",
            extra={"node": checkpoint.node.value, "messages": len(kept)},
        )
        return continued

    def _carried(self) -> dict[str, Any]:
        """What every successor carries, whatever its release's shape."""
        return {
            "stream_seq": self._live.seq,
            "decided": self._decisions.decided,
            "delivered": sorted(self._decisions.delivered),
            "checkpoint_count": self._executor.checkpoint_count,
            "pause_reason": self._executor.pause_reason,
            "forked_from": self.forked_from,
            "stream": self._events.handoff(),  # decides `carried_polls`: keep this order
            "stream_polls": self._events.carried_polls,
            "runs": self.links(),
        }

    # -- the query -----------------------------------------------------------------------------

    def history_page(self, page: HistoryPageQuery) -> list[ModelMessage]:
        """Messages from global index `page.offset`, as far as this run holds them."""
        state = self._live.state
        if state is None:
            return []
        start = page.offset - state.history_offset
        if start < 0:
            return []
        return self._live.messages()[start : start + page.limit]

    def history_segments(self) -> list[HistorySegment]:
        """Which workflow run holds which messages, this run last."""
        state = self._live.state
        if state is None:
            return list(self.segments)
        own = HistorySegment(
            run_id=self._port.identity().run_id,
            start=state.history_offset,
            end=state.history_offset + self._live.message_count(),
        )
        return [*self.segments, own]
