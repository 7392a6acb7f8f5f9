"""`LiveRun`: the one place the workflow's components reach the loop they drive.

The run controller exists once the workflow knows its agent, and its loop once a run has a
state; before that there is nothing to read. Components ask here instead of each testing
`controller`, `controller.loop` and `loop.state` for themselves.

A run that waits for a person keeps its conversation as compressed JSON meanwhile (`park`):
a worker holds every cached waiting run, and the conversation is the part of one that grows
with the run, a few pydantic models a message (about 6 KB a tool step as objects against
0.6 KB as JSON). It is read back when the run goes on (`unpark`); queries meanwhile read a
copy (`messages`). Neither issues a command, so a replay parks and unparks at the same
points.

The loop is let go of too while the run waits: a dozen collaborators a run, and the run goes
on in a loop of its own (`RunController.continue_after_hitl`) anyway. What the wait needs of
a loop (a record for a decision as it arrives, a steering message) is done by one made
again from the state (`RunController.attach`); making one draws no ids and issues nothing,
so it is the same loop, numbering records on from the state's `stream_seq`.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentExecutionNode
    from ...contract.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from ...contract.records import RecordData, RunCancelledData
    from ...contract.state import AgentRunState, RunStatus
    from ...contract.tools import ToolDefinition
    from ...engine.controller import RunController
    from ...engine.loop import AgentLoop
    from ...engine.spec import AgentSpec
    from ..executor import TemporalExecutor
    from ..packed import PACK_LEVEL
    from ..wire import AgentWorkflowInput

__all__ = ["LiveRun", "release_evicted"]


class _Parked(NamedTuple):
    packed: bytes
    """The conversation's JSON, compressed (it repeats its field names message after
    message): the bytes are on the C heap, which Python's objects are not."""
    length: int
    answered_by: str | None
    latest_at: int | None
    """Where the state's `latest_response` is in the conversation (None: it kept it)."""


