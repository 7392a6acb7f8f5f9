"""The executor inside the workflow: checkpoints become workflow state, Suspend becomes a wait.

Every boundary is recorded (the resume evidence list and the latest full checkpoint, both
served by queries). When a boundary must suspend (a `suspend_at` node, or a `suspend`
signal asking to pause at the next boundary) the executor blocks on `workflow.wait_condition`
until a `resume` signal or `resume_run` update arrives, then continues in the same execution.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel
from temporalio import workflow

from durable_agent import (
    AgentCheckpoint,
    AgentExecutionNode,
    AgentResumeEvidence,
    Continue,
    Suspend,
)
from durable_agent.contract.records import RecordData, ResumedData, SuspendedData

from .packed import PackedBytes

__all__ = ["CONTINUE_AS_NEW", "Announce", "TemporalExecutor"]

Announce = Callable[[AgentExecutionNode | None, RecordData], None]
"""How the executor adds a record to the run's stream (`suspended`, `resumed`)."""

_CONTINUE = Continue()
"""The loop only reads a decision's type: one `Continue` serves every boundary."""
_SHARED_FIELDS = ("latest_response", "toolset_listings")
"""State fields a boundary's JSON leaves out and keeps by reference: the loop replaces
them, never changes them in place, and they are the large ones (the response just read, the
tool schemas listed), so every boundary writing them again would cost each step their size."""
_BY_REFERENCE = {"state": {"message_history", *_SHARED_FIELDS}}
_NODES = tuple(AgentExecutionNode)
_NODE_AT = {node: at for at, node in enumerate(_NODES)}


class _Resume(BaseModel):
    """A kept checkpoint's JSON read for its evidence alone (the rest is skipped)."""

    resume: AgentResumeEvidence


_NOWHERE: frozenset[AgentExecutionNode] = frozenset()
"""Every run's empty `suspend_at` (an empty frozenset is 216 bytes of each cached run)."""

CONTINUE_AS_NEW = "continue-as-new"
"""The one `Suspend` the executor hands to the loop: the workflow then continues as new."""


