"""`ParkedRun`: what a run keeps of its state while it waits for a person, as bytes.

A worker holds every cached waiting run, and a run waits for days; what its state holds as
objects (two dozen fields, the pending calls, the usage, a model and a dict and a set for
each) is on the collector's books and in the allocator's arenas all that time. Parked, the
conversation is one compressed JSON block and the rest of the state another; each reader
meanwhile (a query, the run's status, a signal's check) gets a copy read back for it alone,
and the run goes on with the state read back once (`state`).

What a state holds by reference and the loop never changes in place stays a reference: the
toolset listings (the tool schemas listed, often the state's largest field, which the
executor's boundaries share too) and a latest response that is not the conversation's last.
JSON is how a state crosses every other boundary (checkpoints, continue-as-new), so what
comes back is the state that went in.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract._fields import settled
    from ...contract.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from ...contract.state import AgentRunState
    from ..packed import PACK_LEVEL

__all__ = ["ParkedRun", "answered_by"]

_BY_REFERENCE = {"message_history", "latest_response", "toolset_listings"}
"""State fields not in the packed rest of it (the conversation is packed on its own)."""


class ParkedRun(NamedTuple):
    conversation: bytes
    """The conversation's JSON, compressed (it repeats its field names message after
    message): the bytes are on the C heap, which Python's objects are not."""
    length: int
    answered_by: str | None
    latest_at: int | None
    """Where the state's `latest_response` is in the conversation (None: not there)."""
    seq: int
    """The next stream record's seq: where a loop made again numbers on."""
    rest: bytes | None
    """The rest of the state as compressed JSON; None once the state is objects again (a
    decision or a steering message arrived, and a loop was made to record it)."""
    latest: ModelResponse | None
    """The state's `latest_response` when it is not in the conversation."""
    listings: list[Any]
    """The state's `toolset_listings`, by reference."""

    @classmethod
    def of(cls, state: AgentRunState, seq: int) -> ParkedRun:
        """`state` parked; the caller lets go of it (nothing here refers to its fields but
        the two kept by reference)."""
        history = state.message_history
        latest = state.latest_response
        # The state's latest response is the conversation's last one: kept as its position.
        at = next((k for k, m in enumerate(reversed(history)) if m is latest), None)
        rest = state.model_dump_json(exclude=_BY_REFERENCE).encode()
        return cls(
            zlib.compress(ModelMessagesTypeAdapter.dump_json(history), PACK_LEVEL),
            len(history),
            answered_by(history),
            None if at is None else len(history) - 1 - at,
            seq,
            zlib.compress(rest, PACK_LEVEL),
            latest if at is None else None,
            state.toolset_listings,
        )

    def messages(self) -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_json(zlib.decompress(self.conversation))

    def state(self) -> AgentRunState:
        """The state as it was parked, without its conversation (`messages` reads that, and
        `restore` puts it back): a new object each call, which its reader alone holds."""
        assert self.rest is not None, "the state is objects again: read it from the loop"
        state = settled(AgentRunState.model_validate_json(zlib.decompress(self.rest)))
        state.toolset_listings = self.listings
        state.latest_response = self.latest
        return state

    def unpacked(self) -> ParkedRun:
        """The state is objects again (in a loop made for the wait): the conversation alone
        stays parked."""
        return self._replace(rest=None, latest=None, listings=[])

    def restore(self, state: AgentRunState) -> None:
        """Gives `state` its conversation back, and its latest response if that is in it."""
        history = self.messages()
        state.message_history = history
        if self.latest_at is not None:
            state.latest_response = cast(ModelResponse, history[self.latest_at])


def answered_by(history: list[ModelMessage]) -> str | None:
    """`provider:model` of the conversation's latest response (None before one)."""
    for message in reversed(history):
        if message.kind == "response":  # by kind: the sandbox wraps `isinstance`
            name = message.model_name or "unknown model"
            return f"{message.provider_name}:{name}" if message.provider_name else name
    return None