class LiveRun:
    """The workflow's input, its controller (once there is one) and why it failed."""

    def __init__(self, input: AgentWorkflowInput) -> None:
        self.input = input
        self.controller: RunController | None = None
        self.error: str | None = None
        """`kind: message` once the run failed."""
        self._parked: _Parked | None = None
        """The conversation while the run waits for a person."""
        self._waiting: AgentRunState | None = None
        """The state while the run waits without a loop (`park`)."""

    @property
    def loop(self) -> AgentLoop | None:
        """The run's loop, to act through: made again if the run let go of it to wait."""
        controller = self.controller
        if controller is None:
            return None
        if controller.loop is None and self._waiting is not None:
            state, self._waiting = self._waiting, None
            controller.attach(state, stream_start=state.stream_seq)
        return controller.loop

    def _kept_loop(self) -> AgentLoop | None:
        """The loop as it is: None before there is one and while a waiting run has none."""
        return self.controller.loop if self.controller is not None else None

    def driving_loop(self) -> AgentLoop | None:
        """The loop while it drives the run (None while the run waits: nothing made)."""
        loop = self._kept_loop()
        return loop if loop is not None and loop.driving else None

    @property
    def state(self) -> AgentRunState | None:
        """The run's live state: the one the loop is driving (None before it has one)."""
        loop = self._kept_loop()
        return loop.state if loop is not None else self._waiting

    @property
    def agent(self) -> AgentSpec | None:
        return self.controller.agent if self.controller is not None else None

    @property
    def seq(self) -> int:
        """The next stream record's seq."""
        loop = self._kept_loop()
        if loop is not None:
            return loop.seq
        return self._waiting.stream_seq if self._waiting is not None else 0

    def toolset_definitions(self) -> list[ToolDefinition]:
        """The run's listed toolset tools, for a query: a waiting run's loop is not made
        again for it (what a query reads must not change what the run keeps)."""
        controller, kept, state = self.controller, self._kept_loop(), self._waiting
        if kept is not None:
            return kept.toolset_definitions()
        if controller is None or state is None:
            return []
        loop = AgentLoop(controller.agent, state, controller.driver)
        try:
            return loop.toolset_definitions()
        finally:
            loop.release()

    def messages(self) -> list[ModelMessage]:
        """The run's conversation: its state's, or while it is parked a copy read back for
        this reader alone (a query, a fork, the run's status), not kept."""
        if self._parked is not None:
            return ModelMessagesTypeAdapter.validate_json(zlib.decompress(self._parked.packed))
        state = self.state
        return state.message_history if state is not None else []

    def message_count(self) -> int:
        if self._parked is not None:
            return self._parked.length
        state = self.state
        return len(state.message_history) if state is not None else 0

    def answered_by(self) -> str | None:
        """`provider:model` of the conversation's latest response (None before one): the
        run's status names it."""
        if self._parked is not None:
            return self._parked.answered_by
        return _answered_by(self.messages())

    def park(self, executor: TemporalExecutor) -> None:
        """The run starts a long wait: its conversation is kept as JSON, the state and
        `executor` let go of its messages, and the controller of its loop. Nothing before
        the loop exists."""
        controller = self.controller
        loop = controller.loop if controller is not None else None
        if controller is None or loop is None or self._parked is not None:
            return
        state = loop.state
        history = state.message_history
        latest = state.latest_response
        # The state's latest response is the conversation's last one: kept as its position.
        at = next((k for k, m in enumerate(reversed(history)) if m is latest), None)
        self._parked = _Parked(
            zlib.compress(ModelMessagesTypeAdapter.dump_json(history), PACK_LEVEL),
            len(history),
            _answered_by(history),
            None if at is None else len(history) - 1 - at,
        )
        executor.let_go_of(history, self.messages)
        state.message_history = []
        if at is not None:
            state.latest_response = None
        state.stream_seq = loop.seq  # where a loop made again numbers on (the same seq)
        controller.loop = None
        loop.release()
        self._waiting = state

    def unpark(self, executor: TemporalExecutor) -> None:
        """The wait is over: the conversation is objects again, in the state and
        `executor` (the loop copies it before it next grows)."""
        loop = self.loop
        if self._parked is None or loop is None:
            return
        state = loop.state
        history = self.messages()
        latest = self._parked.latest_at
        self._parked = None
        state.message_history = history
        if latest is not None:
            state.latest_response = cast(ModelResponse, history[latest])
        executor.take_back(history)

    def cancelled(self, reason: str | None) -> None:
        """The run was cancelled (`reason`: what its canceller said, if anything)."""
        state = self.state
        if state is not None:
            state.status = RunStatus.CANCELLED
        self.announce(None, RunCancelledData(reason=reason or None))

    def announce(self, node: AgentExecutionNode | None, data: RecordData) -> None:
        """A record of the workflow's own (a decision arrived, the run was suspended), in
        the loop's numbering; nothing before the loop exists."""
        loop = self.loop
        if loop is not None:
            loop.emit(node, data)


def _answered_by(history: list[ModelMessage]) -> str | None:
    for message in reversed(history):
        if message.kind == "response":  # by kind: the sandbox wraps `isinstance`
            name = message.model_name or "unknown model"
            return f"{message.provider_name}:{name}" if message.provider_name else name
    return None


def release_evicted(workflow_fields: dict[str, Any]) -> None:
    """Empties a run's workflow object (its `vars`) and the components only it owns, once
    the run has left the worker's cache and none of its code runs again. The components
    refer to each other (callbacks, the loop's sink), a cycle that would keep the run's
    state and conversation until the collector's full pass; emptied, they are freed at once.
    Worker-wide objects (`hosting`, the registered agent) are only let go. Released once:
    a second call finds nothing. (A run evicted in flight also leaves its cancelled
    coroutines' frames to the collector.)"""
    live = workflow_fields.get("live")
    if not isinstance(live, LiveRun):
        return
    controller = live.controller
    owned: list[object] = [
        live,
        workflow_fields.get("executor"),
        workflow_fields.get("events"),
    ]
    if controller is not None:
        if controller.loop is not None:
            controller.loop.release()
        owned.append(controller)
    for component in owned:
        if component is not None:
            vars(component).clear()
    workflow_fields.clear()
