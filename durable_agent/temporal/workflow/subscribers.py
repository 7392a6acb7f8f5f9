"""Where plain Workflow Streams subscribers are, so a continue-as-new leaves none behind.

A Workflow Streams client (not ours: `AgentRunHandle.stream` reads earlier runs itself)
polls with the offset it wants next. When the run continues as new, the successor's stream
starts at the offset the handoff keeps; a subscriber behind that offset is told its offset
was truncated and jumps to the successor's first record, skipping the gap. So the handoff
keeps every record from the slowest subscriber that polled lately (`ACTIVE`), up to
`SUBSCRIBER_HANDOFF_BYTES` of them: past that bound a subscriber that far behind skips
what does not fit (history would otherwise carry the transcript).

The polls are updates, recorded in history, and time is the workflow's: a replay sees the
same polls at the same times and hands off the same records.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ..wire import StreamPoll
    from .port import WorkflowPort

__all__ = ["ACTIVE", "SUBSCRIBER_HANDOFF_BYTES", "Subscribers"]

ACTIVE = timedelta(minutes=5)
"""A subscriber that has not polled for this long counts as gone."""
SUBSCRIBER_HANDOFF_BYTES = 256 * 1024
"""The most record bytes a continuation carries for lagging subscribers."""
_MAX_POLLS = 4096


class Subscribers:
    """The offsets plain subscribers polled from lately."""

    def __init__(self, port: WorkflowPort, carried: Sequence[StreamPoll] = ()) -> None:
        self._port = port
        self._polls: deque[tuple[datetime, int]] | tuple[()] = (
            deque(((p.at, p.offset) for p in carried), maxlen=_MAX_POLLS) if carried else ()
        )
        """Made at the first poll: most runs have no plain subscriber, and an empty deque
        takes a block of its own."""

    def polled(self, offset: int) -> None:
        now = self._port.now()
        polls = self._polls
        if not isinstance(polls, deque):
            polls = self._polls = deque(maxlen=_MAX_POLLS)
        while polls and now - polls[0][0] > ACTIVE:
            polls.popleft()
        polls.append((now, offset))

    def slowest(self) -> int | None:
        """The lowest offset an active subscriber asked for (None: none polled lately).
        A subscriber's older polls ask for less than its newer ones, so this may keep a
        few records more than it needs, never fewer."""
        now = self._port.now()
        active = [offset for at, offset in self._polls if now - at <= ACTIVE]
        return min(active) if active else None

    def carry(self) -> list[StreamPoll]:
        """The active polls, for the successor run."""
        now = self._port.now()
        return [StreamPoll(at=at, offset=o) for at, o in self._polls if now - at <= ACTIVE]
