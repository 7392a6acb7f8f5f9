"""Stream records: the ordered account of a run that UIs and logs follow.

Sequence numbers are contiguous from the start of a run; a checkpoint's
`resume.cursor.stream_cursor` is the sequence number of its boundary's `node_start` record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["AgentStreamRecord", "StreamKind", "StreamSink"]

StreamKind = Literal[
    "run_start",
    "steered",
    "node_start",
    "node_complete",
    "checkpoint",
    "model_request",
    "model_response",
    "tool_call",
    "tool_return",
    "suspended",
    "waiting",
    "run_complete",
    "run_failed",
]


class AgentStreamRecord(BaseModel):
    seq: int
    kind: StreamKind
    run_id: str
    node: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


StreamSink = Callable[[AgentStreamRecord], None]
