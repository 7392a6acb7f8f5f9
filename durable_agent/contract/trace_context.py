"""Starweaver's `TraceContext`: the trace a run belongs to, as its resume evidence carries it.

It is plain data (W3C ids as lowercase hex) so that a durable store can index checkpoints by
trace without OpenTelemetry installed; `durable_agent.telemetry` fills it when tracing is on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._fields import WIRE_CONFIG, omit_empty, omit_none

__all__ = ["TraceContext"]


class TraceContext(BaseModel):
    """`trace_id` (32 hex digits) and `span_id` (16) of the run's `invoke_agent` span;
    `parent_span_id` of the span it hangs under (the starter's, or a parent agent's) when it
    has one. Every field is optional and left out of the JSON when empty, as in starweaver."""

    model_config = WIRE_CONFIG

    trace_id: str | None = omit_none()
    span_id: str | None = omit_none()
    parent_span_id: str | None = omit_none()
    trace_state: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.trace_id or self.span_id or self.parent_span_id or self.trace_state)
