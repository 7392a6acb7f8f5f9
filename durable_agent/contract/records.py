"""Stream records: the ordered account of a run that UIs and logs follow.

Sequence numbers are contiguous from the start of a run; a checkpoint's
`resume.cursor.stream_cursor` is the sequence number of its boundary's `node_start` record.

Besides the loop's own progress (`node_start`, `checkpoint`, `model_request`, ...), a run
reports what a UI needs to show it working: `model_delta` (text or thinking as a streaming
model produces it, `{run_step, attempt, part, text}`), `model_retry` (attempt `attempt` of
step `run_step` replaced an earlier one: drop the text the earlier attempts streamed),
`usage` (after each model response), `approval_requested`, `call_deferred`,
`approval_decided`, `deferred_result`, `suspended` / `resumed` and `run_cancelled`. The
`model_response` record carries the whole response (`text`, `thinking`, `calls`), so a
client that missed or dropped deltas still shows the right text. A fork's stream opens with
`forked` (where it came from); `steered` is a user's steering message arriving; a session
reports `awaiting_prompt` between turns (each turn then runs `run_start` to
`run_complete`) and `session_ended` at its end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from ._fields import omit_empty, omit_none
from .messages import ModelResponse, TextPart, ThinkingPart

__all__ = [
    "PREVIEW_CHARS",
    "TERMINAL_KINDS",
    "AgentStreamRecord",
    "StreamKind",
    "StreamSink",
    "preview",
    "response_view",
]

PREVIEW_CHARS = 2_000
"""How much of a tool result a `tool_return` record shows: enough for a UI, and records of
a run are held in its workflow's memory (the model still gets the whole result)."""

StreamKind = Literal[
    "run_start",
    "forked",
    "steered",
    "awaiting_prompt",
    "session_ended",
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
    "model_delta",
    "model_retry",
    "usage",
    "approval_requested",
    "call_deferred",
    "approval_decided",
    "deferred_result",
    "resumed",
    "run_cancelled",
    "subagent_start",
    "subagent_end",
]
TERMINAL_KINDS: frozenset[str] = frozenset(
    {"run_complete", "run_failed", "run_cancelled", "session_ended"}
)
"""Kinds after which a run emits nothing more (until a session's next turn)."""


class AgentStreamRecord(BaseModel):
    seq: int
    kind: StreamKind
    run_id: str
    node: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    workflow_id: str | None = omit_none()
    """Set on a sub-agent's record read through its parent (`stream(children=True)`): the
    child workflow it comes from; `seq` is then that run's own."""
    depth: int = omit_empty(0)
    """How far below the run being read the record's run is (1: a child)."""


StreamSink = Callable[[AgentStreamRecord], None]


def response_view(response: ModelResponse) -> dict[str, Any]:
    """What a `model_response` record says of the response: its whole text and thinking,
    and the calls it makes, so a client can replace whatever deltas it showed."""
    return {
        "text": "".join(p.text for p in response.parts if isinstance(p, TextPart)),
        "thinking": "".join(p.text for p in response.parts if isinstance(p, ThinkingPart)),
        "calls": [
            {"tool_call_id": c.id, "tool_name": c.name, "arguments": c.arguments}
            for c in response.tool_calls
        ],
    }


def preview(value: Any, limit: int = PREVIEW_CHARS) -> tuple[str, bool]:
    """`value` as text of at most `limit` characters, and whether it was cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return text, False
    return text[:limit], True