class TemporalExecutor:
    def __init__(
        self,
        suspend_at: Iterable[AgentExecutionNode] = (),
        on_change: Callable[[], None] | None = None,
        continue_as_new: Callable[[AgentCheckpoint], bool] | None = None,
        announce: Announce | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> None:
        self.suspend_at = frozenset(suspend_at) or _NOWHERE
        self.continue_as_new = continue_as_new or (lambda _: False)
        self.earlier_checkpoints = 0
        self.on_change = on_change or (lambda: None)
        self.announce: Announce = announce or (lambda node, data: None)
        self.on_wait = on_wait or (lambda: None)
        """What else `pack` packs (the run's unread stream records)."""
        self._latest: AgentCheckpoint | None = None
        self._history: list[Any] = []
        """The latest checkpoint's conversation, by reference: every recorded boundary's
        is a prefix of it (`recorded`), and it outlives `_latest` while the run is packed."""
        # Every boundary's checkpoint id, its node, the checkpoint as JSON without its
        # conversation, how many messages the conversation had then, and the state values
        # kept by reference (`_SHARED_FIELDS`): forks read them back (`recorded`), the
        # `checkpoints` query reads the evidence out of the JSON (`evidence`). Flat lists of
        # strings, bytes and shared references, not a model or tuple per boundary: a busy
        # worker holds every step's boundaries of every cached run, and a finished run's
        # instance is freed by the garbage collector, which walks objects, not bytes. The
        # ids are packed too while the run waits (one block, not a string a boundary).
        self._ids = PackedBytes()
        self._nodes = bytearray()
        """Each boundary's node as its place in `_NODES` (a byte, not a reference)."""
        self._kept = PackedBytes()
        self._lengths = array("I")
        self._shared: list[list[Any]] = [[] for _ in _SHARED_FIELDS]
        self._evidence: list[AgentResumeEvidence] = []
        self._read_history: Callable[[], list[Any]] | None = None
        """While the run's conversation is parked (`let_go_of`): reads a copy of it."""
        self.pause_reason: str | None = None
        self.suspended_reason: str | None = None
        self._resume_requested = False
        self._resume_reason: str | None = None

    @property
    def latest(self) -> AgentCheckpoint | None:
        """The run's latest checkpoint. While the run waits for a person (`pack`), read
        back from its boundary's JSON for each reader (queries, forks) and not kept."""
        if self._latest is None and self._ids:
            return self.recorded(len(self._ids) - 1)
        return self._latest

    @latest.setter
    def latest(self, checkpoint: AgentCheckpoint | None) -> None:
        """A checkpoint this run did not record (the one a continued run carries)."""
        self._latest = checkpoint
        self._history = checkpoint.state.message_history if checkpoint is not None else []

    @property
    def node(self) -> AgentExecutionNode | None:
        if self._nodes:
            return _NODES[self._nodes[-1]]
        return self._latest.node if self._latest is not None else None

    @property
    def is_suspended(self) -> bool:
        return self.suspended_reason is not None

    def request_pause(self, reason: str) -> None:
        self.pause_reason = reason

    def request_resume(self, reason: str | None = None) -> bool:
        """True if a suspended run will now continue."""
        if not self.is_suspended:
            return False
        self._resume_requested = True
        self._resume_reason = reason
        return True

    def decide(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        if checkpoint.node is AgentExecutionNode.RUN_FAILED:
            return _CONTINUE
        if self.pause_reason is not None:
            reason, self.pause_reason = self.pause_reason, None
            return Suspend(reason=reason)
        if checkpoint.node in self.suspend_at:
            return Suspend(reason=f"suspend_at {checkpoint.node.value}")
        return _CONTINUE

    def record(self, checkpoint: AgentCheckpoint) -> None:
        """Keeps `checkpoint` as this run's latest boundary (and the next in its list)."""
        kept = checkpoint.model_dump_json(exclude=_BY_REFERENCE).encode()
        self._latest = checkpoint
        state = checkpoint.state
        self._history = state.message_history
        self._ids.append(checkpoint.checkpoint_id.encode())
        self._nodes.append(_NODE_AT[checkpoint.node])
        self._kept.append(kept)
        self._lengths.append(len(state.message_history))
        for name, values in zip(_SHARED_FIELDS, self._shared, strict=True):
            values.append(getattr(state, name))

    def pack(self) -> None:
        """The run starts a long wait (for a person): its boundaries' JSON is packed (see
        `packed`), and what `on_wait` packs. The latest checkpoint is let go of (its JSON
        is the last packed: `latest` reads it back), and so is the evidence read for the
        `checkpoints` query (read again when next asked)."""
        self._kept.pack()
        self._ids.pack()
        if self._ids:
            self._latest = None
        self._evidence = []
        self.on_wait()

    def let_go_of(self, history: list[Any], read: Callable[[], list[Any]]) -> None:
        """The run's conversation `history` is parked while it waits (`LiveRun.park`); the
        executor reads it back with `read` until `take_back`, if what it holds is a prefix
        of `history` message for message, and keeps the responses its boundaries share with
        the conversation as their positions. Otherwise it holds messages of its own (an
        earlier run's checkpoint the conversation does not begin with), and keeps them."""
        held = self._history
        if len(held) > len(history):
            return
        if any(a is not b for a, b in zip(held, history[: len(held)], strict=True)):
            return
        positions = {id(message): at for at, message in enumerate(history)}
        for values in self._shared:
            for k, value in enumerate(values):
                at = positions.get(id(value))
                if at is not None:
                    values[k] = at  # no shared value is an int: the mark is unambiguous
        self._history = []
        self._read_history = read

    def take_back(self, history: list[Any]) -> None:
        """The parked conversation is objects again (`let_go_of`)."""
        if self._read_history is None:
            return
        self._read_history = None
        self._history = history
        for values in self._shared:
            values[:] = [history[v] if isinstance(v, int) else v for v in values]

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        self.record(checkpoint)
        decision = self.decide(checkpoint)
        if isinstance(decision, Suspend):
            self.suspended_reason = decision.reason
            self._resume_requested = False
            self.announce(checkpoint.node, SuspendedData(reason=decision.reason))
            self.on_change()
            self.pack()
            workflow.logger.info(
                "run suspended", extra={"node": checkpoint.node.value, "reason": decision.reason}
            )
            await workflow.wait_condition(lambda: self._resume_requested)
            self.suspended_reason = None
            self._resume_requested = False
            self.announce(checkpoint.node, ResumedData(reason=self._resume_reason))
        self.on_change()
        if self.continue_as_new(checkpoint):
            return Suspend(reason=CONTINUE_AS_NEW)
        return _CONTINUE

    @property
    def checkpoint_count(self) -> int:
        return self.earlier_checkpoints + len(self._ids)

    @property
    def recorded_count(self) -> int:
        """How many boundaries this run recorded."""
        return len(self._ids)

    @property
    def nodes(self) -> list[AgentExecutionNode]:
        """Each recorded boundary's node, in order."""
        return [_NODES[at] for at in self._nodes]

    @property
    def evidence(self) -> list[AgentResumeEvidence]:
        """Every recorded boundary's resume evidence, read out of its JSON when first asked
        for (queries ask; the loop never does), then kept for the next query."""
        read = self._evidence
        for kept in self._kept.since(len(read)):
            read.append(_Resume.model_validate_json(kept).resume)
        return read

    def position_of(self, checkpoint_id: str) -> int | None:
        """Where this run recorded checkpoint `checkpoint_id` (None: it did not)."""
        try:
            return self._ids.since(0).index(checkpoint_id.encode())
        except ValueError:
            return None

    def recorded(self, position: int) -> AgentCheckpoint:
        """This run's checkpoint at `position` (0: its first boundary), whole again.

        Keeping every boundary's conversation would hold O(steps²) messages; but within a
        run the conversation only grows, so each one is a prefix of the latest's."""
        length = self._lengths[position]
        read = self._read_history
        history = self._history if read is None else read()
        if length > len(history):
            # The id only names the checkpoint here: read from its packed block no sooner.
            checkpoint_id = self._ids[position].decode()
            raise ValueError(
                f"checkpoint {checkpoint_id} held {length} messages, more than the "
                f"{len(history)} of the latest one; its conversation is not a prefix"
            )
        checkpoint = AgentCheckpoint.model_validate_json(self._kept[position])
        state = checkpoint.state
        state.message_history = history[:length]
        for name, values in zip(_SHARED_FIELDS, self._shared, strict=True):
            value = values[position]
            setattr(state, name, history[value] if isinstance(value, int) else value)
        return checkpoint
